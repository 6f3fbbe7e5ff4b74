// ChainPlan and ChainMatch (shim/chain_server.h): a thread's calls checked one by one against a chain key, as the
// adapter checks them under KJIT_FUSION=serve before it defers them; and which fused kernels may stand in for a
// complete chain.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "chain_server.h"

namespace kjit::shim {
namespace {

const TensorDesc kX = TensorDesc::Contiguous(DType::kFloat32, {64, 3072});
const double kK = std::sqrt(2.0 / M_PI);

// minGPT's GELU as the recorder keys it: x once (kjit::input, call 0), eight calls, the last one written.
OpKey GeluKey() {
  return OpKey::Chain({OpCall{std::string(kChainInputOp), "", {kX}},
                       OpCall{"aten::mul", "Tensor", {ValueRef{0, 0}, 0.5}},
                       OpCall{"aten::pow", "Tensor_Scalar", {ValueRef{0, 0}, 3.0}},
                       OpCall{"aten::mul", "Tensor", {ValueRef{2, 0}, 0.044715}},
                       OpCall{"aten::add", "Tensor", {ValueRef{0, 0}, ValueRef{3, 0}, int64_t{1}}},
                       OpCall{"aten::mul", "Tensor", {ValueRef{4, 0}, kK}},
                       OpCall{"aten::tanh", "", {ValueRef{5, 0}}},
                       OpCall{"aten::add", "Tensor", {ValueRef{6, 0}, 1.0, int64_t{1}}},
                       OpCall{"aten::mul", "Tensor", {ValueRef{1, 0}, ValueRef{7, 0}}},
                       OpCall{std::string(kChainLiveOp), "", {IntList{8}}}},
                      90);
}

struct Call {
  OpCall call;
  std::vector<uint64_t> ids;
};

// The GELU's calls as a thread makes them on tensor id `x`, its outputs ids base + member index.
std::vector<Call> GeluCalls(uint64_t x, uint64_t base) {
  return {
      {OpCall{"aten::mul", "Tensor", {kX, 0.5}}, {x, 0}},
      {OpCall{"aten::pow", "Tensor_Scalar", {kX, 3.0}}, {x, 0}},
      {OpCall{"aten::mul", "Tensor", {kX, 0.044715}}, {base + 1, 0}},
      {OpCall{"aten::add", "Tensor", {kX, kX, int64_t{1}}}, {x, base + 2, 0}},
      {OpCall{"aten::mul", "Tensor", {kX, kK}}, {base + 3, 0}},
      {OpCall{"aten::tanh", "", {kX}}, {base + 4}},
      {OpCall{"aten::add", "Tensor", {kX, 1.0, int64_t{1}}}, {base + 5, 0, 0}},
      {OpCall{"aten::mul", "Tensor", {kX, kX}}, {base + 0, base + 6}},
  };
}

TEST(ChainPlan, MembersAreTheCallsAndWrittenTheLiveOnes) {
  auto plan = ChainPlan::Of(GeluKey());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->members().size(), 8u);
  EXPECT_EQ(plan->members().front(), 1u);  // call 0 is the kjit::input
  EXPECT_EQ(plan->written(), std::vector<uint32_t>{7});
  EXPECT_EQ(plan->MemberOf(0), -1);
  EXPECT_EQ(plan->MemberOf(8), 7);
  EXPECT_EQ(plan->member(5).op, "aten::tanh");
  // Refused: one call, a forward reference, a key ChainLiveOf refuses.
  EXPECT_FALSE(ChainPlan::Of(OpKey::Single("aten::tanh", "", {kX}, 90)).ok());
  EXPECT_FALSE(ChainPlan::Of(OpKey::Chain({OpCall{"aten::tanh", "", {ValueRef{1, 0}}}, OpCall{"aten::neg", "", {kX}}}, 90)).ok());
  EXPECT_FALSE(ChainPlan::Of(OpKey::Chain({OpCall{std::string(kChainLiveOp), "", {IntList{0}}}}, 90)).ok());
}

TEST(ChainMatch, TheChainsCallsMatchInOrder) {
  auto plan = ChainPlan::Of(GeluKey());
  ASSERT_TRUE(plan.ok());
  ChainMatch match(*plan);
  const std::vector<Call> calls = GeluCalls(7, 100);
  for (size_t i = 0; i < calls.size(); ++i) {
    ASSERT_TRUE(match.Next(calls[i].call, calls[i].ids)) << "member " << i;
    EXPECT_FALSE(match.Next(calls[i].call, calls[i].ids)) << "no call before the last one's output is bound";
    match.Bind(100 + i);
  }
  EXPECT_TRUE(match.complete());
  EXPECT_FALSE(match.Next(calls[0].call, calls[0].ids)) << "a complete chain takes no more calls";
}

TEST(ChainMatch, AnythingElseIsNoMatch) {
  auto plan = ChainPlan::Of(GeluKey());
  ASSERT_TRUE(plan.ok());
  const std::vector<Call> calls = GeluCalls(7, 100);
  // Runs the first `n` calls, then offers `other`: true if it matched.
  auto after = [&](size_t n, const Call& other) {
    ChainMatch match(*plan);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_TRUE(match.Next(calls[i].call, calls[i].ids));
      match.Bind(100 + i);
    }
    return match.Next(other.call, other.ids);
  };
  EXPECT_TRUE(after(0, calls[0]));
  // Another op, overload, scalar or shape.
  EXPECT_FALSE(after(0, {OpCall{"aten::div", "Tensor", {kX, 0.5}}, {7, 0}}));
  EXPECT_FALSE(after(0, {OpCall{"aten::mul", "Scalar", {kX, 0.5}}, {7, 0}}));
  EXPECT_FALSE(after(0, {OpCall{"aten::mul", "Tensor", {kX, 0.25}}, {7, 0}}));
  EXPECT_FALSE(after(0, {OpCall{"aten::mul", "Tensor", {TensorDesc::Contiguous(DType::kFloat32, {64, 3071}), 0.5}}, {7, 0}}));
  // x is one tensor: pow of another tensor than mul's is not the chain.
  EXPECT_FALSE(after(1, {OpCall{"aten::pow", "Tensor_Scalar", {kX, 3.0}}, {8, 0}}));
  // A ValueRef must be the window's own output: the cube (id 101), not another tensor of its description.
  EXPECT_FALSE(after(2, {OpCall{"aten::mul", "Tensor", {kX, 0.044715}}, {55, 0}}));
  // A tensor from outside must not be one of the chain's values.
  auto plain = ChainPlan::Of(OpKey::Chain({OpCall{"aten::tanh", "", {kX}}, OpCall{"aten::mul", "Tensor", {ValueRef{0, 0}, kX}}}, 90));
  ASSERT_TRUE(plain.ok());
  ChainMatch m(*plain);
  ASSERT_TRUE(m.Next(OpCall{"aten::tanh", "", {kX}}, std::vector<uint64_t>{7}));
  m.Bind(200);
  EXPECT_FALSE(m.Next(OpCall{"aten::mul", "Tensor", {kX, kX}}, std::vector<uint64_t>{200, 200}));
  EXPECT_TRUE(m.Next(OpCall{"aten::mul", "Tensor", {kX, kX}}, std::vector<uint64_t>{200, 9}));
}

