// kjit-evaluator: one per GPU, started and supervised by kjitd. Evaluates the
// baselines and candidates kjitd sends on file descriptor 3 (worker_protocol.h)
// and exits when told to, when kjitd goes away, or after a candidate has
// destroyed its CUDA context.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "kjit/evaluator/evaluator.h"
#include "kjit/evaluator/sanitizer.h"
#include "kjit/runtime/device.h"
#include "kjit/runtime/driver.h"
#include "worker_protocol.h"

namespace {

using namespace kjit;

int Serve(int fd, const eval::EvaluatorOptions& options) {
  auto send = [fd](const daemon::WorkerMessage& m) {
    Status st = daemon::WriteFrame(fd, daemon::EncodeWorkerMessage(m));
    if (!st.ok()) {
      std::fprintf(stderr, "kjit-evaluator: %s; exiting\n", st.ToString().c_str());
      std::_Exit(1);
    }
  };
  auto evaluator = eval::Evaluator::Create(options);
  if (!evaluator.ok()) {
    send(daemon::Unavailable{evaluator.status().ToString()});
    return 3;
  }
  send(daemon::Hello{(*evaluator)->device()});
  while (true) {
    auto frame = daemon::ReadFrameBlocking(fd);
    if (!frame.ok()) return 0;  // kjitd closed the channel
    auto message = daemon::DecodeWorkerMessage(*frame);
    if (!message.ok()) {
      std::fprintf(stderr, "kjit-evaluator: %s\n", message.status().ToString().c_str());
      return 2;
    }
    if (std::holds_alternative<daemon::Exit>(*message)) return 0;
    uint64_t id = 0;
    auto progress = [&](const std::string& phase, std::chrono::milliseconds deadline) {
      send(daemon::Progress{id, phase, deadline.count()});
    };
    if (const auto* b = std::get_if<daemon::BaselineRequest>(&*message)) {
      id = b->id;
      send((*evaluator)->Baseline(*b, progress));
    } else if (const auto* e = std::get_if<daemon::EvaluateRequest>(&*message)) {
      id = e->id;
      send((*evaluator)->Evaluate(*e, progress));
    } else {
      std::fprintf(stderr, "kjit-evaluator: unexpected message from kjitd\n");
      return 2;
    }
    // A faulted or hung kernel leaves the context unusable: only a new process can go on.
    if ((*evaluator)->context_lost()) std::_Exit(4);
  }
}

// The sanitizer's target (sanitizer.h): evaluates the request in `path` once and prints the verdict.
int SanitizeRequest(const std::string& path, const eval::EvaluatorOptions& options) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  auto message = daemon::DecodeWorkerMessage(text.str());
  const auto* request = message.ok() ? std::get_if<daemon::EvaluateRequest>(&*message) : nullptr;
  if (request == nullptr) {
    std::fprintf(stderr, "kjit-evaluator: %s holds no evaluation request\n", path.c_str());
    return 2;
  }
  auto evaluator = eval::Evaluator::Create(options);
  if (!evaluator.ok()) {
    std::fprintf(stderr, "kjit-evaluator: %s\n", evaluator.status().ToString().c_str());
    return 3;
  }
  const daemon::Verdict v = (*evaluator)->Evaluate(*request, [](const std::string&, std::chrono::milliseconds) {});
  std::printf("%s: %s\n", v.outcome.c_str(), v.reason.c_str());
  return 0;
}

