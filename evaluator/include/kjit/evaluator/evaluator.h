// The evaluator: PyTorch's kernel for an OpKey as reference and baseline, and
// the compile -> verify -> time pipeline every candidate kernel goes through.
//
// It runs inside a worker process (kjit-evaluator), one per GPU, because a
// candidate that faults destroys the CUDA context of the process it runs in.
// After a verdict with context_lost, the process must exit.
//
// Verification (every step must pass; the first failure is the verdict):
//   1. The source compiles with NVRTC for the device's arch, the entry point
//      exists and the launch fits the device and the kernel's limits.
//   2. For each input set (3 fresh random sets: normal, uniform, large; then
//      the edge sets: small magnitudes with subnormals, and special values NaN,
//      +-Inf, -0.0 where the op's traits allow), with seeds drawn fresh for this
//      evaluation: PyTorch's kernel computes the reference; the candidate runs
//      twice, its outputs (inside guard bytes) poisoned first with a NaN pattern,
//      then with a finite one. Elements equal to the poison both times were not
//      written; guard bytes or inputs that changed mean out-of-bounds writes;
//      the two runs must agree bitwise unless the op is declared
//      nondeterministic; each run must match the reference (compare.h).
//   3. Timing (profile below) runs on a set the candidate has not seen, and the
//      outputs of its last timed run must match the reference again: a kernel
//      that changes behaviour across calls (state kept in device globals) fails.
//   4. A kernel faster than PyTorch, and faster than any kernel this worker has
//      already seen pass this check for the key (by policy::kStoreMargin: kjitd
//      stores no other), runs once more under compute-sanitizer (memcheck, and
//      racecheck where it uses shared memory) where the machine has it
//      (sanitizer.h): any error it reports is a rejection. The run stops when
//      another process wants the GPU (the job answers retry_later).
//
// Memory: one input set is resident at a time (its inputs, a pristine copy of
// them while the candidate runs, PyTorch's outputs, the candidate's outputs and
// one copy of them, and the comparison's temporaries, made a piece at a time);
// a set is freed before the next is built, and after each job the worker gives
// PyTorch's cached blocks back to the driver, so that kjitd's next reading of
// free memory is not shrunk by kjit's own cache. Before allocating anything, a
// job's peak (memory.h) is checked against kjitd's memory cap: over it, the
// answer is resource_backoff with retry_later (baseline: backoff); over ~0.9 of
// the GPU's total memory, it can never fit this GPU and the answer says unfit.
//
// Profile: L2 is flushed (a write of twice its size) before every timed run,
// which also keeps the GPU busy while the next launch is queued so host launch
// overhead is not measured. Candidate and baseline are timed alternately in
// the same loop with CUDA events, after a warm-up, in batches until the 95%
// confidence interval of both medians is within `target_ci_rel` or a run or
// time budget is spent. Median, interquartile spread and CI are reported.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kjit/runtime/op_key.h"
#include "kjit/runtime/status.h"
#include "worker_protocol.h"

