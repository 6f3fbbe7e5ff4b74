#include "evaluator_pool.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "child_environment.h"
#include "config.h"
#include "kjit/policy/reward.h"
#include "kjit/runtime/device.h"
#include "kjit/runtime/driver.h"
#include "kjit/runtime/nvml.h"
#include "kjit/runtime/op_key.h"
#include "server.h"

extern char** environ;

namespace kjit::daemon {
namespace {

using Clock = std::chrono::steady_clock;

// A job's phase from dispatch until the worker's first progress message.
constexpr const char* kQueuedInWorker = "queued in worker";

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) {
    const int code = WEXITSTATUS(status);
    if (code == 4) return "exited after its CUDA context was lost (code 4)";
    return "exited with code " + std::to_string(code);
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return std::string("killed by signal ") + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "ended";
}

std::string SelfDirectory() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/'));
}

}  // namespace

Result<PoolOptions> PoolOptionsFromConfig(const DaemonConfig& config) {
  PoolOptions o;
  o.worker_path = config.Get("evaluator");
  if (o.worker_path == "auto") o.worker_path = SelfDirectory() + "/kjit-evaluator";
  KJIT_ASSIGN_OR_RETURN(o.when, ParseRunWhen(config.Get("when")));
  o.idle.max_utilization_percent = std::stod(config.Get("idle_max_utilization"));
  o.idle.min_free_memory_fraction = std::stod(config.Get("idle_min_free_memory"));
  // auto: unset, so that the idle gate applies the `when` mode's default (idle.h).
  if (const std::string& cap = config.Get("memory_cap_fraction"); cap != "auto") o.idle.memory_cap_fraction = std::stod(cap);
  o.idle.settle_ms = static_cast<int>(std::stod(config.Get("idle_settle_ms")));
  o.idle.client_hold_ms = static_cast<int>(std::stod(config.Get("idle_client_hold_ms")));
  o.idle.yields_per_trial = static_cast<int>(std::stod(config.Get("idle_yields_per_trial")));
  o.worker_args = {"--compare", config.Get("compare")};
  KJIT_ASSIGN_OR_RETURN(o.devices, ParseDevices(config.Get("devices")));
  if (!o.devices.empty()) return o;
  // `all`: every GPU the CUDA driver shows this process, i.e. what CUDA_VISIBLE_DEVICES
  // leaves visible, numbered as the workers (which inherit kjitd's environment) will count them.
  auto driver = Driver::Get();
  if (!driver.ok()) return driver.status();
  for (int i = 0; i < (*driver)->device_count(); ++i) o.devices.push_back(std::to_string(i));
  if (o.devices.empty()) {
    return Status(StatusCode::kNoDevice, "devices = all, but the CUDA driver shows no GPU" + VisibleDevicesNote());
  }
  return o;
}

std::string VisibleDevicesNote() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  if (v == nullptr) return "";
  return std::string(" (kjitd runs with CUDA_VISIBLE_DEVICES=") + v +
         ": ordinals count only those GPUs; unset it where kjitd starts to serve every GPU)";
}

struct EvaluatorPool::Job {
  uint64_t id = 0;
  int arch = 0;
  int backoffs = 0;               // times it was put back in the queue: memory short, or the GPU given back
  int yields = 0;                 // times it gave the GPU back to another process (--when idle)
  int redeliveries = 0;           // times its worker died before starting it
  Clock::time_point not_before;  // after a backoff, when to try again
  std::optional<BaselineRequest> baseline;
  std::optional<EvaluateRequest> evaluate;
  BaselineDone baseline_done;
  VerdictDone verdict_done;

  // Ends the job without a worker's answer.
  void Fail(policy::Outcome outcome, const std::string& reason) {
    if (baseline) {
      BaselineResult r;
      r.id = id;
      r.error_code = outcome == policy::Outcome::kResourceBackoff ? "unavailable" : "internal";
      r.error = reason;
      r.backoff = outcome == policy::Outcome::kResourceBackoff;
      baseline_done(r, WorkerDevice{});
    } else {
      Verdict v;
      v.id = id;
      v.outcome = std::string(policy::OutcomeName(outcome));
      v.reason = reason;
      v.reward = policy::Reward(policy::TrialOutcome{outcome, 0, 0});
      verdict_done(v, WorkerDevice{});
    }
  }
};

