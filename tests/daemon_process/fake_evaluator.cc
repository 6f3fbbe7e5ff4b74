// A stand-in for kjit-evaluator that speaks the worker protocol without a GPU,
// so kjitd's supervision (restarts, watchdog, failure reasons, deferred
// replies, cache inserts) is tested on CPU machines. A candidate's source says
// what to do: "ok" (verified, 2x faster), "slow" (verified, not faster),
// "wrong", "crash" (abort), "hang" (stop answering past its deadline),
// "fault" (report a fault and exit, as after an illegal address), "backoff-once"
// (short of memory the first time, verified the next).
// FAKE_EVALUATOR_UNAVAILABLE=<reason> makes it refuse to start.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "worker_protocol.h"

using namespace kjit::daemon;

namespace {
void Send(const WorkerMessage& m) {
  if (!WriteFrame(kWorkerFd, EncodeWorkerMessage(m)).ok()) std::_Exit(1);
}
}  // namespace

int main(int argc, char** argv) {
  // kjitd passes --device N --compare MODE; the fake ignores them.
  (void)argc;
  (void)argv;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (const char* why = std::getenv("FAKE_EVALUATOR_UNAVAILABLE")) {
    Send(Unavailable{why});
    return 3;
  }
  WorkerDevice d;
  d.name = "Fake GPU";
  d.uuid = "GPU-fake";
  d.arch = 90;
  d.pid = static_cast<uint32_t>(getpid());
  Send(Hello{d});
  int backoffs = 0;
  while (true) {
    auto frame = ReadFrameBlocking(kWorkerFd);
    if (!frame.ok()) return 0;
    auto message = DecodeWorkerMessage(*frame);
    if (!message.ok()) return 2;
    if (std::holds_alternative<Exit>(*message)) return 0;
    if (const auto* b = std::get_if<BaselineRequest>(&*message)) {
      BaselineResult r;
      r.id = b->id;
      r.timing.median_us = 2.0;
      r.timing.runs = 10;
      r.outputs = {"f32[4]"};
      Send(r);
      continue;
    }
    const auto* e = std::get_if<EvaluateRequest>(&*message);
    if (e == nullptr) return 2;
    const std::string& what = e->candidate.source;
    Send(Progress{e->id, "compile", 5000});
    Verdict v;
    v.id = e->id;
    v.compiled = true;
    v.baseline.median_us = 2.0;
    v.baseline.runs = 10;
    if (what == "ok" || what == "slow") {
      v.outcome = "verified";
      v.reason = "verified";
      v.timing.median_us = what == "ok" ? 1.0 : 2.0;
      v.timing.runs = 10;
      v.cubin = "FAKE-CUBIN";
      v.reward = std::log(v.baseline.median_us / v.timing.median_us);
      v.accepted = what == "ok";
      v.verification.seeds = {1, 2, 3};
    } else if (what == "backoff-once" && backoffs++ == 0) {
      v.outcome = "resource_backoff";
      v.reason = "the inputs need more GPU memory than the cap allows now";
      v.retry_later = true;
    } else if (what == "backoff-once") {
      v.outcome = "verified";
      v.reason = "verified";
      v.timing.median_us = 1.0;
      v.cubin = "FAKE-CUBIN";
      v.accepted = true;
    } else if (what == "wrong") {
      v.outcome = "wrong_result";
      v.reason = "output 0 differs";
      v.reward = -4;
    } else if (what == "crash") {
      std::abort();
    } else if (what == "hang") {
      Send(Progress{e->id, "verify", 300});
      while (true) pause();
    } else if (what == "fault") {
      v.outcome = "fault";
      v.reason = "the candidate faulted: CUDA_ERROR_ILLEGAL_ADDRESS";
      v.worker_exits = true;
      Send(v);
      return 4;
    } else {
      v.compiled = false;
      v.outcome = "compile_error";
      v.reason = "compile error: unknown fake behaviour '" + what + "'";
    }
    Send(v);
  }
}