namespace kjit::eval {

// Loads libtorch_cuda.so from beside libtorch_cpu.so, which registers PyTorch's
// CUDA kernels, allocator, generators and stream pool; kUnavailable (with what
// to install) where this PyTorch has no CUDA. Idempotent.
Status LoadTorchCuda();

struct EvaluatorOptions {
  int device = 0;  // CUDA ordinal (after CUDA_VISIBLE_DEVICES)
  int random_sets = 3;
  int warmup_runs = 3;
  int min_runs = 20;
  int max_runs = 500;
  double target_ci_rel = 0.01;
  std::chrono::milliseconds timing_budget{3000};
  // A kernel run longer than max(min_run_deadline, run_deadline_factor x the
  // baseline) is a hang.
  std::chrono::milliseconds min_run_deadline{2000};
  double run_deadline_factor = 1000;
  // Compare every op's outputs bitwise, whatever its traits say.
  bool bitwise = false;
  // CPU threads that compile EvaluateRequest::compile_ahead's candidates while a job runs (0: none).
  int compile_ahead_threads = 2;
  // compute-sanitizer (sanitizer.h): its path (empty: none), run over each kernel that passes verification
  // faster than PyTorch, once per CUBIN and key, within `sanitizer_timeout` per tool. Keys whose inputs and
  // outputs exceed `sanitizer_max_bytes` are not sanitized (every access is slower under it).
  std::string sanitizer;
  std::chrono::milliseconds sanitizer_timeout{std::chrono::minutes(5)};
  uint64_t sanitizer_max_bytes = uint64_t{1} << 30;
  // racecheck (kernels with shared memory) only up to this many bytes of inputs and outputs: its cost grows with
  // the kernel's shared-memory accesses, 21 s for a bmm of 192 MiB and 44 s for an mm of 497 MiB on an H100
  // (memcheck alone: 2-5 s), and a key waits for it before its first kernel is served. Above it memcheck runs
  // alone and the verdict says so.
  uint64_t racecheck_max_bytes = uint64_t{256} << 20;
  // Every verified kernel, not only those faster than PyTorch (tests; a slow check for every trial).
  bool sanitize_every_verified = false;
  // This worker is the sanitizer's target (kjit-evaluator --sanitize-request): one normal input set, no
  // edge sets, no timing, no sanitizer of its own.
  bool sanitizer_target = false;
};

// Asks the job in flight to give the GPU back: kjitd sends the worker SIGUSR1
// when another process starts using the GPU mid-job (--when idle). The job stops
// at its next timed batch or input set and answers resource_backoff with
// retry_later ("preempted: ..."), so kjitd runs it again once the GPU is idle.
// Async-signal-safe; each job starts with the request cleared.
void RequestYield();

class Evaluator {
 public:
  // Loads PyTorch's CUDA backend and the driver, retains the device's primary
  // context and makes a stream PyTorch and kjit share. kUnavailable/kNoDevice
  // with the reason when there is no usable GPU.
  static Result<std::unique_ptr<Evaluator>> Create(const EvaluatorOptions& options);
  ~Evaluator();

  const daemon::WorkerDevice& device() const;

  // Called before each phase with its name and the wall-clock deadline the
  // supervisor should enforce.
  using ProgressFn = std::function<void(const std::string& phase, std::chrono::milliseconds deadline)>;

  // Times PyTorch's own kernel for the key.
  daemon::BaselineResult Baseline(const daemon::BaselineRequest& request, const ProgressFn& progress);

  // The whole pipeline for one candidate. Never throws; failures are verdicts.
  daemon::Verdict Evaluate(const daemon::EvaluateRequest& request, const ProgressFn& progress);

  // Compiles `candidates` on up to `threads` threads into the compile cache
  // Evaluate consults, so that evaluating them one after another afterwards
  // does not wait for NVRTC each time (searches compile hundreds of points).
  // Compile errors are left for Evaluate to report. Runs no kernel.
  void Precompile(const std::vector<daemon::CandidateSpec>& candidates, int threads);

  // Compiles `ahead` on background threads (EvaluatorOptions::compile_ahead_threads) into the same cache,
  // replacing the entries of an earlier call not yet started, and returns at once. Evaluate calls it with
  // its request's compile_ahead before it starts, so the next candidates compile while this one runs.
  void CompileAhead(const std::vector<daemon::CompileAhead>& ahead);
  // Candidates CompileAhead compiled so far (compile errors included).
  uint64_t compiled_ahead() const;

  // True once a candidate has faulted: the CUDA context is unusable and the process must exit.
  bool context_lost() const;

 private:
  struct Impl;
  explicit Evaluator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Statistics of a list of run times (microseconds): median, interquartile
// range, min, max, and the 95% CI half-width of the median relative to it (from
// order statistics: ranks n/2 -+ 0.98 sqrt(n)). Exposed for tests.
daemon::TimingStats Summarize(std::vector<double> runs_us);

// "ptxas info : Used 32 registers, 8 bytes spill stores, ..." -> spill bytes, or -1.
int ParseSpillBytes(const std::string& compile_log);

}  // namespace kjit::eval
