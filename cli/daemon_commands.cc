#include "daemon_commands.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli_format.h"
#include "config.h"
#include "kjit/cache/kernel_cache.h"
#include "kjit/ipc/client.h"
#include "kjit/ipc/endpoint.h"
#include "kjit/ipc/task_info.h"
#include "kjit/runtime/hash.h"
#include "kjit/runtime/paths.h"

namespace kjit::cli {

using Clock = std::chrono::steady_clock;

OpKey ExampleKey() {
  return OpKey::Single("aten::_softmax", "",
                       {TensorDesc::Contiguous(DType::kFloat32, {64, 1048576}), int64_t{-1}, false}, 90);
}

struct DaemonCommands::Options {
  CLI::App* daemon = nullptr;
  CLI::App* start = nullptr;
  CLI::App* stop = nullptr;
  CLI::App* status = nullptr;
  CLI::App* keygen = nullptr;
  CLI::App* tasks = nullptr;
  CLI::App* submit = nullptr;
  CLI::App* run = nullptr;

  std::string endpoint;  // empty: DefaultEndpoint(), resolved when a command runs
  int timeout_ms = 2000;
  bool json = false;

  bool foreground = false;
  std::vector<std::string> kjitd_args;
  double stop_timeout_s = 10;
  std::string keygen_out;
  bool keygen_force = false;

  std::string tasks_state;
  uint32_t tasks_limit = 0;
  std::string tasks_cache;
  double tasks_watch_s = 0;  // > 0: print again every this many seconds

  std::string submit_key;
  bool submit_example = false;
  int submit_priority = 0;
  std::string submit_detail;

  bool run_no_daemon = false;
  std::vector<std::string> run_command;
};

namespace {

using Options = DaemonCommands::Options;

// ---- output



// A failure that is not a Status from below: says what happened and what to do.
int Fail(const std::string& message) {
  std::cerr << "kjit: " << message << "\n";
  return 1;
}


// Counters are doubles on the wire; most are counts, shown without decimals.
bool IsWhole(double v) { return std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15; }

std::string NumberText(double v) {
  return IsWhole(v) ? std::to_string(static_cast<long long>(v)) : Format("%.3f", v);
}

Json NumberJson(double v) { return IsWhole(v) ? Json(static_cast<int64_t>(v)) : Json(v); }


std::string DurationText(double seconds) {
  if (!(seconds >= 0)) return "?";
  const auto total = static_cast<long long>(seconds);
  const long long d = total / 86400, h = total % 86400 / 3600, m = total % 3600 / 60, s = total % 60;
  if (d > 0) return Format("%lldd %02lldh %02lldm", d, h, m);
  if (h > 0) return Format("%lldh %02lldm %02llds", h, m, s);
  if (m > 0) return Format("%lldm %02llds", m, s);
  return Format("%.1fs", seconds);
}

// ---- talking to kjitd

std::string Endpoint(const Options& o) { return o.endpoint.empty() ? ipc::DefaultEndpoint() : o.endpoint; }

std::unique_ptr<ipc::Client> MakeClient(const Options& o) {
  ipc::ClientOptions options;
  options.endpoint = Endpoint(o);
  options.name = "kjit-cli/0.1";
  options.request_timeout = std::chrono::milliseconds(o.timeout_ms);
  return std::make_unique<ipc::Client>(std::move(options));
}

bool IsUnavailable(const Status& s) { return s.code() == StatusCode::kUnavailable; }

// The client's message without its "(is it running? ...)" hint, for when kjit knows it is.
std::string WithoutHint(const Status& s) {
  std::string message = s.message();
  const size_t hint = message.find(" (is it running?");
  if (hint != std::string::npos) message.erase(hint);
  return message;
}

// The pid kjitd reports in its stats (0 if it does not).
int64_t PidFromStats(const ipc::StatsReply& stats) {
  const auto it = stats.counters.find("pid");
  return it == stats.counters.end() ? 0 : static_cast<int64_t>(it->second);
}

// ---- processes and the pid file

// The pid file kjitd uses for `endpoint`, worked out as kjitd does (its
// configuration file, KJITD_PID_FILE, else derived from the endpoint).
std::string PidFileFor(const std::string& endpoint) {
  const std::map<std::string, std::string> flags = {{"endpoint", endpoint}};
  auto config = daemon::LoadConfig(daemon::DefaultConfigFile(), false, flags);
  if (!config.ok()) config = daemon::LoadConfig("", false, flags);  // a broken file: kjitd would not start anyway
  if (config.ok()) return config->Get("pid_file");
  return endpoint == ipc::DefaultEndpoint()
             ? ipc::DefaultPidFile()
             : ipc::RuntimeDir() + "/kjitd-" + HashBytes(endpoint).ToHex().substr(0, 12) + ".pid";
}

// Whether `pid` is a live process (a zombie counts as gone: it has exited).
bool Alive(pid_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return kill(pid, 0) == 0 || errno == EPERM;
  const size_t paren = line.rfind(')');  // the command name may hold spaces and parentheses
  return paren == std::string::npos || paren + 2 >= line.size() || line[paren + 2] != 'Z';
}

bool IsKjitd(pid_t pid) {
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(comm, name);
  return name == "kjitd";
}

struct PidFileState {
  std::string path;
  bool exists = false;
  pid_t pid = 0;          // what the file says, 0 if unreadable
  bool running = false;   // that pid is a live kjitd
};

PidFileState ReadPidFile(const std::string& path) {
  PidFileState state;
  state.path = path;
  std::ifstream in(path);
  if (!in) return state;
  state.exists = true;
  long long pid = 0;
  if (in >> pid && pid > 0 && pid <= INT32_MAX) state.pid = static_cast<pid_t>(pid);
  state.running = state.pid > 0 && Alive(state.pid) && IsKjitd(state.pid);
  return state;
}

// Waits until `pid` has exited; true if it did within `timeout`.
bool WaitGone(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Alive(pid)) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

// kjitd next to this kjit (the build tree and an installation keep them together), else on PATH.
Result<std::string> FindKjitd() {
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  std::string next_to;
  if (!error) {
    next_to = (self.parent_path() / "kjitd").string();
    if (access(next_to.c_str(), X_OK) == 0) return next_to;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string dir = dirs.substr(start, end - start);
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/kjitd";
    struct stat st{};
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    start = end + 1;
  }
  return NotFound("cannot find the kjitd program: it is neither next to kjit" +
                  (next_to.empty() ? std::string() : " (" + next_to + ")") +
                  " nor on PATH; build it (`ninja kjitd`) or install it beside kjit");
}

std::vector<char*> Argv(std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return argv;
}

// In a forked child: every descriptor from 3 up is closed, so kjitd keeps none of kjit's.
void CloseFromThree() {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, 3u, ~0u, 0u) == 0) return;
#endif
  const long max = std::min(sysconf(_SC_OPEN_MAX), 65536L);
  for (long fd = 3; fd < max; ++fd) close(static_cast<int>(fd));
}

