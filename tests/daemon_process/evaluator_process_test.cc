// kjitd supervising evaluator workers: the agent environment end to end, with
// a fake worker (fake_evaluator.cc) so that crashes, hangs and refusals can be
// staged on machines without a GPU. The real worker's verdicts are tested on
// the GPU machine (tests/gpu/evaluator_gpu_test.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>
#include <tuple>

#include "kjit/cache/kernel_cache.h"
#include "kjit/ipc/client.h"
#include "kjit/runtime/op_key.h"
#include "kjitd_harness.h"

namespace kjit {
namespace {

using testing::KjitdHarness;

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

  auto ok = c.SubmitCandidate(Candidate(obs->episode_id, "ok"));
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
  cache::OpenOptions o;
  o.path = h.cache_path();
  o.read_only = true;
  auto kc = cache::KernelCache::Open(o);
  ASSERT_TRUE(kc.ok());
  cache::ListFilter verified;
  verified.status = cache::RecordStatus::kVerified;
  auto records = (*kc)->List(verified);
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size(), 1u);
  auto measurements = (*kc)->ListMeasurements();
  ASSERT_TRUE(measurements.ok());
  ASSERT_EQ(measurements->size(), 3u);
  std::multiset<std::string> outcomes;
  for (const auto& m : *measurements) outcomes.insert(m.outcome);
  EXPECT_EQ(outcomes, (std::multiset<std::string>{"verified", "wrong_result", "slower"}));
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
  cache::OpenOptions o;
  o.path = h.cache_path();
  o.read_only = true;
  auto kc = cache::KernelCache::Open(o);
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

}  // namespace
}  // namespace kjit
