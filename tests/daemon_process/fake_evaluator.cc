// A stand-in for kjit-evaluator that speaks the worker protocol without a GPU,
// so kjitd's supervision (restarts, watchdog, failure reasons, deferred
// replies, cache inserts) is tested on CPU machines. A candidate's source says
// what to do: "ok" (verified, 2x faster), "slow" (verified, not faster),
// "wrong", "crash" (abort), "hang" (stop answering past its deadline),
// "fault" (report a fault and exit, as after an illegal address), "backoff-once"
// (short of memory the first time, verified the next), "unfit" (a working set
// that can never fit the GPU: resource_backoff, unfit, "unfit: ...").
// A source with "__global__" (a generated kernel, as the tuner submits) is
// verified at a time its text decides, 1.0-1.99 us against PyTorch's 2.0.
// FAKE_EVALUATOR_UNAVAILABLE=<reason> makes it refuse to start.
// Baselines: keys whose text contains an item of FAKE_EVALUATOR_UNFIT_KEYS
// ('|'-separated) are unfit ("unfit: ..."); of FAKE_EVALUATOR_WAIT_KEYS back off
// (memory short now) the first time each worker measures them.
//
// Its GPU: FAKE_EVALUATOR_GPUS="GPU-aaaa:90,GPU-bbbb:80" lists the machine's
// GPUs (uuid:arch, in CUDA's order), filtered and reordered by
// CUDA_VISIBLE_DEVICES as CUDA does (indices or UUIDs, up to the first that
// names no GPU); --device takes an ordinal among the visible ones or a UUID,
// as kjit-evaluator does, and a name that matches none makes it refuse with
// the reason. Unset: one GPU, "GPU-fake", sm_90. A verified verdict's reason
// names the GPU ("verified on GPU-aaaa"), and with FAKE_EVALUATOR_SHOW_CAP set
// the memory cap kjitd gave the job too.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cmath>
#include <functional>
#include <map>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "kjit/runtime/op_key.h"
#include "worker_protocol.h"

using namespace kjit::daemon;

namespace {
void Send(const WorkerMessage& m) {
  if (!WriteFrame(kWorkerFd, EncodeWorkerMessage(m)).ok()) std::_Exit(1);
}

std::vector<std::string> Split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(item);
  return out;
}

std::string KeyText(const std::string& key_bytes) {
  auto key = kjit::OpKey::Decode(key_bytes);
  return key.ok() ? key->ToString() : "";
}

// Whether the environment variable lists (separated by '|') a text the key's text contains.
bool Listed(const char* variable, const std::string& key_text) {
  const char* list = std::getenv(variable);
  if (list == nullptr || key_text.empty()) return false;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, '|')) {
    if (!item.empty() && key_text.find(item) != std::string::npos) return true;
  }
  return false;
}

volatile sig_atomic_t g_yield = 0;
void OnYield(int) { g_yield = 1; }

bool IsOrdinal(const std::string& s) { return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos; }