struct Captured {
  int exit_code = -1;  // 128 + signal when killed by one
  bool timed_out = false;
  std::string out, err;
};

// Runs a program with stdin from /dev/null and stdout and stderr captured, for at most `timeout`.
Result<Captured> RunCaptured(std::vector<std::string> args, std::chrono::milliseconds timeout) {
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return IOError(std::string("pipe: ") + std::strerror(errno));
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    const int saved = errno;
    close(out_pipe[0]);
    close(out_pipe[1]);
    return IOError(std::string("pipe: ") + std::strerror(saved));
  }
  std::vector<char*> argv = Argv(args);
  std::cout.flush();
  std::cerr.flush();
  const pid_t pid = fork();
  if (pid < 0) {
    const int saved = errno;
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) close(fd);
    return IOError(std::string("fork: ") + std::strerror(saved));
  }
  if (pid == 0) {
    // Only async-signal-safe calls until exec: kjit has threads.
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    CloseFromThree();
    execv(argv[0], argv.data());
    static const char kMessage[] = "cannot execute the program\n";
    if (write(STDERR_FILENO, kMessage, sizeof kMessage - 1) < 0) {
      // Nothing more to say.
    }
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  Captured result;
  const auto deadline = Clock::now() + timeout;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_pipes = 2;
  while (open_pipes > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      result.timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    const int ready = poll(fds, 2, static_cast<int>(std::min<long long>(left, 1000)));
    if (ready < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[4096];
      const ssize_t n = read(fds[i].fd, buffer, sizeof buffer);
      if (n > 0) {
        sinks[i]->append(buffer, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_pipes;
      }
    }
  }
  for (const auto& fd : fds) {
    if (fd.fd >= 0) close(fd.fd);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
  return result;
}

// ---- daemon start / stop / status

// Whether a kjitd answers at the endpoint; its pid if it says.
struct Probe {
  bool answers = false;
  int64_t pid = 0;
};

Probe ProbeDaemon(const Options& o) {
  auto stats = MakeClient(o)->Stats();
  return stats.ok() ? Probe{true, PidFromStats(*stats)} : Probe{};
}

std::string PidText(int64_t pid) { return pid > 0 ? "pid " + std::to_string(pid) : "pid unknown"; }

// Where a detached kjitd logs, which logs nowhere unless told: the log_file of the user's kjitd.conf, else kjit's
// state directory's kjitd.log, which kjit then passes (`pass`). Nothing when `extra` flags name a log or config.
struct KjitdLog {
  std::string file;
  bool pass = false;
};
KjitdLog KjitdLogFile(const Options& o, const std::vector<std::string>& extra) {
  for (const auto& arg : extra) {
    if (arg == "--log-file" || arg.rfind("--log-file=", 0) == 0 || arg == "--config" || arg.rfind("--config=", 0) == 0) {
      return {};
    }
  }
  auto config = daemon::LoadConfig(daemon::DefaultConfigFile(), false, {{"endpoint", Endpoint(o)}});
  if (config.ok() && !config->Get("log_file").empty()) return {config->Get("log_file"), false};
  const std::string dir = CacheDir();
  if (!MakeDirectories(dir, 0700).ok()) return {};
  return {dir + "/kjitd.log", true};
}

int CmdStart(const Options& o) {
  for (const auto& arg : o.kjitd_args) {
    // kjit passes these itself; kjitd would refuse them twice, in its own words.
    if (arg == "--endpoint" || arg.rfind("--endpoint=", 0) == 0) {
      std::cerr << "kjit: give the endpoint to kjit, before `--`: `kjit daemon start --endpoint EP` (kjit passes it "
                   "on to kjitd and talks to kjitd there)\n";
      return 2;
    }
    if (arg == "--detach") {
      std::cerr << "kjit: `kjit daemon start` runs kjitd with --detach already (--foreground runs it in this "
                   "terminal)\n";
      return 2;
    }
  }
  auto kjitd = FindKjitd();
  if (!kjitd.ok()) return Report(kjitd.status());
  const std::string endpoint = Endpoint(o);
  std::vector<std::string> args = {*kjitd, "--endpoint", endpoint};
  if (o.foreground) {
    args.insert(args.end(), o.kjitd_args.begin(), o.kjitd_args.end());
    std::cout.flush();
    std::cerr.flush();
    std::vector<char*> argv = Argv(args);
    execv(argv[0], argv.data());
    return Report(IOError("cannot run " + *kjitd + ": " + std::strerror(errno)));
  }

  // Starting what already runs is not an error: the state the user asked for holds.
  auto already_running = [&](const Probe& probe) {
    std::cout << "kjitd is already running (" << PidText(probe.pid) << ", " << endpoint << ")\n";
    if (!o.kjitd_args.empty()) {
      std::cerr << "kjit: the kjitd flags given were not used; `kjit daemon stop` first to start it with them\n";
    }
    return 0;
  };
  if (const Probe probe = ProbeDaemon(o); probe.answers) return already_running(probe);
  args.push_back("--detach");
  const KjitdLog log = KjitdLogFile(o, o.kjitd_args);
  if (log.pass) args.insert(args.end(), {"--log-file", log.file});
  args.insert(args.end(), o.kjitd_args.begin(), o.kjitd_args.end());
  constexpr auto kReadyTimeout = std::chrono::seconds(30);
  auto run = RunCaptured(args, kReadyTimeout);
  if (!run.ok()) return Report(run.status().WithContext("starting " + *kjitd));
  if (run->timed_out) {
    return Fail("kjitd did not report that it was ready within " + std::to_string(kReadyTimeout.count()) +
                " s; look at its log (`kjitd --print-config` shows log_file), or run `kjit daemon start "
                "--foreground` to watch it start");
  }
  if (run->exit_code != 0 && run->err.find("already running") != std::string::npos) {
    // Another start won the race, or a kjitd holds the pid file without answering yet.
    if (const Probe probe = ProbeDaemon(o); probe.answers) return already_running(probe);
  }
  std::cout << run->out;
  std::cerr << run->err;
  if (run->exit_code == 0) {
    if (log.pass) std::cout << "its log: " << log.file << "\n";
    return 0;
  }
  if (run->exit_code != 1 || (run->out.empty() && run->err.empty())) {
    // Not kjitd's own failure status: its flags were refused (CLI11's codes), or it crashed.
    std::cerr << "kjit: " << *kjitd << " exited with status " << run->exit_code
              << (run->out.empty() && run->err.empty() ? " and said nothing" : "") << "\n";
  }
  return 1;
}

int CmdStop(const Options& o) {
  const std::string endpoint = Endpoint(o);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.stop_timeout_s * 1000));
  const bool local = endpoint.rfind("ipc://", 0) == 0;
  auto client = MakeClient(o);
  auto stats = client->Stats();
  const Status asked = stats.ok() ? client->Shutdown() : stats.status();
  client.reset();

  pid_t pid = stats.ok() ? static_cast<pid_t>(PidFromStats(*stats)) : 0;
  const PidFileState pid_file = ReadPidFile(PidFileFor(endpoint));
  if (pid <= 0 && pid_file.running) pid = pid_file.pid;

  // kjitd answered the stats request, so it got the shutdown request too. Its
  // acknowledgement can still go missing (kjitd may close its socket before the
  // reply leaves), so what counts is whether the process exits.
  if (stats.ok() && (asked.ok() || IsUnavailable(asked))) {
    if (!local || pid <= 0) {
      // A kjitd elsewhere (tcp://), or one that did not say its pid: its acknowledgement is all there is.
      if (!asked.ok()) return Report(asked.WithContext("asking kjitd to shut down"));
      std::cout << "kjitd at " << endpoint << " acknowledged the shutdown request\n";
      return 0;
    }
    // kjitd finishes the request in hand first; a SIGTERM halfway only repeats the request.
    if (!WaitGone(pid, timeout / 2)) {
      kill(pid, SIGTERM);
      if (!WaitGone(pid, timeout - timeout / 2)) {
        return Fail(Format("kjitd (pid %d) was asked to shut down and sent SIGTERM, but is still running after %.1f s; "
                           "`kill -9 %d` ends it (the cache stays consistent: every write is one transaction)",
                           static_cast<int>(pid), o.stop_timeout_s, static_cast<int>(pid)));
      }
    }
    std::cout << "kjitd stopped (pid " << pid << ", " << endpoint << ")\n";
    return 0;
  }
  if (!asked.ok() && !IsUnavailable(asked)) {
    std::cerr << "kjit: kjitd refused the request: " << asked.ToString() << "\n";
  }

  if (!pid_file.running) {
    std::cout << "kjitd is not running at " << endpoint;
    if (pid_file.exists && pid_file.pid > 0) {
      std::cout << " (the pid file " << pid_file.path << " names pid " << pid_file.pid
                << ", which is not a running kjitd: left by one that was killed)";
    }
    std::cout << "\n";
    return 0;
  }
  pid = pid_file.pid;
  std::cerr << "kjit: kjitd (pid " << pid << ") does not answer: " << WithoutHint(asked)
            << "; sending it SIGTERM\n";
  if (kill(pid, SIGTERM) != 0) {
    return Fail(Format("cannot signal kjitd (pid %d): %s", static_cast<int>(pid), std::strerror(errno)));
  }
  if (!WaitGone(pid, timeout)) {
    return Fail(Format("kjitd (pid %d) is still running %.1f s after SIGTERM; `kill -9 %d` ends it (the cache "
                       "stays consistent: every write is one transaction)",
                       static_cast<int>(pid), o.stop_timeout_s, static_cast<int>(pid)));
  }
  std::cout << "kjitd stopped (pid " << pid << ", " << endpoint << ", by SIGTERM)\n";
  return 0;
}

