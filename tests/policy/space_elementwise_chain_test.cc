// The elementwise_chain design space, on CPU: which chains it fuses and which it declines, the kernel's
// parameters and outputs, and the arithmetic it writes for eager's rounding (space_test.cc compiles every
// family's points and pins their sources).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kjit/policy/design_space.h"

namespace kjit::policy {
namespace {

constexpr DType f32 = DType::kFloat32, f16 = DType::kFloat16, bf16 = DType::kBFloat16;

const Family& ChainFamily() {
  for (const Family* f : Families()) {
    if (f->name() == "elementwise_chain") return *f;
  }
  throw std::runtime_error("no elementwise_chain family");
}
std::string Reason(const OpKey& key) {
  auto m = FindFamily(key);
  return m.ok() ? "served by " + std::string(m->family->name()) : m.status().message();
}
Result<Candidate> Default(const OpKey& key) {
  const Family& f = ChainFamily();
  auto p = f.Match(key);
  if (!p.ok()) return p.status();
  const DeviceFacts dev = DeviceFacts::H200();
  return f.Generate(**p, f.ExpertDefault(**p, dev), dev);
}
bool Has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(ElementwiseChainSpace, FusesChainsOfElementwiseOps) {
  const TensorDesc x = TensorDesc::Contiguous(bf16, {64, 128});
  EXPECT_EQ(Reason(OpKey::Chain({OpCall{"aten::sigmoid", "", {x}}, OpCall{"aten::mul", "Tensor", {x, ValueRef{0, 0}}}}, 90)),
            "served by elementwise_chain");
  // One call is a single op's key, not a chain.
  EXPECT_NE(Reason(OpKey::Chain({OpCall{"aten::sigmoid", "", {x}}}, 90)), "served by elementwise_chain");
}

TEST(ElementwiseChainSpace, DeclinesWhatItCannotServe) {
  const TensorDesc x = TensorDesc::Contiguous(f32, {64, 128});
  auto two = [&](OpCall first) { return OpKey::Chain({std::move(first), OpCall{"aten::neg", "", {ValueRef{0, 0}}}}, 90); };
  EXPECT_TRUE(Has(Reason(two(OpCall{"aten::mul", "Tensor", {x, TensorDesc::Contiguous(f32, {128})}})), "broadcasting"));
  EXPECT_TRUE(Has(Reason(two(OpCall{"aten::neg", "", {TensorDesc::Contiguous(DType::kFloat64, {8})}})), "not served"));
  EXPECT_TRUE(Has(Reason(two(OpCall{"aten::neg", "", {TensorDesc{f32, {8, 8}, {1, 8}, 0, 16}}})), "non-contiguous"));
  EXPECT_TRUE(Has(Reason(two(OpCall{"aten::pow", "Tensor_Scalar", {x, 1.5}})), "exponent"));
  EXPECT_TRUE(Has(Reason(two(OpCall{"aten::log", "", {x}})), "not an elementwise op"));
  EXPECT_TRUE(Has(Reason(two(OpCall{"aten::div", "Tensor", {2.0, x}})), "no tensor"));
  EXPECT_TRUE(Has(Reason(two(OpCall{"aten::neg", "", {TensorDesc::Contiguous(f32, {0, 8})}})), "empty"));
  EXPECT_TRUE(Has(Reason(two(OpCall{"aten::_to_copy", "", {x, f16, NoneArg{}, NoneArg{}, NoneArg{}, true, NoneArg{}}})),
                  "dtype cast"));
  EXPECT_TRUE(Has(Reason(OpKey::Chain({OpCall{"aten::neg", "", {x}}, OpCall{"aten::neg", "", {ValueRef{0, 1}}}}, 90)), "earlier"));
}

TEST(ElementwiseChainSpace, ParametersAreTheInputsInKeyOrderThenTheLiveOutputs) {
  const TensorDesc a = TensorDesc::Contiguous(bf16, {1024});
  const TensorDesc b = TensorDesc::Contiguous(f32, {1024});
  OpKey key = OpKey::Chain({OpCall{"aten::mul", "Tensor", {a, b}},         // 0: bf16 * f32 -> f32
                     OpCall{"aten::_to_copy", "", {ValueRef{0, 0}, f16, NoneArg{}, NoneArg{}, NoneArg{}, false, NoneArg{}}},
                     OpCall{"aten::add", "Tensor", {ValueRef{1, 0}, a, int64_t{1}}},  // f16 + bf16 -> f32
                     OpCall{"kjit::live", "", {IntList{1, 2}}}}, 90);
  auto c = Default(key);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(Has(c->source, "#define CHAIN_PARAMS const __nv_bfloat16* __restrict__ in0, const float* __restrict__ in1, "
                             "const __nv_bfloat16* __restrict__ in2, __half* __restrict__ out0, float* __restrict__ out1"))
      << c->source;
  EXPECT_TRUE(Has(c->source, "const float v0 = as_dtype<float>(op_mul(x0[k][e], x1[k][e]));"));
  EXPECT_TRUE(Has(c->source, "const float v1 = as_dtype<__half>(v0);"));
  EXPECT_TRUE(Has(c->source, "const float v2 = as_dtype<float>(op_add(v1, x2[k][e]));"));
  EXPECT_TRUE(Has(c->source, "y0[k][e] = v1;"));
  EXPECT_TRUE(Has(c->source, "y1[k][e] = v2;"));
}

TEST(ElementwiseChainSpace, AKjitInputIsOneParameter) {
  const TensorDesc x = TensorDesc::Contiguous(bf16, {4096});
  OpKey key = OpKey::Chain({OpCall{"kjit::input", "", {x}}, OpCall{"aten::sigmoid", "", {ValueRef{0, 0}}},
                     OpCall{"aten::mul", "Tensor", {ValueRef{0, 0}, ValueRef{1, 0}}}}, 90);
  auto c = Default(key);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(Has(c->source, "#define CHAIN_PARAMS const __nv_bfloat16* __restrict__ in0, __nv_bfloat16* __restrict__ out0\n"))
      << c->source;
  EXPECT_TRUE(Has(c->source, "const float v0 = as_dtype<__nv_bfloat16>(x0[k][e]);"));
  EXPECT_TRUE(Has(c->source, "const float v2 = as_dtype<__nv_bfloat16>(op_mul(v0, v1));"));
  // It is no result.
  key.calls.push_back(OpCall{"kjit::live", "", {IntList{0, 2}}});
  EXPECT_TRUE(Has(Reason(key), "names a kjit::input"));
}

TEST(ElementwiseChainSpace, ScalarsAreTheirFloatBitsAndEagersRulesAreKept) {
  const TensorDesc x = TensorDesc::Contiguous(f16, {4096});
  OpKey key = OpKey::Chain({OpCall{"aten::pow", "Tensor_Scalar", {x, 3.0}},
                     OpCall{"aten::div", "Tensor", {ValueRef{0, 0}, int64_t{3}}},
                     OpCall{"aten::sub", "Tensor", {ValueRef{1, 0}, x, 0.5}},
                     OpCall{"aten::mul", "Tensor", {ValueRef{2, 0}, 0.1}}}, 90);
  auto c = Default(key);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  // float16 x^3 rounds b * b to float16 before the second product, as PyTorch's b * b * b on at::Half does.
  EXPECT_TRUE(Has(c->source, "as_dtype<__half>(op_mul(as_dtype<__half>(op_mul(x0[k][e], x0[k][e])), x0[k][e]))")) << c->source;
  // A division by a number multiplies by its float reciprocal: 1/3 as a float is 0x3eaaaaab.
  EXPECT_TRUE(Has(c->source, "op_mul(v0, __int_as_float(0x3eaaaaab))"));
  // a - 0.5 * b: one fused multiply-add with -alpha.
  EXPECT_TRUE(Has(c->source, "op_axpy(v1, __int_as_float(0xbf000000), x1[k][e])"));
  // 0.1 is converted to float (0x3dcccccd), not kept as a double.
  EXPECT_TRUE(Has(c->source, "op_mul(v2, __int_as_float(0x3dcccccd))"));
}

TEST(ElementwiseChainSpace, VectorsFollowEveryInputsAlignment) {
  TensorDesc off = TensorDesc::Contiguous(f32, {1000});
  off.storage_offset = 2;
  off.alignment = 8;
  OpKey key = OpKey::Chain({OpCall{"aten::exp", "", {off}}, OpCall{"aten::neg", "", {ValueRef{0, 0}}}}, 90);
  const Family& f = ChainFamily();
  auto p = f.Match(key);
  ASSERT_TRUE(p.ok());
  const DeviceFacts dev = DeviceFacts::H200();
  EXPECT_TRUE(f.Check(**p, {{"threads", 256}, {"vec", 2}, {"items", 1}, {"hint", 0}}, dev).ok());
  EXPECT_TRUE(Has(f.Check(**p, {{"threads", 256}, {"vec", 4}, {"items", 1}, {"hint", 0}}, dev).message(), "aligned"));
  EXPECT_EQ(f.ExpertDefault(**p, dev).at("vec"), 2);
  // Eight bfloat16 elements are 16 bytes; eight float32 ones are not a vector.
  OpKey mixed = OpKey::Chain({OpCall{"aten::_to_copy", "", {TensorDesc::Contiguous(bf16, {4096}), f32, NoneArg{}, NoneArg{},
                                                   NoneArg{}, false, NoneArg{}}},
                       OpCall{"aten::neg", "", {ValueRef{0, 0}}}}, 90);
  auto m = f.Match(mixed);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(f.ExpertDefault(**m, dev).at("vec"), 4);
  // Held values: items x vec x (inputs + outputs) at most 64.
  EXPECT_TRUE(f.Check(**m, {{"threads", 256}, {"vec", 4}, {"items", 4}, {"hint", 0}}, dev).ok());
  const TensorDesc a = TensorDesc::Contiguous(f32, {4096});
  auto five = f.Match(OpKey::Chain({OpCall{"aten::mul", "Tensor", {a, a}}, OpCall{"aten::add", "Tensor", {ValueRef{0, 0}, a, 1.0}},
                             OpCall{"kjit::live", "", {IntList{0, 1}}}}, 90));
  ASSERT_TRUE(five.ok());
  EXPECT_TRUE(f.Check(**five, {{"threads", 256}, {"vec", 4}, {"items", 2}, {"hint", 0}}, dev).ok());
  EXPECT_TRUE(Has(f.Check(**five, {{"threads", 256}, {"vec", 4}, {"items", 4}, {"hint", 0}}, dev).message(), "holds 80"));
  // A block's registers: 1024 threads holding 40 values each (and about 32 more) exceed the SM's 65536.
  EXPECT_TRUE(Has(f.Check(**five, {{"threads", 1024}, {"vec", 4}, {"items", 2}, {"hint", 0}}, dev).message(),
                  "more registers than an SM has"));
}

TEST(ElementwiseChainSpace, LaunchCoversEveryElementOnce) {
  const TensorDesc x = TensorDesc::Contiguous(f32, {1001});
  auto c = Default(OpKey::Chain({OpCall{"aten::tanh", "", {x}}, OpCall{"aten::neg", "", {ValueRef{0, 0}}}}, 90));
  ASSERT_TRUE(c.ok());
  // 1001 elements, 4 a thread, 256 threads a block: 251 threads, one block; the last thread's one element
  // goes through the tail.
  EXPECT_EQ(c->launch.grid[0], 1u);
  EXPECT_EQ(c->launch.block[0], 256u);
  EXPECT_TRUE(Has(c->source, "constexpr long long N = 1001LL;"));
}

}  // namespace
}  // namespace kjit::policy
