// Chain keys as one boxed op (chain.h), on CPU tensors: the external arguments and their types, the chain run
// call by call as eager PyTorch runs it, liveness, wrapped-number scalars, and the malformed chains refused.
#include "kjit/evaluator/chain.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "kjit/evaluator/inputs.h"
#include "kjit/evaluator/memory.h"

namespace kjit::eval {
namespace {

// minGPT's tanh-GELU as the CUDA key sees it: 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))).
OpKey Gelu(const TensorDesc& x, bool with_live) {
  const double k = std::sqrt(2.0 / M_PI);
  std::vector<OpCall> calls = {
      OpCall{"aten::mul", "Tensor", {x, 0.5}},                      // 0: 0.5 * x
      OpCall{"aten::pow", "Tensor_Scalar", {x, 3.0}},               // 1: x^3
      OpCall{"aten::mul", "Tensor", {ValueRef{1, 0}, 0.044715}},    // 2
      OpCall{"aten::add", "Tensor", {x, ValueRef{2, 0}, int64_t{1}}},  // 3
      OpCall{"aten::mul", "Tensor", {ValueRef{3, 0}, k}},           // 4
      OpCall{"aten::tanh", "", {ValueRef{4, 0}}},                   // 5
      OpCall{"aten::add", "Tensor", {ValueRef{5, 0}, 1.0, int64_t{1}}},  // 6
      OpCall{"aten::mul", "Tensor", {ValueRef{0, 0}, ValueRef{6, 0}}},   // 7
  };
  if (with_live) calls.push_back(OpCall{"kjit::live", "", {IntList{5, 7}}});
  return OpKey::Chain(std::move(calls), 90);
}

TEST(Chain, ExternalArgumentsAreEveryArgumentThatIsNoValueRefInCallOrder) {
  const TensorDesc x = TensorDesc::Contiguous(DType::kFloat32, {4, 33});
  auto op = BoxedOpOf(Gelu(x, false));
  ASSERT_TRUE(op.ok()) << op.status().ToString();
  EXPECT_TRUE(op->chain);
  // mul(x, 0.5), pow(x, 3.0), mul(_, 0.044715), add(x, _, 1), mul(_, k), tanh(_), add(_, 1.0, 1), mul(_, _)
  ASSERT_EQ(op->call.args.size(), 10u);
  EXPECT_EQ(op->call.op, std::string(kChainOp));
  EXPECT_EQ(op->schema.arguments().size(), 10u);
  EXPECT_EQ(op->schema.arguments()[0].name(), "c0_self");
  EXPECT_EQ(op->schema.arguments()[2].name(), "c1_self");
  EXPECT_EQ(op->schema.arguments()[5].name(), "c3_self");
  EXPECT_EQ(op->schema.arguments()[6].name(), "c3_alpha");
  EXPECT_EQ((std::vector<uint32_t>{0, 0, 1, 1, 2, 3, 3, 4, 6, 6}), op->call_of_argument);
  EXPECT_EQ(op->schema.returns().size(), 1u);  // the last call's output: no kjit::live
  EXPECT_FALSE(op->schema.is_mutable());
}

TEST(Chain, RunsCallByCallAsEagerAndReturnsTheLiveCallsOutputs) {
  const TensorDesc x = TensorDesc::Contiguous(DType::kFloat32, {4, 33});
  auto op = BoxedOpOf(Gelu(x, true));
  ASSERT_TRUE(op.ok()) << op.status().ToString();
  ASSERT_EQ(op->schema.returns().size(), 2u);
  auto args = MakeArguments(op->schema, op->call, DefaultOpTraits(), c10::Device(c10::kCPU), InputKind::kNormal, 3);
  ASSERT_TRUE(args.ok()) << args.status().ToString();
  // Python scalars arrive as wrapped numbers; the tensors are the key's.
  ASSERT_TRUE((*args)[1].isTensor());
  EXPECT_TRUE(IsWrappedNumber((*args)[1]));
  EXPECT_EQ((*args)[1].toTensor().scalar_type(), at::kDouble);
  EXPECT_EQ((*args)[1].toTensor().item<double>(), 0.5);
  EXPECT_FALSE(IsWrappedNumber((*args)[0]));
  EXPECT_TRUE((*args)[6].isInt());  // add's alpha stays a Scalar argument
  std::vector<c10::IValue> stack = *args;
  op->run(&stack);
  ASSERT_EQ(stack.size(), 2u);

  // Each use of x is an external argument of its own (drawn with its own seed): mul's, pow's and add's.
  const at::Tensor in = (*args)[0].toTensor();
  const at::Tensor in1 = (*args)[2].toTensor();
  const at::Tensor in3 = (*args)[5].toTensor();
  const at::Tensor t = at::tanh((in3 + in1.pow(3.0) * 0.044715) * std::sqrt(2.0 / M_PI));
  const at::Tensor y = (in * 0.5) * (t + 1.0);
  EXPECT_TRUE(at::equal(stack[0].toTensor(), t));
  EXPECT_TRUE(at::equal(stack[1].toTensor(), y));
}

TEST(Chain, AKjitInputIsOneArgumentThatEveryUseReads) {
  const TensorDesc x = TensorDesc::Contiguous(DType::kFloat32, {4, 33});
  // SiLU as x * sigmoid(x): x one tensor.
  auto op = BoxedOpOf(OpKey::Chain({OpCall{"kjit::input", "", {x}}, OpCall{"aten::sigmoid", "", {ValueRef{0, 0}}},
                             OpCall{"aten::mul", "Tensor", {ValueRef{0, 0}, ValueRef{1, 0}}}}, 90));
  ASSERT_TRUE(op.ok()) << op.status().ToString();
  ASSERT_EQ(op->call.args.size(), 1u);
  EXPECT_EQ(op->schema.arguments()[0].name(), "c0_input");
  auto args = MakeArguments(op->schema, op->call, DefaultOpTraits(), c10::Device(c10::kCPU), InputKind::kNormal, 5);
  ASSERT_TRUE(args.ok()) << args.status().ToString();
  std::vector<c10::IValue> stack = *args;
  op->run(&stack);
  ASSERT_EQ(stack.size(), 1u);
  const at::Tensor in = (*args)[0].toTensor();
  EXPECT_TRUE(at::equal(stack[0].toTensor(), in * at::sigmoid(in)));
}

TEST(Chain, ScalarOperandsKeepFloat32Arithmetic) {
  // A wrapped number takes no part in type promotion beyond its category: f32 * 0.1 stays float32.
  const TensorDesc x = TensorDesc::Contiguous(DType::kFloat32, {8});
  auto op = BoxedOpOf(OpKey::Chain({OpCall{"aten::mul", "Tensor", {x, 0.1}}, OpCall{"aten::neg", "", {ValueRef{0, 0}}}}, 90));
  ASSERT_TRUE(op.ok()) << op.status().ToString();
  auto args = MakeArguments(op->schema, op->call, DefaultOpTraits(), c10::Device(c10::kCPU), InputKind::kNormal, 1);
  ASSERT_TRUE(args.ok());
  std::vector<c10::IValue> stack = *args;
  op->run(&stack);
  ASSERT_EQ(stack.size(), 1u);
  EXPECT_EQ(stack[0].toTensor().scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(stack[0].toTensor(), -((*args)[0].toTensor() * 0.1)));
}

TEST(Chain, ClonedWrappedNumbersStayWrapped) {
  const TensorDesc x = TensorDesc::Contiguous(DType::kFloat32, {8});
  auto op = BoxedOpOf(OpKey::Chain({OpCall{"aten::mul", "Tensor", {x, 2.0}}, OpCall{"aten::neg", "", {ValueRef{0, 0}}}}, 90));
  ASSERT_TRUE(op.ok());
  auto args = MakeArguments(op->schema, op->call, DefaultOpTraits(), c10::Device(c10::kCPU), InputKind::kNormal, 1);
  ASSERT_TRUE(args.ok());
  auto copies = CloneArguments(*args);
  ASSERT_TRUE(copies.ok());
  EXPECT_TRUE(IsWrappedNumber((*copies)[1]));
  EXPECT_EQ((*copies)[1].toTensor().item<double>(), 2.0);
}

TEST(Chain, TheWorkingSetCountsTheLiveOutputs) {
  const TensorDesc x = TensorDesc::Contiguous(DType::kFloat32, {1024});
  auto one = BoxedOpOf(Gelu(x, false));
  auto two = BoxedOpOf(Gelu(x, true));
  ASSERT_TRUE(one.ok() && two.ok());
  auto w1 = EstimateWorkingSet(one->run, one->schema, one->call, DefaultOpTraits(), false);
  auto w2 = EstimateWorkingSet(two->run, two->schema, two->call, DefaultOpTraits(), false);
  ASSERT_TRUE(w1.ok()) << w1.status().ToString();
  ASSERT_TRUE(w2.ok()) << w2.status().ToString();
  EXPECT_TRUE(w1->outputs_known);
  EXPECT_EQ(w1->outputs, 4096u);
  EXPECT_EQ(w2->outputs, 2 * 4096u);
}

TEST(Chain, OneCallIsTheOpItself) {
  const TensorDesc x = TensorDesc::Contiguous(DType::kFloat32, {8});
  auto op = BoxedOpOf(OpKey::Chain({OpCall{"aten::tanh", "", {x}}}, 90));
  ASSERT_TRUE(op.ok());
  EXPECT_FALSE(op->chain);
  EXPECT_EQ(op->call.op, "aten::tanh");
  EXPECT_EQ(op->schema.name(), "aten::tanh");
}

TEST(Chain, MalformedChainsAreRefusedWithTheReason) {
  const TensorDesc x = TensorDesc::Contiguous(DType::kFloat32, {8});
  auto reason = [](const OpKey& key) {
    auto op = BoxedOpOf(key);
    return op.ok() ? std::string("accepted") : op.status().message();
  };
  // A reference forward, to itself, or to an output the call does not have.
  EXPECT_NE(reason(OpKey::Chain({OpCall{"aten::tanh", "", {ValueRef{1, 0}}}, OpCall{"aten::neg", "", {x}}}, 90)).find("earlier"),
            std::string::npos);
  EXPECT_NE(reason(OpKey::Chain({OpCall{"aten::tanh", "", {x}}, OpCall{"aten::neg", "", {ValueRef{1, 0}}}}, 90)).find("earlier"),
            std::string::npos);
  EXPECT_NE(reason(OpKey::Chain({OpCall{"aten::tanh", "", {x}}, OpCall{"aten::neg", "", {ValueRef{0, 1}}}}, 90)).find("earlier"),
            std::string::npos);
  // kjit::live: last only, increasing, in range, not alone.
  EXPECT_NE(reason(OpKey::Chain({OpCall{"aten::tanh", "", {x}}, OpCall{"kjit::live", "", {IntList{0}}},
                          OpCall{"aten::neg", "", {ValueRef{0, 0}}}}, 90))
                .find("only end"),
            std::string::npos);
  EXPECT_NE(reason(OpKey::Chain({OpCall{"aten::tanh", "", {x}}, OpCall{"aten::neg", "", {ValueRef{0, 0}}},
                          OpCall{"kjit::live", "", {IntList{1, 0}}}}, 90))
                .find("increasing"),
            std::string::npos);
  EXPECT_NE(reason(OpKey::Chain({OpCall{"aten::tanh", "", {x}}, OpCall{"kjit::live", "", {IntList{1}}}}, 90)).find("increasing"),
            std::string::npos);
  EXPECT_NE(reason(OpKey::Chain({OpCall{"kjit::live", "", {IntList{0}}}}, 90)).find("no call"), std::string::npos);
  // kjit::input: one tensor, and no result.
  EXPECT_NE(reason(OpKey::Chain({OpCall{"kjit::input", "", {1.0}}, OpCall{"aten::neg", "", {ValueRef{0, 0}}}}, 90)).find("one tensor"),
            std::string::npos);
  EXPECT_NE(reason(OpKey::Chain({OpCall{"kjit::input", "", {x}}, OpCall{"aten::neg", "", {ValueRef{0, 0}}},
                          OpCall{"kjit::live", "", {IntList{0, 1}}}}, 90))
                .find("no result"),
            std::string::npos);
  // A call that writes its arguments, and an op that does not exist.
  EXPECT_NE(reason(OpKey::Chain({OpCall{"aten::tanh_", "", {x}}, OpCall{"aten::neg", "", {ValueRef{0, 0}}}}, 90)).find("writes"),
            std::string::npos);
  EXPECT_NE(reason(OpKey::Chain({OpCall{"aten::no_such_op", "", {x}}, OpCall{"aten::neg", "", {ValueRef{0, 0}}}}, 90)).find("no operator"),
            std::string::npos);
}

}  // namespace
}  // namespace kjit::eval