struct EvaluatorPool::Worker {
  enum class State { kStopped, kStarting, kReady, kBusy, kExiting, kUnavailable };
  std::string device;  // as configured
  std::string ordinal;  // what --device gets
  State state = State::kStopped;
  pid_t pid = -1;
  int fd = -1;
  FrameReader reader;
  std::optional<WorkerDevice> info;
  std::unique_ptr<Job> job;
  Clock::time_point deadline;
  std::string phase;
  Clock::time_point restart_at;
  std::string last_error;
  std::string idle_verdict;  // the last idle decision's reason for this GPU (busy, idle + memory cap, ...)
  int starts = 0;
  uint64_t jobs = 0;     // answers received (baselines and verdicts)
  uint64_t crashes = 0;  // died or was killed with or without a job
  bool retired = false;  // never restarted (a second worker for a GPU another one has)
  Clock::time_point last_dispatch{};  // when it was last given a job: the longest-waiting goes first
  Clock::time_point next_busy_check{};  // --when idle: when to look again whether others want the GPU back
  IdleTracker idle;
  // The newest report_activity that named this GPU (a program kjit serves ran ops on it): when, and whose.
  std::optional<Clock::time_point> client_active_at;
  uint32_t client_pid = 0;
  bool yield_asked = false;   // the job in flight was asked to give the GPU back
  bool kept_running = false;  // ... and was let run to its end instead (logged once a job)

  static const char* Name(State s) {
    switch (s) {
      case State::kStopped: return "stopped";
      case State::kStarting: return "starting";
      case State::kReady: return "ready";
      case State::kBusy: return "busy";
      case State::kExiting: return "exiting";
      case State::kUnavailable: return "unavailable";
    }
    return "?";
  }
};

EvaluatorPool::EvaluatorPool(PoolOptions options, Log& log, std::map<std::string, double>& counters)
    : options_(std::move(options)), log_(log), counters_(counters) {
  for (const std::string& d : options_.devices) {
    auto w = std::make_unique<Worker>();
    w->device = d;
    w->ordinal = d;
    workers_.push_back(std::move(w));
  }
  // --when always runs whatever the load, but a trial beside the user's busy program is exactly
  // when the memory cap matters: NVML is read then too, for the cap alone.
  if (options_.when != RunWhen::kNever) {
    auto nvml = Nvml::Load();
    if (nvml.ok()) {
      nvml_ = *nvml;
    } else {
      nvml_error_ = nvml.status().ToString();
    }
  }
}

EvaluatorPool::~EvaluatorPool() {
  for (auto& w : workers_) {
    if (w->fd >= 0) {
      (void)WriteFrame(w->fd, EncodeWorkerMessage(Exit{}));
      close(w->fd);
      w->fd = -1;
    }
  }
  const auto until = Clock::now() + std::chrono::seconds(2);
  for (auto& w : workers_) {
    if (w->pid <= 0) continue;
    int status = 0;
    while (waitpid(w->pid, &status, WNOHANG) == 0) {
      if (Clock::now() > until) {
        kill(w->pid, SIGKILL);
        waitpid(w->pid, &status, 0);
        break;
      }
      usleep(10000);
    }
    w->pid = -1;
    if (w->job) w->job->Fail(policy::Outcome::kResourceBackoff, "kjitd stopped");
  }
  for (auto& job : queue_) job->Fail(policy::Outcome::kResourceBackoff, "kjitd stopped");
}

void EvaluatorPool::Start() {
  if (options_.when == RunWhen::kNever) {
    log_.Write("info", "evaluator_disabled", {{"reason", "--when never"}});
    return;
  }
  std::string names;
  for (const auto& w : workers_) names += (names.empty() ? "" : ",") + w->device;
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  log_.Write("info", "evaluator_devices", {{"devices", names}, {"cuda_visible_devices", visible ? visible : "(unset)"}});
  for (auto& w : workers_) Spawn(*w);
}

