// The kjitd <-> worker channel and the evaluator's statistics, without a GPU.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>

#include "kjit/evaluator/evaluator.h"
#include "worker_protocol.h"

namespace kjit::daemon {
namespace {

TEST(WorkerProtocol, EveryMessageRoundTrips) {
  EvaluateRequest e;
  e.id = 7;
  e.key_bytes = std::string("KJK\x01\x00\xff", 6);
  e.candidate.source = "extern \"C\" __global__ void k() {}";
  e.candidate.entry_point = "k";
  e.candidate.options = {"-O3"};
  e.candidate.launch.grid[0] = 132;
  e.candidate.launch.block[0] = 256;
  e.candidate.launch.dynamic_shared_bytes = 1024;
  e.candidate.design = {"softmax", {{"threads", "256"}}, "expert-default"};
  e.memory_cap_bytes = 1ull << 40;
  auto back = DecodeWorkerMessage(EncodeWorkerMessage(e));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const auto& e2 = std::get<EvaluateRequest>(*back);
  EXPECT_EQ(e2.key_bytes, e.key_bytes);
  EXPECT_EQ(e2.candidate.source, e.candidate.source);
  EXPECT_EQ(e2.candidate.launch, e.candidate.launch);
  EXPECT_EQ(e2.candidate.design, e.candidate.design);
  EXPECT_EQ(e2.memory_cap_bytes, e.memory_cap_bytes);
  // No workspace: the launch's JSON is what it was before workspaces (kernel ABI v1).
  EXPECT_EQ(EncodeWorkerMessage(e).find("workspace_bytes"), std::string::npos);
  EXPECT_EQ(e2.candidate.launch.workspace_bytes, 0u);
  e.candidate.launch.workspace_bytes = (uint64_t{1} << 32) + 8;
  back = DecodeWorkerMessage(EncodeWorkerMessage(e));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(std::get<EvaluateRequest>(*back).candidate.launch, e.candidate.launch);
  EXPECT_TRUE(std::get<EvaluateRequest>(*back).compile_ahead.empty());
  EXPECT_EQ(EncodeWorkerMessage(e).find("compile_ahead"), std::string::npos);  // as an older kjitd sends it
  e.compile_ahead = {{"extern \"C\" __global__ void a() {}", {"-O3", "-DX=1"}}, {"// b", {}}};
  back = DecodeWorkerMessage(EncodeWorkerMessage(e));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(std::get<EvaluateRequest>(*back).compile_ahead, e.compile_ahead);

  Verdict v;
  v.id = 9;
  v.outcome = "wrong_result";
  v.reason = "output 0 differs";
  v.cubin = std::string("\x7f" "ELF\x00\x01", 6);
  v.compile_log = "bad byte \xff here";  // not UTF-8: replaced, never a throw
  v.timing.median_us = 12.5;
  v.verification.seeds = {1, 2, 3};
  v.verification.outputs = {{true, 6, {4, 5}, {5, 1}}, {false, 0, {}, {}}};
  v.retry_later = true;
  back = DecodeWorkerMessage(EncodeWorkerMessage(v));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const auto& v2 = std::get<Verdict>(*back);
  EXPECT_EQ(v2.cubin, v.cubin);
  EXPECT_EQ(v2.outcome, v.outcome);
  EXPECT_DOUBLE_EQ(v2.timing.median_us, 12.5);
  EXPECT_EQ(v2.verification.seeds, v.verification.seeds);
  EXPECT_EQ(v2.verification.outputs, v.verification.outputs);
  EXPECT_TRUE(v2.retry_later);

  for (const WorkerMessage& m : std::vector<WorkerMessage>{Hello{}, Unavailable{"no GPU"}, BaselineRequest{1, "k", 0},
                                                            BaselineResult{}, Progress{3, "verify", 2000}, Exit{}}) {
    auto r = DecodeWorkerMessage(EncodeWorkerMessage(m));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->index(), m.index());
  }
}

// `unfit` (a working set that can never fit the GPU) travels in baseline
// results and verdicts, and is optional on the wire: an older worker's
// messages, without it, read as false, and a false one is not written.
TEST(WorkerProtocol, UnfitRoundTripsAndDefaultsToFalse) {
  BaselineResult b;
  b.id = 4;
  b.error_code = "invalid_argument";
  b.error = "unfit: one input set needs 200.0 GiB at the peak (...), and this GPU has 139.8 GiB in all";
  b.unfit = true;
  auto back = DecodeWorkerMessage(EncodeWorkerMessage(b));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(std::get<BaselineResult>(*back).unfit);
  EXPECT_FALSE(std::get<BaselineResult>(*back).backoff);
  EXPECT_EQ(std::get<BaselineResult>(*back).error, b.error);

  Verdict v;
  v.id = 5;
  v.outcome = "resource_backoff";
  v.reason = "unfit: ...";
  v.unfit = true;
  back = DecodeWorkerMessage(EncodeWorkerMessage(v));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(std::get<Verdict>(*back).unfit);
  EXPECT_FALSE(std::get<Verdict>(*back).retry_later);

  // Without the field (as an older worker writes them): false.
  b.unfit = false;
  v.unfit = false;
  const std::string old_baseline = EncodeWorkerMessage(b);
  const std::string old_verdict = EncodeWorkerMessage(v);
  EXPECT_EQ(old_baseline.find("\"unfit\""), std::string::npos) << old_baseline;
  EXPECT_EQ(old_verdict.find("\"unfit\""), std::string::npos) << old_verdict;
  back = DecodeWorkerMessage(old_baseline);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_FALSE(std::get<BaselineResult>(*back).unfit);
  back = DecodeWorkerMessage(old_verdict);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_FALSE(std::get<Verdict>(*back).unfit);

  // Present, it must be a bool.
  std::string wrong = EncodeWorkerMessage(b);
  wrong.insert(wrong.size() - 1, ",\"unfit\":\"yes\"");
  EXPECT_EQ(DecodeWorkerMessage(wrong).status().code(), StatusCode::kInvalidArgument) << wrong;
}

TEST(WorkerProtocol, MalformedMessagesAreErrors) {
  for (const char* bad : {"", "[]", "{}", "{\"type\":\"nope\"}", "{\"type\":\"progress\",\"id\":\"x\"}",
                          "{\"type\":\"evaluate\",\"id\":1,\"key\":\"zz\"}", "{\"type\":"}) {
    EXPECT_EQ(DecodeWorkerMessage(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(WorkerProtocol, FramesSurviveAStreamSocket) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  const std::string big(200000, 'x');
  ASSERT_TRUE(WriteFrame(sv[0], "first").ok());
  ASSERT_TRUE(WriteFrame(sv[0], "").ok());
  std::thread writer([&] { ASSERT_TRUE(WriteFrame(sv[0], big).ok()); });
  auto a = ReadFrameBlocking(sv[1]);
  auto b = ReadFrameBlocking(sv[1]);
  auto c = ReadFrameBlocking(sv[1]);
  writer.join();
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*a, "first");
  EXPECT_EQ(*b, "");
  EXPECT_EQ(*c, big);
  close(sv[0]);
  EXPECT_EQ(ReadFrameBlocking(sv[1]).status().code(), StatusCode::kIOError);
  close(sv[1]);
}

TEST(WorkerProtocol, FrameReaderRefusesOversizedFrames) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  const unsigned char header[4] = {0xff, 0xff, 0xff, 0x7f};
  ASSERT_EQ(write(sv[0], header, 4), 4);
  FrameReader reader;
  EXPECT_EQ(reader.ReadAvailable(sv[1]).code(), StatusCode::kCorruption);
  close(sv[0]);
  close(sv[1]);
}

TEST(EvaluatorStats, SummarizeGivesMedianSpreadAndInterval) {
  std::vector<double> runs;
  for (int i = 1; i <= 101; ++i) runs.push_back(i);
  const TimingStats t = eval::Summarize(runs);
  EXPECT_EQ(t.runs, 101);
  EXPECT_DOUBLE_EQ(t.median_us, 51);
  EXPECT_DOUBLE_EQ(t.spread_us, 50);  // 76 - 26
  EXPECT_DOUBLE_EQ(t.min_us, 1);
  EXPECT_DOUBLE_EQ(t.max_us, 101);
  // Ranks 50 -+ 0.98 sqrt(101) = 40.2 .. 59.8 -> values 41 .. 61.
  EXPECT_NEAR(t.ci_rel, (61.0 - 41.0) / 2 / 51, 1e-12);
  EXPECT_EQ(eval::Summarize({}).runs, 0);
  const TimingStats flat = eval::Summarize(std::vector<double>(30, 4.0));
  EXPECT_DOUBLE_EQ(flat.ci_rel, 0);
  EXPECT_DOUBLE_EQ(flat.spread_us, 0);
}

TEST(EvaluatorStats, SpillBytesFromThePtxasLog) {
  EXPECT_EQ(eval::ParseSpillBytes(""), -1);
  EXPECT_EQ(eval::ParseSpillBytes("ptxas info    : Used 32 registers, 0 bytes spill stores, 0 bytes spill loads"), 0);
  EXPECT_EQ(eval::ParseSpillBytes("ptxas info : 24 bytes spill stores, 24 bytes spill loads\n"
                                  "ptxas info : 8 bytes spill stores, 8 bytes spill loads"),
            32);
}

}  // namespace
}  // namespace kjit::daemon
