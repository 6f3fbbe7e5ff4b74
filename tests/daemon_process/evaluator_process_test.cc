// kjitd supervising evaluator workers: the agent environment end to end, with
// a fake worker (fake_evaluator.cc) so that crashes, hangs and refusals can be
// staged on machines without a GPU. The real worker's verdicts are tested on
// the GPU machine (tests/gpu/evaluator_gpu_test.cc).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>
#include <tuple>
#include <future>
#include <set>
#include <variant>

#include "kjit/cache/kernel_cache.h"
#include "kjit/cache/launch_journal.h"
#include "kjit/ipc/client.h"
#include "kjit/runtime/op_key.h"
#include "kjitd_harness.h"

namespace kjit {
namespace {

using testing::KjitdHarness;
using testing::ScopedEnv;

std::string KeyBytes() {
  return OpKey::Single("aten::relu", "", {TensorDesc::Contiguous(DType::kFloat32, {4})}, 90).Encode();
}

ipc::Client MakeClient(const KjitdHarness& h) {
  ipc::ClientOptions o;
  o.endpoint = h.endpoint();
  o.request_timeout = std::chrono::milliseconds(20000);
  o.retry_interval = std::chrono::milliseconds(50);
  return ipc::Client(o);
}

// kjitd's cache, read beside it as `kjit cache` would.
Result<std::unique_ptr<cache::KernelCache>> OpenCacheReadOnly(const KjitdHarness& h) {
  cache::OpenOptions o;
  o.path = h.cache_path();
  o.read_only = true;
  return cache::KernelCache::Open(o);
}

// A record stored as verified, claiming `median_us` against PyTorch's 2.0 us on an H200; the fake worker's
// verdict on it, when kjitd verifies it again, follows `behaviour` (its source).
cache::KernelRecord VerifiedRecord(const std::string& key_bytes, const std::string& behaviour, double median_us,
                                   const std::string& cubin) {
  cache::KernelRecord r;
  r.key_bytes = key_bytes;
  r.source = behaviour;
  r.entry_point = "k";
  r.cubin = cubin;
  r.launch.grid[0] = 1;
  r.launch.block[0] = 128;
  r.timing = {median_us, 0, 10, "NVIDIA H200", 0, 0};
  r.baseline = {2.0, 0, 10, "NVIDIA H200", 0, 0};
  r.toolchain = cache::RunningToolchain();
  r.status = cache::RecordStatus::kVerified;
  return r;
}

std::vector<std::string> FakeFlags() {
  return {"--evaluator", KJIT_FAKE_EVALUATOR, "--devices", "0", "--when", "always"};
}

ipc::SubmitCandidate Candidate(int64_t episode, const std::string& behaviour) {
  ipc::SubmitCandidate c;
  c.episode_id = episode;
  c.source = behaviour;
  c.entry_point = "k";
  c.block[0] = 128;
  return c;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(KjitdEvaluator, AgentEpisodeVerifiesStoresAndRejects) {
  KjitdHarness h(KJIT_KJITD, FakeFlags());
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  auto c = MakeClient(h);
  auto hello = c.Hello();
  ASSERT_TRUE(hello.ok());
  auto obs = c.OpenEpisode(KeyBytes());
  ASSERT_TRUE(obs.ok()) << obs.status().ToString() << "\n" << ReadFile(h.log_path());
  EXPECT_DOUBLE_EQ(obs->baseline_us, 2.0);
  EXPECT_EQ(obs->op, "aten::relu");
  EXPECT_EQ(obs->device["outputs"], "f32[4]");

  // The accepted candidate says where it came from (the RL policy's checkpoint); the others do not.
  auto ok_candidate = Candidate(obs->episode_id, "ok");
  cache::DesignPoint design{"softmax", {{"threads", "256"}, {"vec", "4"}}, "rl1-i1500-1a2b3c4d"};
  ok_candidate.design = ipc::DesignToWire(design);
  auto ok = c.SubmitCandidate(ok_candidate);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(ok->verified);
  EXPECT_NEAR(ok->reward, std::log(2.0), 1e-9);

  auto wrong = c.SubmitCandidate(Candidate(obs->episode_id, "wrong"));
  ASSERT_TRUE(wrong.ok());
  EXPECT_FALSE(wrong->verified);
  EXPECT_NE(wrong->verdict.find("wrong_result"), std::string::npos) << wrong->verdict;

  auto slow = c.SubmitCandidate(Candidate(obs->episode_id, "slow"));
  ASSERT_TRUE(slow.ok());
  EXPECT_TRUE(slow->verified);

  EXPECT_TRUE(c.CloseEpisode(obs->episode_id).ok());
  EXPECT_EQ(c.SubmitCandidate(Candidate(obs->episode_id, "ok")).status().code(), StatusCode::kNotFound);

  // Only the accepted kernel is served; every trial is kept for learning.
  auto kc = OpenCacheReadOnly(h);
  ASSERT_TRUE(kc.ok());
  cache::ListFilter verified;
  verified.status = cache::RecordStatus::kVerified;
  auto records = (*kc)->List(verified);
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size(), 1u);
  auto record = (*kc)->Get(records->front().id);
  ASSERT_TRUE(record.ok());
  EXPECT_EQ(record->design, design);
  // The reply names the record that holds the kernel; the record names the GPU that timed it, and its clocks.
  EXPECT_EQ(ok->profile.at("record"), static_cast<double>(record->id));
  EXPECT_EQ(ok->profile.at("already_stored"), 0.0);
  EXPECT_EQ(slow->profile.count("record"), 0u);
  EXPECT_EQ(record->timing.device, "Fake GPU GPU-fake");
  EXPECT_EQ(record->baseline.device, "Fake GPU GPU-fake");
  EXPECT_EQ(record->timing.sm_clock_khz, 1980000);
  EXPECT_EQ(record->timing.memory_clock_khz, 2619000);
  auto measurements = (*kc)->measurements().ListMeasurements();
  ASSERT_TRUE(measurements.ok());
  ASSERT_EQ(measurements->size(), 3u);
  std::multiset<std::string> outcomes;
  for (const auto& m : *measurements) {
    outcomes.insert(m.outcome);
    EXPECT_EQ(m.design.policy_version, m.outcome == "verified" ? "rl1-i1500-1a2b3c4d" : "external-agent");
  }
  EXPECT_EQ(outcomes, (std::multiset<std::string>{"verified", "wrong_result", "slower"}));
}

// The same kernel submitted again (by the seeder, or an agent retrying) is measured again but not stored
// again: the record that holds it answers, and nothing new is announced. A different kernel for the key
// gets its own record only if it is faster than the key's best (policy::kStoreMargin, reward.h).
TEST(KjitdEvaluator, TheSameKernelAgainIsNotStoredTwice) {
  KjitdHarness h(KJIT_KJITD, FakeFlags());
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  auto c = MakeClient(h);
  auto submit = [&c](const std::string& source) -> Result<ipc::CandidateResult> {
    auto obs = c.OpenEpisode(KeyBytes());
    if (!obs.ok()) return obs.status();
    auto candidate = Candidate(obs->episode_id, "ok");
    candidate.source = source;  // the fake's verdict follows "ok"; its CUBIN is the same whatever the source
    auto r = c.SubmitCandidate(candidate);
    (void)c.CloseEpisode(obs->episode_id);
    return r;
  };
  auto first = submit("ok");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(first->verified);
  ASSERT_EQ(first->profile.count("record"), 1u);
  EXPECT_EQ(first->profile.at("already_stored"), 0.0);
  auto again = submit("ok");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->verified);
  EXPECT_EQ(again->profile.at("accepted"), 1.0);
  EXPECT_EQ(again->profile.at("record"), first->profile.at("record"));
  EXPECT_EQ(again->profile.at("already_stored"), 1.0);
  auto stats = c.Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->counters["kernels_verified"], 1);
  EXPECT_EQ(stats->counters["kernels_already_stored"], 1);