void EvaluatorPool::Spawn(Worker& w) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    w.last_error = std::string("socketpair: ") + std::strerror(errno);
    w.state = Worker::State::kStopped;
    w.restart_at = Clock::now() + options_.unavailable_pause;
    return;
  }
  // The child's end must not already be fd 3: dup2 onto itself would keep close-on-exec.
  const int child_end = fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
  close(sv[1]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, child_end, kWorkerFd);
  std::vector<std::string> args = {options_.worker_path, "--device", w.ordinal};
  args.insert(args.end(), options_.worker_args.begin(), options_.worker_args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  ChildEnvironment env;  // without kjit's shim in LD_PRELOAD: the worker must run PyTorch's own kernels
  const int rc = posix_spawn(&pid, options_.worker_path.c_str(), &actions, nullptr, argv.data(), env.pointers());
  posix_spawn_file_actions_destroy(&actions);
  close(child_end);
  if (rc != 0) {
    close(sv[0]);
    w.last_error = "cannot start the evaluator " + options_.worker_path + ": " + std::strerror(rc) +
                   " (set `evaluator` in kjitd's configuration)";
    w.state = Worker::State::kUnavailable;
    w.restart_at = Clock::now() + options_.unavailable_pause;
    log_.Write("warn", "evaluator_spawn_failed", {{"device", w.device}, {"error", w.last_error}});
    return;
  }
  fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
  w.pid = pid;
  w.fd = sv[0];
  w.reader = FrameReader();
  w.state = Worker::State::kStarting;
  w.deadline = Clock::now() + options_.startup_deadline;
  w.phase = "startup";
  ++w.starts;
  counters_["evaluator_starts"] += 1;
  log_.Write("info", "evaluator_started", {{"device", w.device}, {"pid", std::to_string(pid)}});
}

Status EvaluatorPool::Available(int arch) const {
  if (options_.when == RunWhen::kNever) {
    return Status(StatusCode::kUnavailable, "evaluation is disabled (kjitd --when never)");
  }
  if (workers_.empty()) return Status(StatusCode::kUnavailable, "no GPU is configured for evaluation");
  std::string reasons;
  for (const auto& w : workers_) {
    // A stopped worker that has run before is between a crash and its restart.
    const bool alive = w->state != Worker::State::kUnavailable && (w->state != Worker::State::kStopped || w->starts > 0);
    const bool arch_ok = arch == 0 || !w->info || w->info->arch == arch;
    if (alive && arch_ok) return Status::Ok();
    if (!reasons.empty()) reasons += "; ";
    reasons += "gpu " + w->device + ": ";
    if (!arch_ok) {
      reasons += "is sm_" + std::to_string(w->info->arch);
    } else {
      reasons += w->last_error.empty() ? std::string(Worker::Name(w->state)) : w->last_error;
    }
  }
  return Status(StatusCode::kUnavailable, "no evaluator can take this job (" + reasons + ")");
}

void EvaluatorPool::Enqueue(std::unique_ptr<Job> job) {
  if (Status st = Available(job->arch); !st.ok()) return job->Fail(policy::Outcome::kResourceBackoff, st.message());
  queue_.push_back(std::move(job));
  Dispatch();
}

void EvaluatorPool::SubmitBaseline(BaselineRequest request, int arch, BaselineDone done) {
  auto job = std::make_unique<Job>();
  job->id = request.id = next_id_++;
  job->arch = arch;
  job->baseline = std::move(request);
  job->baseline_done = std::move(done);
  Enqueue(std::move(job));
}

void EvaluatorPool::SubmitEvaluate(EvaluateRequest request, int arch, VerdictDone done) {
  auto job = std::make_unique<Job>();
  job->id = request.id = next_id_++;
  job->arch = arch;
  job->evaluate = std::move(request);
  job->verdict_done = std::move(done);
  Enqueue(std::move(job));
}

std::vector<int> EvaluatorPool::Fds() const {
  std::vector<int> fds;
  for (const auto& w : workers_) {
    if (w->fd >= 0) fds.push_back(w->fd);
  }
  return fds;
}

void EvaluatorPool::OnReadable(int fd) {
  for (auto& wp : workers_) {
    Worker& w = *wp;
    if (w.fd != fd) continue;
    Status st = w.reader.ReadAvailable(fd);
    while (auto frame = w.reader.Next()) {
      auto message = DecodeWorkerMessage(*frame);
      if (!message.ok()) {
        Lost(w, "sent a malformed message: " + message.status().message(), false);
        return;
      }
      Handle(w, *message);
      if (w.fd < 0) return;
    }
    if (!st.ok()) {
      // The channel closed: the worker is exiting or gone.
      close(w.fd);
      w.fd = -1;
      Reap(w);
    }
    return;
  }
}