double Counter(const ipc::StatsReply& stats, const std::string& name) {
  const auto it = stats.counters.find(name);
  return it == stats.counters.end() ? 0 : it->second;
}

constexpr int kNotRunning = 3;  // as `systemctl status`

// One line per evaluator worker (one per GPU): which GPU, its state, how much it
// has done, and why it is not working when it is not.
void PrintEvaluators(const ipc::StatsReply& s) {
  if (!s.evaluators) return;  // an older kjitd, or none with an evaluator pool
  auto get = [](const std::map<std::string, std::string>& m, const char* key) {
    const auto it = m.find(key);
    return it == m.end() ? std::string() : it->second;
  };
  std::cout << "evaluators (" << s.evaluators->size() << (s.evaluators->size() == 1 ? " GPU" : " GPUs") << ")\n";
  if (s.evaluators->empty()) std::cout << "  (none configured)\n";
  for (const auto& w : *s.evaluators) {
    std::string line = "  gpu " + get(w, "device") + "  " + get(w, "state");
    // The phase only means something while it works (a ready worker keeps its last one).
    const std::string state = get(w, "state"), phase = get(w, "phase");
    if ((state == "busy" || state == "starting") && !phase.empty()) line += " (" + phase + ")";
    if (const std::string arch = get(w, "arch"); !arch.empty()) line += "  sm_" + arch;
    if (const std::string name = get(w, "name"); !name.empty()) line += "  " + name;
    if (const std::string uuid = get(w, "uuid"); !uuid.empty() && uuid != get(w, "device")) line += "  " + uuid;
    if (const std::string pid = get(w, "pid"); !pid.empty()) line += "  pid " + pid;
    line += "  jobs " + get(w, "jobs") + ", starts " + get(w, "starts") + ", crashes " + get(w, "crashes");
    std::cout << line << "\n";
    if (const std::string note = get(w, "note"); !note.empty()) std::cout << "      " << note << "\n";
    if (const std::string idle = get(w, "idle"); !idle.empty()) std::cout << "      idle: " << idle << "\n";
    if (const std::string key = get(w, "key"); !key.empty() && state == "busy") {
      std::cout << "      " << (phase == "baseline" ? "timing PyTorch's kernel for " : "trying a kernel for ") << key
                << "\n";
    }
  }
}

