// kjitd's evaluator workers: one kjit-evaluator process per GPU, supervised.
//
// The pool starts a worker per configured GPU and hands it one job at a time
// (a baseline or a candidate), queued jobs going to a worker of the key's arch
// whose GPU is idle enough (runtime/idle.h). It never blocks: kjitd's request
// loop polls the workers' channels (Fds) and calls Tick often.
//
// Under --when idle a job also yields: when another process starts using a
// busy worker's GPU, the worker is asked (SIGUSR1) to stop at its next timed
// batch or input set; the job answers retry_later and runs again once the GPU
// is idle, so kjit's trials do not slow the user's work down for long. "Another
// process" is what NVML's per-process figures show, or a program kjit serves
// that reported running ops on the GPU (NoteClientActivity), which NVML misses
// on some virtual machines.
//
// A worker that dies (a candidate faulted, or it crashed) fails its job with
// outcome "fault" and the reason (exit code or signal) and is restarted after a
// short pause. A job phase that outlives the deadline the worker announced is a
// hang: the worker is killed (SIGKILL) and restarted. A worker that reports it
// cannot run (no GPU, CPU-only PyTorch) is retried after a longer pause, and
// its reason is what Available() says.
//
// Several GPUs (issue 10). Each worker owns one GPU and its own idle tracker,
// so idle state and the memory cap are per GPU. A job goes to the ready worker
// of its arch whose GPU is idle and that has waited longest for work, so that
// sequential jobs spread over the GPUs instead of always landing on the first.
// Devices are named as `kjit-evaluator --device` takes them: an ordinal counts
// the GPUs CUDA_VISIBLE_DEVICES leaves visible (kjitd's own environment, which
// its workers inherit), a UUID names one GPU whatever the numbering. Idle
// readings come from NVML by the UUID the worker reports, never by ordinal,
// since NVML's indices ignore CUDA_VISIBLE_DEVICES. Two configured names for
// the same GPU (its ordinal and its UUID) would put two workers on it: the
// one configured later is stopped for good and says why.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kjit/runtime/idle.h"
#include "kjit/runtime/nvml.h"
#include "kjit/runtime/status.h"
#include "worker_protocol.h"

namespace kjit::daemon {

class Log;

struct PoolOptions {
  std::string worker_path;          // kjit-evaluator
  std::vector<std::string> devices;  // CUDA ordinals ("0") or UUIDs; a UUID is resolved by the worker
  std::vector<std::string> worker_args;  // more arguments for every worker, e.g. {"--compare", "bitwise"}
  RunWhen when = RunWhen::kIdle;
  IdleThresholds idle;
  std::chrono::milliseconds restart_pause{1000};
  std::chrono::milliseconds unavailable_pause{60000};
  std::chrono::milliseconds startup_deadline{180000};
  // --when idle: how often a busy worker's GPU is sampled for other processes' load; when they use it, the
  // worker is asked (SIGUSR1) to stop its job early and run it again once the GPU is idle.
  std::chrono::milliseconds busy_check_interval{500};
};

// Options from kjitd's configuration: the `evaluator`, `devices`, `when` and idle keys.
struct DaemonConfig;
Result<PoolOptions> PoolOptionsFromConfig(const DaemonConfig& config);

// "" without CUDA_VISIBLE_DEVICES; else a note for messages saying that it
// narrows what kjitd (and so its workers) sees.
std::string VisibleDevicesNote();

class EvaluatorPool {
 public:
  using BaselineDone = std::function<void(const BaselineResult&, const WorkerDevice&)>;
  // The device is the GPU whose worker answered (empty when the job ended without one).
  using VerdictDone = std::function<void(const Verdict&, const WorkerDevice&)>;

  EvaluatorPool(PoolOptions options, Log& log, std::map<std::string, double>& counters);
  ~EvaluatorPool();  // asks workers to exit, then kills what is left
  EvaluatorPool(const EvaluatorPool&) = delete;
  EvaluatorPool& operator=(const EvaluatorPool&) = delete;

  // Starts the workers (no-op for --when never).
  void Start();

  // OK if some worker of `arch` (0: any) is running or starting; otherwise why not.
  Status Available(int arch = 0) const;

  // Queues a job. The callback runs from Tick or OnReadable, exactly once.
  void SubmitBaseline(BaselineRequest request, int arch, BaselineDone done);
  void SubmitEvaluate(EvaluateRequest request, int arch, VerdictDone done);

  // The channels to poll for reading, and what to do when one is readable.
  std::vector<int> Fds() const;
  void OnReadable(int fd);
  // Watchdog, reaping, restarts, dispatch. Call at least every 100 ms.
  void Tick();

  // A program kjit serves ran ops on these GPUs (ipc report_activity; `pid` as it reported it). Under
  // --when idle each counts busy for idle.client_hold_ms, and a trial in flight on one yields at once.
  void NoteClientActivity(const std::vector<std::string>& uuids, uint32_t pid);

  // Per worker: "gpu0.state" and so on, for stats.
  std::map<std::string, std::string> Describe() const;
  // One map per worker, in configuration order, for stats_reply.evaluators:
  // device (as configured), state, phase, starts, jobs, crashes, and once it has
  // said hello: name, uuid, arch, pid; note: the last error; idle: the GPU's last
  // idle verdict (why it is busy, or its memory cap), once a job was waiting for it.
  std::vector<std::map<std::string, std::string>> Workers() const;
  size_t queued() const { return queue_.size(); }

 private:
  struct Job;
  struct Worker;
  // Queues a job, or fails it at once when no worker can ever take it.
  void Enqueue(std::unique_ptr<Job> job);
  void Spawn(Worker& w);
  void Handle(Worker& w, const WorkerMessage& message);
  void Lost(Worker& w, const std::string& why, bool hang);
  void Reap(Worker& w);
  // Stops `w` for good: it names the GPU `keeper` already serves.
  void Retire(Worker& w, const Worker& keeper, const std::string& uuid);
  // Puts a job that met a resource backoff back in the queue for later (at once when it `yielded` the GPU to
  // another process); false (and the job untouched) once it has waited long enough.
  bool Requeue(std::unique_ptr<Job>& job, bool yielded = false);
  void Dispatch();
  bool GpuIdle(Worker& w, uint64_t* memory_cap);
  // NVML sampling options that leave out kjit's workers and the processes they start.
  SampleOptions KjitsOwnProcesses() const;
  // Asks a busy worker to give its GPU back when other processes started using it (--when idle).
  void YieldIfWanted(Worker& w, std::chrono::steady_clock::time_point now);
  // The newest client report of ops on w's GPU, unless its process has exited.
  std::optional<ClientActivity> ClientActivityOn(Worker& w, std::chrono::steady_clock::time_point now);

  PoolOptions options_;
  Log& log_;
  std::map<std::string, double>& counters_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::deque<std::unique_ptr<Job>> queue_;
  std::shared_ptr<Nvml> nvml_;
  std::string nvml_error_;
  uint64_t next_id_ = 1;
};

}  // namespace kjit::daemon
