// `kjit report`: what kjit did for the programs it served, per key, from the kernel cache alone.
//
//   kjit report [--cache PATH] [--run ID|last] [--json | --markdown | --html FILE] [--limit N]
//   kjit report --runs [--json]
//
// One row per key any program ran or kjitd tuned: the op and its shapes, the calls the programs reported
// (hits: kjit's kernel; misses: PyTorch's), PyTorch's time and the kernel's as the evaluator timed them,
// the speedup, the key's state (served, tuning, queued, no faster kernel found, unfit, failed, not tuned)
// and the GPU time saved so far (hits x the time each hit saved). The calls come from the shims' use reports
// (ipc report_uses, every few seconds and at exit); keys with no report count their misses from the task
// queue. `--html FILE` writes one self-contained page (no scripts, no network) with the table and SVG plots:
// speedup per key, best-so-far against trials for every tuned key, and time saved. `--run` narrows the report to
// one program run (the calls its processes reported: `kjit run` names a run and its child processes share it);
// `--runs` lists the kept runs.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kjit/cache/kernel_cache.h"
#include "kjit/runtime/status.h"

namespace CLI {
class App;
}

namespace kjit::cli {

struct ReportRow {
  std::string key_hash;  // 32 hex digits
  std::string key_text;
  std::string op;
  std::string state;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t calls = 0;        // hits + misses
  double pytorch_us = 0;     // PyTorch's kernel, as the evaluator timed it (0: not timed)
  double kjit_us = 0;        // the fastest verified kernel (0: none)
  double speedup = 0;        // pytorch_us / kjit_us (0: no kernel)
  double floor_us = 0;       // the memory/compute floor (0: unknown)
  int trials = 0;
  int64_t record_id = 0;     // the fastest verified record (0: none)
  std::string timed_on;      // the GPU model that timed it
  double saved_us = 0;       // hits x (pytorch_us - kjit_us), never negative
  std::vector<double> best_so_far_us;  // the fastest verified time after each trial (0 until one verified)
};

struct KeyReport {
  std::string cache_path;
  std::optional<cache::RunSummary> run;  // set for one run's report
  std::vector<ReportRow> rows;  // most time saved first, then most calls
  uint64_t calls = 0, hits = 0;
  size_t served = 0;            // keys with a kernel
  double saved_us = 0;
};

// The report of a cache, as `kjit report` prints it; with `run_id`, of that run's keys and calls only
// ("last": the run seen most recently). NotFound for an unknown run.
Result<KeyReport> BuildReport(const cache::KernelCache& cache, const std::string& run_id = "");

std::string RunsJson(const std::vector<cache::RunSummary>& runs);

std::string ReportJson(const KeyReport& report);
std::string ReportMarkdown(const KeyReport& report);
std::string ReportHtml(const KeyReport& report);

class ReportCommand {
 public:
  explicit ReportCommand(CLI::App& app);
  ~ReportCommand();
  ReportCommand(const ReportCommand&) = delete;
  ReportCommand& operator=(const ReportCommand&) = delete;
  bool chosen() const;
  int Run();

  struct Options;

 private:
  std::unique_ptr<Options> options_;
};

}  // namespace kjit::cli