void EvaluatorPool::Handle(Worker& w, const WorkerMessage& message) {
  if (const auto* h = std::get_if<Hello>(&message)) {
    // Its ordinal and its UUID both configured: one GPU, which gets one worker. The one
    // configured first keeps it (whichever said hello first), unless it is already busy.
    for (auto& other : workers_) {
      if (other.get() == &w || !other->info || other->retired || h->device.uuid.empty()) continue;
      if (other->info->uuid != h->device.uuid) continue;
      const bool w_first = std::find_if(workers_.begin(), workers_.end(), [&](const auto& x) {
                             return x.get() == &w || x.get() == other.get();
                           })->get() == &w;
      if (w_first && other->state == Worker::State::kReady && !other->job) {
        Retire(*other, w, h->device.uuid);
        break;
      }
      Retire(w, *other, h->device.uuid);
      return;
    }
    w.info = h->device;
    w.state = Worker::State::kReady;
    w.last_error.clear();
    log_.Write("info", "evaluator_ready",
               {{"device", w.device}, {"name", h->device.name}, {"uuid", h->device.uuid},
                {"arch", std::to_string(h->device.arch)}, {"pid", std::to_string(h->device.pid)},
                {"torch", h->device.torch_version}});
  } else if (const auto* u = std::get_if<Unavailable>(&message)) {
    w.last_error = u->reason;
    w.state = Worker::State::kUnavailable;
    log_.Write("warn", "evaluator_unavailable", {{"device", w.device}, {"reason", u->reason}});
  } else if (const auto* p = std::get_if<Progress>(&message)) {
    w.phase = p->phase;
    w.deadline = Clock::now() + std::chrono::milliseconds(p->deadline_ms);
  } else if (const auto* b = std::get_if<BaselineResult>(&message)) {
    if (!w.job || !w.job->baseline || w.job->id != b->id) return Lost(w, "answered a job it was not given", false);
    auto job = std::move(w.job);
    w.state = Worker::State::kReady;
    ++w.jobs;
    // A baseline short of memory is answered at once, not retried here: the client decides when to try again
    // (the tuner hands the key back to wait and takes the next one), so a key the GPU cannot hold now never
    // holds a tuner's job for the minute a retry would take. An unfit one can never be held by this GPU.
    if (b->backoff) counters_["baselines_backed_off"] += 1;
    if (b->unfit) counters_["jobs_unfit"] += 1;
    counters_["baselines_measured"] += 1;
    job->baseline_done(*b, *w.info);
  } else if (const auto* v = std::get_if<Verdict>(&message)) {
    if (!w.job || !w.job->evaluate || w.job->id != v->id) return Lost(w, "answered a job it was not given", false);
    auto job = std::move(w.job);
    w.state = v->worker_exits ? Worker::State::kExiting : Worker::State::kReady;
    ++w.jobs;
    if (v->unfit) counters_["jobs_unfit"] += 1;
    const bool yielded = v->retry_later && w.yield_asked;
    if (yielded) ++job->yields;
    if (v->retry_later && !v->unfit && Requeue(job, yielded)) return;
    counters_["trials"] += 1;
    counters_["trials_" + v->outcome] += 1;
    job->verdict_done(*v, w.info ? *w.info : WorkerDevice{});
  } else {
    Lost(w, "sent a message only kjitd sends", false);
  }
}

void EvaluatorPool::Retire(Worker& w, const Worker& keeper, const std::string& uuid) {
  w.retired = true;
  w.state = Worker::State::kUnavailable;
  w.info.reset();
  w.last_error = "the same GPU (" + uuid + ") as device " + keeper.device + "; not used twice";
  log_.Write("warn", "evaluator_duplicate_gpu", {{"device", w.device}, {"same_as", keeper.device}, {"uuid", uuid}});
  // It exits when asked; the closed channel then reaps it (or Tick kills it after a grace
  // period), and Tick never restarts it.
  if (w.fd >= 0) (void)WriteFrame(w.fd, EncodeWorkerMessage(Exit{}));
  w.deadline = Clock::now() + std::chrono::seconds(5);
}

bool EvaluatorPool::Requeue(std::unique_ptr<Job>& job, bool yielded) {
  // Memory that is short now is usually back in seconds: retry for about a minute.
  // (A job whose working set can never fit the GPU, `unfit`, is never requeued.) A job that gave the GPU back
  // may run again as soon as the idle gate lets it: the program's next gap may be short.
  constexpr int kMostBackoffs = 12;
  if (job->backoffs >= kMostBackoffs) return false;
  ++job->backoffs;
  job->not_before = Clock::now() + (yielded ? std::chrono::seconds(0) : std::chrono::seconds(5));
  counters_["jobs_backed_off"] += 1;
  queue_.push_back(std::move(job));
  return true;
}

