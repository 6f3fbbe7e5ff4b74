// kjitd's tuner: the process that works the task queue (`kjit-policy tune`,
// policy/learn/include/kjit/policy/learn/tuner.h), started and supervised by
// kjitd as it does its evaluator workers.
//
// Why a process of its own: the tuner's policy is a LibTorch network, and
// kjitd stays torch-free (it links no LibTorch; the evaluator workers, which
// need it, are processes too). The tuner is a client of kjitd's agent
// environment like any external agent, and claims tasks from the cache file
// directly, with leases, so that several tuners (later, several machines)
// can share one queue.
//
// Contract:
// - Start() spawns it with kjitd's cache, endpoint, one job per GPU worker,
//   and the tune_* settings; its stderr is kjitd's (its JSON lines join
//   kjitd's log).
// - Before the first start, claims its earlier runs left (a kjitd that was
//   killed) are handed back, and so are a tuner's when it exits or is
//   stopped, so a restarted kjitd or tuner resumes the queue at once instead
//   of waiting for the leases to run out. The tuner ends with kjitd
//   (--parent-pid), also when kjitd is killed.
// - Tick() reaps it; one that exits is started again after a pause that
//   doubles on each quick exit (1 s up to 5 minutes) and resets once it has
//   run for 5 minutes. A program that cannot be started is retried after the
//   longest pause, and Describe() says why.
// - Stop() sends SIGTERM (the tuner finishes its trials in flight and hands
//   their tasks back), waits up to `stop_grace`, then SIGKILL.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "kjit/runtime/status.h"

namespace kjit::daemon {

class Log;
struct DaemonConfig;

struct TunerProcessOptions {
  std::string program;             // empty: no tuner
  std::vector<std::string> args;   // after the program name
  std::string claimer;             // the name its claims carry: "<claimer>/<tuner pid>/<job>"
  std::string cache_path;
  std::chrono::milliseconds min_pause{1000};
  std::chrono::milliseconds max_pause{300000};
  std::chrono::milliseconds healthy_after{300000};
  std::chrono::milliseconds stop_grace{5000};
  std::string off_reason;          // why there is no tuner, when program is empty
};

// The options from kjitd's configuration (tuner, tune_*, tuner_args, cache, endpoint), for `jobs` GPU
// workers. kInvalidArgument names a malformed setting.
Result<TunerProcessOptions> TunerOptionsFromConfig(const DaemonConfig& config, int jobs);

class TunerProcess {
 public:
  TunerProcess(TunerProcessOptions options, Log& log, std::map<std::string, double>& counters);
  ~TunerProcess();  // Stop()
  TunerProcess(const TunerProcess&) = delete;
  TunerProcess& operator=(const TunerProcess&) = delete;

  void Start();
  void Tick();
  void Stop();

  pid_t pid() const { return pid_; }
  // "running (pid N)", "restarting in 4 s: exited with status 1", "off: ..." for status.
  std::string Describe() const;

 private:
  void Spawn();
  // Hands back the running tasks whose claimer starts with `prefix` (a tuner known to be gone).
  void ReleaseClaimsOf(const std::string& prefix);

  TunerProcessOptions options_;
  Log& log_;
  std::map<std::string, double>& counters_;
  pid_t pid_ = -1;
  bool started_ = false;
  std::chrono::steady_clock::time_point spawned_at_{};
  std::chrono::steady_clock::time_point restart_at_{};
  std::chrono::milliseconds pause_{0};
  std::string last_exit_;
};

}  // namespace kjit::daemon