int CmdStatus(const Options& o) {
  const std::string endpoint = Endpoint(o);
  auto client = MakeClient(o);
  auto hello = client->Hello();
  Result<ipc::StatsReply> stats = hello.ok() ? client->Stats() : Result<ipc::StatsReply>(hello.status());
  if (!stats.ok()) {
    if (!IsUnavailable(stats.status())) return Report(stats.status());
    const PidFileState pid_file = ReadPidFile(PidFileFor(endpoint));
    if (pid_file.running) {
      // The process is there but does not answer: a failure, not a stopped daemon.
      if (o.json) {
        std::cout << DumpJson(Json{{"running", true},
                                   {"answering", false},
                                   {"pid", pid_file.pid},
                                   {"endpoint", endpoint},
                                   {"error", stats.status().ToString()}})
                  << "\n";
      } else {
        std::cout << "kjitd (pid " << pid_file.pid << ") is running but does not answer: "
                  << WithoutHint(stats.status()) << "\n";
      }
      return 1;
    }
    if (o.json) {
      std::cout << DumpJson(Json{{"running", false}, {"endpoint", endpoint}}) << "\n";
    } else {
      std::cout << "kjitd is not running at " << endpoint << " (start it with `kjit daemon start`)\n";
    }
    return kNotRunning;
  }
  const auto& h = *hello;
  const auto& s = *stats;
  const int64_t pid = PidFromStats(s);
  if (o.json) {
    Json counters = Json::object();
    for (const auto& [name, value] : s.counters) counters[name] = NumberJson(value);
    std::cout << DumpJson(Json{{"running", true},
                               {"answering", true},
                               {"pid", pid},
                               {"endpoint", endpoint},
                               {"announce_endpoint", h.announce_endpoint},
                               {"server", h.server},
                               {"protocol_version", h.protocol_version},
                               {"capabilities", h.capabilities},
                               {"uptime_s", Counter(s, "uptime_s")},
                               {"requests", NumberJson(Counter(s, "requests"))},
                               {"misses_reported", NumberJson(Counter(s, "misses_reported"))},
                               {"tasks_queued", NumberJson(Counter(s, "tasks_queued"))},
                               {"evaluators", s.evaluators ? Json(*s.evaluators) : Json::array()},
                               {"counters", counters}})
              << "\n";
    return 0;
  }
  std::string capabilities;
  for (const auto& c : h.capabilities) capabilities += (capabilities.empty() ? "" : ", ") + c;
  std::cout << "kjitd is running (" << PidText(pid) << ")\n"
            << "  endpoint          " << endpoint << "\n"
            << "  announce          " << (h.announce_endpoint.empty() ? "(none)" : h.announce_endpoint) << "\n"
            << "  server            " << h.server << ", protocol " << h.protocol_version
            << (capabilities.empty() ? "" : " (" + capabilities + ")") << "\n"
            << "  uptime            " << DurationText(Counter(s, "uptime_s")) << "\n"
            << "  requests          " << NumberText(Counter(s, "requests")) << "\n"
            << "  misses reported   " << NumberText(Counter(s, "misses_reported")) << "\n"
            << "  tasks queued      " << NumberText(Counter(s, "tasks_queued")) << "\n";
  // The queue's other states and the tuner, where kjitd reports them (kjitds before the tuner do not).
  if (s.counters.count("tuner_running") != 0) {
    std::cout << "  tasks             " << NumberText(Counter(s, "tasks_running")) << " tuning, "
              << NumberText(Counter(s, "tasks_done")) << " done, " << NumberText(Counter(s, "tasks_unfit"))
              << " unfit, " << NumberText(Counter(s, "tasks_failed")) << " failed\n"
              << "  tuner             "
              << (Counter(s, "tuner_running") > 0
                      ? "running (pid " + NumberText(Counter(s, "tuner_pid")) + ")"
                      : std::string("not running (kjitd's log says why; `kjitd --print-config` shows `tuner`)"))
              << "\n";
  }
  PrintEvaluators(s);
  std::cout << "counters\n";
  size_t width = 0;
  for (const auto& [name, value] : s.counters) width = std::max(width, name.size());
  for (const auto& [name, value] : s.counters) {
    std::cout << "  " << name << std::string(width - name.size() + 2, ' ') << NumberText(value) << "\n";
  }
  return 0;
}

// Writes `contents` to `path` with `mode` (whatever the umask), replacing the file whole.
Status WriteWithMode(const std::string& path, const std::string& contents, mode_t mode) {
  const std::string temp = path + ".tmp." + std::to_string(getpid());
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) return IOError("cannot create " + temp + ": " + std::strerror(errno));
  bool ok = fchmod(fd, mode) == 0 &&
            write(fd, contents.data(), contents.size()) == static_cast<ssize_t>(contents.size());
  ok = fsync(fd) == 0 && ok;
  const int saved = errno;
  ok = close(fd) == 0 && ok;
  if (!ok || rename(temp.c_str(), path.c_str()) != 0) {
    const int error = ok ? errno : saved;
    unlink(temp.c_str());
    return IOError("cannot write " + path + ": " + std::strerror(error));
  }
  return Status::Ok();
}