  // Another launch shape is another kernel, even with the same CUBIN; but one no faster than the key's best
  // (1.0 us both) is not stored: verified, not accepted, the best record named.
  auto obs = c.OpenEpisode(KeyBytes());
  ASSERT_TRUE(obs.ok());
  auto wider = Candidate(obs->episode_id, "ok");
  wider.block[0] = 256;
  auto same_speed = c.SubmitCandidate(wider);
  ASSERT_TRUE(same_speed.ok());
  EXPECT_TRUE(same_speed->verified);
  EXPECT_EQ(same_speed->profile.at("accepted"), 0.0);
  EXPECT_EQ(same_speed->profile.count("record"), 0u);
  EXPECT_EQ(same_speed->profile.at("best_record"), first->profile.at("record"));
  // A faster one is (0.5 us).
  wider.source = "fast";
  auto other = c.SubmitCandidate(wider);
  (void)c.CloseEpisode(obs->episode_id);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->profile.at("accepted"), 1.0);
  EXPECT_EQ(other->profile.at("already_stored"), 0.0);
  EXPECT_NE(other->profile.at("record"), first->profile.at("record"));
  stats = c.Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->counters["kernels_verified"], 2);
  EXPECT_EQ(stats->counters["kernels_not_better"], 1);

  auto kc = OpenCacheReadOnly(h);
  ASSERT_TRUE(kc.ok());
  cache::ListFilter verified;
  verified.status = cache::RecordStatus::kVerified;
  auto records = (*kc)->List(verified);
  ASSERT_TRUE(records.ok());
  EXPECT_EQ(records->size(), 2u);
  auto measurements = (*kc)->measurements().ListMeasurements();
  ASSERT_TRUE(measurements.ok());
  EXPECT_EQ(measurements->size(), 4u);  // every trial is kept for learning
}

// A verified record that a client reports failing is quarantined at once and
// re-verified by the evaluator: a kernel that still verifies is served again;
// one that does not is rejected and its key queued for a new kernel. The fake
// worker's verdict follows the record's source ("ok", "wrong").
TEST(KjitdEvaluator, FailureReportIsReverifiedByTheEvaluator) {
  KjitdHarness h(KJIT_KJITD, FakeFlags());
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  auto key = [](int64_t n) {
    return OpKey::Single("aten::relu", "", {TensorDesc::Contiguous(DType::kFloat32, {n})}, 90).Encode();
  };
  int64_t sound = 0, broken = 0;
  {
    cache::OpenOptions o;
    o.path = h.cache_path();
    auto writer = cache::KernelCache::Open(o);
    ASSERT_TRUE(writer.ok());
    for (auto [n, source, id] : {std::tuple{8, "ok", &sound}, std::tuple{16, "wrong", &broken}}) {
      cache::KernelRecord r;
      r.key_bytes = key(n);
      r.source = source;
      r.entry_point = "k";
      r.cubin = "CUBIN";
      r.launch.block[0] = 128;
      r.toolchain = cache::RunningToolchain();
      r.status = cache::RecordStatus::kVerified;
      *id = *(*writer)->Insert(r);
    }
  }
  auto c = MakeClient(h);
  for (auto [n, id] : {std::pair{8, sound}, std::pair{16, broken}}) {
    auto reply = c.Call(ipc::ReportFailure{key(n), id, "load", "CUDA_ERROR_INVALID_IMAGE"});
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    const auto& ack = std::get<ipc::FailureAck>(*reply);
    EXPECT_TRUE(ack.out_of_service);
    EXPECT_EQ(ack.reverify, "started");
  }
  auto kc = OpenCacheReadOnly(h);
  ASSERT_TRUE(kc.ok());
  auto status = [&](int64_t id) { return (*kc)->Get(id)->status; };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((status(sound) == cache::RecordStatus::kQuarantined || status(broken) == cache::RecordStatus::kQuarantined) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(status(sound), cache::RecordStatus::kVerified) << ReadFile(h.log_path());
  EXPECT_NE((*kc)->Get(sound)->status_reason.find("re-verified after a client reported a load failure"),
            std::string::npos);
  EXPECT_EQ(status(broken), cache::RecordStatus::kRejected) << ReadFile(h.log_path());
  EXPECT_NE((*kc)->Get(broken)->status_reason.find("wrong_result"), std::string::npos)
      << (*kc)->Get(broken)->status_reason;
  auto tasks = c.ListTasks("queued");
  ASSERT_TRUE(tasks.ok());
  ASSERT_EQ(tasks->size(), 1u);  // only the broken record's key needs a new kernel
  EXPECT_EQ(tasks->front().key_hash, OpKey::Decode(key(16))->Hash().ToHex());
}

TEST(KjitdEvaluator, CrashHangAndFaultEachFailOneTrialAndKjitdGoesOn) {
  KjitdHarness h(KJIT_KJITD, FakeFlags());
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  auto c = MakeClient(h);
  auto obs = c.OpenEpisode(KeyBytes());
  ASSERT_TRUE(obs.ok()) << obs.status().ToString();

  auto crash = c.SubmitCandidate(Candidate(obs->episode_id, "crash"));
  ASSERT_TRUE(crash.ok()) << crash.status().ToString();
  EXPECT_FALSE(crash->verified);
  EXPECT_NE(crash->verdict.find("fault"), std::string::npos) << crash->verdict;
  EXPECT_NE(crash->verdict.find("signal 6"), std::string::npos) << crash->verdict;

  auto hang = c.SubmitCandidate(Candidate(obs->episode_id, "hang"));
  ASSERT_TRUE(hang.ok()) << hang.status().ToString();
  EXPECT_NE(hang->verdict.find("hang"), std::string::npos) << hang->verdict;
  EXPECT_NE(hang->verdict.find("verify"), std::string::npos) << hang->verdict;

  auto fault = c.SubmitCandidate(Candidate(obs->episode_id, "fault"));
  ASSERT_TRUE(fault.ok()) << fault.status().ToString();
  EXPECT_NE(fault->verdict.find("ILLEGAL_ADDRESS"), std::string::npos) << fault->verdict;

  // Each failure cost a worker; a new one serves the next trial.
  auto ok = c.SubmitCandidate(Candidate(obs->episode_id, "ok"));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString() << "\n" << ReadFile(h.log_path());
  EXPECT_TRUE(ok->verified);

  auto stats = c.Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->counters["evaluator_crashes"], 1);
  EXPECT_EQ(stats->counters["evaluator_kills"], 1);
  EXPECT_GE(stats->counters["evaluator_starts"], 4);
  EXPECT_EQ(stats->counters["trials_fault"], 2);
  EXPECT_EQ(stats->counters["trials_hang"], 1);
  EXPECT_EQ(stats->counters["trials_verified"], 1);
}

TEST(KjitdEvaluator, ShortOfMemoryTrialsWaitAndRetry) {
  KjitdHarness h(KJIT_KJITD, FakeFlags());
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  auto c = MakeClient(h);
  auto obs = c.OpenEpisode(KeyBytes());
  ASSERT_TRUE(obs.ok()) << obs.status().ToString();
  auto r = c.SubmitCandidate(Candidate(obs->episode_id, "backoff-once"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->verified) << r->verdict;
  auto stats = c.Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->counters["jobs_backed_off"], 1);
  EXPECT_EQ(stats->counters["trials"], 1);  // a backoff is not a trial
}

