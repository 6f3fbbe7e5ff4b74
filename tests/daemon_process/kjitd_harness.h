// Starts and stops a real kjitd in a private temporary directory, for tests
// and the IPC load benchmark.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kjit/ipc/client.h"

namespace kjit::testing {

class KjitdHarness {
 public:
  // `kjitd` is the binary; the directory holds the runtime dir, cache and log.
  KjitdHarness(std::string kjitd, std::vector<std::string> extra_flags = {})
      : kjitd_(std::move(kjitd)), extra_(std::move(extra_flags)) {
    char tmpl[] = "/tmp/kjitd-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    setenv("KJIT_RUNTIME_DIR", (dir_ + "/run").c_str(), 1);
    setenv("KJIT_CACHE", cache_path().c_str(), 1);
    setenv("XDG_CONFIG_HOME", (dir_ + "/config").c_str(), 1);
    unsetenv("KJIT_ENDPOINT");
  }
  ~KjitdHarness() {
    Kill(SIGKILL);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::string cache_path() const { return dir_ + "/cache.db"; }
  std::string log_path() const { return dir_ + "/kjitd.log"; }
  std::string endpoint() const { return "ipc://" + dir_ + "/run/kjitd.sock"; }
  std::string announce_endpoint() const { return "ipc://" + dir_ + "/run/kjitd-announce.sock"; }
  std::string pid_file() const { return dir_ + "/run/kjitd.pid"; }
  const std::string& dir() const { return dir_; }
  pid_t pid() const { return pid_; }

  // Starts kjitd in the foreground of a child process, its log in log_path(),
  // and waits until it answers. False if it did not within 15 s.
  bool Start() {
    pid_ = fork();
    if (pid_ == 0) {
      const int log = open(log_path().c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
      if (log >= 0) dup2(log, STDERR_FILENO);
      // No evaluator workers unless a test asks for them with its own --when.
      std::vector<std::string> args = {kjitd_};
      if (std::find(extra_.begin(), extra_.end(), "--when") == extra_.end()) {
        args.insert(args.end(), {"--when", "never"});
      }
      // No tuner either (it would claim the tasks a test looks at) unless a test asks for one.
      if (std::find(extra_.begin(), extra_.end(), "--tuner") == extra_.end()) {
        args.insert(args.end(), {"--tuner", "off"});
      }
      args.insert(args.end(), extra_.begin(), extra_.end());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(kjitd_.c_str(), argv.data());
      _exit(127);
    }
    ipc::ClientOptions o;
    o.endpoint = endpoint();
    o.request_timeout = std::chrono::milliseconds(500);
    ipc::Client probe(o);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    while (std::chrono::steady_clock::now() < deadline) {
      if (probe.Hello().ok()) return true;
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  // Sends `sig` and reaps the process; returns its wait status.
  int Kill(int sig) {
    if (pid_ <= 0) return 0;
    kill(pid_, sig);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

  // Waits for the process to exit by itself (after a shutdown request).
  int Wait() {
    if (pid_ <= 0) return 0;
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  std::string kjitd_;
  std::vector<std::string> extra_;
  std::string dir_;
  pid_t pid_ = -1;
};

// Sets environment variables for the kjitd a test starts (its workers inherit them)
// and restores them when the test ends, so that no test leaks its fake machine.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<const char*, std::string>> vars) {
    for (const auto& [name, value] : vars) {
      const char* old = std::getenv(name);
      saved_.push_back({name, old ? std::optional<std::string>(old) : std::nullopt});
      setenv(name, value.c_str(), 1);
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, old] : saved_) {
      if (old) {
        setenv(name.c_str(), old->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

}  // namespace kjit::testing
