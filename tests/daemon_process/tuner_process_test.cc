// kjitd tunes by itself (issue 39): kjitd starts its tuner (`kjit-policy tune`),
// which claims the queued tasks and runs each key's episode through kjitd's
// agent environment, here with the fake evaluator (fake_evaluator.cc), which
// verifies generated kernels at a time their source decides. No client runs
// but the one that reports the misses, and it is gone before the tuning.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <zmq.hpp>

#include "kjit/cache/kernel_cache.h"
#include "kjit/ipc/client.h"
#include "kjit/runtime/op_key.h"
#include "kjitd_harness.h"

namespace kjit {
namespace {

using testing::KjitdHarness;
using testing::ScopedEnv;
using Clock = std::chrono::steady_clock;

// Softmax keys: the family has a design space, an expert default, and a generator.
std::string SoftmaxKey(int64_t rows, int64_t cols) {
  return OpKey::Single("aten::_softmax", "", {TensorDesc::Contiguous(DType::kFloat32, {rows, cols}), int64_t{-1}, false},
                       90)
      .Encode();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}


// kjitd with the fake evaluator on one GPU and the real tuner: no first policy is trained (it would take
// minutes of CPU), so the expert default and random points propose, as they do before a policy exists.
std::vector<std::string> TunerFlags(const std::string& first_trials, const std::string& trials,
                                    const std::string& more_tuner_args = "") {
  return {"--evaluator", KJIT_FAKE_EVALUATOR, "--devices", "0", "--when", "always", "--tuner", KJIT_TUNER,
          "--tune-first-trials", first_trials, "--tune-trials", trials, "--watch-interval-ms", "50",
          "--tuner-args", "--no-train --learn-every 0 --wait-s 1 " + more_tuner_args};
}

void ReportMiss(const KjitdHarness& h, const std::string& key, uint64_t calls, double us) {
  ipc::ClientOptions o;
  o.endpoint = h.endpoint();
  o.request_timeout = std::chrono::milliseconds(10000);
  ipc::Client c(o);
  auto ack = c.Call(ipc::ReportMiss{key, calls, us});
  ASSERT_TRUE(ack.ok()) << ack.status().ToString();
}

Result<std::unique_ptr<cache::KernelCache>> OpenCache(const KjitdHarness& h) {
  cache::OpenOptions o;
  o.path = h.cache_path();
  o.read_only = true;
  return cache::KernelCache::Open(o);
}

// The key's task, once `done` holds for it, or an error after `seconds`.
Result<cache::Task> WaitForTask(const KjitdHarness& h, const std::string& key,
                                const std::function<bool(const cache::Task&)>& done, int seconds = 60) {
  const Hash128 hash = OpKey::Decode(key)->Hash();
  const auto deadline = Clock::now() + std::chrono::seconds(seconds);
  std::string last = "no task";
  while (Clock::now() < deadline) {
    auto cache = OpenCache(h);
    if (cache.ok()) {
      auto tasks = (*cache)->tasks().ListTasks();
      if (tasks.ok()) {
        for (const auto& t : *tasks) {
          if (!(t.key_hash == hash)) continue;
          last = t.state + " (" + t.detail + ")";
          if (done(t)) return t;
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Status(StatusCode::kUnavailable, "the task did not get there within " + std::to_string(seconds) +
                                              " s; last: " + last + "\nkjitd's log:\n" + ReadFile(h.log_path()));
}

TEST(KjitdTuner, AMissBecomesAStoredAnnouncedKernelWithNoOtherCommand) {
  KjitdHarness h(KJIT_KJITD, TunerFlags("2", "2"));
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::linger, 0);
  sub.set(zmq::sockopt::rcvtimeo, 60000);
  sub.set(zmq::sockopt::subscribe, "sm_90/");
  sub.connect(h.announce_endpoint());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let the subscription reach kjitd

  const std::string key = SoftmaxKey(64, 4096);
  ReportMiss(h, key, 100, 2.5);  // the client is gone from here on

  zmq::message_t topic, payload;
  ASSERT_TRUE(sub.recv(topic)) << "no announcement within 60 s\n" << ReadFile(h.log_path());
  ASSERT_TRUE(sub.recv(payload));
  EXPECT_EQ(topic.to_string(), "sm_90/" + OpKey::Decode(key)->Hash().ToHex());

  // Two rounds: the first (the expert default, then one more), then a search round of two.
  auto task = WaitForTask(h, key, [](const cache::Task& t) { return t.state == "done"; });
  ASSERT_TRUE(task.ok()) << task.status().ToString();
  EXPECT_EQ(task->round, 2);
  EXPECT_EQ(task->trials, 4);
  EXPECT_GE(task->attempts, 2);
  EXPECT_GT(task->best_us, 0);
  EXPECT_LT(task->best_us, task->baseline_us);
  EXPECT_GT(task->record_id, 0);
  EXPECT_DOUBLE_EQ(task->baseline_us, 2.0);  // the fake's PyTorch time

  auto cache = OpenCache(h);
  ASSERT_TRUE(cache.ok());
  auto measurements = (*cache)->measurements().ListMeasurements("softmax");
  ASSERT_TRUE(measurements.ok());
  ASSERT_EQ(measurements->size(), 4u);
  // The key's first trial is the family's expert default, so its first kernel comes from its first trial.
  EXPECT_EQ((*measurements)[0].design.policy_version, "expert-default");
  EXPECT_EQ((*measurements)[0].outcome, "verified");
  // No point twice, although the search round started afresh.
  std::set<std::map<std::string, std::string>> points;
  for (const auto& m : *measurements) points.insert(m.design.knobs);
  EXPECT_EQ(points.size(), 4u);
  // The best is the record the task names, and it carries who proposed it.
  auto best = (*cache)->Get(task->record_id);
  ASSERT_TRUE(best.ok());
  EXPECT_EQ(best->status, cache::RecordStatus::kVerified);
  EXPECT_EQ(best->design.policy_version, task->policy_version);
  EXPECT_DOUBLE_EQ(best->timing.median_us, task->best_us);

  const std::string log = ReadFile(h.log_path());
  EXPECT_NE(log.find("\"event\":\"tuner_trial\""), std::string::npos) << log;
  EXPECT_NE(log.find("\"event\":\"tuner_round\""), std::string::npos) << log;
}

// A chain key (what the shim reports under KJIT_FUSION=record: minGPT's GELU, x read once through kjit::input)
// is tuned like any key: the elementwise_chain family's expert default first, a stored kernel, its op a chain's.
TEST(KjitdTuner, AChainKeysMissIsTunedLikeAnyKey) {
  KjitdHarness h(KJIT_KJITD, TunerFlags("2", "2"));
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  const TensorDesc x = TensorDesc::Contiguous(DType::kFloat32, {8192, 3072});
  const std::string key =
      OpKey::Chain({OpCall{std::string(kChainInputOp), "", {x}},
                    OpCall{"aten::mul", "Tensor", {ValueRef{0, 0}, 0.5}},
                    OpCall{"aten::pow", "Tensor_Scalar", {ValueRef{0, 0}, 3.0}},
                    OpCall{"aten::mul", "Tensor", {ValueRef{2, 0}, 0.044715}},
                    OpCall{"aten::add", "Tensor", {ValueRef{0, 0}, ValueRef{3, 0}, int64_t{1}}},
                    OpCall{"aten::mul", "Tensor", {ValueRef{4, 0}, 0.7978845608028654}},
                    OpCall{"aten::tanh", "", {ValueRef{5, 0}}},
                    OpCall{"aten::add", "Tensor", {ValueRef{6, 0}, 1.0, int64_t{1}}},
                    OpCall{"aten::mul", "Tensor", {ValueRef{1, 0}, ValueRef{7, 0}}},
                    OpCall{std::string(kChainLiveOp), "", {IntList{8}}}},
                   90)
          .Encode();
  ReportMiss(h, key, 3, 0.0);
  auto task = WaitForTask(h, key, [](const cache::Task& t) { return t.state == "done"; });
  ASSERT_TRUE(task.ok()) << task.status().ToString();
  EXPECT_GT(task->record_id, 0);
  EXPECT_LT(task->best_us, task->baseline_us);
  auto cache = OpenCache(h);
  ASSERT_TRUE(cache.ok());
  auto measurements = (*cache)->measurements().ListMeasurements("elementwise_chain");
  ASSERT_TRUE(measurements.ok());
  ASSERT_FALSE(measurements->empty());
  EXPECT_EQ((*measurements)[0].design.policy_version, "expert-default");
  auto best = (*cache)->Get(task->record_id);
  ASSERT_TRUE(best.ok());
  EXPECT_EQ(best->op, "chain(mul,pow,mul,add,mul,tanh,add,mul)");
}

TEST(KjitdTuner, UnfitIsMarkedOnceAndAWaitingKeyDoesNotStallTheQueue) {
  const std::string unfit = SoftmaxKey(8192, 1 << 20), waiting = SoftmaxKey(128, 8192), plain = SoftmaxKey(64, 1024);
  ScopedEnv env({{"FAKE_EVALUATOR_UNFIT_KEYS", "f32[8192,1048576]"}, {"FAKE_EVALUATOR_WAIT_KEYS", "f32[128,8192]"}});
  KjitdHarness h(KJIT_KJITD, TunerFlags("1", "0"));
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  // The waiting key first in the queue (the largest expected gain), then the unfit one, then the plain one.
  ReportMiss(h, waiting, 1000, 100.0);
  ReportMiss(h, unfit, 1000, 50.0);
  ReportMiss(h, plain, 10, 1.0);

  auto plain_done = WaitForTask(h, plain, [](const cache::Task& t) { return t.state == "done"; });
  ASSERT_TRUE(plain_done.ok()) << plain_done.status().ToString();
  EXPECT_GT(plain_done->record_id, 0);
  auto cache = OpenCache(h);
  ASSERT_TRUE(cache.ok());
  // By then the unfit key is marked, after one claim, with the evaluator's reason.
  auto tasks = (*cache)->tasks().ListTasks();
  ASSERT_TRUE(tasks.ok());
  for (const auto& t : *tasks) {
    if (t.key_bytes != unfit) continue;
    EXPECT_EQ(t.state, "unfit");
    EXPECT_EQ(t.attempts, 1);
    EXPECT_NE(t.detail.find("unfit: "), std::string::npos) << t.detail;
  }
  // The waiting key was handed back, not waited on, and gets its kernel once the memory is there.
  auto waited = WaitForTask(h, waiting, [](const cache::Task& t) { return t.state == "done"; });
  ASSERT_TRUE(waited.ok()) << waited.status().ToString();
  EXPECT_GE(waited->attempts, 2);
  EXPECT_GT(waited->record_id, 0);
  EXPECT_GE(waited->updated_unix_ms, plain_done->updated_unix_ms);

  // More misses of the unfit key do not bring it back within kRetuneCallsFactor-fold calls, nor ever.
  ReportMiss(h, unfit, 100000, 50.0);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto later = OpenCache(h);
  ASSERT_TRUE(later.ok());
  auto unfit_tasks = (*later)->tasks().ListTasks("unfit");
  ASSERT_TRUE(unfit_tasks.ok());
  ASSERT_EQ(unfit_tasks->size(), 1u);
  for (const auto& t : *unfit_tasks) {
    if (t.key_bytes == unfit) {
      EXPECT_EQ(t.state, "unfit");
      EXPECT_EQ(t.attempts, 1);
    }
  }
}

TEST(KjitdTuner, ARestartedKjitdResumesTheQueue) {
  std::vector<std::string> keys;
  for (int i = 0; i < 8; ++i) keys.push_back(SoftmaxKey(64, 1024 << i));
  KjitdHarness h(KJIT_KJITD, TunerFlags("1", "0"));
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  for (const auto& k : keys) ReportMiss(h, k, 10, 1.0);
  // Killed as soon as the first key is done: the others are queued, or held by the tuner it started (which
  // ends with it, its claims left behind).
  auto first = WaitForTask(h, keys[0], [](const cache::Task& t) { return t.state == "done"; });
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  h.Kill(SIGKILL);
  int left = 0;
  {
    auto cache = OpenCache(h);
    ASSERT_TRUE(cache.ok());
    auto tasks = (*cache)->tasks().ListTasks();
    ASSERT_TRUE(tasks.ok());
    for (const auto& t : *tasks) left += t.state != "done";
  }
  EXPECT_GT(left, 0) << "every key was done before the kill: the restart resumed nothing";
  // A second kjitd on the same files: its tuner takes every key that is left, held ones included, at once.
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  for (const auto& k : keys) {
    auto task = WaitForTask(h, k, [](const cache::Task& t) { return t.state == "done"; }, 30);
    ASSERT_TRUE(task.ok()) << task.status().ToString();
    EXPECT_GT(task->record_id, 0);
  }
}

TEST(KjitdTuner, TunerOffLeavesTheQueueAlone) {
  KjitdHarness h(KJIT_KJITD, {"--evaluator", KJIT_FAKE_EVALUATOR, "--devices", "0", "--when", "always"});
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  ReportMiss(h, SoftmaxKey(64, 2048), 10, 1.0);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto cache = OpenCache(h);
  ASSERT_TRUE(cache.ok());
  auto queued = (*cache)->tasks().ListTasks("queued");
  ASSERT_TRUE(queued.ok());
  EXPECT_EQ(queued->size(), 1u);
  EXPECT_NE(ReadFile(h.log_path()).find("tuner = off"), std::string::npos);
}

TEST(KjitdTuner, AMissingTunerProgramIsSaidOnceAndKjitdServesOn) {
  auto flags = TunerFlags("1", "0");
  for (auto& f : flags) {
    if (f == KJIT_TUNER) f = "/nonexistent/kjit-policy";
  }
  KjitdHarness h(KJIT_KJITD, flags);
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  ReportMiss(h, SoftmaxKey(64, 2048), 10, 1.0);
  const std::string log = ReadFile(h.log_path());
  EXPECT_NE(log.find("no tuner: /nonexistent/kjit-policy"), std::string::npos) << log;
}

}  // namespace
}  // namespace kjit