// A CUDA ordinal from "0" or from a UUID ("GPU-8f6c..."): UUIDs name the same
// GPU whatever CUDA_VISIBLE_DEVICES does to the numbering.
Result<int> ResolveDevice(const std::string& name) {
  if (!name.empty() && name.find_first_not_of("0123456789") == std::string::npos) return std::stoi(name);
  KJIT_ASSIGN_OR_RETURN(const Driver* driver, Driver::Get());
  for (int i = 0; i < driver->device_count(); ++i) {
    auto info = QueryDevice(*driver, i);
    if (info.ok() && info->uuid == name) return i;
  }
  return Status(StatusCode::kNoDevice, "no visible GPU has UUID " + name);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "kjit-evaluator: compiles, verifies and times candidate kernels on one GPU for kjitd.\n"
      "kjitd starts one per GPU; it talks on file descriptor 3. Run by hand with --probe to see\n"
      "whether this machine can evaluate kernels."};
  eval::EvaluatorOptions options;
  bool probe = false;
  int fd = daemon::kWorkerFd;
  std::string device = "0";
  app.add_option("--device", device, "CUDA device: an ordinal (after CUDA_VISIBLE_DEVICES) or a UUID")
      ->capture_default_str();
  app.add_option("--fd", fd, "file descriptor of the channel to kjitd")->capture_default_str();
  app.add_flag("--probe", probe, "set up the GPU, print the device as kjitd would see it, and exit");
  std::string compare = "close";
  app.add_option("--compare", compare, "output comparison for every op: close (assert_close, or the op's own rule) or bitwise")
      ->check(CLI::IsMember({"close", "bitwise"}))
      ->capture_default_str();
  app.add_option("--max-runs", options.max_runs, "most timed runs per kernel")->capture_default_str();
  app.add_option("--target-ci", options.target_ci_rel, "stop timing when the median's 95% CI is this tight")
      ->capture_default_str();
  std::string sanitizer = "auto";
  app.add_option("--sanitizer", sanitizer,
                 "compute-sanitizer run over each kernel that passes faster than PyTorch: its path, auto (look in "
                 "PATH, then /usr/local/cuda/bin) or off")
      ->capture_default_str();
  const char* when_env = std::getenv("KJIT_SANITIZE_WHEN");
  std::string sanitize_when = when_env != nullptr && *when_env != '\0' ? when_env : "faster";
  app.add_option("--sanitize-when", sanitize_when,
                 "which kernels the sanitizer checks: faster (those that beat PyTorch, which may be served) or "
                 "verified (every verified one: slow, for tests); default from KJIT_SANITIZE_WHEN")
      ->check(CLI::IsMember({"faster", "verified"}))
      ->capture_default_str();
  std::string sanitize_request;
  app.add_option("--sanitize-request", sanitize_request,
                 "run as compute-sanitizer's target: evaluate the request in this file on one input set, print "
                 "the verdict and exit (the worker starts this itself)");
  CLI11_PARSE(app, argc, argv);
  if (!sanitize_request.empty()) {
    options.sanitizer_target = true;
    options.compile_ahead_threads = 0;
  } else {
    options.sanitizer = eval::FindSanitizer(sanitizer);
    options.sanitize_every_verified = sanitize_when == "verified";
  }
  options.bitwise = compare == "bitwise";
  auto ordinal = ResolveDevice(device);
  if (ordinal.ok()) options.device = *ordinal;

  if (!sanitize_request.empty()) {
    if (!ordinal.ok()) {
      std::fprintf(stderr, "kjit-evaluator: %s\n", ordinal.status().ToString().c_str());
      return 3;
    }
    return SanitizeRequest(sanitize_request, options);
  }
  if (probe) {
    if (!ordinal.ok()) {
      std::printf("%s\n", daemon::EncodeWorkerMessage(daemon::Unavailable{ordinal.status().ToString()}).c_str());
      return 3;
    }
    auto evaluator = eval::Evaluator::Create(options);
    if (!evaluator.ok()) {
      std::printf("%s\n", daemon::EncodeWorkerMessage(daemon::Unavailable{evaluator.status().ToString()}).c_str());
      return 3;
    }
    std::printf("%s\n", daemon::EncodeWorkerMessage(daemon::Hello{(*evaluator)->device()}).c_str());
    return 0;
  }
  // kjitd gone means nobody wants the answers: do not outlive it.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) return 0;
  signal(SIGPIPE, SIG_IGN);
  // kjitd's request to give the GPU back (another process started using it): the job in flight stops early.
  struct sigaction yield{};
  yield.sa_handler = [](int) { eval::RequestYield(); };
  sigemptyset(&yield.sa_mask);
  yield.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &yield, nullptr);
  if (!ordinal.ok()) {
    (void)daemon::WriteFrame(fd, daemon::EncodeWorkerMessage(daemon::Unavailable{ordinal.status().ToString()}));
    return 3;
  }
  return Serve(fd, options);
}
