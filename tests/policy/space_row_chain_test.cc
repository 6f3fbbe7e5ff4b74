// The row_chain design space, on CPU: which chains with a row reduction it fuses and which it declines, the
// kernel's parameters, the per-row values and the launch (space_test.cc compiles every family's points and pins
// their sources; the GPU verifies their values).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kjit/policy/design_space.h"

namespace kjit::policy {
namespace {

constexpr DType f32 = DType::kFloat32, bf16 = DType::kBFloat16;

const Family& RowFamily() {
  for (const Family* f : Families()) {
    if (f->name() == "row_chain") return *f;
  }
  throw std::runtime_error("no row_chain family");
}
std::string Reason(const OpKey& key) {
  auto m = FindFamily(key);
  return m.ok() ? "served by " + std::string(m->family->name()) : m.status().message();
}
bool Has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

OpCall Call(const char* op, const char* overload, std::vector<Arg> args) { return OpCall{op, overload, std::move(args)}; }

// Hugging Face's LlamaRMSNorm on a tensor of the weight's dtype, as the shim records it.
OpKey RmsNorm(const TensorDesc& x, std::vector<Arg> mean_args = {IntList{-1}, true, NoneArg{}}) {
  std::vector<Arg> mean = {ValueRef{1, 0}};
  mean.insert(mean.end(), mean_args.begin(), mean_args.end());
  return OpKey::Chain({Call("kjit::input", "", {x}), Call("aten::pow", "Tensor_Scalar", {ValueRef{0, 0}, 2.0}),
                       Call("aten::mean", "dim", std::move(mean)), Call("aten::add", "Tensor", {ValueRef{2, 0}, 1e-6, int64_t{1}}),
                       Call("aten::rsqrt", "", {ValueRef{3, 0}}), Call("aten::mul", "Tensor", {ValueRef{0, 0}, ValueRef{4, 0}}),
                       Call("aten::mul", "Tensor", {TensorDesc::Contiguous(x.dtype, {x.sizes.back()}), ValueRef{5, 0}})},
                      90);
}

Result<Candidate> Generate(const OpKey& key, Point point = {}) {
  const Family& f = RowFamily();
  auto p = f.Match(key);
  if (!p.ok()) return p.status();
  const DeviceFacts dev = DeviceFacts::H200();
  return f.Generate(**p, point.empty() ? f.ExpertDefault(**p, dev) : point, dev);
}

TEST(RowChainSpace, FusesRmsNormAsHuggingFaceWritesIt) {
  EXPECT_EQ(Reason(RmsNorm(TensorDesc::Contiguous(f32, {8192, 4096}))), "served by row_chain");
  EXPECT_EQ(Reason(RmsNorm(TensorDesc::Contiguous(bf16, {2, 512, 768}))), "served by row_chain");
  // Dim rank - 1 is the last dim too.
  EXPECT_EQ(Reason(RmsNorm(TensorDesc::Contiguous(f32, {64, 256}), {IntList{1}, true, NoneArg{}})), "served by row_chain");
  // Chains without a reduction stay elementwise_chain's.
  const TensorDesc x = TensorDesc::Contiguous(f32, {64, 128});
  EXPECT_EQ(Reason(OpKey::Chain({Call("aten::sigmoid", "", {x}), Call("aten::mul", "Tensor", {x, ValueRef{0, 0}})}, 90)),
            "served by elementwise_chain");
}

TEST(RowChainSpace, DeclinesWhatItCannotServe) {
  const TensorDesc x = TensorDesc::Contiguous(f32, {64, 128});
  EXPECT_TRUE(Has(Reason(RmsNorm(x, {IntList{0}, true, NoneArg{}})), "last alone"));
  EXPECT_TRUE(Has(Reason(RmsNorm(x, {IntList{-1, -2}, true, NoneArg{}})), "last alone"));
  EXPECT_TRUE(Has(Reason(RmsNorm(x, {IntList{-1}, false, NoneArg{}})), "without keepdim"));
  EXPECT_TRUE(Has(Reason(RmsNorm(x, {IntList{-1}, true, f32})), "with a dtype"));
  EXPECT_TRUE(Has(Reason(RmsNorm(TensorDesc::Contiguous(f32, {4, 65537}))), "over the 65536"));
  EXPECT_TRUE(Has(Reason(RmsNorm(TensorDesc::Contiguous(f32, {0, 128}))), "empty"));
  EXPECT_TRUE(Has(Reason(RmsNorm(TensorDesc::Contiguous(DType::kFloat64, {64, 128}))), "not served"));
  auto mean = [](Arg in) { return Call("aten::mean", "dim", {std::move(in), IntList{-1}, true, NoneArg{}}); };
  // The per-row value written, two reductions, a [.., 1] tensor from outside, one reduction and nothing after it.
  EXPECT_TRUE(Has(Reason(OpKey::Chain({Call("aten::exp", "", {x}), mean(ValueRef{0, 0})}, 90)), "not [.., LEN]"));
  EXPECT_TRUE(Has(Reason(OpKey::Chain({mean(x), Call("aten::sub", "Tensor", {x, ValueRef{0, 0}, int64_t{1}}),
                                       mean(ValueRef{1, 0}), Call("aten::mul", "Tensor", {x, ValueRef{2, 0}})}, 90)),
                  "a second reduction"));
  EXPECT_TRUE(Has(Reason(OpKey::Chain({mean(x), Call("aten::mul", "Tensor", {ValueRef{0, 0}, TensorDesc::Contiguous(f32, {64, 1})}),
                                       Call("aten::mul", "Tensor", {x, ValueRef{1, 0}})}, 90)),
                  "neither [.., LEN] nor [LEN]"));
  EXPECT_TRUE(Has(Reason(OpKey::Chain({mean(x), Call("aten::exp", "", {x}), Call("kjit::live", "", {IntList{1}})}, 90)),
                  "reaches no written value"));
  EXPECT_TRUE(Has(Reason(OpKey::Chain({Call("aten::exp", "", {x}), Call("aten::mul", "Tensor", {ValueRef{0, 0}, TensorDesc::Contiguous(f32, {128})})}, 90)),
                  "no sum, mean or cumsum"));
}

TEST(RowChainSpace, RmsNormsKernelReadsTheRowOnceAndTheWeightPerColumn) {
  auto c = Generate(RmsNorm(TensorDesc::Contiguous(f32, {8192, 4096})));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  // x (kjit::input), the weight, then the one written output.
  EXPECT_TRUE(Has(c->source, "#define CHAIN_PARAMS const float* __restrict__ in0, const float* __restrict__ in1, "
                             "float* __restrict__ out0\n"))
      << c->source;
  EXPECT_TRUE(Has(c->source, "load_any(in0 + base + col, x0[k]);"));
  EXPECT_TRUE(Has(c->source, "load_cached(in1 + col, c1[k]);"));
  // The sum of x * x, the mean by PyTorch's factor (1 / 4096 exactly), eps added and rsqrt per row.
  EXPECT_TRUE(Has(c->source, "acc += v1;"));
  EXPECT_TRUE(Has(c->source, "#define MEAN_FACTOR 0x1p-12f"));
  EXPECT_TRUE(Has(c->source, "const float v2 = as_dtype<float>(acc * MEAN_FACTOR);"));
  EXPECT_TRUE(Has(c->source, "const float v4 = as_dtype<float>(rsqrtf(v3));"));
  EXPECT_TRUE(Has(c->source, "const float v6 = as_dtype<float>(op_mul(c1[k][e], v5));"));
  EXPECT_TRUE(Has(c->source, "y0[e] = v6;"));
  EXPECT_EQ(c->entry_point, "kjit_row_chain");
}

TEST(RowChainSpace, SumAndBFloat16RoundEachOpsResult) {
  const TensorDesc x = TensorDesc::Contiguous(bf16, {1024, 512});
  OpKey key = OpKey::Chain({Call("aten::sum", "dim_IntList", {x, IntList{-1}, true, NoneArg{}}),
                            Call("aten::div", "Tensor", {x, ValueRef{0, 0}})}, 90);
  auto c = Generate(key);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(Has(c->source, "MEAN_FACTOR"));
  EXPECT_TRUE(Has(c->source, "const float v0 = as_dtype<__nv_bfloat16>(acc);"));
  // x is read twice in the key (two parameters), both held: the sum's and the division's.
  EXPECT_TRUE(Has(c->source, "acc += x0[k][e];"));
  EXPECT_TRUE(Has(c->source, "const float v1 = as_dtype<__nv_bfloat16>(op_div(x1[k][e], v0));"));
}

// A masked cumsum, torch.cumsum(x * mask, -1): the products held per element, the row's running sums a piece at a
// time (row_exclusive_scan), every element written.
TEST(RowChainSpace, AMaskedCumsumScansTheRowsProducts) {
  const TensorDesc x = TensorDesc::Contiguous(f32, {512, 4096});
  auto cumsum = [&](std::vector<Arg> args) {
    std::vector<Arg> all = {ValueRef{0, 0}};
    all.insert(all.end(), args.begin(), args.end());
    return OpKey::Chain({Call("aten::mul", "Tensor", {x, x}), Call("aten::cumsum", "", std::move(all))}, 90);
  };
  EXPECT_EQ(Reason(cumsum({int64_t{-1}, NoneArg{}})), "served by row_chain");
  EXPECT_TRUE(Has(Reason(cumsum({int64_t{0}, NoneArg{}})), "another dim than the last"));
  EXPECT_TRUE(Has(Reason(cumsum({int64_t{-1}, f32})), "with a dtype"));
  auto c = Generate(cumsum({int64_t{1}, NoneArg{}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(Has(c->source, "s[k][e] = v0;")) << c->source;
  EXPECT_TRUE(Has(c->source, "row_exclusive_scan(run, red, &total)"));
  EXPECT_FALSE(Has(c->source, "row_sum("));
  EXPECT_TRUE(Has(c->source, "const float v1 = as_dtype<float>(s[k][e]);"));
  EXPECT_TRUE(Has(c->source, "y0[e] = v1;"));
}

TEST(RowChainSpace, EveryRowAndElementIsCoveredOnce) {
  const Family& f = RowFamily();
  const DeviceFacts dev = DeviceFacts::H200();
  for (const OpKey& key : f.SampleKeys()) {
    auto p = f.Match(key);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    int64_t rows = 1;
    const auto& x = std::get<TensorDesc>(key.calls[0].args[0]);
    for (size_t d = 0; d + 1 < x.sizes.size(); ++d) rows *= x.sizes[d];
    const int64_t len = x.sizes.back();
    size_t checked = 0;
    for (const Point& pt : ValidPoints(f, **p, dev)) {
      auto c = f.Generate(**p, pt, dev);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      const int64_t row_threads = pt.at("row_threads"), block_rows = pt.at("block_rows"), vec = pt.at("vec");
      EXPECT_EQ(c->launch.block[0], row_threads * block_rows);
      EXPECT_GE(static_cast<int64_t>(c->launch.grid[0]) * block_rows, rows);
      EXPECT_LT((static_cast<int64_t>(c->launch.grid[0]) - 1) * block_rows, rows);
      const int64_t items = (len + row_threads * vec - 1) / (row_threads * vec);
      EXPECT_TRUE(Has(c->source, "#define ITEMS " + std::to_string(items) + "\n"));
      EXPECT_GE(items * row_threads * vec, len);
      ++checked;
    }
    EXPECT_GT(checked, 0u) << key.ToString();
  }
}

}  // namespace
}  // namespace kjit::policy