void EvaluatorPool::Reap(Worker& w) {
  if (w.pid <= 0) return;
  int status = 0;
  pid_t r = waitpid(w.pid, &status, WNOHANG);
  if (r == 0) {
    // The channel closed but the process lingers: it is not coming back.
    kill(w.pid, SIGKILL);
    r = waitpid(w.pid, &status, 0);
  }
  const std::string how = r == w.pid ? DescribeExit(status) : "vanished";
  w.pid = -1;
  if (w.fd >= 0) {
    close(w.fd);
    w.fd = -1;
  }
  if (w.job) {
    auto job = std::move(w.job);
    if (w.phase == kQueuedInWorker && job->redeliveries == 0) {
      // It died before it began the job (no progress yet): killed from outside while
      // idle, say, or on the GPU of another worker's process. Not the job's fault: it
      // goes to another worker, once, so that a job that kills workers on sight still ends.
      ++job->redeliveries;
      counters_["jobs_redelivered"] += 1;
      queue_.push_front(std::move(job));
    } else {
      counters_["trials"] += 1;
      counters_["trials_fault"] += 1;
      job->Fail(policy::Outcome::kFault, "the evaluator worker " + how + " during " + w.phase);
    }
  }
  if (w.state == Worker::State::kUnavailable) {
    w.restart_at = Clock::now() + options_.unavailable_pause;
    return;
  }
  if (w.state != Worker::State::kExiting) {
    counters_["evaluator_crashes"] += 1;
    ++w.crashes;
    log_.Write("warn", "evaluator_died", {{"device", w.device}, {"how", how}, {"phase", w.phase}});
    if (!w.info) w.last_error = "the evaluator " + how + " before it was ready";
  }
  w.state = w.info || w.state == Worker::State::kExiting ? Worker::State::kStopped : Worker::State::kUnavailable;
  w.restart_at = Clock::now() + (w.state == Worker::State::kStopped ? options_.restart_pause : options_.unavailable_pause);
}

void EvaluatorPool::Lost(Worker& w, const std::string& why, bool hang) {
  log_.Write("warn", hang ? "evaluator_hung" : "evaluator_lost", {{"device", w.device}, {"why", why}});
  if (w.pid > 0) kill(w.pid, SIGKILL);
  if (w.job) {
    counters_["trials"] += 1;
    counters_[hang ? "trials_hang" : "trials_fault"] += 1;
    auto job = std::move(w.job);
    job->Fail(hang ? policy::Outcome::kHang : policy::Outcome::kFault, why);
  }
  w.state = Worker::State::kExiting;  // restart after the reap, without counting a crash twice
  ++w.crashes;
  if (hang) counters_["evaluator_kills"] += 1;
  Reap(w);
}

SampleOptions EvaluatorPool::KjitsOwnProcesses() const {
  SampleOptions so;
  std::vector<uint32_t> workers;
  for (const auto& other : workers_) {
    if (other->pid > 0) workers.push_back(static_cast<uint32_t>(other->pid));
  }
  so.exclude_pids = std::move(workers);
  so.exclude_descendants = true;  // compute-sanitizer and its target, which a worker starts
  return so;
}

bool EvaluatorPool::GpuIdle(Worker& w, uint64_t* memory_cap) {
  Result<GpuSample> sample = Status(StatusCode::kUnavailable, nvml_error_.empty() ? "NVML not loaded" : nvml_error_);
  if (nvml_ && w.info) {
    // By UUID: NVML's indices follow PCI order whatever CUDA_VISIBLE_DEVICES says. Every
    // worker of kjit's is excluded, not only this GPU's: a worker that touched another GPU
    // (PyTorch's lazy init can make a context there) is kjit's own load, not the user's; so are the
    // processes a worker starts (compute-sanitizer runs a copy of the worker).
    sample = nvml_->Sample(w.info->uuid, KjitsOwnProcesses());
  }
  const IdleDecision d = w.idle.Update(options_.when, options_.idle, sample, ClientActivityOn(w, Clock::now()));
  *memory_cap = d.memory_cap_bytes;
  w.idle_verdict = d.reason;  // this GPU's own reading, run or not, for stats
  if (!d.run) {
    if (w.phase != "waiting for idle") log_.Write("debug", "evaluator_waits", {{"device", w.device}, {"reason", d.reason}});
    w.phase = "waiting for idle";
  }
  return d.run;
}