// A key whose working set can never fit the GPU: the baseline's answer reaches
// the client at once as a non-retryable error starting "unfit: " (not retried
// for a minute as memory short now is), and a candidate's verdict says unfit
// too, without a retry.
TEST(KjitdEvaluator, UnfitKeysAreAnsweredAtOnceNotRetried) {
  setenv("FAKE_EVALUATOR_UNFIT_KEYS", "aten::unfit_for_the_fake", 1);
  KjitdHarness h(KJIT_KJITD, FakeFlags());
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  unsetenv("FAKE_EVALUATOR_UNFIT_KEYS");
  auto c = MakeClient(h);
  const std::string huge =
      OpKey::Single("aten::unfit_for_the_fake", "", {TensorDesc::Contiguous(DType::kFloat32, {4})}, 90).Encode();
  auto refused = c.OpenEpisode(huge);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message().rfind("unfit: ", 0), 0u) << refused.status().message();
  EXPECT_NE(refused.status().message().find("more memory than the fake GPU has"), std::string::npos)
      << refused.status().message();
  auto stats = c.Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->counters["jobs_backed_off"], 0);
  EXPECT_EQ(stats->counters["jobs_unfit"], 1);
  EXPECT_EQ(stats->counters["baselines_measured"], 1);  // one answer: not measured again

  auto obs = c.OpenEpisode(KeyBytes());
  ASSERT_TRUE(obs.ok()) << obs.status().ToString();
  auto r = c.SubmitCandidate(Candidate(obs->episode_id, "unfit"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->verified);
  EXPECT_EQ(r->verdict.rfind("resource_backoff: unfit: ", 0), 0u) << r->verdict;
  stats = c.Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->counters["jobs_backed_off"], 0);
  EXPECT_EQ(stats->counters["jobs_unfit"], 2);
}

TEST(KjitdEvaluator, WorkerThatCannotRunIsReportedWithItsReason) {
  setenv("FAKE_EVALUATOR_UNAVAILABLE", "no_device: PyTorch sees no CUDA device", 1);
  KjitdHarness h(KJIT_KJITD, FakeFlags());
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  unsetenv("FAKE_EVALUATOR_UNAVAILABLE");
  auto c = MakeClient(h);
  // The worker may still be starting when the first request arrives.
  Status last;
  for (int i = 0; i < 100; ++i) {
    last = c.OpenEpisode(KeyBytes()).status();
    if (last.code() == StatusCode::kUnavailable) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(last.code(), StatusCode::kUnavailable);
  EXPECT_NE(last.message().find("PyTorch sees no CUDA device"), std::string::npos) << last.message();
}

TEST(KjitdEvaluator, MissingWorkerProgramIsAnErrorNotACrash) {
  KjitdHarness h(KJIT_KJITD, {"--evaluator", "/nonexistent/kjit-evaluator", "--devices", "0", "--when", "always"});
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  auto c = MakeClient(h);
  auto obs = c.OpenEpisode(KeyBytes());
  ASSERT_FALSE(obs.ok());
  EXPECT_EQ(obs.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(obs.status().message().find("/nonexistent/kjit-evaluator"), std::string::npos) << obs.status().message();
  EXPECT_TRUE(c.Hello().ok());
}

TEST(KjitdEvaluator, WhenNeverDisablesTrials) {
  KjitdHarness h(KJIT_KJITD, {"--evaluator", KJIT_FAKE_EVALUATOR, "--devices", "0", "--when", "never"});
  ASSERT_TRUE(h.Start());
  auto c = MakeClient(h);
  auto obs = c.OpenEpisode(KeyBytes());
  ASSERT_FALSE(obs.ok());
  EXPECT_NE(obs.status().message().find("--when never"), std::string::npos) << obs.status().message();
}

// ---- Several GPUs (issue 10), with fake device lists (FAKE_EVALUATOR_GPUS, read
// by the fake worker, which applies CUDA_VISIBLE_DEVICES to it as CUDA does) and
// a fake NVML (fake_nvml.cc, loaded by kjitd through KJIT_NVML_LIBRARY).

std::string KeyBytesForArch(int arch, int64_t n = 4) {
  return OpKey::Single("aten::relu", "", {TensorDesc::Contiguous(DType::kFloat32, {n})}, static_cast<uint16_t>(arch))
      .Encode();
}


using Workers = std::vector<std::map<std::string, std::string>>;

Workers EvaluatorsOf(ipc::Client& c) {
  auto stats = c.Stats();
  if (!stats.ok() || !stats->evaluators) return {};
  return *stats->evaluators;
}

// Waits until `ready` workers say they are ready (or 15 s pass); returns the last stats.
Workers WaitReady(ipc::Client& c, size_t ready) {
  Workers w;
  for (int i = 0; i < 300; ++i) {
    w = EvaluatorsOf(c);
    size_t n = 0;
    for (const auto& m : w) n += m.at("state") == "ready";
    if (n >= ready) return w;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return w;
}

void WriteNvmlState(const std::string& path, const std::string& text) {
  const std::string temp = path + ".tmp";
  std::ofstream(temp) << text;
  std::rename(temp.c_str(), path.c_str());  // whole, so the fake never reads half a file
}

// One trial of a fake behaviour on `key`; the verdict text ("verified: verified on GPU-aaaa").
std::string Trial(ipc::Client& c, const std::string& key, const std::string& behaviour = "ok") {
  auto obs = c.OpenEpisode(key);
  if (!obs.ok()) return "no episode: " + obs.status().ToString();
  auto r = c.SubmitCandidate(Candidate(obs->episode_id, behaviour));
  (void)c.CloseEpisode(obs->episode_id);
  return r.ok() ? r->verdict : "no result: " + r.status().ToString();
}

TEST(KjitdSeveralGpus, EveryWorkerEvaluatesAndStatsShowEachGpu) {
  ScopedEnv env({{"FAKE_EVALUATOR_GPUS", "GPU-aaaa:90,GPU-bbbb:90"}});
  KjitdHarness h(KJIT_KJITD, {"--evaluator", KJIT_FAKE_EVALUATOR, "--devices", "0,1", "--when", "always"});
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  auto c = MakeClient(h);
  Workers w = WaitReady(c, 2);
  ASSERT_EQ(w.size(), 2u) << ReadFile(h.log_path());
  EXPECT_EQ(w[0].at("device"), "0");
  EXPECT_EQ(w[0].at("uuid"), "GPU-aaaa");
  EXPECT_EQ(w[1].at("device"), "1");
  EXPECT_EQ(w[1].at("uuid"), "GPU-bbbb");
  EXPECT_EQ(w[1].at("arch"), "90");
  EXPECT_EQ(w[1].at("state"), "ready");
  EXPECT_FALSE(w[1].at("pid").empty());

  // Trials one after another (as one agent runs them) still use both GPUs: the
  // idle worker that has waited longest takes the next job (a trial is two jobs:
  // PyTorch's baseline when the episode opens, then the candidate).
  for (int i = 0; i < 6; ++i) {
    const std::string v = Trial(c, KeyBytes());
    EXPECT_EQ(v.rfind("verified: verified on GPU-", 0), 0u) << v;
  }
  w = EvaluatorsOf(c);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].at("jobs"), "6") << ReadFile(h.log_path());
  EXPECT_EQ(w[1].at("jobs"), "6");
}

TEST(KjitdSeveralGpus, JobsGoToAGpuOfTheKeysArch) {
  ScopedEnv env({{"FAKE_EVALUATOR_GPUS", "GPU-aaaa:90,GPU-bbbb:80"}});
  KjitdHarness h(KJIT_KJITD, {"--evaluator", KJIT_FAKE_EVALUATOR, "--devices", "0,1", "--when", "always"});
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  auto c = MakeClient(h);
  ASSERT_EQ(WaitReady(c, 2).size(), 2u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Trial(c, KeyBytesForArch(80)), "verified: verified on GPU-bbbb");
    EXPECT_EQ(Trial(c, KeyBytesForArch(90)), "verified: verified on GPU-aaaa");
  }
  // A stored kernel says which GPU verified it (any GPU of the arch may serve it). The three trials of a
  // key submitted the same kernel: one record a key.
  {
    auto kc = OpenCacheReadOnly(h);
    ASSERT_TRUE(kc.ok());
    auto records = (*kc)->List(cache::ListFilter{});
    ASSERT_TRUE(records.ok());
    ASSERT_EQ(records->size(), 2u);
    for (const auto& r : *records) {
      const std::string gpu = r.arch == 80 ? "GPU-bbbb" : "GPU-aaaa";
      auto full = (*kc)->Get(r.id);
      ASSERT_TRUE(full.ok());
      EXPECT_NE(full->status_reason.find("verified against PyTorch on " + gpu + ", "), std::string::npos)
          << full->status_reason;
      EXPECT_EQ(full->timing.device, "Fake GPU " + gpu);
    }
  }
  // No GPU of the key's arch: refused at once, naming what each GPU is.
  auto none = c.OpenEpisode(KeyBytesForArch(75));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(none.status().message().find("gpu 0: is sm_90; gpu 1: is sm_80"), std::string::npos)
      << none.status().message();
}