// The GPUs this process sees, in CUDA's order, each "uuid:arch".
std::vector<std::string> VisibleGpus() {
  const char* all_env = std::getenv("FAKE_EVALUATOR_GPUS");
  const std::vector<std::string> all = Split(all_env ? all_env : "GPU-fake:90");
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible == nullptr) return all;
  std::vector<std::string> out;
  for (const std::string& name : Split(visible)) {
    std::string found;
    if (IsOrdinal(name)) {
      if (std::stoul(name) < all.size()) found = all[std::stoul(name)];
    } else {
      for (const std::string& g : all) {
        if (g.rfind(name, 0) == 0) found = g;  // CUDA takes a UUID prefix too
      }
    }
    if (found.empty()) break;  // CUDA ignores the rest after a name that matches nothing
    out.push_back(found);
  }
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  // kjitd passes --device NAME --compare MODE.
  std::string device = "0";
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--device") == 0) device = argv[i + 1];
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (const char* why = std::getenv("FAKE_EVALUATOR_UNAVAILABLE")) {
    Send(Unavailable{why});
    return 3;
  }
  const std::vector<std::string> gpus = VisibleGpus();
  std::string mine;
  int ordinal = 0;
  for (size_t i = 0; i < gpus.size(); ++i) {
    const std::string uuid = gpus[i].substr(0, gpus[i].find(':'));
    if (IsOrdinal(device) ? std::stoul(device) == i : uuid == device) {
      mine = gpus[i];
      ordinal = static_cast<int>(i);
    }
  }
  if (mine.empty()) {
    Send(Unavailable{"no_device: no visible GPU " + device + " (the fake sees " + std::to_string(gpus.size()) + ")"});
    return 3;
  }
  WorkerDevice d;
  d.ordinal = ordinal;
  d.name = "Fake GPU";
  d.torch_version = "9.9.0";  // kjitd stores it with each kernel (KernelRecord::torch_version)
  d.sm_clock_khz = 1980000;
  d.memory_clock_khz = 2619000;
  d.uuid = mine.substr(0, mine.find(':'));
  d.arch = mine.find(':') == std::string::npos ? 90 : std::stoi(mine.substr(mine.find(':') + 1));
  d.pid = static_cast<uint32_t>(getpid());
  signal(SIGUSR1, OnYield);
  Send(Hello{d});
  int backoffs = 0;
  std::map<std::string, int> waits;  // FAKE_EVALUATOR_WAIT_KEYS: baselines backed off so far, per key
  while (true) {
    auto frame = ReadFrameBlocking(kWorkerFd);
    if (!frame.ok()) return 0;
    auto message = DecodeWorkerMessage(*frame);
    if (!message.ok()) return 2;
    if (std::holds_alternative<Exit>(*message)) return 0;
    if (const auto* b = std::get_if<BaselineRequest>(&*message)) {
      BaselineResult r;
      r.id = b->id;
      const std::string key = KeyText(b->key_bytes);
      if (Listed("FAKE_EVALUATOR_UNFIT_KEYS", key)) {
        r.error_code = "invalid_argument";
        r.error = "unfit: the key needs more memory than the fake GPU has";
        r.unfit = true;
        Send(r);
        continue;
      }
      if (Listed("FAKE_EVALUATOR_WAIT_KEYS", key) && waits[key]++ < 1) {
        r.error_code = "unavailable";
        r.error = "the inputs need more GPU memory than the cap allows now";
        r.backoff = true;
        Send(r);
        continue;
      }
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
    // What reached the worker of the client's compile-ahead list, echoed for the tests (a real worker
    // reports here what it waited for NVRTC).
    v.compile_wait_ms = static_cast<double>(e->compile_ahead.size());
    v.baseline.median_us = 2.0;
    v.baseline.runs = 10;
    if (what == "ok" || what == "slow" || what == "fast") {
      v.outcome = "verified";
      v.reason = "verified on " + d.uuid;  // which GPU ran it, for the tests of several
      if (std::getenv("FAKE_EVALUATOR_SHOW_CAP") != nullptr) v.reason += " cap " + std::to_string(e->memory_cap_bytes);
      v.timing.median_us = what == "ok" ? 1.0 : what == "fast" ? 0.5 : 2.0;
      v.timing.runs = 10;
      v.cubin = "FAKE-CUBIN";
      v.reward = std::log(v.baseline.median_us / v.timing.median_us);
      v.accepted = what != "slow";
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
    } else if (what == "show-env") {
      // What the worker inherited from kjitd (tests of the child environment).
      const char* preload = std::getenv("LD_PRELOAD");
      v.outcome = "verified";
      v.reason = std::string("LD_PRELOAD=") + (preload != nullptr ? preload : "(unset)");
      v.timing.median_us = 1.0;
      v.cubin = "FAKE-CUBIN";
    } else if (what == "unfit") {
      v.outcome = "resource_backoff";
      v.reason = "unfit: one input set needs 200.0 GiB at the peak (...), and this GPU has 80.0 GiB in all";
      v.unfit = true;
    } else if (what == "yield") {
      // A long trial that gives the GPU back when kjitd asks (SIGUSR1), as kit-evaluator does between timed
      // batches: preempted if asked within 2 s, verified otherwise.
      g_yield = 0;
      for (int i = 0; i < 200 && !g_yield; ++i) usleep(10000);
      if (g_yield) {
        v.outcome = "resource_backoff";
        v.reason = "preempted: another process started using the GPU";
        v.retry_later = true;
      } else {
        v.outcome = "verified";
        v.reason = "verified on " + d.uuid;
        v.timing.median_us = 1.0;
        v.timing.runs = 10;
        v.cubin = "FAKE-CUBIN-YIELD";
        v.accepted = true;
      }
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
    } else if (what.find("__global__") != std::string::npos) {
      // A generated kernel (a tuner's trial): verified, at a time that depends on its source only, between
      // 1.0 and 1.99 us, so that points differ and the same point always times the same.
      v.outcome = "verified";
      v.reason = "verified on " + d.uuid;
      v.timing.median_us = 1.0 + static_cast<double>(std::hash<std::string>{}(what) % 100) / 100.0;
      v.timing.runs = 10;
      v.cubin = "FAKE-CUBIN-" + std::to_string(std::hash<std::string>{}(what));
      v.reward = std::log(v.baseline.median_us / v.timing.median_us);
      v.accepted = true;
      v.verification.seeds = {1, 2, 3};
    } else {
      v.compiled = false;
      v.outcome = "compile_error";
      v.reason = "compile error: unknown fake behaviour '" + what + "'";
    }
    Send(v);
  }
}