std::optional<ClientActivity> EvaluatorPool::ClientActivityOn(Worker& w, Clock::time_point now) {
  if (!w.client_active_at) return std::nullopt;
  // A program that has exited runs nothing more: its last report stops counting at once, so that kjitd
  // starts tuning right after the program it served ends.
  if (w.client_pid > 0 && kill(static_cast<pid_t>(w.client_pid), 0) != 0 && errno == ESRCH) {
    w.client_active_at.reset();
    return std::nullopt;
  }
  return ClientActivity{w.client_pid,
                        std::chrono::duration_cast<std::chrono::milliseconds>(now - *w.client_active_at)};
}

void EvaluatorPool::NoteClientActivity(const std::vector<std::string>& uuids, uint32_t pid) {
  const auto now = Clock::now();
  for (auto& w : workers_) {
    if (!w->info || std::find(uuids.begin(), uuids.end(), w->info->uuid) == uuids.end()) continue;
    w->client_active_at = now;
    w->client_pid = pid;
    // A trial in flight gives the GPU back now rather than at the next busy check.
    if (w->state == Worker::State::kBusy) {
      w->next_busy_check = now;
      YieldIfWanted(*w, now);
    }
  }
}

void EvaluatorPool::YieldIfWanted(Worker& w, Clock::time_point now) {
  // Only --when idle promises to stay out of the way; --when always runs whatever the load.
  if (options_.when != RunWhen::kIdle || !w.info || w.pid <= 0 || now < w.next_busy_check) return;
  w.next_busy_check = now + options_.busy_check_interval;
  std::map<std::string, std::string> why{{"device", w.device}};
  const std::optional<ClientActivity> activity = ClientActivityOn(w, now);
  if (activity && activity->age.count() < options_.idle.client_hold_ms) {
    why["client_pid"] = std::to_string(activity->pid);
  } else {
    if (!nvml_) return;
    auto sample = nvml_->Sample(w.info->uuid, KjitsOwnProcesses());
    if (!sample.ok() || sample->others_utilization_percent <= options_.idle.max_utilization_percent) return;
    why["others_utilization_percent"] = std::to_string(static_cast<int>(sample->others_utilization_percent));
  }
  // A job that gave the GPU back yields_per_trial times already runs to its end.
  if (w.job && w.job->yields >= options_.idle.yields_per_trial) {
    if (!w.kept_running) {
      w.kept_running = true;
      counters_["trials_kept_running"] += 1;
      why["yields"] = std::to_string(w.job->yields);
      log_.Write("info", "evaluator_keeps_running", why);
    }
    return;
  }
  // Someone else's kernels run on this GPU: the job in flight stops at its next timed batch or input set and
  // answers retry_later, and runs again once the GPU is idle. Sent again at each check: a request that
  // reached the worker just before its job started is cleared by the job.
  w.yield_asked = true;
  kill(w.pid, SIGUSR1);
  counters_["trials_preempted_requests"] += 1;
  log_.Write("info", "evaluator_yields", why);
}

void EvaluatorPool::Dispatch() {
  // Each ready GPU is sampled at most once per pass, however many jobs are queued.
  struct Idle {
    bool sampled = false;
    bool run = false;
    uint64_t cap = 0;
  };
  std::vector<Idle> idle(workers_.size());
  std::vector<std::unique_ptr<Job>> undelivered;
  for (auto it = queue_.begin(); it != queue_.end();) {
    Job& job = **it;
    if (Clock::now() < job.not_before) {
      ++it;
      continue;
    }
    Worker* chosen = nullptr;
    uint64_t chosen_cap = 0;
    for (size_t i = 0; i < workers_.size(); ++i) {
      Worker& w = *workers_[i];
      if (w.state != Worker::State::kReady || !w.info) continue;
      if (job.arch != 0 && w.info->arch != job.arch) continue;
      if (!idle[i].sampled) {
        idle[i].sampled = true;
        idle[i].run = GpuIdle(w, &idle[i].cap);
      }
      if (!idle[i].run) continue;
      // The idle GPU that has waited longest: jobs one after another still use every GPU.
      if (chosen == nullptr || w.last_dispatch < chosen->last_dispatch) {
        chosen = &w;
        chosen_cap = idle[i].cap;
      }
    }
    if (chosen == nullptr) {
      ++it;
      continue;
    }
    if (job.baseline) job.baseline->memory_cap_bytes = chosen_cap;
    if (job.evaluate) job.evaluate->memory_cap_bytes = chosen_cap;
    chosen->last_dispatch = Clock::now();
    const std::string frame = job.baseline ? EncodeWorkerMessage(*job.baseline) : EncodeWorkerMessage(*job.evaluate);
    chosen->job = std::move(*it);
    chosen->yield_asked = false;
    chosen->kept_running = false;
    it = queue_.erase(it);
    chosen->state = Worker::State::kBusy;
    chosen->phase = kQueuedInWorker;
    chosen->deadline = Clock::now() + std::chrono::seconds(30);
    if (Status st = WriteFrame(chosen->fd, frame); !st.ok()) {
      // The worker died before kjitd noticed (killed while idle): the job never reached
      // it, so it is not the job's fault. It waits for another worker, or this one's restart.
      undelivered.push_back(std::move(chosen->job));
      counters_["evaluator_crashes"] += 1;  // as when the closed channel is noticed first (Reap)
      Lost(*chosen, "its channel is closed (" + st.message() + ")", false);
    }
  }
  for (auto& job : undelivered) queue_.push_front(std::move(job));
}