int CmdKeygen(const Options& o) {
  const std::string secret_path = o.keygen_out + ".key";
  const std::string public_path = o.keygen_out + ".pub";
  if (!o.keygen_force) {
    for (const auto& path : {secret_path, public_path}) {
      struct stat st{};
      if (lstat(path.c_str(), &st) == 0) {
        return Fail(path + " already exists; --force replaces it (clients holding the old public key will then be "
                           "refused)");
      }
    }
  }
  char public_key[41] = {0}, secret_key[41] = {0};
  if (zmq_curve_keypair(public_key, secret_key) != 0) {
    return Report(Status(StatusCode::kUnavailable, std::string("cannot make a CURVE keypair: ") +
                                                       zmq_strerror(zmq_errno()) +
                                                       " (this libzmq may be built without CURVE support)"));
  }
  if (auto s = WriteWithMode(secret_path, std::string(secret_key) + "\n", 0600); !s.ok()) return Report(s);
  if (auto s = WriteWithMode(public_path, std::string(public_key) + "\n", 0644); !s.ok()) return Report(s);
  std::error_code error;
  auto absolute = std::filesystem::absolute(secret_path, error);
  const std::string secret_absolute = error ? secret_path : absolute.lexically_normal().string();
  const std::string config_file = daemon::DefaultConfigFile();
  std::cout << "wrote the CURVE secret key to " << secret_path << " (mode 0600) and the public key to " << public_path
            << "\n\n"
            << "For kjitd to accept encrypted connections over TCP, put in "
            << (config_file.empty() ? std::string("its configuration file") : config_file) << ":\n"
            << "  tcp_endpoint = tcp://*:5555\n"
            << "  curve_secret_key_file = " << secret_absolute << "\n"
            << "  curve_authorized_keys_file = <a file of the clients' public keys, one per line>\n"
            << "(or pass --tcp-endpoint, --curve-secret-key-file and --curve-authorized-keys-file to kjitd: `kjit "
               "daemon start -- --tcp-endpoint tcp://*:5555 --curve-secret-key-file "
            << secret_absolute << " --curve-authorized-keys-file FILE`). Each client makes its own pair with "
            << "`kjit daemon keygen`; without that list kjitd refuses TCP unless curve_allow_any_client = true, "
               "which admits any client with the public key below read-only.\n\n"
            << "Clients connecting over TCP need the server's public key (" << public_path << "):\n"
            << "  " << public_key << "\n"
            << "Keep " << secret_path << " private: whoever holds it can pose as this kjitd.\n";
  return 0;
}

// ---- tasks and submit

Json TaskJson(const ipc::TaskInfo& t) {
  Json j{{"id", t.id},
         {"key_hash", t.key_hash},
         {"key_text", t.key_text},
         {"state", t.state},
         {"priority", t.priority},
         {"calls", t.calls},
         {"observed_us", t.observed_us},
         {"expected_gain_us", t.expected_gain_us},
         {"attempts", t.attempts},
         {"detail", t.detail},
         {"created_unix_ms", t.created_unix_ms},
         {"updated_unix_ms", t.updated_unix_ms}};
  // The tuner's progress, where kjitd reports it.
  if (t.round) j["round"] = *t.round;
  if (t.trials) j["trials"] = *t.trials;
  if (t.best_us) j["best_us"] = *t.best_us;
  if (t.baseline_us) j["baseline_us"] = *t.baseline_us;
  if (t.floor_us) j["floor_us"] = *t.floor_us;
  if (t.best_us && t.baseline_us && *t.best_us > 0) j["speedup"] = *t.baseline_us / *t.best_us;
  if (t.record_id) j["record_id"] = *t.record_id;
  if (t.policy_version) j["policy_version"] = *t.policy_version;
  if (t.claimed_by) j["claimed_by"] = *t.claimed_by;
  return j;
}

// What a user calls a running task: a tuner is working on it.
std::string StateText(const std::string& state) { return state == "running" ? "tuning" : state; }

void PrintTasks(const Options& o, const std::vector<ipc::TaskInfo>& tasks) {
  if (o.json) {
    Json all = Json::array();
    for (const auto& t : tasks) all.push_back(TaskJson(t));
    std::cout << DumpJson(all) << "\n";
    return;
  }
  if (tasks.empty()) {
    std::cout << (o.tasks_state.empty() ? std::string("no tasks") : "no " + o.tasks_state + " tasks") << "\n";
    return;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& t : tasks) {
    // BEST: the best verified kernel's speedup over PyTorch's, as the evaluator timed both.
    std::string best = "-";
    if (t.best_us.value_or(0) > 0 && t.baseline_us.value_or(0) > 0) {
      char b[32];
      std::snprintf(b, sizeof b, "%.2fx", *t.baseline_us / *t.best_us);
      best = b;
    }
    const int64_t record = t.record_id.value_or(0);
    rows.push_back({std::to_string(t.id), StateText(t.state), std::to_string(t.priority), std::to_string(t.calls),
                    MicrosText(t.observed_us), MicrosText(t.expected_gain_us), std::to_string(t.trials.value_or(0)),
                    best, record > 0 ? std::to_string(record) : "-", t.key_hash.substr(0, 12), t.key_text});
  }
  PrintTable(std::cout, {{"ID", true},
              {"STATE", false},
              {"PRIORITY", true},
              {"CALLS", true},
              {"MEAN(us)", true},
              {"GAIN(us)", true},
              {"TRIALS", true},
              {"BEST", true},
              {"KERNEL", true},
              {"KEY", false},
              {"OP / KEY", false}},
             rows, TableWidth());
  // Why tasks ended as they did, where they did not yield a kernel.
  for (const auto& t : tasks) {
    const bool no_kernel = t.state == "done" && t.record_id.value_or(0) == 0;
    if ((t.state == "unfit" || t.state == "failed" || no_kernel) && !t.detail.empty()) {
      std::cout << "  task " << t.id << " " << t.state << ": " << t.detail << "\n";
    }
  }
}