// A failed call leaves no binding behind: the kjit::input a mismatched call bound is free again.
TEST(ChainMatch, AMismatchUndoesItsBindings) {
  auto plan = ChainPlan::Of(GeluKey());
  ASSERT_TRUE(plan.ok());
  ChainMatch match(*plan);
  EXPECT_FALSE(match.Next(OpCall{"aten::mul", "Tensor", {kX, 0.25}}, std::vector<uint64_t>{7, 0}));
  const std::vector<Call> calls = GeluCalls(9, 100);
  EXPECT_TRUE(match.Next(calls[0].call, calls[0].ids)) << "x is 9 now, not the 7 of the failed call";
}

TEST(FusedKernelCovers, OnlyWrittenOutputsMayBeHeldOutside) {
  auto plan = ChainPlan::Of(GeluKey());
  ASSERT_TRUE(plan.ok());
  // The window holds each output once, and the ones later calls read once more per read.
  const std::vector<long> window = {2, 2, 2, 2, 2, 2, 2, 1};
  std::vector<long> holders = window;
  holders[7] += 1;  // Python holds the result
  EXPECT_TRUE(FusedKernelCovers(*plan, holders, window));
  holders[0] += 1;  // and `0.5 * x` in a variable: the kernel does not write it
  EXPECT_FALSE(FusedKernelCovers(*plan, holders, window));
  EXPECT_FALSE(FusedKernelCovers(*plan, std::vector<long>{1}, window)) << "sizes must agree";
}

}  // namespace
}  // namespace kjit::shim
