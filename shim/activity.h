// Tells kjitd which GPUs this process is running ops on (ipc report_activity), so that kjitd's trials keep
// off a GPU while the program kjit serves works on it. NVML's per-process utilization, which kjitd's idle
// gate reads otherwise, showed no other process on an H100 virtual machine while a program ran there, and
// cannot match PIDs across PID namespaces.
//
// Nothing is added to the hot path: a background thread wakes every `interval`, sums the entry table's
// per-device call counts (hits and misses, which the hot path counts anyway) and sends one report naming the
// devices whose counts moved since its last look, through the client's non-blocking queue. A quiet process
// sends nothing. Every `uses_every` looks (and once more at exit, FlushUses) it also sends each key's calls
// since the last such report (ipc report_uses), which kjitd keeps per key for `kjit report`. Only ops kjit intercepts are seen; a program that runs none of them for a while looks quiet
// to this reporter (NVML still speaks for it where it can).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "kjit/ipc/messages.h"
#include "shim_core.h"

namespace kjit::shim {

// Where reports go and how devices are named (an interface, so the reporter is tested without a GPU).
class ActivitySink {
 public:
  virtual ~ActivitySink() = default;
  // Never blocks. False: kjitd does not take activity reports (an older kjitd); the reporter stops.
  virtual bool SendActivity(ipc::ReportActivity report) = 0;
  // The GPU's UUID ("GPU-..."), or "" when the device is not usable.
  virtual std::string DeviceUuid(int device) = 0;
  // Never blocks. Per-key calls (ipc report_uses).
  virtual void SendUses(ipc::ReportUses report) = 0;
};

// The program run this process's use reports belong to (ipc report_uses' run fields).
struct ProgramRun {
  std::string id;               // empty: reports carry no run
  std::string program;          // the command line, cut to ipc::kMaxProgramText bytes
  int64_t started_unix_ms = 0;  // when the shim began reporting (the first intercepted call)
};
// This process's run: KJIT_RUN_ID if set (`kjit run` sets it, and child processes inherit it, so a program's
// workers count as one run), else "<pid>-<start ms>"; the command line from /proc/self/cmdline.
ProgramRun CurrentProgramRun(uint32_t pid);

class ActivityReporter {
 public:
  static constexpr std::chrono::milliseconds kDefaultInterval{500};

  static constexpr int kDefaultUsesEvery = 5;

  ActivityReporter(const EntryTable& table, ActivitySink* sink, uint32_t pid,
                   std::chrono::milliseconds interval = kDefaultInterval, int uses_every = kDefaultUsesEvery,
                   ProgramRun run = {});
  ~ActivityReporter();  // stops and joins the thread
  ActivityReporter(const ActivityReporter&) = delete;
  ActivityReporter& operator=(const ActivityReporter&) = delete;

  void Start();
  void Stop();

  // One look at the table, as the thread takes it: the report it sent, or nullopt when no count moved
  // (or no device that moved has a UUID). The first look reports every device with calls.
  std::optional<ipc::ReportActivity> Tick();
  // Each key's hits and misses since the last call, sent as one report_uses (nullopt when none ran).
  // Thread-safe: the thread calls it every `uses_every` looks, the shim once more at exit.
  std::optional<ipc::ReportUses> FlushUses();

  uint64_t reports() const { return reports_.load(); }
  bool refused() const { return refused_.load(); }

 private:
  void Run();
  const EntryTable& table_;
  ActivitySink* sink_;
  const uint32_t pid_;
  const std::chrono::milliseconds interval_;
  const int uses_every_;
  const ProgramRun run_;
  std::map<int, uint64_t> last_;  // device -> calls at the last look (Tick's caller only)
  struct Reported {
    std::string key_hash;  // hex, computed once per entry
    uint64_t hits = 0, misses = 0;
  };
  std::mutex uses_mu_;
  std::map<const Entry*, Reported> reported_;  // guarded by uses_mu_
  std::atomic<uint64_t> reports_{0};
  std::atomic<bool> refused_{false};
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace kjit::shim
