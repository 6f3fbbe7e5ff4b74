// The depthwise_conv_backward design space, on CPU: what it declines, its traits, checks and expert defaults,
// what its sources are specialised on, and that every valid point of its sample keys compiles with NVRTC for
// sm_80 as well (space_test.cc compiles them for sm_90 and pins their sources).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "kjit/policy/design_space.h"
#include "kjit/policy/op_traits.h"
#include "kjit/runtime/compiler.h"
#include "space_test_util.h"

namespace kjit::policy {
namespace {

constexpr DType f32 = DType::kFloat32, f16 = DType::kFloat16, bf16 = DType::kBFloat16;

// convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
// output_padding, groups, output_mask) with the tensors given by hand.
OpKey Backward(TensorDesc dy, TensorDesc x, TensorDesc w, IntList s, IntList p, IntList d, IntList mask,
               int64_t groups = -1, bool transposed = false, Arg bias_sizes = NoneArg{}) {
  const int64_t c = x.sizes[1];
  const size_t spatial = x.sizes.size() - 2;
  return OpKey::Single("aten::convolution_backward", "",
                       {std::move(dy), std::move(x), std::move(w), std::move(bias_sizes), s, p, d, transposed,
                        IntList(spatial, 0), groups < 0 ? c : groups, std::move(mask)},
                       90);
}
TensorDesc T(DType dt, std::vector<int64_t> sizes) { return TensorDesc::Contiguous(dt, std::move(sizes)); }
// MobileNet's 3x3 over [32, 128, 128, 128], padding 1: the output has the input's sizes.
OpKey Headroom(DType dt = f32, IntList mask = {1, 1, 1}) {
  return Backward(T(dt, {32, 128, 128, 128}), T(dt, {32, 128, 128, 128}), T(dt, {128, 1, 3, 3}), {1, 1}, {1, 1},
                  {1, 1}, std::move(mask), -1, false, IntList{128});
}

std::string Reason(const OpKey& key) { return FindFamily(key).status().message(); }

Point P(int64_t threads, int64_t outs, int64_t wstrategy, int64_t hint = 0) {
  return {{"threads", threads}, {"outs", outs}, {"wstrategy", wstrategy}, {"hint", hint}};
}

TEST(DepthwiseConvBackwardSpace, DeclinesWhatItCannotServe) {
  auto found = FindFamily(Headroom());
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->family->name(), "depthwise_conv_backward");
  EXPECT_TRUE(FindFamily(Headroom(bf16, {0, 1, 0})).ok());
  // A convolution without a bias: autograd passes bias_sizes [0] and no grad_bias (seen on the GPU); asking for
  // grad_bias with a bias_sizes other than [C] is declined.
  const auto no_bias = [](IntList mask) {
    return Backward(T(f32, {2, 16, 20, 20}), T(f32, {2, 16, 20, 20}), T(f32, {16, 1, 3, 3}), {1, 1}, {1, 1}, {1, 1},
                    std::move(mask), 16, false, IntList{0});
  };
  EXPECT_TRUE(FindFamily(no_bias({1, 1, 0})).ok()) << Reason(no_bias({1, 1, 0}));
  EXPECT_NE(Reason(no_bias({1, 1, 1})).find("bias_sizes is not [C]"), std::string::npos);
  // conv1d's 3-D tensors: a 4-tap causal kernel over 1024 (padding 3: 1027 outputs).
  EXPECT_TRUE(FindFamily(Backward(T(f32, {8, 256, 1027}), T(f32, {8, 256, 1024}), T(f32, {256, 1, 4}), {1}, {3}, {1},
                                  {1, 1, 1}))
                  .ok());
  EXPECT_NE(Reason(Headroom(DType::kFloat64)).find("not served"), std::string::npos);
  EXPECT_NE(Reason(Headroom(f32, {0, 0, 0})).find("no gradient"), std::string::npos);
  // Ordinary, grouped and multiplier convolutions, and transposed ones, are every other convolution's backward.
  EXPECT_NE(Reason(Backward(T(f32, {2, 16, 8, 8}), T(f32, {2, 16, 8, 8}), T(f32, {16, 16, 3, 3}), {1}, {1}, {1},
                            {1, 1, 1}, 1))
                .find("not depthwise"),
            std::string::npos);
  EXPECT_NE(Reason(Backward(T(f32, {2, 32, 8, 8}), T(f32, {2, 16, 8, 8}), T(f32, {32, 1, 3, 3}), {1}, {1}, {1},
                            {1, 1, 1}, 16))
                .find("channel multiplier"),
            std::string::npos);
  EXPECT_NE(Reason(Backward(T(f32, {2, 16, 10, 10}), T(f32, {2, 16, 8, 8}), T(f32, {16, 1, 3, 3}), {1}, {0}, {1},
                            {1, 1, 1}, -1, true))
                .find("transposed"),
            std::string::npos);
  // Layouts: channels_last input or weight is cuDNN's backward; other strides are copied by PyTorch.
  OpKey cl = Headroom();
  cl.calls[0].args[1] = ChannelsLast(f32, {32, 128, 128, 128});
  EXPECT_NE(Reason(cl).find("channels_last"), std::string::npos) << Reason(cl);
  OpKey cl_weight = Headroom();
  cl_weight.calls[0].args[2] = ChannelsLast(f32, {128, 1, 3, 3});
  EXPECT_NE(Reason(cl_weight).find("channels_last"), std::string::npos) << Reason(cl_weight);
  OpKey strided_grad = Headroom();
  strided_grad.calls[0].args[0] = TensorDesc{f32, {32, 128, 128, 128}, {128 * 128 * 256, 128 * 256, 256, 2}, 0, 16};
  EXPECT_NE(Reason(strided_grad).find("grad_output not contiguous"), std::string::npos) << Reason(strided_grad);
  OpKey mixed = Headroom();
  mixed.calls[0].args[0] = T(f16, {32, 128, 128, 128});
  EXPECT_NE(Reason(mixed).find("dtype"), std::string::npos);
  // grad_output must be the output's shape; output_padding must be 0 (PyTorch rejects the rest).
  EXPECT_NE(Reason(Backward(T(f32, {2, 8, 7, 8}), T(f32, {2, 8, 8, 8}), T(f32, {8, 1, 3, 3}), {1}, {1}, {1},
                            {1, 1, 1}))
                .find("output shape"),
            std::string::npos);
  OpKey output_padding = Headroom();
  output_padding.calls[0].args[8] = IntList{1, 0};
  EXPECT_NE(Reason(output_padding).find("output_padding"), std::string::npos);
  EXPECT_NE(Reason(Backward(T(f32, {2, 8, 4, 4, 4}), T(f32, {2, 8, 4, 4, 4}), T(f32, {8, 1, 1, 1, 1}), {1}, {0}, {1},
                            {1, 1, 1}))
                .find("1-D and 2-D"),
            std::string::npos);
  EXPECT_EQ(FindFamily(Backward(T(f32, {0, 8, 8, 8}), T(f32, {0, 8, 8, 8}), T(f32, {8, 1, 3, 3}), {1}, {1}, {1},
                                {1, 1, 1}))
                .status()
                .code(),
            StatusCode::kNotFound);
}

TEST(DepthwiseConvBackwardSpace, Float16IsNotFedSpecialValues) {
  (void)Families();  // registers the traits
  const OpTraits t = TraitsFor("aten::convolution_backward");
  EXPECT_TRUE(t.special_values);
  EXPECT_FALSE(t.nan_values);
  EXPECT_EQ(t.no_special_inputs, std::set<DType>{f16});
  EXPECT_EQ(t.no_large_inputs, std::set<DType>{f16});
}

TEST(DepthwiseConvBackwardSpace, ChecksAndDefaults) {
  const DeviceFacts dev = DeviceFacts::H200();
  auto found = FindFamily(Headroom());
  ASSERT_TRUE(found.ok());
  const Family& f = *found->family;
  const Problem& headroom = *found->problem;
  // 128 channels x 9 taps over 132 SMs x 8 blocks: two waves of per-tap blocks reading 2 tensors each, against
  // one wave of channel blocks reading 10: PyTorch's order. 537 MB of tensors: streaming stores.
  EXPECT_EQ(PointToString(f.ExpertDefault(headroom, dev)), PointToString(P(256, 2, 0, 1)));
  EXPECT_TRUE(f.Check(headroom, P(512, 4, 1, 0), dev).ok());
  EXPECT_FALSE(f.Check(headroom, P(256, 8, 0), dev).ok());  // not a value of outs, 32 bytes
  EXPECT_FALSE(f.Check(headroom, P(512, 2, 0), dev).ok());  // PyTorch's order: 8 of 16 warps would idle
  // Many channels: a block per channel reads each tensor once.
  auto wide = FindFamily(Backward(T(f32, {8, 2048, 14, 14}), T(f32, {8, 2048, 14, 14}), T(f32, {2048, 1, 3, 3}), {1},
                                  {1}, {1}, {0, 1, 1}));
  ASSERT_TRUE(wide.ok());
  EXPECT_EQ(PointToString(f.ExpertDefault(*wide->problem, dev)), PointToString(P(256, 1, 1, 0)));
  // Without grad_input, outs and hint do not apply; without grad_weight, wstrategy does not.
  EXPECT_FALSE(f.Check(*wide->problem, P(256, 2, 1), dev).ok());
  EXPECT_FALSE(f.Check(*wide->problem, P(256, 1, 1, 1), dev).ok());
  auto input_only = FindFamily(Headroom(f32, {1, 0, 0}));
  ASSERT_TRUE(input_only.ok());
  EXPECT_FALSE(f.Check(*input_only->problem, P(256, 2, 1), dev).ok());
  EXPECT_TRUE(f.Check(*input_only->problem, P(256, 2, 0), dev).ok());
  // A channel's block holds at most 64 taps: 9x9 takes PyTorch's order only.
  auto large = FindFamily(Backward(T(f32, {2, 8, 16, 16}), T(f32, {2, 8, 16, 16}), T(f32, {8, 1, 9, 9}), {1}, {4},
                                   {1}, {1, 1, 1}));
  ASSERT_TRUE(large.ok());
  EXPECT_FALSE(f.Check(*large->problem, P(64, 2, 1), dev).ok());
  // 2 samples: PyTorch's block has 2 warps, so 64 threads.
  EXPECT_FALSE(f.Check(*large->problem, P(128, 2, 0), dev).ok());
  EXPECT_EQ(PointToString(f.ExpertDefault(*large->problem, dev)), PointToString(P(64, 2, 0, 0)));
  // Rows of one element: one element a thread.
  auto column = FindFamily(Backward(T(bf16, {3, 6, 40, 1}), T(bf16, {3, 6, 40, 1}), T(bf16, {6, 1, 3, 1}), {1},
                                    {1, 0}, {1}, {1, 1, 1}));
  ASSERT_TRUE(column.ok()) << column.status().ToString();
  EXPECT_FALSE(f.Check(*column->problem, P(64, 2, 0), dev).ok());
  EXPECT_EQ(f.ExpertDefault(*column->problem, dev).at("outs"), 1);
}

TEST(DepthwiseConvBackwardSpace, SourcesAreSpecialisedOnTheKeyAndThePoint) {
  const DeviceFacts dev = DeviceFacts::H200();
  auto generate = [&](const OpKey& key, const Point& pt) {
    auto found = FindFamily(key);
    EXPECT_TRUE(found.ok()) << found.status().ToString();
    auto c = found->family->Generate(*found->problem, pt, dev);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return *c;
  };
  // Every gradient, PyTorch's order: 128 x 9 weight blocks, 128 bias blocks, then 32 x 128 x 128 rows of 64 pairs
  // over blocks of 256.
  const Candidate all = generate(Headroom(), P(256, 2, 0, 1));
  EXPECT_EQ(all.entry_point, "kjit_depthwise_conv_backward");
  EXPECT_EQ(all.launch.grid[0], 128u * 9u + 128u + 32u * 128u * 128u * 64u / 256u);
  EXPECT_EQ(all.launch.block[0], 256u);
  EXPECT_EQ(all.launch.workspace_bytes, 0u);
  EXPECT_NE(all.source.find("#define WANT_DX 1\n#define WANT_DW 1\n#define WANT_DB 1\n#define WSTRATEGY 0\n"
                            "#define VEC_STORE 1\n"),
            std::string::npos);
  EXPECT_NE(all.source.find("typedef int idx_t;"), std::string::npos);
  EXPECT_NE(all.source.find("VW = 8;"), std::string::npos);  // PyTorch's block: min(32, 8) warps
  EXPECT_NE(all.source.find("WEIGHT_BLOCKS = 1152, BIAS_BLOCKS = 128;"), std::string::npos);
  // A channel's block sums the bias too: no bias blocks.
  const Candidate channel = generate(Headroom(), P(128, 4, 1, 0));
  EXPECT_NE(channel.source.find("WEIGHT_BLOCKS = 128, BIAS_BLOCKS = 0;"), std::string::npos);
  EXPECT_EQ(channel.launch.grid[0], 128u + 32u * 128u * 128u * 32u / 128u);
  // The parameters' gradients only: no input blocks; the bias alone: a block per channel.
  const Candidate params = generate(Headroom(f32, {0, 1, 1}), P(64, 1, 0, 0));
  EXPECT_EQ(params.launch.grid[0], 128u * 9u + 128u);
  EXPECT_NE(params.source.find("#define WANT_DX 0"), std::string::npos);
  const Candidate bias = generate(Headroom(f32, {0, 0, 1}), P(64, 1, 0, 0));
  EXPECT_EQ(bias.launch.grid[0], 128u);
  // conv1d as PyTorch views it: one row, a one-row kernel; 2 samples: PyTorch's block of 2 warps.
  const Candidate one_d = generate(Backward(T(f16, {2, 64, 1027}), T(f16, {2, 64, 1024}), T(f16, {64, 1, 4}), {1}, {3},
                                            {1}, {1, 1, 0}),
                                   P(64, 4, 0, 0));
  EXPECT_NE(one_d.source.find("IH = 1, IW = 1024, OH = 1, OW = 1027;"), std::string::npos);
  EXPECT_NE(one_d.source.find("SH = 1, SW = 1, PH = 0, PW = 3, DIL_H = 1, DIL_W = 1;"), std::string::npos);
  EXPECT_NE(one_d.source.find("KH = 1, KW = 4,"), std::string::npos);
  EXPECT_NE(one_d.source.find("VW = 2;"), std::string::npos);
  EXPECT_NE(one_d.source.find("typedef __half in_t;"), std::string::npos);
  // Odd rows: scalar stores past the row's last whole vector.
  const Candidate odd = generate(Backward(T(f32, {2, 8, 9, 9}), T(f32, {2, 8, 9, 9}), T(f32, {8, 1, 3, 3}), {1}, {1},
                                          {1}, {1, 0, 0}),
                                 P(64, 2, 0, 0));
  EXPECT_NE(odd.source.find("#define VEC_STORE 0"), std::string::npos);
  EXPECT_EQ(odd.launch.grid[0], (2u * 8u * 9u * 5u + 63u) / 64u);
}

// space_test.cc compiles for sm_90 (the H200's); the A100's sm_80 (no clusters: SourceHead's stubs) is a target
// too: each sample key's pairwise cover compiles there (every valid point with KJIT_FULL_SWEEP=1).
TEST(DepthwiseConvBackwardSpace, EveryPointCompilesForSm80) {
  DeviceFacts device = DeviceFacts::H200();
  device.arch = 80;
  device.sm_count = 108;
  Compiler compiler;
  auto found = FindFamily(Headroom());
  ASSERT_TRUE(found.ok());
  const Family& f = *found->family;
  size_t compiled = 0;
  for (const OpKey& key : f.SampleKeys()) {
    auto problem = f.Match(key);
    ASSERT_TRUE(problem.ok()) << problem.status().ToString();
    const bool full = std::getenv("KJIT_FULL_SWEEP") != nullptr;
    for (const Point& p : full ? ValidPoints(f, **problem, device) : PairwiseCover(f, **problem, device)) {
      auto c = f.Generate(**problem, p, device);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      CompileRequest request;
      request.source = c->source;
      request.program_name = "depthwise_conv_backward.cu";
      request.arch = 80;
      request.options = c->options;
      auto result = compiler.Compile(request);
      EXPECT_TRUE(result.ok()) << (*problem)->description << " " << PointToString(p) << ": "
                               << result.status().ToString().substr(0, 3000);
      ++compiled;
    }
  }
  EXPECT_GT(compiled, f.SampleKeys().size());
}

}  // namespace
}  // namespace kjit::policy
