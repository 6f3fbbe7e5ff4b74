// The pool_backward design space, on CPU: what it declines, its checks, its expert defaults and what its sources
// are specialised on (space_test.cc compiles every family's points and pins their sources).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kjit/policy/design_space.h"
#include "kjit/policy/op_traits.h"
#include "space_test_util.h"

namespace kjit::policy {
namespace {

constexpr DType f32 = DType::kFloat32, f16 = DType::kFloat16, bf16 = DType::kBFloat16;

// self's sizes and the pooled sizes (grad_output's and the indices') given by hand.
OpKey MaxBackward(DType dt, std::vector<int64_t> self, std::vector<int64_t> out, IntList k, IntList s, IntList p,
                  IntList d, bool ceil) {
  return OpKey::Single("aten::max_pool2d_with_indices_backward", "",
                       {TensorDesc::Contiguous(dt, out), TensorDesc::Contiguous(dt, self), k, s, p, d, ceil,
                        TensorDesc::Contiguous(DType::kInt64, out)},
                       90);
}
OpKey AvgBackward(DType dt, std::vector<int64_t> self, std::vector<int64_t> out, IntList k, IntList s, IntList p,
                  bool ceil, bool include, Arg div, const char* op = "aten::avg_pool2d_backward") {
  return OpKey::Single(op, "",
                       {TensorDesc::Contiguous(dt, out), TensorDesc::Contiguous(dt, self), k, s, p, ceil, include,
                        std::move(div)},
                       90);
}
OpKey Stem(DType dt = f32) {
  return MaxBackward(dt, {32, 64, 112, 112}, {32, 64, 56, 56}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false);
}

std::string Reason(const OpKey& key) { return FindFamily(key).status().message(); }

Point P(int64_t threads, int64_t outs, int64_t rows, int64_t hint = 0) {
  return {{"threads", threads}, {"outs", outs}, {"rows", rows}, {"hint", hint}};
}

TEST(PoolBackwardSpace, DeclinesWhatItCannotServe) {
  EXPECT_TRUE(FindFamily(Stem()).ok());
  EXPECT_TRUE(FindFamily(AvgBackward(bf16, {64, 28, 28}, {64, 14, 14}, {2}, {}, {0}, false, true, NoneArg{})).ok());
  EXPECT_NE(Reason(Stem(DType::kFloat64)).find("not served"), std::string::npos);
  // channels_last: PyTorch's NHWC kernels.
  OpKey cl = Stem();
  cl.calls[0].args[1] = TensorDesc{f32, {32, 64, 112, 112}, {64 * 112 * 112, 1, 112 * 64, 64}, 0, 16};
  EXPECT_NE(Reason(cl).find("channels_last"), std::string::npos) << Reason(cl);
  OpKey strided = Stem();
  strided.calls[0].args[1] = TensorDesc{f32, {32, 64, 112, 112}, {64 * 112 * 224, 112 * 224, 224, 2}, 0, 16};
  EXPECT_NE(Reason(strided).find("neither contiguous nor channels_last"), std::string::npos) << Reason(strided);
  // grad_output and indices: the pooled shape, contiguous, int64 indices.
  EXPECT_NE(Reason(MaxBackward(f32, {32, 64, 112, 112}, {32, 64, 55, 56}, {3}, {2}, {1}, {1}, false))
                .find("pooled shape"),
            std::string::npos);
  // ceil_mode changes the pooled shape: 17 -> 8 floor, 9 ceil.
  EXPECT_TRUE(FindFamily(MaxBackward(f32, {2, 3, 17, 17}, {2, 3, 9, 9}, {2}, {2}, {0}, {1}, true)).ok());
  EXPECT_FALSE(FindFamily(MaxBackward(f32, {2, 3, 17, 17}, {2, 3, 9, 9}, {2}, {2}, {0}, {1}, false)).ok());
  OpKey int32_indices = Stem();
  int32_indices.calls[0].args[7] = TensorDesc::Contiguous(DType::kInt32, {32, 64, 56, 56});
  EXPECT_NE(Reason(int32_indices).find("int64"), std::string::npos);
  OpKey strided_grad = Stem();
  strided_grad.calls[0].args[0] = TensorDesc{f32, {32, 64, 56, 56}, {64 * 56 * 56, 1, 56 * 64, 64}, 0, 16};
  EXPECT_NE(Reason(strided_grad).find("non-contiguous grad_output"), std::string::npos) << Reason(strided_grad);
  OpKey mixed = Stem();
  mixed.calls[0].args[0] = TensorDesc::Contiguous(f16, {32, 64, 56, 56});
  EXPECT_NE(Reason(mixed).find("dtype"), std::string::npos);
  // Arguments PyTorch rejects.
  EXPECT_NE(Reason(MaxBackward(f32, {2, 3, 8, 8}, {2, 3, 4, 4}, {2}, {2}, {2}, {1}, false)).find("padding"),
            std::string::npos);
  EXPECT_NE(Reason(AvgBackward(f32, {2, 3, 8, 8}, {2, 3, 4, 4}, {2}, {2}, {0}, false, true, int64_t{0}))
                .find("divisor_override 0"),
            std::string::npos);
  EXPECT_NE(Reason(MaxBackward(f32, {2, 3, 8, 8}, {2, 3, 4, 4}, {2, 2, 2}, {2}, {0}, {1}, false)).find("kernel_size"),
            std::string::npos);
  EXPECT_NE(Reason(MaxBackward(f32, {8, 8}, {4, 4}, {2}, {2}, {0}, {1}, false)).find("[C, H, W]"), std::string::npos);
  EXPECT_NE(Reason(AvgBackward(f32, {2, 3, 80, 80}, {2, 3, 1, 1}, {65, 65}, {65}, {0}, false, true, NoneArg{}))
                .find("4096"),
            std::string::npos);
  EXPECT_EQ(FindFamily(MaxBackward(f32, {0, 3, 8, 8}, {0, 3, 4, 4}, {2}, {2}, {0}, {1}, false)).status().code(),
            StatusCode::kNotFound);
}

TEST(PoolBackwardSpace, IndicesAreFlatPositionsInSelfsPlane) {
  (void)Families();  // registers the traits
  const OpTraits t = TraitsFor("aten::max_pool2d_with_indices_backward");
  ASSERT_EQ(t.int_domains.count(7), 1u);
  const IntDomain d = t.int_domains.at(7);
  EXPECT_EQ(d.low, 0);
  EXPECT_EQ(d.size_of_arg, 1);
  EXPECT_EQ(d.size_of_dim, -2);
  EXPECT_EQ(d.size_of_dims, 2);
  EXPECT_TRUE(TraitsFor("aten::avg_pool2d_backward").int_domains.empty());
}

TEST(PoolBackwardSpace, ChecksAndDefaults) {
  const DeviceFacts dev = DeviceFacts::H200();
  auto found = FindFamily(Stem());
  ASSERT_TRUE(found.ok());
  const Family& f = *found->family;
  EXPECT_EQ(f.name(), "pool_backward");
  const Problem& stem = *found->problem;
  // 2 elements a thread along an even row, 256 threads; 102 MB of tensors: streaming stores.
  const Point p = f.ExpertDefault(stem, dev);
  EXPECT_EQ(PointToString(p), PointToString(P(256, 2, 1, 1)));
  EXPECT_TRUE(f.Check(stem, p, dev).ok());
  EXPECT_TRUE(f.Check(stem, P(1024, 4, 2), dev).ok());
  EXPECT_FALSE(f.Check(stem, P(256, 4, 4), dev).ok());  // 16 accumulators
  // An odd row: one element a thread; a small key: no streaming stores.
  auto odd = FindFamily(AvgBackward(f16, {8, 32, 63, 65}, {8, 32, 32, 33}, {3}, {2}, {1}, true, false, NoneArg{}));
  ASSERT_TRUE(odd.ok());
  EXPECT_EQ(PointToString(f.ExpertDefault(*odd->problem, dev)), PointToString(P(256, 1, 1, 0)));
  EXPECT_TRUE(f.Check(*odd->problem, P(128, 4, 2), dev).ok());  // scalar stores past the row's last vector
  // A row of 3, a plane of 2 rows.
  auto tiny = FindFamily(MaxBackward(f32, {2, 3}, {1, 1}, {2, 3}, {2, 3}, {0, 0}, {1, 1}, false));
  ASSERT_FALSE(tiny.ok());  // 2-D self
  auto small = FindFamily(MaxBackward(f32, {1, 2, 3}, {1, 1, 1}, {2, 3}, {2, 3}, {0, 0}, {1, 1}, false));
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  EXPECT_FALSE(f.Check(*small->problem, P(64, 4, 1), dev).ok());  // outs > W
  EXPECT_FALSE(f.Check(*small->problem, P(64, 1, 4), dev).ok());  // rows > H
  EXPECT_FALSE(f.Check(*small->problem, P(128, 1, 1), dev).ok());  // 3 items
  EXPECT_EQ(PointToString(f.ExpertDefault(*small->problem, dev)), PointToString(P(64, 1, 1, 0)));
}

TEST(PoolBackwardSpace, SourcesAreSpecialisedOnTheOpAndTheSizes) {
  const DeviceFacts dev = DeviceFacts::H200();
  auto generate = [&](const OpKey& key, const Point* pt = nullptr) {
    auto found = FindFamily(key);
    EXPECT_TRUE(found.ok()) << found.status().ToString();
    auto c = found->family->Generate(*found->problem, pt ? *pt : found->family->ExpertDefault(*found->problem, dev),
                                     dev);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return *c;
  };
  const Candidate stem = generate(Stem());
  EXPECT_EQ(stem.entry_point, "kjit_pool_backward");
  // 32 x 64 planes x 112 rows x 56 pairs, 256 a block.
  EXPECT_EQ(stem.launch.grid[0], 32u * 64u * 112u * 56u / 256u);
  EXPECT_EQ(stem.launch.workspace_bytes, 0u);
  EXPECT_NE(stem.source.find("typedef int idx_t;"), std::string::npos);
  EXPECT_NE(stem.source.find("#define IS_MAX 1"), std::string::npos);
  EXPECT_NE(stem.source.find("#define VEC_STORE 1"), std::string::npos);
  EXPECT_NE(stem.source.find("EXT_H = 3, EXT_W = 3"), std::string::npos);
  EXPECT_NE(stem.source.find("const long long* __restrict__ ind, out_t* __restrict__ dx"), std::string::npos);
  // Average pooling: no indices; the divisor and the float16 rounding of the quotient.
  const Candidate avg =
      generate(AvgBackward(f16, {4, 24, 15, 15}, {4, 24, 8, 8}, {2, 3}, {2}, {1}, false, true, int64_t{5}));
  EXPECT_EQ(avg.source.find("ind,"), std::string::npos);
  EXPECT_NE(avg.source.find("#define USE_DIVISOR 1"), std::string::npos);
  EXPECT_NE(avg.source.find("DIVISOR = 5;"), std::string::npos);
  EXPECT_NE(avg.source.find("#define ROUND_QUOTIENT 1"), std::string::npos);
  EXPECT_NE(avg.source.find("#define VEC_STORE 1"), std::string::npos);  // one element a thread
  const Point pairs = P(64, 2, 1);
  const Candidate odd_row =
      generate(AvgBackward(f16, {4, 24, 15, 15}, {4, 24, 8, 8}, {2, 3}, {2}, {1}, false, true, int64_t{5}), &pairs);
  EXPECT_NE(odd_row.source.find("#define VEC_STORE 0"), std::string::npos);  // pairs along a row of 15: scalars
  EXPECT_EQ(odd_row.launch.grid[0], (4u * 24u * 15u * 8u + 63u) / 64u);
  // Dilation in the window's extent: (3 - 1) * 2 + 1.
  const Candidate dilated = generate(MaxBackward(f32, {8, 32, 33, 33}, {8, 32, 31, 31}, {3}, {1}, {1}, {2}, false));
  EXPECT_NE(dilated.source.find("EXT_H = 5, EXT_W = 5"), std::string::npos);
  EXPECT_NE(dilated.source.find("#define ROUND_QUOTIENT 0"), std::string::npos);
  // Planes of 2^31 elements and more: 64-bit indices.
  const Candidate wide = generate(AvgBackward(f32, {2, 1, 32768, 32768}, {2, 1, 16384, 16384}, {2}, {2}, {0}, false,
                                              true, NoneArg{}));
  EXPECT_NE(wide.source.find("typedef long long idx_t;"), std::string::npos);
  // A thread's rows and outputs.
  const Point two_by_four = P(128, 4, 2);
  const Candidate block = generate(Stem(), &two_by_four);
  EXPECT_NE(block.source.find("OUTS = 4, ROWS = 2;"), std::string::npos);
  EXPECT_EQ(block.launch.grid[0], 32u * 64u * 56u * 28u / 128u);
}

// 3-D pooling's backward: the same space over [N, C, D, H, W] (or [C, D, H, W]) with a depth loop (DIMS3); what
// it declines; max pooling's indices made by the forward op.
OpKey Avg3dBackward(DType dt, std::vector<int64_t> self, std::vector<int64_t> out, IntList k, IntList s, IntList p,
                    bool ceil, bool include, Arg div) {
  return AvgBackward(dt, std::move(self), std::move(out), k, s, p, ceil, include, std::move(div),
                     "aten::avg_pool3d_backward");
}

TEST(PoolBackwardSpace, Pool3dBackwardAddsTheDepth) {
  const DeviceFacts dev = DeviceFacts::H200();
  // A video network's k2 s2 over 8 x 28 x 28.
  const OpKey video = Avg3dBackward(f32, {4, 64, 8, 28, 28}, {4, 64, 4, 14, 14}, {2}, {2}, {0}, false, true, NoneArg{});
  auto found = FindFamily(video);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->family->name(), "pool_backward");
  EXPECT_NE(found->problem->description.find("avg_pool3d_backward f32 N=4 C=64 in=8x28x28 out=4x14x14 k=2x2x2 s=2x2x2 p=0x0x0 include_pad"),
            std::string::npos)
      << found->problem->description;
  const Point p = found->family->ExpertDefault(*found->problem, dev);
  auto c = found->family->Generate(*found->problem, p, dev);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_NE(c->source.find("#define DIMS3 1"), std::string::npos);
  EXPECT_NE(c->source.find("D = 8, OD = 4, KD = 2, SD = 2, PD = 0, EXT_D = 2;"), std::string::npos);
  // A thread per 2 elements of a row of one depth slice: 4 x 64 planes x 8 slices x 28 rows x 14 pairs; 7 MB of
  // tensors: no streaming stores.
  EXPECT_EQ(PointToString(p), PointToString(P(256, 2, 1, 0)));
  EXPECT_EQ(c->launch.grid[0], (4u * 64u * 8u * 28u * 14u + 255u) / 256u);
  // 2-D keys say so, and their kernels have no depth.
  auto two_d = FindFamily(Stem());
  ASSERT_TRUE(two_d.ok());
  auto stem = two_d->family->Generate(*two_d->problem, two_d->family->ExpertDefault(*two_d->problem, dev), dev);
  ASSERT_TRUE(stem.ok());
  EXPECT_NE(stem->source.find("#define DIMS3 0"), std::string::npos);
  EXPECT_EQ(stem->source.find("constexpr idx_t D ="), std::string::npos);
  // Unbatched, lists of one value, a divisor; the pooled shape along D checked too.
  EXPECT_TRUE(FindFamily(Avg3dBackward(f16, {4, 6, 10, 10}, {4, 4, 6, 6}, {2, 3, 3}, {2, 2, 2}, {1, 1, 1}, true, true,
                                       int64_t{7}))
                  .ok());
  EXPECT_NE(Reason(Avg3dBackward(f32, {4, 64, 8, 28, 28}, {4, 64, 5, 14, 14}, {2}, {2}, {0}, false, true, NoneArg{}))
                .find("pooled shape"),
            std::string::npos);
  EXPECT_NE(Reason(Avg3dBackward(f32, {64, 8, 28}, {64, 4, 14}, {2}, {2}, {0}, false, true, NoneArg{}))
                .find("[C, D, H, W]"),
            std::string::npos);
  EXPECT_NE(Reason(Avg3dBackward(f32, {2, 3, 20, 20, 20}, {2, 3, 1, 1, 1}, {17}, {17}, {0}, false, true, NoneArg{}))
                .find("4096"),
            std::string::npos);  // 17^3 elements a window
  OpKey cl = video;
  cl.calls[0].args[1] = TensorDesc{f32, {4, 64, 8, 28, 28}, {64 * 8 * 28 * 28, 1, 28 * 28 * 64, 28 * 64, 64}, 0, 16};
  EXPECT_NE(Reason(cl).find("not contiguous"), std::string::npos) << Reason(cl);
  // 3-D max pooling's backward: the index compared is a flat position in the plane's volume; PyTorch adds each
  // gradient at its index wherever it lies, so the evaluator makes the indices with the forward op.
  OpKey max3 = OpKey::Single("aten::max_pool3d_with_indices_backward", "",
                             {TensorDesc::Contiguous(f32, {2, 3, 4, 4, 4}), TensorDesc::Contiguous(f32, {2, 3, 8, 8, 8}),
                              IntList{2}, IntList{2}, IntList{0}, IntList{1}, false,
                              TensorDesc::Contiguous(DType::kInt64, {2, 3, 4, 4, 4})},
                             90);
  auto max3_found = FindFamily(max3);
  ASSERT_TRUE(max3_found.ok()) << max3_found.status().ToString();
  auto max3_source = max3_found->family->Generate(
      *max3_found->problem, max3_found->family->ExpertDefault(*max3_found->problem, dev), dev);
  ASSERT_TRUE(max3_source.ok());
  EXPECT_NE(max3_source->source.find("#define IS_MAX 1"), std::string::npos);
  EXPECT_NE(max3_source->source.find("#define DIMS3 1"), std::string::npos);
  const OpTraits t = TraitsFor("aten::max_pool3d_with_indices_backward");
  ASSERT_EQ(t.derived_inputs.count(7), 1u);
  EXPECT_EQ(t.derived_inputs.at(7).op, "aten::max_pool3d_with_indices");
  EXPECT_EQ(t.derived_inputs.at(7).args, (std::vector<int>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(t.derived_inputs.at(7).output, 1);
  EXPECT_TRUE(t.int_domains.empty());
}

}  // namespace
}  // namespace kjit::policy
