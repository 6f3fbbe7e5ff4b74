// kjitd: the kjit daemon. Answers lookups from the kernel cache, turns miss
// reports into a task queue, and announces newly verified kernels.
//
//   kjitd [--detach] [--config FILE] [--endpoint EP] [--cache FILE] ... [--print-config]
//
// SIGTERM or SIGINT: finish the request in hand and exit. SIGHUP: reread the
// configuration (log level now; endpoints and cache at the next start).
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "config.h"
#include "kjit/cache/kernel_cache.h"
#include "kjit/ipc/endpoint.h"
#include "server.h"

namespace {

std::atomic<bool> g_stop{false};
std::atomic<bool> g_reload{false};

void OnSignal(int sig) {
  if (sig == SIGHUP) {
    g_reload = true;
  } else {
    g_stop = true;
  }
}

void InstallSignals() {
  struct sigaction sa{};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a signal wakes the poll at once
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

// Holds the pid file locked for the life of the process: the lock, not the
// file's existence, is what says a kjitd is running (a killed one leaves the
// file but not the lock).
class PidFile {
 public:
  ~PidFile() {
    if (fd_ >= 0) {
      unlink(path_.c_str());
      close(fd_);
    }
  }
  kjit::Status Acquire(const std::string& path, const std::string& endpoint) {
    path_ = path;
    fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd_ < 0) return kjit::IOError("cannot open pid file " + path + ": " + std::strerror(errno));
    if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      char buf[32] = {0};
      const ssize_t n = pread(fd_, buf, sizeof buf - 1, 0);
      close(fd_);
      fd_ = -1;
      return kjit::Status(kjit::StatusCode::kUnavailable,
                          "kjitd is already running for " + endpoint + " (pid " +
                              (n > 0 ? std::string(buf, strcspn(buf, "\n")) : std::string("?")) + ", pid file " +
                              path + "); stop it with `kjit daemon stop`");
    }
    const std::string pid = std::to_string(getpid()) + "\n";
    if (ftruncate(fd_, 0) != 0 || pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
      return kjit::IOError("cannot write pid file " + path);
    }
    return kjit::Status::Ok();
  }

 private:
  std::string path_;
  int fd_ = -1;
};

// Forks into the background. Returns in the daemon process with `ready_fd` set
// to a pipe the daemon writes "ok" or an error to once it is serving; the
// original process waits for that line, prints it and exits.
void Detach(int* ready_fd) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    std::perror("kjitd: pipe");
    std::exit(1);
  }
  const pid_t pid = fork();
  if (pid < 0) {
    std::perror("kjitd: fork");
    std::exit(1);
  }
  if (pid > 0) {
    close(fds[1]);
    std::string line;
    char c;
    while (read(fds[0], &c, 1) == 1 && c != '\n') line += c;
    if (line.rfind("ok", 0) == 0) {
      std::printf("kjitd started in the background (%s)\n", line.c_str() + (line.size() > 3 ? 3 : line.size()));
      std::exit(0);
    }
    std::fprintf(stderr, "kjitd: %s\n", line.empty() ? "the daemon exited before it was ready" : line.c_str());
    std::exit(1);
  }
  close(fds[0]);
  setsid();
  if (fork() > 0) _exit(0);  // the session leader leaves; the daemon can never regain a terminal
  *ready_fd = fds[1];
  if (chdir("/") != 0) {
    // Not fatal: the daemon only keeps the cwd busy.
  }
}

void Ready(int ready_fd, const std::string& line) {
  if (ready_fd < 0) return;
  const std::string text = line + "\n";
  if (write(ready_fd, text.data(), text.size()) < 0) {
    // The starter went away; nothing to tell.
  }
  close(ready_fd);
}