// The script for two GPUs kills one worker by hand: the other carries on at once,
// and the killed one comes back.
TEST(KjitdSeveralGpus, AKilledWorkerLeavesTheOtherWorking) {
  ScopedEnv env({{"FAKE_EVALUATOR_GPUS", "GPU-aaaa:90,GPU-bbbb:90"}});
  KjitdHarness h(KJIT_KJITD, {"--evaluator", KJIT_FAKE_EVALUATOR, "--devices", "0,1", "--when", "always"});
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  auto c = MakeClient(h);
  Workers w = WaitReady(c, 2);
  ASSERT_EQ(w.size(), 2u);
  const pid_t first = static_cast<pid_t>(std::stol(w[0].at("pid")));
  ASSERT_EQ(kill(first, SIGKILL), 0);
  // At once, before kjitd may have noticed: a job sent to the dead worker is not failed
  // but goes to another.
  for (int i = 0; i < 4; ++i) {
    const std::string v = Trial(c, KeyBytes());
    EXPECT_EQ(v.rfind("verified: verified on GPU-", 0), 0u) << v << "\n" << ReadFile(h.log_path());
  }
  auto stats = c.Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->counters["trials_fault"], 0);
  EXPECT_EQ(stats->counters["evaluator_crashes"], 1) << ReadFile(h.log_path());
  w = WaitReady(c, 2);  // the killed one restarts after its pause
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].at("state"), "ready");
  EXPECT_EQ(w[0].at("starts"), "2");
  EXPECT_EQ(w[0].at("crashes"), "1");
  EXPECT_NE(w[0].at("pid"), std::to_string(first));
  EXPECT_EQ(w[1].at("starts"), "1");
  EXPECT_EQ(w[1].at("crashes"), "0");
  EXPECT_EQ(Trial(c, KeyBytes()).rfind("verified: verified on GPU-", 0), 0u);
}

// A candidate that crashes its worker costs that GPU's worker only.
TEST(KjitdSeveralGpus, ACrashOnOneGpuLeavesTheOtherReady) {
  ScopedEnv env({{"FAKE_EVALUATOR_GPUS", "GPU-aaaa:90,GPU-bbbb:90"}});
  KjitdHarness h(KJIT_KJITD, {"--evaluator", KJIT_FAKE_EVALUATOR, "--devices", "0,1", "--when", "always"});
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  auto c = MakeClient(h);
  ASSERT_EQ(WaitReady(c, 2).size(), 2u);
  EXPECT_NE(Trial(c, KeyBytes(), "crash").find("signal 6"), std::string::npos);
  const Workers w = EvaluatorsOf(c);
  ASSERT_EQ(w.size(), 2u);
  // Exactly one worker crashed; the other is ready (the crashed one waits out its pause).
  EXPECT_EQ(std::stoi(w[0].at("crashes")) + std::stoi(w[1].at("crashes")), 1);
  const auto& survivor = w[0].at("crashes") == "0" ? w[0] : w[1];
  EXPECT_EQ(survivor.at("state"), "ready");
  EXPECT_EQ(Trial(c, KeyBytes()), "verified: verified on " + survivor.at("uuid"));
}

// CUDA_VISIBLE_DEVICES=1,0 swaps the ordinals: worker "0" is GPU-bbbb. NVML lists
// the GPUs in its own (PCI) order. Idle state must follow the GPU, by UUID: busy
// GPU-bbbb keeps worker "0" idle-waiting whatever the numbering.
TEST(KjitdSeveralGpus, IdleStateAndMemoryCapArePerGpuByUuid) {
  const std::string nvml_state = std::filesystem::temp_directory_path() / ("kjit-fake-nvml-" + std::to_string(getpid()));
  // GPU-bbbb busy (someone else's process 4242 at 80%), GPU-aaaa idle with 60 of 80 GB free.
  WriteNvmlState(nvml_state, "GPU-bbbb 40000000000 80000000000 4242:80\nGPU-aaaa 60000000000 80000000000\n");
  ScopedEnv env({{"FAKE_EVALUATOR_GPUS", "GPU-aaaa:90,GPU-bbbb:90"},
                 {"CUDA_VISIBLE_DEVICES", "1,0"},
                 {"KJIT_NVML_LIBRARY", KJIT_FAKE_NVML},
                 {"FAKE_NVML_STATE", nvml_state},
                 {"FAKE_EVALUATOR_SHOW_CAP", "1"}});
  KjitdHarness h(KJIT_KJITD, {"--evaluator", KJIT_FAKE_EVALUATOR, "--devices", "0,1", "--when", "idle",
                              "--idle-settle-ms", "0", "--memory-cap-fraction", "0.5"});
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  auto c = MakeClient(h);
  Workers w = WaitReady(c, 2);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].at("uuid"), "GPU-bbbb");  // ordinal 0 after CUDA_VISIBLE_DEVICES=1,0
  EXPECT_EQ(w[1].at("uuid"), "GPU-aaaa");
  // Half of GPU-aaaa's free 60 GB.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Trial(c, KeyBytes()), "verified: verified on GPU-aaaa cap 30000000000");
  w = EvaluatorsOf(c);
  EXPECT_NE(w[0].at("idle").find("GPU busy"), std::string::npos) << w[0].at("idle");
  EXPECT_NE(w[1].at("idle").find("GPU idle"), std::string::npos) << w[1].at("idle");
  EXPECT_NE(w[1].at("idle").find("memory cap 27.9 GiB (50% of 55.9 GiB free)"), std::string::npos) << w[1].at("idle");
  EXPECT_EQ(w[0].at("jobs"), "0");

  // The other way round: now only GPU-bbbb is idle.
  WriteNvmlState(nvml_state, "GPU-bbbb 20000000000 80000000000\nGPU-aaaa 60000000000 80000000000 4242:80\n");
  // Half of GPU-bbbb's free 20 GB: the cap is the GPU's own.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Trial(c, KeyBytes()), "verified: verified on GPU-bbbb cap 10000000000");

  // Both busy: a trial waits (it is queued, not failed) until one GPU is free again.
  WriteNvmlState(nvml_state,
                 "GPU-bbbb 20000000000 80000000000 4242:80\nGPU-aaaa 60000000000 80000000000 4243:50\n");
  auto pending = std::async(std::launch::async, [&h] {
    auto c2 = MakeClient(h);
    return Trial(c2, KeyBytes());
  });
  EXPECT_EQ(pending.wait_for(std::chrono::milliseconds(800)), std::future_status::timeout);
  auto stats = c.Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->counters["trials_queued"], 1);
  for (const auto& m : *stats->evaluators) EXPECT_NE(m.at("idle").find("GPU busy"), std::string::npos);
  WriteNvmlState(nvml_state, "GPU-bbbb 20000000000 80000000000 4242:80\nGPU-aaaa 60000000000 80000000000\n");
  EXPECT_EQ(pending.get(), "verified: verified on GPU-aaaa cap 30000000000");
  std::remove(nvml_state.c_str());
}

