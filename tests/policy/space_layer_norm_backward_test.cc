// The layer_norm_backward design space, on CPU: what it declines, its checks, its expert defaults and what its
// sources are specialised on (space_test.cc compiles every family's points and pins their sources).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kjit/policy/design_space.h"
#include "space_test_util.h"

namespace kjit::policy {
namespace {

constexpr DType f32 = DType::kFloat32, f16 = DType::kFloat16, bf16 = DType::kBFloat16;

TensorDesc Stats(std::vector<int64_t> sizes, size_t normalized) {
  for (size_t i = sizes.size() - normalized; i < sizes.size(); ++i) sizes[i] = 1;
  return TensorDesc::Contiguous(f32, sizes);
}

OpKey LayerNormBackward(DType dt, std::vector<int64_t> sizes, std::vector<int64_t> shape, bool weight, bool bias,
                        IntList mask) {
  return OpKey::Single("aten::native_layer_norm_backward", "",
                       {TensorDesc::Contiguous(dt, sizes), TensorDesc::Contiguous(dt, sizes), IntList(shape),
                        Stats(sizes, shape.size()), Stats(sizes, shape.size()),
                        weight ? Arg(TensorDesc::Contiguous(dt, shape)) : Arg(NoneArg{}),
                        bias ? Arg(TensorDesc::Contiguous(dt, shape)) : Arg(NoneArg{}), std::move(mask)},
                       90);
}

OpKey RmsNormBackward(DType dt, std::vector<int64_t> sizes, std::vector<int64_t> shape, bool weight, IntList mask) {
  return OpKey::Single("aten::_fused_rms_norm_backward", "",
                       {TensorDesc::Contiguous(dt, sizes), TensorDesc::Contiguous(dt, sizes), IntList(shape),
                        Stats(sizes, shape.size()), weight ? Arg(TensorDesc::Contiguous(dt, shape)) : Arg(NoneArg{}),
                        std::move(mask)},
                       90);
}

std::string Reason(const OpKey& key) { return FindFamily(key).status().message(); }

TEST(LayerNormBackwardSpace, DeclinesWhatItCannotServe) {
  EXPECT_TRUE(FindFamily(LayerNormBackward(f32, {64, 128}, {128}, true, true, {1, 1, 1})).ok());
  EXPECT_TRUE(FindFamily(RmsNormBackward(bf16, {64, 128}, {128}, true, {1, 1})).ok());
  EXPECT_NE(Reason(LayerNormBackward(DType::kFloat64, {64, 128}, {128}, true, true, {1, 1, 1})).find("not served"),
            std::string::npos);
  EXPECT_NE(Reason(LayerNormBackward(f32, {64, 128}, {128}, true, true, {0, 0, 0})).find("no gradient"),
            std::string::npos);
  // PyTorch allocates grad_weight like the weight: without one the call fails there, and is declined here.
  EXPECT_NE(Reason(LayerNormBackward(f32, {64, 128}, {128}, false, true, {1, 1, 1})).find("without a weight"),
            std::string::npos);
  EXPECT_NE(Reason(LayerNormBackward(f32, {64, 128}, {128}, true, false, {1, 1, 1})).find("without a bias"),
            std::string::npos);
  EXPECT_NE(Reason(LayerNormBackward(f32, {64, 128}, {128}, true, true, {1, 2, 1})).find("bool"), std::string::npos);
  EXPECT_NE(Reason(LayerNormBackward(f32, {64, 128}, {128}, true, true, {1, 1})).find("length"), std::string::npos);
  EXPECT_NE(Reason(LayerNormBackward(f32, {64, 128}, {64}, true, true, {1, 1, 1})).find("trailing"),
            std::string::npos);
  EXPECT_EQ(FindFamily(LayerNormBackward(f32, {0, 128}, {128}, true, true, {1, 1, 1})).status().code(),
            StatusCode::kNotFound);
  // Mixed dtypes: a float32 weight for a bfloat16 input.
  OpKey mixed = LayerNormBackward(bf16, {64, 128}, {128}, true, true, {1, 1, 1});
  mixed.calls[0].args[5] = TensorDesc::Contiguous(f32, {128});
  EXPECT_NE(Reason(mixed).find("dtype differs"), std::string::npos) << Reason(mixed);
  // Statistics that are not one float32 value a row.
  OpKey stats = LayerNormBackward(f32, {64, 128}, {128}, true, true, {1, 1, 1});
  stats.calls[0].args[4] = TensorDesc::Contiguous(f16, {64, 1});
  EXPECT_NE(Reason(stats).find("rstd is not float32"), std::string::npos) << Reason(stats);
  TensorDesc transposed = TensorDesc::Contiguous(f32, {64, 128});
  transposed.strides = {1, 64};
  OpKey strided = LayerNormBackward(f32, {64, 128}, {128}, true, true, {1, 1, 1});
  strided.calls[0].args[0] = transposed;
  EXPECT_NE(Reason(strided).find("non-contiguous"), std::string::npos) << Reason(strided);
}

Point DefaultOf(const OpKey& key) {
  auto found = FindFamily(key);
  EXPECT_TRUE(found.ok()) << found.status().ToString();
  if (!found.ok()) return {};
  EXPECT_EQ(found->family->name(), "layer_norm_backward");
  const Point p = found->family->ExpertDefault(*found->problem, DeviceFacts::H200());
  EXPECT_TRUE(found->family->Check(*found->problem, p, DeviceFacts::H200()).ok()) << PointToString(p);
  return p;
}

TEST(LayerNormBackwardSpace, ExpertDefaultsFollowTheShape) {
  // A transformer's rows of 768 floats: a warp a row (6 vectors of 4 a lane), column tiles of 128 floats split
  // into chunks until the column blocks fill the GPU twice over.
  Point p = DefaultOf(LayerNormBackward(f32, {8192, 768}, {768}, true, true, {1, 1, 1}));
  EXPECT_EQ(p.at("strategy"), 0) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 4) << PointToString(p);
  EXPECT_EQ(p.at("col_vec"), 4) << PointToString(p);
  EXPECT_EQ(p.at("chunks"), 32) << PointToString(p);  // 6 tiles x 32 chunks <= 264 blocks
  // Rows of 4096 halves: a block a row, held.
  p = DefaultOf(LayerNormBackward(f16, {4096, 4096}, {4096}, true, true, {1, 1, 1}));
  EXPECT_EQ(p.at("strategy"), 1) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 8) << PointToString(p);
  EXPECT_EQ(p.at("col_vec"), 8) << PointToString(p);
  // Long rows: read twice.
  p = DefaultOf(LayerNormBackward(f32, {128, 50000}, {50000}, true, true, {1, 1, 1}));
  EXPECT_EQ(p.at("strategy"), 2) << PointToString(p);
  // The parameters' gradients only: grad_input's knobs at their one value; few rows, one chunk.
  p = DefaultOf(LayerNormBackward(f32, {128, 50000}, {50000}, true, true, {0, 1, 1}));
  EXPECT_EQ(p.at("strategy"), 0) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 1) << PointToString(p);
  EXPECT_EQ(p.at("chunks"), 1) << PointToString(p);
  // The input's gradient only: the column knobs at their one value.
  p = DefaultOf(LayerNormBackward(f32, {512, 33}, {33}, false, false, {1, 0, 0}));
  EXPECT_EQ(p.at("col_vec"), 1) << PointToString(p);
  EXPECT_EQ(p.at("chunks"), 1) << PointToString(p);
  EXPECT_EQ(p.at("unroll"), 1) << PointToString(p);
}

