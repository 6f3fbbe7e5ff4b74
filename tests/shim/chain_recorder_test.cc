// ChainRecorder (shim/chain_recorder.h): chains found by dataflow from a thread's recorded calls, their keys, and
// how often a program repeats them. The calls are minGPT's tanh-GELU as the CUDA key sees it, with tensor ids
// standing in for TensorImpls.
#include "chain_recorder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>

namespace kjit::shim {
namespace {

const TensorDesc kX = TensorDesc::Contiguous(DType::kFloat32, {64, 3072});

CallRecord Rec(std::string op, std::string overload, std::vector<Arg> args, std::vector<uint64_t> inputs,
               uint64_t output) {
  return CallRecord{OpCall{std::move(op), std::move(overload), std::move(args)}, std::move(inputs), output, 90, 0, nullptr};
}

// One GELU of input id `x`, its intermediates and result ids from `base` on: 0.5 * x * (1 + tanh(k * (x + 0.044715
// * x^3))).
std::vector<CallRecord> Gelu(uint64_t x, uint64_t base) {
  const double k = std::sqrt(2.0 / M_PI);
  return {
      Rec("aten::mul", "Tensor", {kX, 0.5}, {x, 0}, base + 0),
      Rec("aten::pow", "Tensor_Scalar", {kX, 3.0}, {x, 0}, base + 1),
      Rec("aten::mul", "Tensor", {kX, 0.044715}, {base + 1, 0}, base + 2),
      Rec("aten::add", "Tensor", {kX, kX, int64_t{1}}, {x, base + 2, 0}, base + 3),
      Rec("aten::mul", "Tensor", {kX, k}, {base + 3, 0}, base + 4),
      Rec("aten::tanh", "", {kX}, {base + 4}, base + 5),
      Rec("aten::add", "Tensor", {kX, 1.0, int64_t{1}}, {base + 5, 0, 0}, base + 6),
      Rec("aten::mul", "Tensor", {kX, kX}, {base + 0, base + 6}, base + 7),
  };
}

TEST(ChainRecorder, FindsAChainByItsDataflowAndKeysItWithValueRefs) {
  ChainRecorder recorder;
  for (CallRecord& r : Gelu(1, 100)) recorder.Add(std::move(r));
  recorder.Flush();
  const auto chains = recorder.Chains();
  ASSERT_EQ(chains.size(), 1u);
  const OpKey& key = chains[0].key;
  // The first multiply joins the rest only through the last one: one chain of eight calls, after a kjit::input
  // for x (used by mul, pow and add) and before kjit::live.
  ASSERT_EQ(key.calls.size(), 10u);
  EXPECT_EQ(key.OpName(), "chain(mul,pow,mul,add,mul,tanh,add,mul)");
  EXPECT_EQ(key.calls[0].op, "kjit::input");
  EXPECT_EQ(key.calls[0].args[0], Arg(kX));
  EXPECT_EQ(key.calls[1].args[0], Arg(ValueRef{0, 0}));
  EXPECT_EQ(key.calls[2].args[0], Arg(ValueRef{0, 0}));
  EXPECT_EQ(key.calls[3].args[0], Arg(ValueRef{2, 0}));
  EXPECT_EQ(key.calls[4].args[0], Arg(ValueRef{0, 0}));  // x itself, through its kjit::input
  EXPECT_EQ(key.calls[4].args[1], Arg(ValueRef{3, 0}));
  EXPECT_EQ(key.calls[8].args[0], Arg(ValueRef{1, 0}));
  EXPECT_EQ(key.calls[8].args[1], Arg(ValueRef{7, 0}));
  EXPECT_EQ(key.calls[9].op, "kjit::live");
  EXPECT_EQ(key.calls[9].args[0], Arg(IntList{8}));  // only the result is read by no member
  EXPECT_EQ(chains[0].count, 1u);
}

TEST(ChainRecorder, CountsRepeatsAndReportsEachChainOnce) {
  ChainRecorder recorder;
  for (uint64_t layer = 0; layer < 5; ++layer) {
    for (CallRecord& r : Gelu(10 + layer, 1000 * (layer + 1))) recorder.Add(std::move(r));
  }
  // The same chain on new tensors each time: one key, five runs (all but the last closed by the window).
  recorder.Flush();
  EXPECT_TRUE(recorder.TakeRepeated(6).empty());
  auto repeated = recorder.TakeRepeated(3);
  ASSERT_EQ(repeated.size(), 1u);
  EXPECT_EQ(repeated[0].count, 5u);
  EXPECT_TRUE(recorder.TakeRepeated(1).empty()) << "a chain is reported once";
  EXPECT_EQ(recorder.records(), 40u);
}

// The gate records a thread's first calls, then one burst a period; the end of a burst is said once.
TEST(RecordingGate, LearnsThenRecordsABurstEachPeriod) {
  RecordingGate gate(/*learn=*/10, /*burst=*/4, /*period=*/100);
  std::vector<uint64_t> recorded, ended;
  for (uint64_t n = 0; n < 350; ++n) {
    bool burst_ended = false;
    if (gate.Next(&burst_ended)) recorded.push_back(n);
    if (burst_ended) ended.push_back(n);
  }
  std::vector<uint64_t> want;
  for (uint64_t n = 0; n < 10; ++n) want.push_back(n);
  for (uint64_t start : {100u, 200u, 300u}) {
    for (uint64_t n = start; n < start + 4; ++n) want.push_back(n);
  }
  EXPECT_EQ(recorded, want);
  EXPECT_EQ(ended, (std::vector<uint64_t>{10, 104, 204, 304}));
}

// A thread's chains: recorded calls of a repeated chain are reported once it was seen `report_after` times, at
// the recorder's next check; the gate's gaps drop the open chains, so a chain never spans a gap.
TEST(ThreadChains, ReportsARepeatedChainOnceAtACheck) {
  ThreadChains chains(RecordingGate(/*learn=*/1000, /*burst=*/0, /*period=*/1000), /*report_after=*/3,
                      /*check_every=*/8);
  std::vector<RecordedChain> reported;
  for (uint64_t layer = 0; layer < 6; ++layer) {
    for (CallRecord& r : Gelu(10 + layer, 1000 * (layer + 1))) {
      ASSERT_TRUE(chains.ShouldRecord());
      for (RecordedChain& c : chains.Add(std::move(r))) reported.push_back(std::move(c));
    }
  }
  // Chains close `window` (16) records after their last call: by the 48th record, three had closed.
  ASSERT_EQ(reported.size(), 1u);
  EXPECT_GE(reported[0].count, 3u);
  EXPECT_EQ(reported[0].key.OpName(), "chain(mul,pow,mul,add,mul,tanh,add,mul)");
  // Past `learn`, nothing is recorded; the first call after the burst dropped the chains still open (the last
  // two GELUs: a chain open at a burst's end may lack members), uncounted.
  for (int i = 0; i < 1000 - 48; ++i) (void)chains.ShouldRecord();
  EXPECT_FALSE(chains.ShouldRecord());
  EXPECT_EQ(chains.recorder().Chains().size(), 1u);
  EXPECT_EQ(chains.recorder().Chains()[0].count, 4u);
}

// Sampling's edges cut chains: a program whose fusible calls are not a multiple of the GELU's eight between
// bursts (here bursts of 40 calls every 100, so each later burst starts and ends inside a GELU) has only whole
// GELUs counted and reported, never the pieces at a burst's start or end.
TEST(ThreadChains, ChainsCutByABurstsEdgesAreNotCounted) {
  ThreadChains chains(RecordingGate(/*learn=*/0, /*burst=*/40, /*period=*/100), /*report_after=*/1,
                      /*check_every=*/1);
  std::vector<std::string> reported;
  for (uint64_t g = 0; g < 125; ++g) {
    for (CallRecord& r : Gelu(10, 1000 * (g + 1))) {
      if (!chains.ShouldRecord()) continue;
      for (RecordedChain& c : chains.Add(std::move(r))) reported.push_back(c.key.OpName());
    }
  }
  chains.ShouldRecord();
  ASSERT_FALSE(reported.empty());
  for (const std::string& name : reported) EXPECT_EQ(name, "chain(mul,pow,mul,add,mul,tanh,add,mul)");
  for (const RecordedChain& c : chains.recorder().Chains()) {
    EXPECT_EQ(c.key.OpName(), "chain(mul,pow,mul,add,mul,tanh,add,mul)") << c.key.ToString();
  }
}

TEST(ChainRecorder, CountsAtMostMaxChainsDistinctChains) {
  ChainRecorder recorder(/*window=*/16, /*max_chains=*/2);
  for (uint64_t i = 0; i < 4; ++i) {
    // Four distinct two-call chains (tanh then exp, neg, sqrt or rsqrt).
    const char* second[] = {"aten::exp", "aten::neg", "aten::sqrt", "aten::rsqrt"};
    recorder.Add(Rec("aten::tanh", "", {kX}, {1}, 100 + 2 * i));
    recorder.Add(Rec(second[i], "", {kX}, {100 + 2 * i}, 101 + 2 * i));
    recorder.Flush();
  }
  EXPECT_EQ(recorder.Chains().size(), 2u);
}

// A record's pins (the adapter's weak references, which keep its tensors' ids unique) are held while its chain is
// open and let go when it closes, so the recorder keeps no tensor's memory past its window.
TEST(ChainRecorder, HoldsARecordsPinsWhileItsChainIsOpen) {
  ChainRecorder recorder(/*window=*/4);
  auto pin = std::make_shared<int>(0);
  const std::weak_ptr<int> watch = pin;
  CallRecord first = Rec("aten::tanh", "", {kX}, {1}, 100);
  first.pins = std::move(pin);
  recorder.Add(std::move(first));
  recorder.Add(Rec("aten::exp", "", {kX}, {100}, 101));
  EXPECT_FALSE(watch.expired()) << "let go while the chain is open: its ids could be reused";
  for (uint64_t i = 0; i < 4; ++i) recorder.Add(Rec("aten::neg", "", {kX}, {200 + i}, 300 + i));
  EXPECT_TRUE(watch.expired()) << "held after the chain closed";
  EXPECT_EQ(recorder.Chains().size(), 1u);
}

TEST(ChainRecorder, UnrelatedCallsAndSingleCallsMakeNoChain) {
  ChainRecorder recorder(4);
  // Calls on separate tensors, each read by nothing recorded: no chain.
  for (uint64_t i = 0; i < 10; ++i) recorder.Add(Rec("aten::tanh", "", {kX}, {i + 1}, 100 + i));
  recorder.Flush();
  EXPECT_TRUE(recorder.Chains().empty());
}

TEST(ChainRecorder, AProducerOutsideTheWindowIsAnInput) {
  ChainRecorder recorder(2);
  recorder.Add(Rec("aten::exp", "", {kX}, {1}, 50));
  // Two unrelated calls pass: the exp's chain closes (alone, so no chain).
  recorder.Add(Rec("aten::tanh", "", {kX}, {2}, 60));
  recorder.Add(Rec("aten::tanh", "", {kX}, {3}, 70));
  recorder.Add(Rec("aten::neg", "", {kX}, {50}, 80));
  recorder.Add(Rec("aten::abs", "", {kX}, {80}, 90));
  recorder.Flush();
  const auto chains = recorder.Chains();
  ASSERT_EQ(chains.size(), 1u);
  EXPECT_EQ(chains[0].key.OpName(), "chain(neg,abs)");
  EXPECT_EQ(chains[0].key.calls[0].args[0], Arg(kX));
}

TEST(ChainRecorder, TwoBranchesReadByNothingAreBothLive) {
  ChainRecorder recorder;
  recorder.Add(Rec("aten::exp", "", {kX}, {1}, 10));
  recorder.Add(Rec("aten::neg", "", {kX}, {10}, 11));
  recorder.Add(Rec("aten::abs", "", {kX}, {10}, 12));
  recorder.Flush();
  const auto chains = recorder.Chains();
  ASSERT_EQ(chains.size(), 1u);
  EXPECT_EQ(chains[0].key.calls.back().args[0], Arg(IntList{1, 2}));
}

TEST(ChainRecorder, OnlyTensorsUsedTwiceGetAKjitInput) {
  ChainRecorder recorder;
  const TensorDesc y = TensorDesc::Contiguous(DType::kBFloat16, {64, 3072});
  // SiLU as x * sigmoid(x) on x (id 1, used twice), then a multiply by y (id 2, used once).
  recorder.Add(Rec("aten::sigmoid", "", {y}, {1}, 10));
  recorder.Add(Rec("aten::mul", "Tensor", {y, y}, {1, 10}, 11));
  recorder.Add(Rec("aten::mul", "Tensor", {y, y}, {11, 2}, 12));
  recorder.Flush();
  const auto chains = recorder.Chains();
  ASSERT_EQ(chains.size(), 1u);
  const OpKey& key = chains[0].key;
  ASSERT_EQ(key.calls.size(), 5u);
  EXPECT_EQ(key.calls[0].op, "kjit::input");
  EXPECT_EQ(key.calls[1].args[0], Arg(ValueRef{0, 0}));
  EXPECT_EQ(key.calls[2].args[0], Arg(ValueRef{0, 0}));
  EXPECT_EQ(key.calls[2].args[1], Arg(ValueRef{1, 0}));
  EXPECT_EQ(key.calls[3].args[0], Arg(ValueRef{2, 0}));
  EXPECT_EQ(key.calls[3].args[1], Arg(y));  // used once: an argument as it is
  EXPECT_EQ(key.calls[4].args[0], Arg(IntList{3}));
  EXPECT_EQ(key.OpName(), "chain(sigmoid,mul,mul)");
}

TEST(ChainRecorder, InterleavedChainsStaySeparate) {
  ChainRecorder recorder;
  // Two independent chains whose calls alternate (two streams of work in one thread's order).
  recorder.Add(Rec("aten::exp", "", {kX}, {1}, 10));
  recorder.Add(Rec("aten::tanh", "", {kX}, {2}, 20));
  recorder.Add(Rec("aten::neg", "", {kX}, {10}, 11));
  recorder.Add(Rec("aten::abs", "", {kX}, {20}, 21));
  recorder.Flush();
  const auto chains = recorder.Chains();
  ASSERT_EQ(chains.size(), 2u);
  EXPECT_EQ(chains[0].key.OpName(), "chain(exp,neg)");
  EXPECT_EQ(chains[1].key.OpName(), "chain(tanh,abs)");
}

}  // namespace
}  // namespace kjit::shim