int CmdTasksOnce(const Options& o);

// `kjit tasks --watch`: the queue and what each GPU is working on, again and again, until interrupted. On a
// terminal each view replaces the last; piped, views follow one another, each under a time stamp.
int CmdTasksWatch(const Options& o) {
  const bool terminal = isatty(STDOUT_FILENO) != 0;
  while (true) {
    if (terminal) std::cout << "\033[H\033[2J";
    const std::time_t now = std::time(nullptr);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%H:%M:%S", std::localtime(&now));
    std::cout << "kjit tasks, " << stamp << " (every " << Format("%g", o.tasks_watch_s) << " s; Ctrl-C stops)\n";
    auto client = MakeClient(o);
    if (auto stats = client->Stats(); stats.ok()) {
      if (stats->counters.count("tuner_running") != 0) {
        std::cout << "tuner " << (Counter(*stats, "tuner_running") > 0 ? "running" : "not running") << "; "
                  << NumberText(Counter(*stats, "trials")) << " trials so far\n";
      }
      PrintEvaluators(*stats);
    }
    client.reset();
    if (const int rc = CmdTasksOnce(o); rc != 0) return rc;
    std::cout << (terminal ? "" : "\n") << std::flush;
    std::this_thread::sleep_for(std::chrono::duration<double>(o.tasks_watch_s));
  }
}

int CmdTasks(const Options& o) {
  if (o.tasks_watch_s > 0 && !o.json) return CmdTasksWatch(o);
  return CmdTasksOnce(o);
}

int CmdTasksOnce(const Options& o) {
  auto client = MakeClient(o);
  auto tasks = client->ListTasks(o.tasks_state, o.tasks_limit);
  client.reset();
  if (tasks.ok()) {
    PrintTasks(o, *tasks);
    return 0;
  }
  if (!IsUnavailable(tasks.status())) return Report(tasks.status());

  // kjitd is away: the queue is in the cache file, which can be read without it.
  cache::OpenOptions options;
  options.path = o.tasks_cache.empty() ? cache::DefaultCachePath() : o.tasks_cache;
  options.read_only = true;
  options.create = false;
  std::error_code error;
  if (!std::filesystem::exists(options.path, error)) {
    std::cerr << "(kjitd is not running at " << Endpoint(o) << ", and there is no kernel cache at " << options.path
              << " yet)\n";
    PrintTasks(o, {});
    return 0;
  }
  auto opened = cache::KernelCache::Open(options);
  if (!opened.ok()) return Report(opened.status());
  auto stored = (*opened)->tasks().ListTasks(o.tasks_state, static_cast<int>(std::min<uint32_t>(o.tasks_limit, INT32_MAX)));
  if (!stored.ok()) return Report(stored.status());
  std::cerr << "(kjitd is not running; read from the cache file " << options.path << ")\n";
  std::vector<ipc::TaskInfo> infos;
  for (const auto& t : *stored) infos.push_back(ipc::ToTaskInfo(t));
  PrintTasks(o, infos);
  return 0;
}

int CmdSubmit(const Options& o) {
  std::string key_bytes;
  if (o.submit_example) {
    key_bytes = ExampleKey().Encode();
  } else if (o.submit_key.empty()) {
    std::cerr << "kjit: give a key in hex (as `kjit key example` prints after \"encoded\") or --example\n"
              << "Run with --help for more information.\n";
    return 2;
  } else {
    auto bytes = HexDecode(o.submit_key);
    if (!bytes.ok()) return Report(bytes.status().WithContext("the key is not hex"));
    key_bytes = std::move(*bytes);
  }
  // Checked here too, so that a typo is explained before anything is sent.
  auto key = OpKey::Decode(key_bytes);
  if (!key.ok()) return Report(key.status().WithContext("the key is not an encoded OpKey"));
  auto client = MakeClient(o);
  auto ack = client->Submit(key_bytes, o.submit_priority, o.submit_detail);
  if (!ack.ok()) return Report(ack.status());
  if (o.json) {
    std::cout << DumpJson(Json{{"task_id", ack->task_id},
                               {"merged", ack->merged},
                               {"key_hash", key->Hash().ToHex()},
                               {"key_text", key->ToString()}})
              << "\n";
    return 0;
  }
  if (ack->merged) {
    std::cout << "task " << ack->task_id << ": merged into the existing open task for " << key->ToString() << "\n";
  } else {
    std::cout << "task " << ack->task_id << ": queued (new) for " << key->ToString() << "\n";
  }
  return 0;
}

// ---- kjit run

constexpr const char* kPreloadName = "libkjit_preload.so";
constexpr const char* kAdapterName = "libkjit_torch_adapter.so";

// libkjit_preload.so: $KJIT_PRELOAD_LIB, else where the build tree and an
// installation both put it beside this kjit (bin/kjit, lib/kjit/), or in lib/
// or bin/ itself. Always an absolute path: the program may chdir.
Result<std::string> FindPreloadLibrary() {
  if (const char* env = std::getenv("KJIT_PRELOAD_LIB"); env != nullptr && *env != '\0') {
    std::error_code error;
    const std::string path = std::filesystem::absolute(env, error).lexically_normal().string();
    if (!error && access(path.c_str(), R_OK) == 0) return path;
    return NotFound(std::string("KJIT_PRELOAD_LIB is ") + env + ", which cannot be read (unset it to use the " +
                    kPreloadName + " beside kjit)");
  }
  std::string looked;
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    const auto dir = self.parent_path();
    for (const auto& candidate : {dir.parent_path() / "lib" / "kjit" / kPreloadName, dir / kPreloadName,
                                  dir.parent_path() / "lib" / kPreloadName}) {
      const std::string path = candidate.lexically_normal().string();
      if (access(path.c_str(), R_OK) == 0) return path;
      looked += (looked.empty() ? "" : ", ") + path;
    }
  }
  return NotFound(std::string("cannot find ") + kPreloadName + (looked.empty() ? "" : " (looked at " + looked + ")") +
                  "; build it with `cmake --build build --target kjit_preload kjit_torch_adapter`, or set "
                  "KJIT_PRELOAD_LIB to its path");
}