// --when always runs beside a busy program, but still under each GPU's own memory cap
// (before, kjitd read NVML only for --when idle, so an always-trial had no cap at all).
TEST(KjitdSeveralGpus, WhenAlwaysStillCapsMemoryPerGpu) {
  const std::string nvml_state = std::filesystem::temp_directory_path() / ("kjit-fake-nvml-always-" + std::to_string(getpid()));
  // GPU-aaaa busy (a stranger's process at 80%) with 40 of 80 GB free; GPU-bbbb idle with 20 free.
  WriteNvmlState(nvml_state, "GPU-aaaa 40000000000 80000000000 4242:80\nGPU-bbbb 20000000000 80000000000\n");
  ScopedEnv env({{"FAKE_EVALUATOR_GPUS", "GPU-aaaa:90"},
                 {"KJIT_NVML_LIBRARY", KJIT_FAKE_NVML},
                 {"FAKE_NVML_STATE", nvml_state},
                 {"FAKE_EVALUATOR_SHOW_CAP", "1"}});
  KjitdHarness h(KJIT_KJITD, {"--evaluator", KJIT_FAKE_EVALUATOR, "--devices", "0", "--when", "always",
                              "--memory-cap-fraction", "0.5"});
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  auto c = MakeClient(h);
  Workers w = WaitReady(c, 1);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(Trial(c, KeyBytes()), "verified: verified on GPU-aaaa cap 20000000000");  // half of its 40 GB free
  w = EvaluatorsOf(c);
  EXPECT_NE(w[0].at("idle").find("--when always: running regardless of load"), std::string::npos) << w[0].at("idle");
  EXPECT_NE(w[0].at("idle").find("memory cap 18.6 GiB (50% of 37.3 GiB free)"), std::string::npos) << w[0].at("idle");
  std::remove(nvml_state.c_str());
}

// kjit's own workers are not "someone else" on any GPU: a worker that shows up on
// another worker's GPU (PyTorch may make a context there) does not make it busy.
TEST(KjitdSeveralGpus, KjitsOwnWorkersDoNotMakeAGpuBusy) {
  const std::string nvml_state = std::filesystem::temp_directory_path() / ("kjit-fake-nvml-own-" + std::to_string(getpid()));
  WriteNvmlState(nvml_state, "GPU-aaaa 60000000000 80000000000\nGPU-bbbb 60000000000 80000000000\n");
  ScopedEnv env({{"FAKE_EVALUATOR_GPUS", "GPU-aaaa:90,GPU-bbbb:90"},
                 {"KJIT_NVML_LIBRARY", KJIT_FAKE_NVML},
                 {"FAKE_NVML_STATE", nvml_state}});
  KjitdHarness h(KJIT_KJITD, {"--evaluator", KJIT_FAKE_EVALUATOR, "--devices", "0,1", "--when", "idle",
                              "--idle-settle-ms", "0"});
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  auto c = MakeClient(h);
  Workers w = WaitReady(c, 2);
  ASSERT_EQ(w.size(), 2u);
  // GPU-aaaa runs GPU-bbbb's worker at 90%; GPU-bbbb runs a stranger's process.
  WriteNvmlState(nvml_state, "GPU-aaaa 60000000000 80000000000 " + w[1].at("pid") +
                                 ":90\nGPU-bbbb 60000000000 80000000000 4242:90\n");
  for (int i = 0; i < 2; ++i) EXPECT_EQ(Trial(c, KeyBytes()), "verified: verified on GPU-aaaa") << ReadFile(h.log_path());
  std::remove(nvml_state.c_str());
}

// An ordinal and the UUID of the same GPU: one worker, and the other says why it stopped.
TEST(KjitdSeveralGpus, TheSameGpuNamedTwiceGetsOneWorker) {
  ScopedEnv env({{"FAKE_EVALUATOR_GPUS", "GPU-aaaa:90,GPU-bbbb:90"}});
  KjitdHarness h(KJIT_KJITD, {"--evaluator", KJIT_FAKE_EVALUATOR, "--devices", "1, GPU-bbbb,1", "--when", "always"});
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  auto c = MakeClient(h);
  ASSERT_EQ(WaitReady(c, 1).size(), 2u);  // "1" given twice is one device
  Workers w;
  for (int i = 0; i < 100; ++i) {
    w = EvaluatorsOf(c);
    if (w.size() == 2 && w[1].at("state") == "unavailable" && !w[1].count("pid")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].at("state"), "ready");
  EXPECT_EQ(w[1].at("device"), "GPU-bbbb");
  EXPECT_EQ(w[1].at("state"), "unavailable");
  EXPECT_NE(w[1].at("note").find("the same GPU (GPU-bbbb) as device 1"), std::string::npos) << w[1].at("note");
  EXPECT_EQ(Trial(c, KeyBytes()), "verified: verified on GPU-bbbb");
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // past the restart pause: still not restarted
  EXPECT_EQ(EvaluatorsOf(c)[1].at("starts"), "1");
}

// A UUID names its GPU whatever CUDA_VISIBLE_DEVICES does to the ordinals; a GPU
// hidden by it cannot be used, and the worker says so.
TEST(KjitdSeveralGpus, UuidSelectionAndHiddenGpus) {
  ScopedEnv env({{"FAKE_EVALUATOR_GPUS", "GPU-aaaa:90,GPU-bbbb:90,GPU-cccc:90"}, {"CUDA_VISIBLE_DEVICES", "2,1"}});
  KjitdHarness h(KJIT_KJITD,
                 {"--evaluator", KJIT_FAKE_EVALUATOR, "--devices", "GPU-bbbb,1,GPU-aaaa", "--when", "always"});
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  auto c = MakeClient(h);
  Workers w;
  for (int i = 0; i < 100; ++i) {
    w = EvaluatorsOf(c);
    if (w.size() == 3 && w[2].at("state") == "unavailable" && w[1].at("state") != "starting") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0].at("uuid"), "GPU-bbbb");
  EXPECT_EQ(w[0].at("state"), "ready");
  // Ordinal 1 under CUDA_VISIBLE_DEVICES=2,1 is GPU-bbbb too: the same GPU, not used twice.
  EXPECT_NE(w[1].at("note").find("the same GPU (GPU-bbbb)"), std::string::npos) << w[1].at("note");
  EXPECT_NE(w[2].at("note").find("no visible GPU GPU-aaaa"), std::string::npos) << w[2].at("note");
}

TEST(KjitdSeveralGpus, MalformedDeviceListIsRefusedAtStart) {
  KjitdHarness h(KJIT_KJITD, {"--evaluator", KJIT_FAKE_EVALUATOR, "--devices", "0,gpu1", "--when", "always"});
  ASSERT_FALSE(h.Start());
  EXPECT_NE(ReadFile(h.log_path()).find("'gpu1' is neither a CUDA ordinal"), std::string::npos)
      << ReadFile(h.log_path());
}