TEST(LayerNormBackwardSpace, ChecksKeepUnusedKnobsAtOneValue) {
  auto found = FindFamily(LayerNormBackward(f32, {1024, 1000}, {1000}, true, true, {1, 0, 0}));
  ASSERT_TRUE(found.ok());
  const Family& f = *found->family;
  const DeviceFacts dev = DeviceFacts::H200();
  auto check = [&](const Point& pt) { return f.Check(*found->problem, pt, dev); };
  Point base = {{"strategy", 2}, {"threads", 128}, {"vec", 4}, {"col_vec", 1}, {"chunks", 1}, {"unroll", 1}};
  EXPECT_TRUE(check(base).ok());
  Point chunked = base;
  chunked["chunks"] = 4;  // no column gradient to chunk
  EXPECT_FALSE(check(chunked).ok());
  Point warp = base;
  warp["strategy"] = 0;  // 1000 floats: 8 vectors of 4 a lane, 32 floats
  EXPECT_TRUE(check(warp).ok());
  warp["vec"] = 8;  // 32-byte vectors
  EXPECT_FALSE(check(warp).ok());
  Point held = base;
  held["strategy"] = 1;
  held["threads"] = 1024;  // 4096 elements a pass for a row of 1000: most threads idle
  EXPECT_FALSE(check(held).ok());
  auto columns_only = FindFamily(LayerNormBackward(f32, {1024, 1000}, {1000}, true, true, {0, 1, 0}));
  ASSERT_TRUE(columns_only.ok());
  Point c = {{"strategy", 0}, {"threads", 256}, {"vec", 1}, {"col_vec", 4}, {"chunks", 8}, {"unroll", 2}};
  EXPECT_TRUE(f.Check(*columns_only->problem, c, dev).ok());
  c["strategy"] = 2;  // no grad_input
  EXPECT_FALSE(f.Check(*columns_only->problem, c, dev).ok());
  c["strategy"] = 0;
  c["chunks"] = 128;  // 8 rows a chunk for 8 warps
  EXPECT_TRUE(f.Check(*columns_only->problem, c, dev).ok());
  c["threads"] = 1024;  // 32 warps: chunks of 8 rows are shorter than the warps
  EXPECT_FALSE(f.Check(*columns_only->problem, c, dev).ok());
}