bool EnvFlagSet(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::string_view(v) != "0";
}

// kjitd for the program to report to: started in the background when none
// answers. Never fatal: without kjitd the program runs exactly as without kjit
// (only its misses go unrecorded), so a failure here is a warning.
void EnsureKjitd(const Options& o) {
  ipc::ClientOptions probe_options;
  probe_options.endpoint = Endpoint(o);
  probe_options.name = "kjit-cli/0.1";
  probe_options.request_timeout = std::chrono::milliseconds(std::min(o.timeout_ms, 1000));
  if (ipc::Client(probe_options).Hello().ok()) return;
  auto warn = [](const std::string& why) {
    std::cerr << "kjit: kjitd is not running and could not be started (" << why
              << "); running the program without it: kernels already cached are used, new misses are not "
                 "recorded\n";
  };
  auto kjitd = FindKjitd();
  if (!kjitd.ok()) return warn(kjitd.status().message());
  std::vector<std::string> args = {*kjitd, "--endpoint", Endpoint(o), "--detach"};
  const KjitdLog log = KjitdLogFile(o, {});
  if (log.pass) args.insert(args.end(), {"--log-file", log.file});
  auto started = RunCaptured(args, std::chrono::seconds(30));
  if (!started.ok()) return warn(started.status().ToString());
  if (started->exit_code != 0) {
    // Another `kjit run` may have started one meanwhile.
    if (ipc::Client(probe_options).Hello().ok()) return;
    std::string why = started->timed_out ? "it did not report that it was ready within 30 s" : started->err;
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    return warn(why.empty() ? "kjitd exited with status " + std::to_string(started->exit_code) : why);
  }
  std::string line = started->out;
  while (!line.empty() && line.back() == '\n') line.pop_back();
  std::cerr << "kjit: " << (line.empty() ? std::string("kjitd started in the background") : line)
            << (log.file.empty() ? "" : "; its log: " + log.file) << "\n";
  // kjitd is shared by every program of the user, but inherits this one's environment: with
  // devices = all it evaluates only on the GPUs this program may see.
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible != nullptr) {
    std::cerr << "kjit: kjitd started with CUDA_VISIBLE_DEVICES=" << visible
              << ", so it evaluates on those GPUs only; to serve every GPU, start it first without it "
                 "(`kjit daemon start`) or set `devices` in its configuration\n";
  }
}

int CmdRun(const Options& o) {
  if (o.run_command.empty()) {
    std::cerr << "kjit run: give the command to run after `--`, e.g. `kjit run -- python3 app.py`\n"
              << "Run with --help for more information.\n";
    return 2;
  }
  auto preload = FindPreloadLibrary();
  if (!preload.ok()) return Report(preload.status());
  // LD_PRELOAD splits its list at spaces and colons.
  if (preload->find_first_of(" :") != std::string::npos) {
    return Fail(*preload + " has a space or a colon in its path, which LD_PRELOAD cannot hold; move it, or link "
                           "it from a path without them and set KJIT_PRELOAD_LIB");
  }
  const std::string adapter = std::filesystem::path(*preload).parent_path() / kAdapterName;
  if (std::getenv("KJIT_TORCH_ADAPTER") == nullptr && access(adapter.c_str(), R_OK) != 0) {
    std::cerr << "kjit: " << adapter << " is missing: PyTorch programs will run without kjit (build it with "
              << "`cmake --build build --target kjit_torch_adapter`, which needs LibTorch)\n";
  }
  if (!o.run_no_daemon && !EnvFlagSet("KJIT_DISABLE")) EnsureKjitd(o);

  std::string list = *preload;
  if (const char* old = std::getenv("LD_PRELOAD"); old != nullptr && *old != '\0') {
    // Already preloaded (a nested `kjit run`): once is enough.
    bool present = false;
    std::string rest = old;
    for (size_t start = 0; start <= rest.size();) {
      size_t end = rest.find_first_of(" :", start);
      if (end == std::string::npos) end = rest.size();
      if (rest.compare(start, end - start, *preload) == 0) present = true;
      start = end + 1;
    }
    list = present ? rest : *preload + ":" + rest;
  }
  setenv("LD_PRELOAD", list.c_str(), 1);
  // The run's name, which the program's processes report their calls under (`kjit report --run`). A nested
  // `kjit run` stays in its parent's run.
  if (const char* run = std::getenv("KJIT_RUN_ID"); run == nullptr || *run == '\0') {
    const time_t now = time(nullptr);
    struct tm local {};
    localtime_r(&now, &local);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &local);
    const std::string id = std::string(stamp) + "-" + std::to_string(getpid());
    setenv("KJIT_RUN_ID", id.c_str(), 1);
  }
  // The shim in the program talks to the kjitd this command talked to.
  if (!o.endpoint.empty()) setenv("KJIT_ENDPOINT", o.endpoint.c_str(), 1);
  std::vector<std::string> args = o.run_command;
  std::vector<char*> argv = Argv(args);
  std::cout.flush();
  std::cerr.flush();
  execvp(argv[0], argv.data());
  // As a shell says it: 127 when there is no such program, 126 when it cannot be run.
  const int error = errno;
  std::cerr << "kjit: cannot run " << args[0] << ": " << std::strerror(error) << "\n";
  return error == ENOENT ? 127 : 126;
}

int Dispatch(const Options& o) {
  if (*o.start) return CmdStart(o);
  if (*o.stop) return CmdStop(o);
  if (*o.status) return CmdStatus(o);
  if (*o.keygen) return CmdKeygen(o);
  if (*o.tasks) return CmdTasks(o);
  if (*o.submit) return CmdSubmit(o);
  if (*o.run) return CmdRun(o);
  return 2;
}