void RedirectOutput(const std::string& log_file) {
  const int null_fd = open("/dev/null", O_RDWR);
  if (null_fd >= 0) {
    dup2(null_fd, STDIN_FILENO);
    dup2(null_fd, STDOUT_FILENO);
  }
  const int log_fd = log_file.empty() ? null_fd : open(log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (log_fd >= 0) dup2(log_fd, STDERR_FILENO);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kjitd: the kjit daemon. Serves the kernel cache to kjit clients, queues optimisation tasks from "
               "miss reports, and announces newly verified kernels."};
  std::string config_file = kjit::daemon::DefaultConfigFile();
  bool config_given = false, detach = false, print_config = false;
  std::map<std::string, std::string> flags;
  app.add_option_function<std::string>(
      "--config", [&](const std::string& f) { config_file = f; config_given = true; },
      "Configuration file (default: " + (config_file.empty() ? std::string("none") : config_file) + ")");
  for (const auto& [key, help] : kjit::daemon::ConfigKeys()) {
    std::string flag = "--" + key;
    for (auto& ch : flag) ch = ch == '_' ? '-' : ch;
    app.add_option_function<std::string>(
        flag, [&flags, k = key](const std::string& v) { flags[k] = v; }, help);
  }
  app.add_flag("--detach", detach, "Run in the background; print when ready");
  app.add_flag("--print-config", print_config, "Print the effective configuration, with where each value came from");
  app.footer("Configuration precedence: defaults < file < environment (KJITD_<KEY>, KJIT_ENDPOINT, KJIT_CACHE) < "
             "flags.\nSignals: SIGTERM/SIGINT stop after the request in hand; SIGHUP rereads the configuration.");
  CLI11_PARSE(app, argc, argv);

  auto config = kjit::daemon::LoadConfig(config_file, config_given, flags);
  if (!config.ok()) {
    std::fprintf(stderr, "kjitd: %s\n", config.status().ToString().c_str());
    return 1;
  }
  if (print_config) {
    std::printf("%s", config->ToString().c_str());
    return 0;
  }

  int ready_fd = -1;
  if (detach) Detach(&ready_fd);
  auto fail = [&](const kjit::Status& s) {
    if (ready_fd >= 0) {
      Ready(ready_fd, s.ToString());  // the starting process prints it
    } else {
      std::fprintf(stderr, "kjitd: %s\n", s.ToString().c_str());
    }
    return 1;
  };

  const std::string endpoint = config->Get("endpoint");
  if (auto s = kjit::ipc::EnsurePrivateRuntimeDir(kjit::ipc::RuntimeDir()); !s.ok()) return fail(s);
  PidFile pid_file;
  if (auto s = pid_file.Acquire(config->Get("pid_file"), endpoint); !s.ok()) return fail(s);

  kjit::cache::OpenOptions cache_options;
  cache_options.path = config->Get("cache");
  auto cache = kjit::cache::KernelCache::Open(cache_options);
  if (!cache.ok()) return fail(cache.status().WithContext("opening the kernel cache"));

  kjit::daemon::Log log(config->Get("log_level"));
  kjit::daemon::Server server(*config, std::move(*cache), log);
  if (auto s = server.Bind(); !s.ok()) return fail(s);
  InstallSignals();
  if (detach) RedirectOutput(config->Get("log_file"));
  log.Write("info", "started",
            {{"pid", std::to_string(getpid())}, {"endpoint", endpoint}, {"cache", config->Get("cache")},
             {"announce", config->Get("announce_endpoint")}});
  if (detach) Ready(ready_fd, "ok pid " + std::to_string(getpid()) + ", " + endpoint);

  auto on_reload = [&] {
    auto fresh = kjit::daemon::LoadConfig(config_file, config_given, flags);
    if (!fresh.ok()) {
      log.Write("warn", "reload_failed", {{"error", fresh.status().ToString()}});
      return;
    }
    log.SetLevel(fresh->Get("log_level"));
    log.Write("info", "reloaded", {{"log_level", fresh->Get("log_level")}});
  };
  const kjit::Status result = server.Run(g_stop, g_reload, on_reload);
  log.Write(result.ok() ? "info" : "error", "stopped", {{"status", result.ToString()}});
  return result.ok() ? 0 : 1;
}