void EvaluatorPool::Tick() {
  const auto now = Clock::now();
  for (auto& wp : workers_) {
    Worker& w = *wp;
    switch (w.state) {
      case Worker::State::kStopped:
      case Worker::State::kUnavailable:
        if (w.pid > 0 && (!w.retired || w.fd < 0 || now > w.deadline)) Reap(w);
        if (w.retired) break;
        if (now >= w.restart_at && options_.when != RunWhen::kNever && w.pid <= 0) Spawn(w);
        break;
      case Worker::State::kStarting:
      case Worker::State::kBusy:
        if (now > w.deadline) {
          Lost(w, "the evaluator did not finish " + w.phase + " in time; killed it", w.state == Worker::State::kBusy);
          break;
        }
        if (w.state == Worker::State::kBusy) YieldIfWanted(w, now);
        break;
      case Worker::State::kExiting:
        if (w.fd < 0) Reap(w);
        break;
      case Worker::State::kReady:
        break;
    }
  }
  // Jobs for an arch no worker can serve any more end now, not never.
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (Status st = Available((*it)->arch); !st.ok()) {
      (*it)->Fail(policy::Outcome::kResourceBackoff, st.message());
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  Dispatch();
}

std::map<std::string, std::string> EvaluatorPool::Describe() const {
  std::map<std::string, std::string> out;
  for (size_t i = 0; i < workers_.size(); ++i) {
    const Worker& w = *workers_[i];
    const std::string p = "gpu" + w.device + ".";
    out[p + "state"] = Worker::Name(w.state);
    out[p + "phase"] = w.phase;
    out[p + "starts"] = std::to_string(w.starts);
    if (w.info) {
      out[p + "name"] = w.info->name;
      out[p + "arch"] = std::to_string(w.info->arch);
    }
    if (!w.last_error.empty()) out[p + "note"] = w.last_error;
  }
  return out;
}

std::vector<std::map<std::string, std::string>> EvaluatorPool::Workers() const {
  std::vector<std::map<std::string, std::string>> out;
  for (const auto& wp : workers_) {
    const Worker& w = *wp;
    std::map<std::string, std::string> m = {{"device", w.device},
                                            {"state", Worker::Name(w.state)},
                                            {"phase", w.phase},
                                            {"starts", std::to_string(w.starts)},
                                            {"jobs", std::to_string(w.jobs)},
                                            {"crashes", std::to_string(w.crashes)}};
    if (w.info) {
      m["name"] = w.info->name;
      m["uuid"] = w.info->uuid;
      m["arch"] = std::to_string(w.info->arch);
    }
    if (w.pid > 0) m["pid"] = std::to_string(w.pid);
    if (!w.last_error.empty()) m["note"] = w.last_error;
    if (!w.idle_verdict.empty()) m["idle"] = w.idle_verdict;
    // What it is working on: the key of its job.
    if (w.job) {
      const std::string& bytes = w.job->baseline ? w.job->baseline->key_bytes : w.job->evaluate->key_bytes;
      if (auto key = kjit::OpKey::Decode(bytes); key.ok()) m["key"] = key->ToString();
    }
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace kjit::daemon