// --when idle: a trial in flight gives the GPU back when another process starts using it (kjitd asks the
// worker with SIGUSR1), and runs again once the GPU is idle, so kjit's trials do not slow the user's program
// down for the rest of a trial. The fake worker's "yield" trial waits 2 s for the request.
TEST(KjitdSeveralGpus, ATrialInFlightYieldsWhenAnotherProcessUsesTheGpu) {
  const std::string nvml_state =
      std::filesystem::temp_directory_path() / ("kjit-fake-nvml-yield-" + std::to_string(getpid()));
  WriteNvmlState(nvml_state, "GPU-aaaa 60000000000 80000000000\n");
  ScopedEnv env({{"FAKE_EVALUATOR_GPUS", "GPU-aaaa:90"},
                 {"KJIT_NVML_LIBRARY", KJIT_FAKE_NVML},
                 {"FAKE_NVML_STATE", nvml_state}});
  KjitdHarness h(KJIT_KJITD,
                 {"--evaluator", KJIT_FAKE_EVALUATOR, "--devices", "0", "--when", "idle", "--idle-settle-ms", "0"});
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  auto c = MakeClient(h);
  ASSERT_EQ(WaitReady(c, 1).size(), 1u);
  auto pending = std::async(std::launch::async, [&h] {
    auto c2 = MakeClient(h);
    return Trial(c2, KeyBytes(), "yield");
  });
  // Once the trial is in the worker (its baseline answered, the candidate's job running), the user's process
  // starts; a little later it is gone again.
  bool running = false;
  for (int i = 0; i < 300 && !running; ++i) {
    const Workers w = EvaluatorsOf(c);
    running = !w.empty() && w[0].at("state") == "busy" && w[0].at("jobs") == "1";
    if (!running) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(running) << ReadFile(h.log_path());
  WriteNvmlState(nvml_state, "GPU-aaaa 60000000000 80000000000 4242:80\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  WriteNvmlState(nvml_state, "GPU-aaaa 60000000000 80000000000\n");
  EXPECT_EQ(pending.get(), "verified: verified on GPU-aaaa") << ReadFile(h.log_path());
  auto stats = c.Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_GE(stats->counters["trials_preempted_requests"], 1);
  EXPECT_EQ(stats->counters["jobs_backed_off"], 1);  // the preempted run, run again once the GPU was idle
  EXPECT_EQ(stats->counters["trials"], 1);           // one trial, not two
  EXPECT_NE(ReadFile(h.log_path()).find("\"event\":\"evaluator_yields\""), std::string::npos);
  std::filesystem::remove(nvml_state);
}

// An agent cannot read the user's files through NVRTC: a submission that includes a file (or passes an option
// that names one) is refused before anything compiles, and the reply holds none of the file's content.
TEST(KjitdEvaluator, ASubmissionThatIncludesAFileIsRefusedWithoutItsContent) {
  KjitdHarness h(KJIT_KJITD, FakeFlags());
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  const std::string secret = h.dir() + "/secret.h";
  std::ofstream(secret) << "the-user-s-secret-token-8d1f\n";
  auto c = MakeClient(h);
  auto obs = c.OpenEpisode(KeyBytes());
  ASSERT_TRUE(obs.ok()) << obs.status().ToString();
  for (const auto& [source, options] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"#include \"" + secret + "\"\nok", {}},
           {"ok", {"--pre-include=" + secret}},
           {"ok", {"-I" + h.dir()}}}) {
    ipc::SubmitCandidate candidate = Candidate(obs->episode_id, "ok");
    candidate.source = source;
    candidate.options = options;
    auto reply = c.Call(candidate);  // an error reply comes back as its Status
    ASSERT_FALSE(reply.ok()) << "not refused: " << ipc::TypeName(*reply);
    EXPECT_EQ(reply.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(reply.status().message().find("not allowed"), std::string::npos) << reply.status().message();
    EXPECT_EQ(reply.status().message().find("secret-token"), std::string::npos) << reply.status().message();
  }
  // The same through compile-ahead: dropped, never sent to the worker (the fake echoes how many arrived).
  ipc::SubmitCandidate candidate = Candidate(obs->episode_id, "ok");
  candidate.compile_ahead = std::vector<std::vector<std::string>>{{"#include \"" + secret + "\"\n"}, {"// fine"}};
  auto r = c.SubmitCandidate(candidate);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->profile.at("compile_wait_ms"), 1);
  auto stats = c.Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->counters["candidates_refused"], 3);
  EXPECT_EQ(stats->counters["trials"], 1);  // only the accepted submission ran
}

// A cache file from elsewhere is not trusted: its "verified" records (here claiming 0.001 us) are served to
// nobody until kjitd has verified them and timed them on this GPU. One that verifies is stored again with this
// machine's timing (1.0 us, the fake's); one that does not is rejected; the imported copies are set aside.
TEST(KjitdEvaluator, ImportedKernelsServeOnlyOnceVerifiedAndTimedHere) {
  KjitdHarness h(KJIT_KJITD, FakeFlags());
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  const std::string good_key = KeyBytes();
  const std::string bad_key = OpKey::Single("aten::relu", "", {TensorDesc::Contiguous(DType::kFloat32, {8})}, 90).Encode();
  const std::string forged = h.dir() + "/forged.db";
  {
    cache::OpenOptions o;
    o.path = forged;
    auto file = cache::KernelCache::Open(o);
    ASSERT_TRUE(file.ok());
    for (const auto& [key, behaviour] : {std::pair{good_key, "ok"}, std::pair{bad_key, "wrong"}}) {
      ASSERT_TRUE((*file)->Insert(VerifiedRecord(key, behaviour, 0.001, "FORGED-CUBIN")).ok());
    }
  }
  std::vector<int64_t> imported;
  {
    cache::OpenOptions o;
    o.path = h.cache_path();
    auto kc = cache::KernelCache::Open(o);
    ASSERT_TRUE(kc.ok());
    auto rep = (*kc)->Import(forged);
    ASSERT_TRUE(rep.ok()) << rep.status().ToString();
    EXPECT_EQ(rep->awaiting_verification, 2u);
    cache::ListFilter quarantined;
    quarantined.status = cache::RecordStatus::kQuarantined;
    auto waiting = (*kc)->List(quarantined);
    ASSERT_TRUE(waiting.ok());
    for (const auto& r : *waiting) imported.push_back(r.id);
    ASSERT_EQ(imported.size(), 2u);
    // Nothing of the file is served meanwhile.
    EXPECT_EQ((*kc)->BestVerified(OpKey::Decode(good_key)->Hash(), "").value().id, 0);
  }
  auto kc = OpenCacheReadOnly(h);
  ASSERT_TRUE(kc.ok());
  bool settled = false;
  for (int i = 0; i < 200 && !settled; ++i) {
    settled = true;
    for (int64_t id : imported) settled = settled && (*kc)->Get(id)->status == cache::RecordStatus::kRejected;
    if (!settled) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(settled) << ReadFile(h.log_path());
  const auto best = (*kc)->BestVerified(OpKey::Decode(good_key)->Hash(), "");
  ASSERT_TRUE(best.ok());
  EXPECT_GT(best->id, 0);
  EXPECT_EQ(std::count(imported.begin(), imported.end(), best->id), 0) << "the imported copy itself is served";
  EXPECT_DOUBLE_EQ(best->median_us, 1.0) << "served with the file's timing, not this machine's";
  EXPECT_EQ((*kc)->Get(best->id)->torch_version, "9.9.0") << "stored with the verifying worker's PyTorch";
  EXPECT_EQ((*kc)->BestVerified(OpKey::Decode(bad_key)->Hash(), "").value().id, 0);
  for (int64_t id : imported) {
    const cache::KernelRecord r = *(*kc)->Get(id);
    const bool bad = r.key_hash == OpKey::Decode(bad_key)->Hash();
    EXPECT_NE(r.status_reason.find(bad ? "failed verification here" : "verified and timed here as record"),
              std::string::npos)
        << r.status_reason;
  }
  auto stats = MakeClient(h).Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->counters["imports_verified"], 1);
  EXPECT_EQ(stats->counters["imports_rejected"], 1);
}

