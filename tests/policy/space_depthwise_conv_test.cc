// The depthwise convolution design space, on CPU: what it declines, the checks that follow the
// layout, the expert defaults, and the sources of older points (space_test.cc compiles every family's points).
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kjit/policy/design_space.h"
#include "space_test_util.h"

namespace kjit::policy {
namespace {

// aten::_conv_depthwise2d(self, weight, kernel_size, bias, stride, padding, dilation), as _convolution calls it.
OpKey DepthwiseKey(TensorDesc x, TensorDesc w, IntList k, Arg bias, IntList s, IntList p, IntList d) {
  return OpKey::Single("aten::_conv_depthwise2d", "", {std::move(x), std::move(w), k, std::move(bias), s, p, d}, 90);
}
// aten::cudnn_convolution(self, weight, padding, stride, dilation, groups, benchmark, deterministic, allow_tf32).
OpKey CudnnConvKey(TensorDesc x, TensorDesc w, IntList p, IntList s, IntList d, int64_t groups) {
  return OpKey::Single("aten::cudnn_convolution", "", {std::move(x), std::move(w), p, s, d, groups, false, false, true}, 90);
}
TensorDesc DepthwiseWeight(DType dt, int64_t c, int64_t kh, int64_t kw) { return TensorDesc::Contiguous(dt, {c, 1, kh, kw}); }

TEST(DepthwiseConvSpace, DeclinesWhatItCannotServe) {
  auto reason = [](const OpKey& key) {
    auto found = FindFamily(key);
    EXPECT_FALSE(found.ok()) << key.ToString();
    return found.ok() ? std::string() : found.status().message();
  };
  constexpr DType f32 = DType::kFloat32;
  const TensorDesc x = TensorDesc::Contiguous(f32, {2, 8, 16, 16});
  const TensorDesc w = DepthwiseWeight(f32, 8, 3, 3);
  // The composite ops never reach a CUDA kernel.
  EXPECT_FALSE(FindFamily(OpKey::Single("aten::convolution", "",
                                        {x, w, NoneArg{}, IntList{1, 1}, IntList{1, 1}, IntList{1, 1}, false,
                                         IntList{0, 0}, int64_t{8}},
                                        90))
                   .ok());
  // A channel multiplier of 2, and a grouped (not depthwise) cuDNN convolution.
  EXPECT_NE(reason(DepthwiseKey(x, DepthwiseWeight(f32, 16, 3, 3), {3, 3}, NoneArg{}, {1, 1}, {1, 1}, {1, 1}))
                .find("multiplier"),
            std::string::npos);
  EXPECT_NE(reason(CudnnConvKey(x, TensorDesc::Contiguous(f32, {8, 2, 3, 3}), {1, 1}, {1, 1}, {1, 1}, 4)).find("depthwise"),
            std::string::npos);
  EXPECT_NE(reason(DepthwiseKey(TensorDesc::Contiguous(DType::kFloat64, {2, 8, 16, 16}),
                                DepthwiseWeight(DType::kFloat64, 8, 3, 3), {3, 3}, NoneArg{}, {1, 1}, {1, 1}, {1, 1}))
                .find("not served"),
            std::string::npos);
  EXPECT_NE(reason(DepthwiseKey(x, DepthwiseWeight(DType::kFloat16, 8, 3, 3), {3, 3}, NoneArg{}, {1}, {1}, {1}))
                .find("weight dtype"),
            std::string::npos);
  EXPECT_NE(reason(DepthwiseKey(x, w, {3, 3}, TensorDesc::Contiguous(DType::kBFloat16, {8}), {1}, {1}, {1}))
                .find("bias dtype"),
            std::string::npos);
  // _conv_depthwise2d copies a non-contiguous input first; cuDNN copies an input whose layout is not
  // the output's (a channels_last weight makes the output channels_last).
  EXPECT_NE(reason(DepthwiseKey(ChannelsLast(f32, {2, 8, 16, 16}), w, {3, 3}, NoneArg{}, {1}, {1}, {1})).find("contiguous"),
            std::string::npos);
  EXPECT_NE(reason(CudnnConvKey(x, ChannelsLast(f32, {8, 1, 3, 3}), {1, 1}, {1, 1}, {1, 1}, 8)).find("copies"),
            std::string::npos);
  // What PyTorch rejects: a kernel larger than the padded input, kernel_size unlike the weight's.
  EXPECT_NE(reason(DepthwiseKey(TensorDesc::Contiguous(f32, {2, 8, 2, 2}), w, {3, 3}, NoneArg{}, {1}, {0}, {1}))
                .find("output size"),
            std::string::npos);
  EXPECT_NE(reason(DepthwiseKey(x, w, {3, 5}, NoneArg{}, {1}, {1}, {1})).find("kernel_size"), std::string::npos);
  EXPECT_NE(reason(DepthwiseKey(TensorDesc::Contiguous(f32, {8, 16, 16}), w, {3, 3}, NoneArg{}, {1}, {1}, {1})).find("4-D"),
            std::string::npos);
  EXPECT_NE(reason(DepthwiseKey(TensorDesc::Contiguous(f32, {0, 8, 16, 16}), w, {3, 3}, NoneArg{}, {1}, {1}, {1}))
                .find("empty"),
            std::string::npos);
  // Served: broadcast lists, a channels_last weight (the same bytes), padding beyond the kernel, cuDNN NCHW
  // and channels_last with a channels_last weight.
  EXPECT_TRUE(FindFamily(DepthwiseKey(x, ChannelsLast(f32, {8, 1, 3, 3}), {3, 3}, NoneArg{}, {2}, {4}, {3})).ok());
  EXPECT_TRUE(FindFamily(CudnnConvKey(x, w, {1, 1}, {1, 1}, {1, 1}, 8)).ok());
  EXPECT_TRUE(FindFamily(CudnnConvKey(ChannelsLast(f32, {2, 8, 16, 16}), ChannelsLast(f32, {8, 1, 3, 3}), {1, 1}, {1, 1},
                                      {2, 2}, 8))
                  .ok());
}

TEST(DepthwiseConvSpace, ChecksFollowTheLayout) {
  const DeviceFacts device = DeviceFacts::H200();
  auto point = [](int64_t strategy, int64_t threads, int64_t outs, int64_t rows, int64_t vec) {
    return Point{{"strategy", strategy}, {"threads", threads}, {"outs", outs}, {"rows", rows}, {"vec", vec}, {"hint", 0}};
  };
  auto match = [](const OpKey& key) {
    auto found = FindFamily(key);
    EXPECT_TRUE(found.ok()) << found.status().ToString();
    return std::move(*found);
  };
  auto why = [&](const Match& m, const Point& p) { return m.family->Check(*m.problem, p, device).message(); };
  constexpr DType f32 = DType::kFloat32, f16 = DType::kFloat16;
  const Match nchw = match(DepthwiseKey(TensorDesc::Contiguous(f32, {32, 128, 128, 128}), DepthwiseWeight(f32, 128, 3, 3),
                                        {3, 3}, TensorDesc::Contiguous(f32, {128}), {1, 1}, {1, 1}, {1, 1}));
  EXPECT_TRUE(nchw.family->Check(*nchw.problem, point(0, 256, 2, 1, 1), device).ok());
  EXPECT_TRUE(nchw.family->Check(*nchw.problem, point(1, 128, 4, 4, 1), device).ok());
  EXPECT_TRUE(nchw.family->Check(*nchw.problem, point(2, 256, 4, 8, 4), device).ok());
  EXPECT_NE(why(nchw, point(0, 256, 1, 1, 4)).find("one element"), std::string::npos);
  EXPECT_NE(why(nchw, point(0, 256, 1, 2, 1)).find("rows"), std::string::npos);
  EXPECT_NE(why(nchw, point(2, 256, 4, 8, 8)).find("16 bytes"), std::string::npos);
  // 8 rows x 8 outputs a thread and the 10 columns under them: 74 floats; 8 rows x 8 outs x 9 taps fits.
  EXPECT_TRUE(nchw.family->Check(*nchw.problem, point(1, 64, 8, 8, 1), device).ok());
  const Match cl = match(CudnnConvKey(ChannelsLast(f16, {8, 24, 56, 56}), DepthwiseWeight(f16, 24, 5, 5), {2, 2}, {1, 1},
                                      {1, 1}, 24));
  EXPECT_NE(why(cl, point(2, 256, 1, 1, 1)).find("NCHW"), std::string::npos);
  EXPECT_NE(why(cl, point(0, 256, 1, 1, 16)).find("16 bytes"), std::string::npos);
  // 24 channels: vectors of 8 (16 bytes of f16) divide them; 16 would not; a 4-byte aligned input allows only 2.
  EXPECT_TRUE(cl.family->Check(*cl.problem, point(1, 128, 2, 2, 8), device).ok());
  // 8 outputs x 8 channels held, plus the 12 columns of 8 under them: over the register budget.
  EXPECT_NE(why(cl, point(1, 64, 8, 1, 8)).find("held"), std::string::npos);
  TensorDesc misaligned = ChannelsLast(f16, {8, 24, 56, 56});
  misaligned.alignment = 4;
  const Match narrow = match(CudnnConvKey(misaligned, DepthwiseWeight(f16, 24, 5, 5), {2, 2}, {1, 1}, {1, 1}, 24));
  for (const Point& v : ValidPoints(*narrow.family, *narrow.problem, device)) EXPECT_LE(v.at("vec"), 2);
  // Slide: NCHW, whole warps, vectors dividing the thread's columns and the rows; rows over 8 are slide's.
  EXPECT_TRUE(nchw.family->Check(*nchw.problem, point(3, 128, 4, 16, 4), device).ok());
  EXPECT_TRUE(nchw.family->Check(*nchw.problem, point(3, 256, 4, 32, 2), device).ok());
  EXPECT_NE(why(nchw, point(3, 128, 2, 16, 4)).find("divide"), std::string::npos);
  EXPECT_NE(why(nchw, point(1, 128, 4, 16, 1)).find("slide"), std::string::npos);
  EXPECT_NE(why(nchw, point(2, 128, 4, 16, 4)).find("slide"), std::string::npos);
  EXPECT_NE(why(cl, point(3, 128, 2, 2, 8)).find("NCHW"), std::string::npos);
  const Match odd = match(DepthwiseKey(TensorDesc::Contiguous(f32, {31, 128, 127, 127}), DepthwiseWeight(f32, 128, 3, 3),
                                       {3, 3}, NoneArg{}, {1, 1}, {1, 1}, {1, 1}));
  EXPECT_NE(why(odd, point(3, 128, 4, 16, 4)).find("input rows"), std::string::npos);
  EXPECT_TRUE(odd.family->Check(*odd.problem, point(3, 128, 4, 16, 1), device).ok());
  // Rows of a million: staging whole rows exceeds shared memory; the other strategies remain.
  const Match long_rows = match(DepthwiseKey(TensorDesc::Contiguous(f32, {1, 4, 4, 1 << 20}), DepthwiseWeight(f32, 4, 3, 3),
                                             {3, 3}, NoneArg{}, {1, 1}, {1, 1}, {1, 1}));
  EXPECT_NE(why(long_rows, point(2, 256, 4, 1, 4)).find("shared memory"), std::string::npos);
  for (const Point& v : ValidPoints(*long_rows.family, *long_rows.problem, device)) EXPECT_NE(v.at("strategy"), 2);
  // Stride at least the window's height: output rows share no input row, so no point holds or stages
  // several; a dilation of 40 puts 81 input rows under one output row, too many to unroll.
  const Match apart = match(DepthwiseKey(TensorDesc::Contiguous(f32, {2, 8, 64, 64}), DepthwiseWeight(f32, 8, 1, 1), {1, 1},
                                         NoneArg{}, {2, 2}, {0, 0}, {1, 1}));
  EXPECT_NE(why(apart, point(1, 64, 2, 2, 1)).find("overlap"), std::string::npos);
  EXPECT_NE(why(apart, point(2, 64, 2, 2, 1)).find("overlap"), std::string::npos);
  const Match dilated = match(DepthwiseKey(TensorDesc::Contiguous(f32, {2, 8, 100, 64}), DepthwiseWeight(f32, 8, 3, 1), {3, 1},
                                           NoneArg{}, {1, 1}, {40, 0}, {40, 1}));
  EXPECT_NE(why(dilated, point(1, 64, 2, 1, 1)).find("input rows"), std::string::npos);
  EXPECT_TRUE(dilated.family->Check(*dilated.problem, point(0, 64, 2, 1, 1), device).ok());
  // A 31x31 kernel: 961 taps; two outputs unrolled fit, eight do not.
  const Match large = match(DepthwiseKey(TensorDesc::Contiguous(f32, {2, 8, 64, 64}), DepthwiseWeight(f32, 8, 31, 31),
                                         {31, 31}, NoneArg{}, {1, 1}, {15, 15}, {1, 1}));
  EXPECT_TRUE(large.family->Check(*large.problem, point(0, 128, 2, 1, 1), device).ok());
  EXPECT_NE(why(large, point(0, 128, 8, 1, 1)).find("multiply-adds"), std::string::npos);
}

TEST(DepthwiseConvSpace, ExpertDefaultsFitTheShapeAndTheAbi) {
  const DeviceFacts device = DeviceFacts::H200();
  auto default_of = [&](const OpKey& key, Candidate* out = nullptr) {
    auto found = FindFamily(key);
    EXPECT_TRUE(found.ok()) << found.status().ToString();
    const Point p = found->family->ExpertDefault(*found->problem, device);
    EXPECT_TRUE(found->family->Check(*found->problem, p, device).ok()) << PointToString(p);
    auto c = found->family->Generate(*found->problem, p, device);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    if (out && c.ok()) *out = *c;
    return p;
  };
  constexpr DType f32 = DType::kFloat32, f16 = DType::kFloat16, bf16 = DType::kBFloat16;
  // The headroom case: slide (codegen 2; codegen 1's measured best was blocked 8 rows x 4 outputs), a
  // thread walking down 16 rows of 4 outputs in 16-byte loads, 128 threads, streaming stores (256 MB
  // each way).
  Candidate c;
  Point p = default_of(DepthwiseKey(TensorDesc::Contiguous(f32, {32, 128, 128, 128}), DepthwiseWeight(f32, 128, 3, 3),
                                    {3, 3}, TensorDesc::Contiguous(f32, {128}), {1, 1}, {1, 1}, {1, 1}),
                       &c);
  EXPECT_EQ(p.at("strategy"), 3) << PointToString(p);
  EXPECT_EQ(p.at("rows"), 16) << PointToString(p);
  EXPECT_EQ(p.at("outs"), 4) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 4) << PointToString(p);
  EXPECT_EQ(p.at("threads"), 128) << PointToString(p);
  EXPECT_EQ(p.at("hint"), 1) << PointToString(p);
  // (x, weight, bias, out): the bias pointer is passed (null when absent) whether or not the key has one.
  // (The parameter list is the macro KJIT_PARAMS, which every strategy's kernel takes.)
  EXPECT_NE(c.source.find("#define KJIT_PARAMS const in_t* __restrict__ x, const in_t* __restrict__ wt, "
                          "const in_t* __restrict__ bias, out_t* __restrict__ y\n"),
            std::string::npos);
  EXPECT_NE(c.source.find("kjit_depthwise_conv(KJIT_PARAMS)"), std::string::npos);
  // A thread per 16 x 4 outputs: 32 x 128 planes x 8 row tiles x 32 column groups, 128 a block.
  EXPECT_EQ(c.launch.grid[0], 32u * 128u * 8u * 32u / 128u);
  EXPECT_EQ(c.launch.dynamic_shared_bytes, 0u);
  Candidate nobias;
  default_of(DepthwiseKey(TensorDesc::Contiguous(f32, {2, 8, 16, 16}), DepthwiseWeight(f32, 8, 3, 3), {3, 3}, NoneArg{}, {1},
                          {1}, {1}),
             &nobias);
  EXPECT_NE(nobias.source.find("const in_t* __restrict__ bias"), std::string::npos);
  EXPECT_NE(nobias.source.find("#define BIAS_OF(ch) (0.f)"), std::string::npos);
  // cudnn_convolution: (x, weight, out); channels_last: blocked over 4-channel vectors.
  p = default_of(CudnnConvKey(ChannelsLast(f32, {8, 64, 56, 56}), DepthwiseWeight(f32, 64, 3, 3), {1, 1}, {1, 1}, {1, 1}, 64),
                 &c);
  EXPECT_EQ(p.at("strategy"), 1) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 4) << PointToString(p);
  EXPECT_NE(c.source.find("#define KJIT_PARAMS const in_t* __restrict__ x, const in_t* __restrict__ wt, "
                          "out_t* __restrict__ y\n"),
            std::string::npos);
  // 4 channels a thread in 2-byte types too (measured: 8-byte vectors beat 16-byte ones for bf16).
  p = default_of(CudnnConvKey(ChannelsLast(bf16, {8, 64, 56, 56}), DepthwiseWeight(bf16, 64, 3, 3), {1, 1}, {1, 1}, {1, 1},
                              64));
  EXPECT_EQ(p.at("vec"), 4) << PointToString(p);
  EXPECT_EQ(p.at("rows"), 4) << PointToString(p);
  // 2-byte elements: slide, 8 outputs (16 bytes) along W; 56 rows: 8 a thread (16 would idle 8 of 64).
  p = default_of(DepthwiseKey(TensorDesc::Contiguous(bf16, {8, 64, 56, 56}), DepthwiseWeight(bf16, 64, 3, 3), {3, 3},
                              NoneArg{}, {1, 1}, {1, 1}, {1, 1}));
  EXPECT_EQ(p.at("strategy"), 3) << PointToString(p);
  EXPECT_EQ(p.at("outs"), 8) << PointToString(p);
  EXPECT_EQ(p.at("rows"), 8) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 8) << PointToString(p);
  // An odd width (127): slide with element loads (no vector divides the rows), 16 rows.
  p = default_of(DepthwiseKey(TensorDesc::Contiguous(f32, {31, 128, 127, 127}), DepthwiseWeight(f32, 128, 3, 3), {3, 3},
                              TensorDesc::Contiguous(f32, {128}), {1, 1}, {1, 1}, {1, 1}));
  EXPECT_EQ(p.at("strategy"), 3) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 1) << PointToString(p);
  EXPECT_EQ(p.at("rows"), 16) << PointToString(p);
  // Stride 2 along W: blocked as before (a neighbour's columns are not the halo's).
  p = default_of(DepthwiseKey(TensorDesc::Contiguous(bf16, {8, 64, 56, 56}), DepthwiseWeight(bf16, 64, 5, 5), {5, 5},
                              NoneArg{}, {2, 2}, {2, 2}, {1, 1}));
  EXPECT_EQ(p.at("strategy"), 1) << PointToString(p);
  // Windows that do not overlap (1x1, stride 2): one output row a thread; stride 2 halves the outputs
  // along W that share columns.
  p = default_of(DepthwiseKey(TensorDesc::Contiguous(f16, {8, 32, 64, 64}), DepthwiseWeight(f16, 32, 1, 1), {1, 1}, NoneArg{},
                              {2, 2}, {0, 0}, {1, 1}));
  EXPECT_EQ(p.at("rows"), 1) << PointToString(p);
  EXPECT_EQ(p.at("outs"), 4) << PointToString(p);
  // Odd, tiny, wide and large-kernel keys each have a valid default that generates.
  default_of(DepthwiseKey(TensorDesc::Contiguous(bf16, {1, 2, 1, 1}), DepthwiseWeight(bf16, 2, 1, 1), {1, 1}, NoneArg{}, {1},
                          {0}, {1}));
  default_of(DepthwiseKey(TensorDesc::Contiguous(f32, {1, 4, 4, 1 << 20}), DepthwiseWeight(f32, 4, 3, 3), {3, 3}, NoneArg{},
                          {1, 1}, {1, 1}, {1, 1}));
  default_of(DepthwiseKey(TensorDesc::Contiguous(f32, {2, 8, 64, 64}), DepthwiseWeight(f32, 8, 31, 31), {31, 31}, NoneArg{},
                          {1, 1}, {15, 15}, {1, 1}));
  default_of(CudnnConvKey(ChannelsLast(f16, {2, 3, 5, 7}), DepthwiseWeight(f16, 3, 5, 5), {4, 4}, {2, 1}, {3, 3}, 3));
}

TEST(DepthwiseConvSpace, CudnnIsNotFedSpecialValues) {
  (void)Families();  // declares the traits
  // On the H200, cuDNN multiplies padding as zeros (an Inf weight at a padding tap gives NaN);
  // _conv_depthwise2d skips padding taps, as kjit's kernels do.
  EXPECT_FALSE(TraitsFor("aten::cudnn_convolution").special_values);
  EXPECT_TRUE(TraitsFor("aten::_conv_depthwise2d").special_values);
  EXPECT_EQ(TraitsFor("aten::_conv_depthwise2d").compare, ComparePolicy::kClose);
}

}  // namespace
}  // namespace kjit::policy
