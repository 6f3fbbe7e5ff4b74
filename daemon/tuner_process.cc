#include "tuner_process.h"

#include "child_environment.h"

#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <sstream>
#include <thread>

#include "config.h"
#include "kjit/cache/kernel_cache.h"
#include "kjit/runtime/hash.h"
#include "server.h"

extern char** environ;

namespace kjit::daemon {
namespace {

using Clock = std::chrono::steady_clock;

std::string ExitText(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return std::string("killed by signal ") + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "ended";
}

std::string SelfDir() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/'));
}

Result<int> IntSetting(const DaemonConfig& config, const std::string& key, int lo, int hi) {
  const std::string& text = config.Get(key);
  try {
    size_t used = 0;
    const int v = std::stoi(text, &used);
    if (used == text.size() && v >= lo && v <= hi) return v;
  } catch (const std::exception&) {
  }
  return InvalidArgument(key + " = '" + text + "': expected a whole number from " + std::to_string(lo) + " to " +
                         std::to_string(hi));
}

}  // namespace

Result<TunerProcessOptions> TunerOptionsFromConfig(const DaemonConfig& config, int jobs) {
  TunerProcessOptions o;
  const std::string& tuner = config.Get("tuner");
  KJIT_ASSIGN_OR_RETURN(int first_trials, IntSetting(config, "tune_first_trials", 1, 1000));
  KJIT_ASSIGN_OR_RETURN(int trials, IntSetting(config, "tune_trials", 0, 1000));
  KJIT_ASSIGN_OR_RETURN(int key_seconds, IntSetting(config, "tune_key_seconds", 1, 86400));
  if (tuner == "off") {
    o.off_reason = "tuner = off: queued tasks wait for `kjit policy tune` or an agent";
    return o;
  }
  o.program = tuner == "auto" ? SelfDir() + "/kjit-policy" : tuner;
  if (access(o.program.c_str(), X_OK) != 0) {
    const std::string why = std::string(std::strerror(errno));
    o.off_reason = "no tuner: " + o.program + ": " + why +
                   (tuner == "auto" ? " (kjit-policy is built with LibTorch, KJIT_WITH_TORCH; or set `tuner`)" : "");
    o.program.clear();
    return o;
  }
  o.cache_path = config.Get("cache");
  // One name per kjitd endpoint, the same across restarts: a restarted kjitd knows its earlier tuner's claims.
  o.claimer = "kjitd-" + HashBytes(config.Get("endpoint")).ToHex().substr(0, 12);
  o.args = {"tune",
            "--cache", o.cache_path,
            "--endpoint", config.Get("endpoint"),
            "--jobs", std::to_string(std::max(1, jobs)),
            "--first-trials", std::to_string(first_trials),
            "--trials", std::to_string(trials),
            "--key-seconds", std::to_string(key_seconds),
            "--claimer", o.claimer,
            "--parent-pid", std::to_string(getpid())};
  std::istringstream extra(config.Get("tuner_args"));
  for (std::string a; extra >> a;) o.args.push_back(a);
  return o;
}

TunerProcess::TunerProcess(TunerProcessOptions options, Log& log, std::map<std::string, double>& counters)
    : options_(std::move(options)), log_(log), counters_(counters), pause_(options_.min_pause) {}

TunerProcess::~TunerProcess() { Stop(); }

void TunerProcess::Start() {
  if (options_.program.empty()) {
    log_.Write("info", "tuner_off", {{"reason", options_.off_reason}});
    return;
  }
  started_ = true;
  // Claims a killed kjitd's tuner left: that tuner is gone, so its keys go back to the queue now.
  ReleaseClaimsOf(options_.claimer + "/");
  Spawn();
}

void TunerProcess::ReleaseClaimsOf(const std::string& prefix) {
  cache::OpenOptions o;
  o.path = options_.cache_path;
  auto cache = cache::KernelCache::Open(o);
  if (!cache.ok()) return;
  if (auto released = (*cache)->tasks().ReleaseClaims(prefix); released.ok() && *released > 0) {
    log_.Write("info", "tuner_claims_released", {{"tasks", std::to_string(*released)}, {"claimer", prefix}});
  }
}

void TunerProcess::Spawn() {
  std::vector<std::string> args = {options_.program};
  args.insert(args.end(), options_.args.begin(), options_.args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  ChildEnvironment env;  // without kjit's shim in LD_PRELOAD
  const int rc = posix_spawn(&pid, options_.program.c_str(), nullptr, nullptr, argv.data(), env.pointers());
  if (rc != 0) {
    last_exit_ = "cannot start " + options_.program + ": " + std::strerror(rc) + " (set `tuner` in kjitd's configuration)";
    pause_ = options_.max_pause;
    restart_at_ = Clock::now() + pause_;
    log_.Write("warn", "tuner_spawn_failed", {{"error", last_exit_}});
    return;
  }
  pid_ = pid;
  spawned_at_ = Clock::now();
  counters_["tuner_starts"] += 1;
  log_.Write("info", "tuner_process_started", {{"pid", std::to_string(pid)}, {"program", options_.program}});
}

void TunerProcess::Tick() {
  if (!started_) return;
  if (pid_ > 0) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == 0) return;
    last_exit_ = r == pid_ ? ExitText(status) : "lost";
    ReleaseClaimsOf(options_.claimer + "/" + std::to_string(pid_) + "/");
    pid_ = -1;
    counters_["tuner_exits"] += 1;
    // A tuner that ran a good while earns a quick restart; one that keeps dying waits longer each time.
    pause_ = Clock::now() - spawned_at_ >= options_.healthy_after ? options_.min_pause
                                                                  : std::min(options_.max_pause, pause_ * 2);
    restart_at_ = Clock::now() + pause_;
    log_.Write("warn", "tuner_exited",
               {{"how", last_exit_}, {"restart_in_ms", std::to_string(pause_.count())}});
    return;
  }
  if (Clock::now() >= restart_at_) Spawn();
}

void TunerProcess::Stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  const auto until = Clock::now() + options_.stop_grace;
  int status = 0;
  bool reaped = false;
  while (Clock::now() < until && !reaped) {
    reaped = waitpid(pid_, &status, WNOHANG) == pid_;
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!reaped) {
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
    log_.Write("warn", "tuner_killed", {{"reason", "did not stop within the grace period"}});
  }
  ReleaseClaimsOf(options_.claimer + "/" + std::to_string(pid_) + "/");
  pid_ = -1;
}

std::string TunerProcess::Describe() const {
  if (!started_) return options_.program.empty() ? "off: " + options_.off_reason : "not started";
  if (pid_ > 0) return "running (pid " + std::to_string(pid_) + ")";
  const auto left = std::chrono::duration_cast<std::chrono::seconds>(restart_at_ - Clock::now()).count();
  return "restarting in " + std::to_string(std::max<int64_t>(0, left)) + " s: " + last_exit_;
}

}  // namespace kjit::daemon