// A kjitd started with kjit's shim in LD_PRELOAD (from a program under `kjit run`) starts its workers without
// it: a worker with the shim would verify candidates against the cache's kernels instead of PyTorch's.
TEST(KjitdEvaluator, WorkersDoNotInheritKjitsShim) {
  // Files that do not exist: the loader says so on stderr and carries on.
  ScopedEnv env({{"LD_PRELOAD", "/nonexistent/kjit/libkjit_preload.so:/nonexistent/libother.so"}});
  KjitdHarness h(KJIT_KJITD, FakeFlags());
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  auto c = MakeClient(h);
  auto obs = c.OpenEpisode(KeyBytes());
  ASSERT_TRUE(obs.ok()) << obs.status().ToString();
  auto r = c.SubmitCandidate(Candidate(obs->episode_id, "show-env"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE(r->verdict.find("LD_PRELOAD=/nonexistent/libother.so"), std::string::npos) << r->verdict;
  EXPECT_EQ(r->verdict.find("libkjit_preload"), std::string::npos) << r->verdict;
}

// Compile-ahead (ipc submit_candidate.compile_ahead): kjitd passes the client's next candidates to the worker
// that runs this one (at most ipc::kMaxCompileAhead, empty entries dropped) and counts them.
TEST(KjitdEvaluator, CompileAheadReachesTheWorker) {
  ScopedEnv env({{"FAKE_EVALUATOR_GPUS", "GPU-aaaa:90"}});
  KjitdHarness h(KJIT_KJITD, {"--evaluator", KJIT_FAKE_EVALUATOR, "--devices", "0", "--when", "always"});
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  auto c = MakeClient(h);
  auto obs = c.OpenEpisode(KeyBytes());
  ASSERT_TRUE(obs.ok()) << obs.status().ToString();
  ipc::SubmitCandidate candidate = Candidate(obs->episode_id, "ok");
  auto r = c.SubmitCandidate(candidate);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->profile.at("compile_wait_ms"), 0);
  candidate.compile_ahead = std::vector<std::vector<std::string>>{{"// next", "--use_fast_math"}, {}, {"// after"}};
  r = c.SubmitCandidate(candidate);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->profile.at("compile_wait_ms"), 2);  // the fake echoes how many arrived
  candidate.compile_ahead = std::vector<std::vector<std::string>>(20, std::vector<std::string>{"// many"});
  r = c.SubmitCandidate(candidate);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->profile.at("compile_wait_ms"), static_cast<double>(ipc::kMaxCompileAhead));
  auto stats = c.Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->counters["compile_ahead_sent"], 2 + static_cast<double>(ipc::kMaxCompileAhead));
}

