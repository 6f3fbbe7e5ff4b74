#include "kjit/evaluator/sanitizer.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace kjit::eval {
namespace {

bool IsExecutable(const std::string& path) {
  struct stat st{};
  return !path.empty() && stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

}  // namespace

SanitizerReport ParseSanitizerOutput(std::string_view output, int exit_code) {
  SanitizerReport r;
  constexpr std::string_view kPrefix = "=========";
  bool in_first = false;
  size_t pos = 0;
  while (pos <= output.size()) {
    size_t end = output.find('\n', pos);
    if (end == std::string_view::npos) end = output.size();
    std::string_view line = output.substr(pos, end - pos);
    pos = end + 1;
    if (!line.starts_with(kPrefix)) {
      in_first = false;
      continue;
    }
    const std::string_view text = Trim(line.substr(kPrefix.size()));
    if (text.empty()) {
      in_first = false;
      continue;
    }
    // memcheck: "ERROR SUMMARY: 3 errors"; racecheck: "RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)".
    if (size_t s = text.find("SUMMARY:"); s != std::string_view::npos) {
      r.summary_seen = true;
      std::string_view rest = text.substr(s + 8);
      if (text.starts_with("RACECHECK")) {
        const size_t open = rest.find('(');
        if (open != std::string_view::npos) rest = rest.substr(open + 1);
      }
      r.errors += std::atoi(std::string(Trim(rest)).c_str());
      continue;
    }
    const bool starts_error = text.starts_with("Invalid ") || text.starts_with("Error") ||
                              text.starts_with("Race reported") || text.starts_with("Program hit") ||
                              text.find("hazard") != std::string_view::npos;
    if (r.first_error.empty() && starts_error) {
      r.first_error = std::string(text);
      in_first = true;
      continue;
    }
    // The indented lines that follow the first error say where ("at k+0x1d0", "Address ... is out of bounds"),
    // up to the host backtrace, which says only where the launch came from.
    if (text.starts_with("Saved host backtrace")) in_first = false;
    if (in_first && r.first_error.size() < 400 && line.size() > kPrefix.size() + 1 &&
        (line[kPrefix.size()] == ' ' || line[kPrefix.size()] == '\t')) {
      r.first_error += "; " + std::string(text);
    }
  }
  if (exit_code == kSanitizerErrorExit && r.errors == 0) r.errors = 1;
  return r;
}

std::string FindSanitizer(const std::string& configured) {
  if (configured == "off") return "";
  if (!configured.empty() && configured != "auto") return IsExecutable(configured) ? configured : "";
  if (const char* path = std::getenv("PATH"); path != nullptr) {
    std::stringstream dirs(path);
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
      if (!dir.empty() && IsExecutable(dir + "/compute-sanitizer")) return dir + "/compute-sanitizer";
    }
  }
  for (const char* p : {"/usr/local/cuda/bin/compute-sanitizer", "/usr/local/cuda/compute-sanitizer/compute-sanitizer"}) {
    if (IsExecutable(p)) return p;
  }
  return "";
}

std::vector<std::string> SanitizerCommand(const std::string& sanitizer, const std::string& tool,
                                          const std::string& entry_point, const std::string& worker,
                                          const std::vector<std::string>& worker_args) {
  std::vector<std::string> argv = {sanitizer,
                                   "--tool",
                                   tool,
                                   "--error-exitcode",
                                   std::to_string(kSanitizerErrorExit),
                                   "--print-limit",
                                   "4",
                                   // Only the candidate is judged: PyTorch's kernels (the reference, the input
                                   // generators) are left alone, which also keeps the run short.
                                   "--kernel-name",
                                   "kns=" + entry_point,
                                   "--check-api-memory-access",
                                   "no"};
  if (tool == "memcheck") {
    argv.push_back("--leak-check");
    argv.push_back("no");
  }
  argv.push_back(worker);
  argv.insert(argv.end(), worker_args.begin(), worker_args.end());
  return argv;
}

Result<ProcessResult> RunForSanitizer(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                                      const std::function<bool()>& stop) {
  if (argv.empty()) return InvalidArgument("no command");
  char out_template[] = "/tmp/kjit-sanitizer-XXXXXX";
  const int out_fd = mkstemp(out_template);
  if (out_fd < 0) return Status(StatusCode::kIOError, std::string("cannot make a temporary file: ") + std::strerror(errno));
  const std::string out_path = out_template;
  struct RemoveFile {
    int fd;
    std::string path;
    ~RemoveFile() {
      close(fd);
      unlink(path.c_str());
    }
  } remove_file{out_fd, out_path};

  std::vector<std::string> env_storage;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "PYTORCH_NO_CUDA_MEMORY_CACHING=", 31) != 0) env_storage.emplace_back(*e);
  }
  env_storage.emplace_back("PYTORCH_NO_CUDA_MEMORY_CACHING=1");
  std::vector<char*> envp;
  for (std::string& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (std::string& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
  posix_spawn_file_actions_adddup2(&actions, out_fd, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, cargv[0], &actions, &attr, cargv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return Status(StatusCode::kUnavailable, "cannot start " + argv[0] + ": " + std::strerror(rc));

  ProcessResult result;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (true) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) return Status(StatusCode::kInternal, std::string("waitpid: ") + std::strerror(errno));
    const bool stopping = stop && stop();
    if (stopping || std::chrono::steady_clock::now() > deadline) {
      kill(-pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      (stopping ? result.stopped : result.timed_out) = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(-pid, SIGKILL);  // anything the target left behind in the group
  if (result.timed_out || result.stopped) {
    result.exit_code = -1;
  } else if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.exit_code = 128 + WTERMSIG(status);
  }
  std::ifstream in(out_path);
  std::stringstream ss;
  ss << in.rdbuf();
  result.output = ss.str();
  return result;
}

}  // namespace kjit::eval