TEST(LayerNormBackwardSpace, SourcesAreSpecialisedOnTheMaskAndTheOp) {
  const DeviceFacts dev = DeviceFacts::H200();
  auto generate = [&](const OpKey& key) {
    auto found = FindFamily(key);
    EXPECT_TRUE(found.ok()) << found.status().ToString();
    auto c = found->family->Generate(*found->problem, found->family->ExpertDefault(*found->problem, dev), dev);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return *c;
  };
  const Candidate all = generate(LayerNormBackward(bf16, {8192, 1024}, {1024}, true, true, {1, 1, 1}));
  EXPECT_EQ(all.entry_point, "kjit_layer_norm_backward");
  EXPECT_NE(all.source.find("#define DX 1\n#define DW 1\n#define DB 1"), std::string::npos);
  EXPECT_NE(all.source.find("typedef __nv_bfloat16 in_t"), std::string::npos);
  // Chunked column sums meet in the workspace: counters for 4 tiles of 256, then two gradients' sums.
  EXPECT_GT(all.launch.workspace_bytes, 0u);
  EXPECT_NE(all.source.find("unsigned char* __restrict__ ws"), std::string::npos);
  const Candidate dx_only = generate(LayerNormBackward(f32, {512, 33}, {33}, false, false, {1, 0, 0}));
  EXPECT_EQ(dx_only.launch.workspace_bytes, 0u);
  EXPECT_EQ(dx_only.source.find("dgb_role("), dx_only.source.rfind("dgb_role(")) << "no column blocks";
  EXPECT_NE(dx_only.source.find("#define HAS_W 0"), std::string::npos);
  EXPECT_EQ(dx_only.launch.grid[0], 512u / 8u) << "a warp a row, 8 warps a block";
  const Candidate rms = generate(RmsNormBackward(f32, {8, 128, 96}, {128, 96}, false, {1, 0}));
  EXPECT_NE(rms.source.find("#define RMS 1"), std::string::npos);
  EXPECT_NE(rms.source.find("const float* mean = nullptr"), std::string::npos);
}

}  // namespace
}  // namespace kjit::policy