// --when idle and a program kjit serves (ipc report_activity): NVML sees nobody (as on an H100 VM while a
// program ran, 2026-12-05), but the program's reports keep trials off its GPU for idle_client_hold_ms, and
// a trial in flight yields to them; reports that stop (or a process that has exited) free the GPU again.
TEST(KjitdSeveralGpus, AProgramsActivityReportsKeepTrialsOffItsGpu) {
  const std::string nvml_state =
      std::filesystem::temp_directory_path() / ("kjit-fake-nvml-activity-" + std::to_string(getpid()));
  WriteNvmlState(nvml_state, "GPU-aaaa 60000000000 80000000000\nGPU-bbbb 60000000000 80000000000\n");
  ScopedEnv env({{"FAKE_EVALUATOR_GPUS", "GPU-aaaa:90,GPU-bbbb:90"},
                 {"KJIT_NVML_LIBRARY", KJIT_FAKE_NVML},
                 {"FAKE_NVML_STATE", nvml_state}});
  KjitdHarness h(KJIT_KJITD, {"--evaluator", KJIT_FAKE_EVALUATOR, "--devices", "0,1", "--when", "idle",
                              "--idle-settle-ms", "0", "--idle-client-hold-ms", "1000"});
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  auto c = MakeClient(h);
  ASSERT_EQ(WaitReady(c, 2).size(), 2u);
  auto hello = c.Hello();
  ASSERT_TRUE(hello.ok());
  EXPECT_NE(std::find(hello->capabilities.begin(), hello->capabilities.end(), "report_activity"),
            hello->capabilities.end());
  const auto me = static_cast<uint32_t>(getpid());

  // This process "runs ops" on GPU-aaaa: trials go to GPU-bbbb.
  auto report = [&](std::vector<std::string> devices) {
    auto r = c.Call(ipc::ReportActivity{me, std::move(devices), 10});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(std::holds_alternative<ipc::Ack>(*r));
  };
  report({"GPU-aaaa"});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Trial(c, KeyBytes()), "verified: verified on GPU-bbbb");
  Workers w = EvaluatorsOf(c);
  EXPECT_NE(w[0].at("idle").find("a program kjit serves (pid " + std::to_string(me) + ")"), std::string::npos)
      << w[0].at("idle");

  // On both: a trial waits while the reports keep coming, and runs once they stop.
  report({"GPU-aaaa", "GPU-bbbb"});
  auto pending = std::async(std::launch::async, [&h] {
    auto c2 = MakeClient(h);
    return Trial(c2, KeyBytes());
  });
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(pending.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
    report({"GPU-aaaa", "GPU-bbbb"});
  }
  EXPECT_EQ(pending.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_NE(pending.get().find("verified: verified on GPU-"), std::string::npos);

  // A trial in flight on GPU-aaaa yields to a report naming it, and runs again once the reports stop.
  WriteNvmlState(nvml_state, "GPU-aaaa 60000000000 80000000000\nGPU-bbbb 60000000000 80000000000 4242:80\n");
  auto yielding = std::async(std::launch::async, [&h] {
    auto c2 = MakeClient(h);
    return Trial(c2, KeyBytes(), "yield");
  });
  // Busy with the candidate (the fake worker's "compile" phase), not with the baseline job the episode may run
  // first: a report during that short job found GPU-aaaa ready and asked nothing (1 run in 10 here).
  bool running = false;
  for (int i = 0; i < 600 && !running; ++i) {
    w = EvaluatorsOf(c);
    running = w.size() == 2 && w[0].at("state") == "busy" && w[0].at("phase") == "compile";
    if (!running) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(running) << ReadFile(h.log_path());
  report({"GPU-aaaa"});
  EXPECT_EQ(yielding.get(), "verified: verified on GPU-aaaa") << ReadFile(h.log_path());
  auto stats = c.Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_GE(stats->counters["trials_preempted_requests"], 1) << ReadFile(h.log_path());
  EXPECT_GE(stats->counters["client_activity_reports"], 9);
  EXPECT_NE(ReadFile(h.log_path()).find("\"client_pid\":\"" + std::to_string(me) + "\""), std::string::npos);
  std::filesystem::remove(nvml_state);
}

// A trial gives the GPU back at most idle_yields_per_trial times, then runs to its end though the program runs
// ops again: a program whose idle gaps are all shorter than a trial still gets its kernels (the chain of a GELU
// program at 3db7f77 waited 64 s of 10 s pauses on an H100 and got none).
TEST(KjitdSeveralGpus, ATrialThatYieldedEnoughRunsToItsEnd) {
  const std::string nvml_state =
      std::filesystem::temp_directory_path() / ("kjit-fake-nvml-kept-" + std::to_string(getpid()));
  WriteNvmlState(nvml_state, "GPU-aaaa 60000000000 80000000000\n");
  ScopedEnv env({{"FAKE_EVALUATOR_GPUS", "GPU-aaaa:90"},
                 {"KJIT_NVML_LIBRARY", KJIT_FAKE_NVML},
                 {"FAKE_NVML_STATE", nvml_state}});
  KjitdHarness h(KJIT_KJITD, {"--evaluator", KJIT_FAKE_EVALUATOR, "--devices", "0", "--when", "idle",
                              "--idle-settle-ms", "0", "--idle-client-hold-ms", "300", "--idle-yields-per-trial", "1"});
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  auto c = MakeClient(h);
  ASSERT_EQ(WaitReady(c, 1).size(), 1u);
  const auto me = static_cast<uint32_t>(getpid());
  auto report = [&] {
    auto r = c.Call(ipc::ReportActivity{me, {"GPU-aaaa"}, 10});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  };
  auto pending = std::async(std::launch::async, [&h] {
    auto c2 = MakeClient(h);
    return Trial(c2, KeyBytes(), "yield");
  });
  // The candidate's job runs (the worker's jobs so far: the baseline, then this one); the program reports ops.
  auto wait_busy_with = [&](const std::string& jobs) {
    for (int i = 0; i < 1000; ++i) {
      const Workers w = EvaluatorsOf(c);
      if (!w.empty() && w[0].at("state") == "busy" && w[0].at("jobs") == jobs) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  };
  ASSERT_TRUE(wait_busy_with("1")) << ReadFile(h.log_path());
  report();
  // It gave the GPU back once, and runs again once the reports stopped for idle_client_hold_ms.
  ASSERT_TRUE(wait_busy_with("2")) << ReadFile(h.log_path());
  report();
  EXPECT_EQ(pending.get(), "verified: verified on GPU-aaaa") << ReadFile(h.log_path());
  auto stats = c.Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->counters["jobs_backed_off"], 1);  // the one yield
  EXPECT_EQ(stats->counters["trials_kept_running"], 1);
  EXPECT_EQ(stats->counters["trials"], 1);
  EXPECT_NE(ReadFile(h.log_path()).find("\"event\":\"evaluator_keeps_running\""), std::string::npos);
  std::filesystem::remove(nvml_state);
}

// A report from a process that has exited stops counting at once: kjitd tunes right after the program ends.
TEST(KjitdSeveralGpus, AnExitedProgramsActivityNoLongerCounts) {
  const std::string nvml_state =
      std::filesystem::temp_directory_path() / ("kjit-fake-nvml-exited-" + std::to_string(getpid()));
  WriteNvmlState(nvml_state, "GPU-aaaa 60000000000 80000000000\n");
  ScopedEnv env({{"FAKE_EVALUATOR_GPUS", "GPU-aaaa:90"},
                 {"KJIT_NVML_LIBRARY", KJIT_FAKE_NVML},
                 {"FAKE_NVML_STATE", nvml_state}});
  KjitdHarness h(KJIT_KJITD, {"--evaluator", KJIT_FAKE_EVALUATOR, "--devices", "0", "--when", "idle",
                              "--idle-settle-ms", "0", "--idle-client-hold-ms", "4000"});
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  auto c = MakeClient(h);
  ASSERT_EQ(WaitReady(c, 1).size(), 1u);
  // A child that exits at once: its pid names no process by the time the trial is dispatched.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  auto r = c.Call(ipc::ReportActivity{static_cast<uint32_t>(child), {"GPU-aaaa"}, 1});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(Trial(c, KeyBytes()), "verified: verified on GPU-aaaa");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(3000));  // not held for 4 s
  // A live one (this process) holds it until the hold has passed.
  r = c.Call(ipc::ReportActivity{static_cast<uint32_t>(getpid()), {"GPU-aaaa"}, 1});
  ASSERT_TRUE(r.ok());
  auto pending = std::async(std::launch::async, [&h] {
    auto c2 = MakeClient(h);
    return Trial(c2, KeyBytes());
  });
  EXPECT_EQ(pending.wait_for(std::chrono::milliseconds(2000)), std::future_status::timeout);
  EXPECT_EQ(pending.get(), "verified: verified on GPU-aaaa");
  std::filesystem::remove(nvml_state);
}

// A process that died during a record's first launch leaves its launch journal entry (the shim writes it
// before and removes it after that launch): kjitd takes the record out of service and re-verifies it (the
// fake evaluator passes it), and removes the entry; when the record kills a second process, it is rejected
// for good and its key queued for a new kernel.
TEST(KjitdEvaluator, ARecordThatKilledAProcessIsReverifiedThenRejectedTheSecondTime) {
  KjitdHarness h(KJIT_KJITD, FakeFlags());
  int64_t id = 0;
  {
    cache::OpenOptions o;
    o.path = h.cache_path();
    auto kc = cache::KernelCache::Open(o);
    ASSERT_TRUE(kc.ok());
    id = *(*kc)->Insert(VerifiedRecord(KeyBytes(), "ok", 1.0, "CUBIN"));
  }
  auto dead_pid = [] {
    const pid_t child = fork();
    if (child == 0) _exit(0);
    int status = 0;
    waitpid(child, &status, 0);
    return static_cast<uint32_t>(child);
  };
  const std::string dir = cache::LaunchJournalDir(h.cache_path());
  // An entry becomes abandoned kMinAbandonedAgeMs after it was written: backdated here.
  auto backdate = [&](uint32_t pid, uint64_t start) {
    const std::string path = dir + "/" + std::to_string(id) + "-" + std::to_string(pid) + "-" + std::to_string(start);
    struct timespec times[2];
    clock_gettime(CLOCK_REALTIME, &times[0]);
    times[0].tv_sec -= 10;
    times[1] = times[0];
    return utimensat(AT_FDCWD, path.c_str(), times, 0) == 0;
  };
  const uint32_t first_pid = dead_pid();
  const cache::LaunchJournal first(dir, first_pid, 777);
  ASSERT_TRUE(first.Begin(id).ok());
  ASSERT_TRUE(backdate(first_pid, 777));
  ASSERT_TRUE(first.KilledAProcess(id));
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  auto kc = OpenCacheReadOnly(h);
  ASSERT_TRUE(kc.ok());
  auto wait_for = [&](auto done) {
    for (int i = 0; i < 200 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return done();
  };
  ASSERT_TRUE(wait_for([&] { return ReadFile(h.log_path()).find("record_reverified") != std::string::npos; }))
      << ReadFile(h.log_path());
  EXPECT_FALSE(first.KilledAProcess(id)) << "the entry is removed once the record is out of service";
  cache::KernelRecord after = *(*kc)->Get(id);
  EXPECT_EQ(after.status, cache::RecordStatus::kVerified) << after.status_reason;
  EXPECT_NE(after.status_reason.find("died during the kernel's first launch"), std::string::npos) << after.status_reason;
  EXPECT_NE(ReadFile(h.log_path()).find("kernel_killed_a_process"), std::string::npos);

  const uint32_t second_pid = dead_pid();
  const cache::LaunchJournal second(dir, second_pid, 778);
  ASSERT_TRUE(second.Begin(id).ok());
  ASSERT_TRUE(backdate(second_pid, 778));
  ASSERT_TRUE(wait_for([&] { return (*kc)->Get(id)->status == cache::RecordStatus::kRejected; }))
      << ReadFile(h.log_path());
  EXPECT_NE((*kc)->Get(id)->status_reason.find("a second time"), std::string::npos);
  EXPECT_TRUE(wait_for([&] { return !second.KilledAProcess(id); }));
  bool queued = false;
  auto tasks = (*kc)->tasks().ListTasks();
  ASSERT_TRUE(tasks.ok());
  for (const auto& t : *tasks) queued = queued || t.detail.find("killed two processes") != std::string::npos;
  EXPECT_TRUE(queued) << "the key is queued for a new kernel";
  auto stats = MakeClient(h).Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->counters["launch_crashes"], 2);
  EXPECT_EQ(stats->counters["records_suspended"], 1);
  EXPECT_EQ(stats->counters["records_rejected"], 1);
}

}  // namespace
}  // namespace kjit