void AddConnectionOptions(CLI::App* app, Options& o) {
  app->add_option("--endpoint", o.endpoint,
                  "kjitd's endpoint (default: $KJIT_ENDPOINT, else ipc://<runtime dir>/kjitd.sock)")
      ->type_name("EP");
  app->add_option("--timeout-ms", o.timeout_ms, "How long to wait for each answer from kjitd")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
}

}  // namespace

DaemonCommands::DaemonCommands(CLI::App& app) : options_(std::make_unique<Options>()) {
  Options& o = *options_;
  o.daemon = app.add_subcommand("daemon", "Start, stop and query kjitd, the kjit daemon");
  o.daemon->require_subcommand(1);
  AddConnectionOptions(o.daemon, o);
  auto add = [&](const char* name, const char* description) {
    CLI::App* sub = o.daemon->add_subcommand(name, description);
    // So that `kjit daemon status --endpoint EP` works as well as `kjit daemon --endpoint EP status`.
    sub->fallthrough();
    sub->footer("Also accepted here: --endpoint EP and --timeout-ms MS (see kjit daemon --help).");
    return sub;
  };

  o.start = add("start", "Start kjitd in the background (or --foreground); says so if it is already running");
  o.start->add_flag("--foreground", o.foreground,
                    "Run kjitd in this terminal instead (logs to stderr; Ctrl-C stops it)");
  o.start->add_option("kjitd_flags", o.kjitd_args, "Extra kjitd flags, after `--` (see kjitd --help)")
      ->type_name("-- FLAGS");

  o.stop = add("stop", "Stop kjitd: a shutdown request, else SIGTERM to the pid in its pid file");
  o.stop->add_option("--timeout", o.stop_timeout_s, "How long to wait for kjitd to exit, in seconds")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);

  o.status = add("status", "Whether kjitd runs, and its counters (exit 0: running, 3: not running)");
  o.status->add_flag("--json", o.json, "Machine-readable output");

  o.keygen = add("keygen", "Make a CURVE keypair for kjitd's optional TCP endpoint");
  o.keygen->add_option("--out", o.keygen_out, "Write PREFIX.key (secret, mode 0600) and PREFIX.pub")
      ->required()
      ->type_name("PREFIX");
  o.keygen->add_flag("--force", o.keygen_force, "Replace existing key files");

  o.tasks = app.add_subcommand("tasks", "List kjitd's task queue (read from the cache file when kjitd is not running)");
  AddConnectionOptions(o.tasks, o);
  o.tasks->add_option("--state", o.tasks_state, "Only tasks in this state (tuning: a tuner is working on it)")
      ->check(CLI::IsMember({"queued", "tuning", "running", "done", "unfit", "failed"}))
      ->each([&o](const std::string& state) {
        if (state == "tuning") o.tasks_state = "running";  // the queue's own name for it
      });
  o.tasks->add_option("--limit", o.tasks_limit, "At most this many tasks (0: all)");
  o.tasks->add_option("--cache", o.tasks_cache,
                      "Cache file to read when kjitd is not running (default: $KJIT_CACHE, else "
                      "$XDG_CACHE_HOME/kjit/cache.db)")
      ->type_name("PATH");
  o.tasks->add_flag("--json", o.json, "Machine-readable output");
  o.tasks->add_option("--watch", o.tasks_watch_s,
                      "Print the queue and what each GPU is working on again every this many seconds, until "
                      "interrupted (live progress while kjitd tunes)")
      ->type_name("SECONDS")
      ->check(CLI::PositiveNumber);

  o.submit = app.add_subcommand("submit", "Ask kjitd to optimise a kernel for an OpKey");
  AddConnectionOptions(o.submit, o);
  auto* key = o.submit->add_option("key", o.submit_key, "The encoded OpKey in hex (`kjit key example` prints one)")
                  ->type_name("KEYHEX");
  o.submit->add_flag("--example", o.submit_example, "Submit the sample key of `kjit key example`")->excludes(key);
  o.submit->add_option("--priority", o.submit_priority, "Higher runs sooner; raises the priority of a merged task")
      ->capture_default_str();
  o.submit->add_option("--detail", o.submit_detail, "A note stored with the task")->type_name("TEXT");
  o.submit->add_flag("--json", o.json, "Machine-readable output");

  o.run = app.add_subcommand("run", "Run a program with kjit: preloads libkjit_preload.so and starts kjitd if needed");
  AddConnectionOptions(o.run, o);
  o.run->add_flag("--no-daemon", o.run_no_daemon,
                  "Do not start kjitd (cached kernels are still used; misses are not recorded without it)");
  o.run->add_option("command", o.run_command, "The program and its arguments, after `--`")->type_name("-- CMD ARGS...");
  o.run->footer(
      "Example: kjit run -- python3 app.py\n"
      "Prepends libkjit_preload.so (KJIT_PRELOAD_LIB, else beside kjit) to LD_PRELOAD. If kjitd does not\n"
      "answer, starts it in the background, its log in $XDG_CACHE_HOME/kjit/kjitd.log unless kjitd.conf sets\n"
      "log_file. Then runs the program in place of kjit: its exit status is the program's.\n"
      "KJIT_DISABLE=1 turns kjit off in the program (and kjitd is not started); KJIT_OPS and KJIT_LOG are\n"
      "passed through to the shim. The run is named KJIT_RUN_ID (date-time-pid; kept if already set), which\n"
      "its processes report their calls under: `kjit report --run last` shows what kjit did for it.");
}

DaemonCommands::~DaemonCommands() = default;

bool DaemonCommands::chosen() const {
  return static_cast<bool>(*options_->daemon) || static_cast<bool>(*options_->tasks) ||
         static_cast<bool>(*options_->submit) || static_cast<bool>(*options_->run);
}

int DaemonCommands::Run() {
  // The standard library and nlohmann/json throw (allocation, filesystem); none of it may reach main.
  try {
    return Dispatch(*options_);
  } catch (const std::exception& e) {
    std::cerr << "kjit: internal: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace kjit::cli
