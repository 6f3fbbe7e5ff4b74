// The max and avg pooling design space, on CPU: what it declines, the checks that follow the
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

OpKey MaxPoolKey(const char* op, TensorDesc x, IntList k, IntList s, IntList p, IntList d, bool ceil) {
  return OpKey::Single(op, "", {std::move(x), k, s, p, d, ceil}, 90);
}
OpKey AvgPoolKey(const char* op, TensorDesc x, IntList k, IntList s, IntList p, bool ceil, bool include, Arg div) {
  return OpKey::Single(op, "", {std::move(x), k, s, p, ceil, include, std::move(div)}, 90);
}

TEST(PoolSpace, DeclinesWhatItCannotServe) {
  auto reason = [](const OpKey& key) {
    auto found = FindFamily(key);
    EXPECT_FALSE(found.ok()) << key.ToString();
    return found.ok() ? std::string() : found.status().message();
  };
  const char* m2 = "aten::max_pool2d_with_indices";
  const char* a3 = "aten::avg_pool3d";
  const TensorDesc x = TensorDesc::Contiguous(DType::kFloat32, {2, 3, 16, 16});
  // The composite ops never reach a CUDA kernel: nothing to serve.
  EXPECT_FALSE(FindFamily(MaxPoolKey("aten::max_pool2d", x, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false)).ok());
  EXPECT_NE(reason(MaxPoolKey(m2, TensorDesc::Contiguous(DType::kFloat64, {2, 3, 8, 8}), {2}, {}, {0}, {1}, false))
                .find("not served"),
            std::string::npos);
  TensorDesc transposed = x;
  transposed.strides = {768, 256, 1, 16};
  EXPECT_NE(reason(MaxPoolKey(m2, transposed, {2}, {}, {0}, {1}, false)).find("neither"), std::string::npos);
  // What PyTorch itself rejects: padding over half the kernel, an empty output, a zero divisor.
  EXPECT_NE(reason(MaxPoolKey(m2, x, {3, 3}, {1, 1}, {2, 2}, {1, 1}, false)).find("half the kernel"), std::string::npos);
  EXPECT_NE(reason(MaxPoolKey(m2, TensorDesc::Contiguous(DType::kFloat32, {2, 3, 2, 2}), {3, 3}, {1, 1}, {0, 0}, {1, 1},
                              false))
                .find("output size"),
            std::string::npos);
  EXPECT_NE(reason(AvgPoolKey("aten::avg_pool2d", x, {2}, {}, {0}, false, true, int64_t{0})).find("divisor"),
            std::string::npos);
  EXPECT_NE(reason(MaxPoolKey(m2, x, {2, 2, 2}, {}, {0}, {1}, false)).find("kernel_size"), std::string::npos);
  EXPECT_NE(reason(MaxPoolKey(m2, TensorDesc::Contiguous(DType::kFloat32, {2, 3, 4, 16, 16}), {2}, {}, {0}, {1}, false))
                .find("rank"),
            std::string::npos);
  EXPECT_NE(reason(MaxPoolKey(m2, TensorDesc::Contiguous(DType::kFloat32, {0, 3, 16, 16}), {2}, {}, {0}, {1}, false))
                .find("empty"),
            std::string::npos);
  // avg_pool3d makes a channels_last input contiguous (and so its output): not served.
  EXPECT_NE(reason(AvgPoolKey(a3, ChannelsLast(DType::kFloat16, {2, 8, 4, 6, 6}), {2}, {}, {0}, false, true, NoneArg{}))
                .find("avg_pool3d"),
            std::string::npos);
  // Served: broadcast lists, an empty stride, unbatched inputs, channels_last max_pool3d.
  EXPECT_TRUE(FindFamily(MaxPoolKey(m2, x, {3}, {}, {1}, {1}, true)).ok());
  EXPECT_TRUE(FindFamily(MaxPoolKey(m2, TensorDesc::Contiguous(DType::kBFloat16, {3, 9, 9}), {2}, {}, {0}, {1}, false)).ok());
  EXPECT_TRUE(FindFamily(MaxPoolKey("aten::max_pool3d_with_indices", ChannelsLast(DType::kFloat16, {2, 8, 4, 6, 6}), {2},
                                    {}, {0}, {1}, false))
                  .ok());
}

TEST(PoolSpace, ChecksFollowTheLayout) {
  const DeviceFacts device = DeviceFacts::H200();
  auto point = [](int64_t strategy, int64_t threads, int64_t outs, int64_t vec, int64_t rows) {
    return Point{{"strategy", strategy}, {"threads", threads}, {"outs", outs}, {"vec", vec}, {"rows", rows}, {"hint", 0}};
  };
  auto match = [](const OpKey& key) {
    auto found = FindFamily(key);
    EXPECT_TRUE(found.ok()) << found.status().ToString();
    return std::move(*found);
  };
  auto why = [&](const Match& m, const Point& p) { return m.family->Check(*m.problem, p, device).message(); };
  const Match nchw = match(MaxPoolKey("aten::max_pool2d_with_indices",
                                      TensorDesc::Contiguous(DType::kFloat32, {32, 64, 256, 256}), {3, 3}, {2, 2}, {1, 1},
                                      {1, 1}, false));
  EXPECT_TRUE(nchw.family->Check(*nchw.problem, point(0, 256, 2, 1, 1), device).ok());
  EXPECT_TRUE(nchw.family->Check(*nchw.problem, point(1, 256, 1, 4, 4), device).ok());
  EXPECT_NE(why(nchw, point(0, 256, 1, 4, 1)).find("staged"), std::string::npos);
  EXPECT_NE(why(nchw, point(0, 256, 1, 1, 2)).find("rows"), std::string::npos);
  EXPECT_NE(why(nchw, point(1, 256, 1, 8, 1)).find("16 bytes"), std::string::npos);
  // Sliding: any vector (codegen 3: a step, outs x stride 2, that it does not divide reads aligned
  // vectors from the boundary before each segment), frames only there.
  EXPECT_TRUE(nchw.family->Check(*nchw.problem, point(2, 128, 2, 4, 4), device).ok());
  EXPECT_TRUE(nchw.family->Check(*nchw.problem, point(2, 128, 1, 2, 1), device).ok());
  EXPECT_TRUE(nchw.family->Check(*nchw.problem, point(2, 128, 1, 4, 1), device).ok());
  Point framed = point(2, 128, 2, 4, 2);
  framed["frames"] = 2;
  EXPECT_NE(why(nchw, framed).find("frames"), std::string::npos);  // a 2-D key has one output frame
  framed["strategy"] = 0;
  framed["vec"] = 1;
  framed["rows"] = 1;
  EXPECT_NE(why(nchw, framed).find("sliding"), std::string::npos);
  const Match odd = match(MaxPoolKey("aten::max_pool2d_with_indices",
                                     TensorDesc::Contiguous(DType::kFloat32, {31, 64, 255, 255}), {3, 3}, {2, 2}, {1, 1},
                                     {1, 1}, false));
  // Odd rows: sliding vectors too (codegen 3), as long as the input is aligned to its element.
  EXPECT_TRUE(odd.family->Check(*odd.problem, point(2, 128, 2, 4, 4), device).ok());
  TensorDesc odd_bytes = TensorDesc::Contiguous(DType::kFloat32, {31, 64, 255, 255});
  odd_bytes.alignment = 2;
  const Match unaligned = match(MaxPoolKey("aten::max_pool2d_with_indices", odd_bytes, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false));
  EXPECT_NE(why(unaligned, point(2, 128, 2, 4, 4)).find("element"), std::string::npos);
  EXPECT_TRUE(unaligned.family->Check(*unaligned.problem, point(2, 128, 2, 1, 4), device).ok());
  // Warp rows (strategy 3): the sliding mapping with a warp's loads coalesced and shared by shuffles;
  // scalars only (rows where vectors fit slide with them), any alignment of the element, windows
  // meeting along W (every column of a warp's segment is loaded), at most 9 loads per lane and row.
  EXPECT_TRUE(odd.family->Check(*odd.problem, point(3, 128, 2, 1, 4), device).ok());
  EXPECT_TRUE(odd.family->Check(*odd.problem, point(3, 64, 4, 1, 1), device).ok());
  EXPECT_NE(why(odd, point(3, 128, 2, 4, 4)).find("scalars"), std::string::npos);
  EXPECT_TRUE(unaligned.family->Check(*unaligned.problem, point(3, 128, 1, 1, 2), device).ok());
  Point warp_framed = point(3, 128, 2, 1, 2);
  warp_framed["frames"] = 2;
  EXPECT_NE(why(odd, warp_framed).find("frames"), std::string::npos);  // a 2-D key has one output frame
  const Match gapped = match(MaxPoolKey("aten::max_pool2d_with_indices", TensorDesc::Contiguous(DType::kFloat32, {2, 3, 64, 64}),
                                        {2, 2}, {3, 3}, {0, 0}, {1, 1}, false));
  EXPECT_NE(why(gapped, point(3, 64, 1, 1, 1)).find("meet"), std::string::npos);
  EXPECT_TRUE(gapped.family->Check(*gapped.problem, point(2, 64, 1, 1, 1), device).ok());
  // Stride 3 under a window of 4: 4 outputs a lane put a warp's segment at 385 columns, 13 loads a lane.
  TensorDesc row = TensorDesc::Contiguous(DType::kFloat32, {4, 7, 1, 1001});
  row.strides = {7 * 1001, 1001, 1001, 1};
  const Match long_step = match(MaxPoolKey("aten::max_pool2d_with_indices", row, {1, 4}, {1, 3}, {0, 2}, {1, 1}, true));
  EXPECT_NE(why(long_step, point(3, 64, 4, 1, 1)).find("too long"), std::string::npos);
  EXPECT_TRUE(long_step.family->Check(*long_step.problem, point(3, 64, 2, 1, 1), device).ok());
  const Match cl = match(MaxPoolKey("aten::max_pool2d_with_indices", ChannelsLast(DType::kFloat16, {8, 24, 56, 56}), {3},
                                    {2}, {1}, {1}, false));
  EXPECT_NE(why(cl, point(1, 256, 1, 1, 1)).find("contiguous"), std::string::npos);
  EXPECT_NE(why(cl, point(2, 256, 1, 1, 1)).find("contiguous"), std::string::npos);
  EXPECT_NE(why(cl, point(3, 256, 1, 1, 1)).find("contiguous"), std::string::npos);
  EXPECT_NE(why(cl, point(0, 256, 1, 16, 1)).find("16 bytes"), std::string::npos);
  // 24 channels: vectors of 8 (16 bytes of f16) divide them; a 4-byte aligned input allows only 2.
  EXPECT_TRUE(cl.family->Check(*cl.problem, point(0, 128, 1, 8, 1), device).ok());
  TensorDesc misaligned = ChannelsLast(DType::kFloat16, {8, 24, 56, 56});
  misaligned.alignment = 4;
  const Match narrow = match(MaxPoolKey("aten::max_pool2d_with_indices", misaligned, {3}, {2}, {1}, {1}, false));
  for (const Point& v : ValidPoints(*narrow.family, *narrow.problem, device)) EXPECT_LE(v.at("vec"), 2);
  // Rows of a million: staging whole rows exceeds shared memory; direct and sliding remain.
  const Match long_rows = match(AvgPoolKey("aten::avg_pool2d", TensorDesc::Contiguous(DType::kFloat32, {4, 8, 1, 1 << 20}),
                                           {1, 3}, {1, 2}, {0, 1}, false, true, NoneArg{}));
  EXPECT_NE(why(long_rows, point(1, 256, 1, 4, 1)).find("shared memory"), std::string::npos);
  for (const Point& v : ValidPoints(*long_rows.family, *long_rows.problem, device)) EXPECT_NE(v.at("strategy"), 1);
}

TEST(PoolSpace, ExpertDefaultsFitTheShapeAndTheAbi) {
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
  // The headroom cases: overlapping windows over contiguous planes slide (a thread per 2 outputs along
  // W x 4 rows, 16-byte loads along W), 3-D over 2 frames x 2 rows; odd 2-D rows load scalars
  // (measured at the floor so).
  Candidate c;
  Point p = default_of(MaxPoolKey("aten::max_pool2d_with_indices", TensorDesc::Contiguous(DType::kFloat32, {32, 64, 256, 256}),
                                  {3, 3}, {2, 2}, {1, 1}, {1, 1}, false),
                       &c);
  EXPECT_EQ(p.at("strategy"), 2) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 4) << PointToString(p);
  EXPECT_EQ(p.at("outs"), 2) << PointToString(p);
  EXPECT_EQ(p.at("rows"), 4) << PointToString(p);
  EXPECT_EQ(p.at("frames"), 1) << PointToString(p);
  EXPECT_EQ(p.at("hint"), 1) << PointToString(p);
  // (x, out, indices): indices int64.
  EXPECT_NE(c.source.find("const in_t* __restrict__ x, out_t* __restrict__ y, long long* __restrict__ ind"),
            std::string::npos);
  EXPECT_EQ(c.launch.dynamic_shared_bytes, 0u);
  p = default_of(MaxPoolKey("aten::max_pool2d_with_indices", TensorDesc::Contiguous(DType::kFloat32, {31, 64, 255, 255}),
                            {3, 3}, {2, 2}, {1, 1}, {1, 1}, false));
  EXPECT_EQ(p.at("strategy"), 2) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 1) << PointToString(p);
  p = default_of(MaxPoolKey("aten::max_pool3d_with_indices", TensorDesc::Contiguous(DType::kFloat32, {16, 32, 64, 128, 128}),
                            {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, false));
  EXPECT_EQ(p.at("strategy"), 2) << PointToString(p);
  // Even 3-D rows: 16-byte vectors over 2 frames x 1 row, 256 threads (searched best on the H200 at codegen 4).
  EXPECT_EQ(p.at("frames"), 2) << PointToString(p);
  EXPECT_EQ(p.at("rows"), 1) << PointToString(p);
  EXPECT_EQ(p.at("threads"), 256) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 4) << PointToString(p);
  // Odd 3-D rows: scalar loads (aligned vectors over odd rows measured slower on the H200), plain
  // stores; max over 1 frame x 2 rows, avg over 4 frames x 2 rows, as measured best; launch bounds of one
  // block an SM (minb 1), so the compiler keeps the rows' loads in flight.
  p = default_of(MaxPoolKey("aten::max_pool3d_with_indices", TensorDesc::Contiguous(DType::kFloat32, {15, 32, 63, 127, 127}),
                            {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, false),
                 &c);
  EXPECT_EQ(p.at("strategy"), 2) << PointToString(p);
  EXPECT_EQ(p.at("frames"), 1) << PointToString(p);
  EXPECT_EQ(p.at("rows"), 2) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 1) << PointToString(p);
  EXPECT_EQ(p.at("hint"), 0) << PointToString(p);
  EXPECT_EQ(p.at("minb"), 1) << PointToString(p);
  EXPECT_NE(c.source.find("__launch_bounds__(THREADS, 1)"), std::string::npos);
  p = default_of(AvgPoolKey("aten::avg_pool3d", TensorDesc::Contiguous(DType::kFloat32, {15, 32, 63, 127, 127}), {3, 3, 3},
                            {2, 2, 2}, {1, 1, 1}, false, true, NoneArg{}));
  EXPECT_EQ(p.at("frames"), 4) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 1) << PointToString(p);
  p = default_of(AvgPoolKey("aten::avg_pool3d", TensorDesc::Contiguous(DType::kFloat32, {16, 32, 64, 128, 128}), {3, 3, 3},
                            {2, 2, 2}, {1, 1, 1}, false, true, NoneArg{}),
                 &c);
  EXPECT_EQ(p.at("strategy"), 2) << PointToString(p);
  EXPECT_EQ(p.at("frames"), 2) << PointToString(p);
  EXPECT_EQ(p.at("rows"), 1) << PointToString(p);
  // (x, out).
  EXPECT_NE(c.source.find("const in_t* __restrict__ x, out_t* __restrict__ y)"), std::string::npos);
  // Non-overlapping windows read every element once anyway: direct.
  p = default_of(MaxPoolKey("aten::max_pool2d_with_indices", TensorDesc::Contiguous(DType::kFloat16, {8, 16, 64, 64}), {2},
                            {}, {0}, {1}, false));
  EXPECT_EQ(p.at("strategy"), 0) << PointToString(p);
  // channels_last: whole 16-byte vectors of channels.
  p = default_of(MaxPoolKey("aten::max_pool2d_with_indices", ChannelsLast(DType::kBFloat16, {8, 64, 56, 56}), {3}, {2}, {1},
                            {1}, false));
  EXPECT_EQ(p.at("vec"), 8) << PointToString(p);
  // Odd, tiny and wide: each has a valid default that generates.
  default_of(MaxPoolKey("aten::max_pool2d_with_indices", TensorDesc::Contiguous(DType::kFloat32, {3, 1, 5}), {1, 2}, {1, 1},
                        {0, 1}, {1, 6}, false));
  default_of(AvgPoolKey("aten::avg_pool2d", TensorDesc::Contiguous(DType::kFloat16, {1, 1, 1, 1}), {1}, {}, {0}, true, false,
                        NoneArg{}));
  default_of(AvgPoolKey("aten::avg_pool2d", TensorDesc::Contiguous(DType::kFloat32, {4, 8, 1, 1 << 20}), {1, 3}, {1, 2},
                        {0, 1}, false, true, NoneArg{}));
  default_of(MaxPoolKey("aten::max_pool3d_with_indices", ChannelsLast(DType::kFloat32, {2, 3, 5, 7, 9}), {3}, {1}, {1}, {2},
                        true));
}

// The points of codegen 4 (minb added, float32 maxima stored from the best value) keep their kernels byte for
// byte when knobs or values are added: their dataset rows stay true of what they measured. Digests of every
// valid point of each sample key, recorded at codegen 4, and again when the kernels moved into pool.cuh
// (after 0363393: the declaration and index store as macros, the sliding kernel's C++-chosen parts as #if):
// NVRTC 13.0's PTX of every point of the sample keys' pairwise covers (296) is byte-identical to before.
TEST(PoolSpace, OldPointsKeepTheirSources) {
  const std::vector<SourceGolden> golden = {
      {852u, 0x473d473d7f824d9bull},  // max_pool2d f32 N=32 C=64 in=1x256x256 out=1x128x128 k=1x3x3 s=1x2x2 p=0x1x1 d=1x1x1
      {1676u, 0xdb5c6a7609cb92dfull},  // max_pool3d f32 N=16 C=32 in=64x128x128 out=32x64x64 k=3x3x3 s=2x2x2 p=1x1x1 d=1x1x1
      {1676u, 0xe2471c14ef4e0453ull},  // avg_pool3d f32 N=16 C=32 in=64x128x128 out=32x64x64 k=3x3x3 s=2x2x2 p=1x1x1 include_pad
      {192u, 0xdf8cd3bd85f1e53full},  // max_pool2d f16 channels_last N=8 C=64 in=1x56x56 out=1x28x28 k=1x3x3 s=1x2x2 p=0x1x1 d=1x1x1
      {792u, 0x7b0fa3697a306fafull},  // max_pool2d bf16 N=3 C=5 in=1x17x19 out=1x8x18 k=1x3x2 s=1x2x1 p=0x1x0 d=1x2x1 ceil
      {260u, 0x5d5f716d2b6382f7ull},  // max_pool2d f32 N=4 C=7 in=1x1x1001 out=1x1x335 k=1x1x4 s=1x1x3 p=0x0x2 d=1x1x1 ceil
      {28u, 0xeea47a2a5b48bf63ull},  // max_pool2d f32 N=1 C=3 in=1x1x5 out=1x1x1 k=1x1x2 s=1x1x1 p=0x0x1 d=1x1x6
      {192u, 0xb248561bd957084bull},  // max_pool3d bf16 channels_last N=2 C=16 in=9x10x11 out=5x5x11 k=2x3x3 s=2x2x1 p=1x1x1 d=1x2x1 ceil
      {1024u, 0xd0b6e4324d33998bull},  // max_pool3d f16 N=1 C=8 in=5x7x9 out=3x4x5 k=2x2x2 s=2x2x2 p=0x0x0 d=1x1x1 ceil
      {676u, 0x7587be9a83e31377ull},  // avg_pool2d f32 N=8 C=32 in=1x63x65 out=1x32x33 k=1x3x3 s=1x2x2 p=0x1x1 ceil exclude_pad
      {188u, 0x450682b38365a9d3ull},  // avg_pool2d bf16 channels_last N=4 C=24 in=1x15x15 out=1x8x8 k=1x2x3 s=1x2x2 p=0x1x1 include_pad divisor=5
      {336u, 0x2e8fee1fcb980663ull},  // avg_pool2d f16 N=16 C=32 in=1x1x4097 out=1x1x2049 k=1x1x3 s=1x1x2 p=0x0x1 ceil include_pad
      {1924u, 0xe1a29a08ded2355full},  // avg_pool3d f16 N=2 C=6 in=9x10x11 out=9x5x6 k=3x3x3 s=1x2x2 p=1x1x1 exclude_pad
      {512u, 0xd327472485c609efull},  // avg_pool3d bf16 N=1 C=4 in=5x6x7 out=3x3x4 k=2x2x3 s=2x2x2 p=1x0x1 ceil include_pad divisor=7
  };
  auto found = FindFamily(MaxPoolKey("aten::max_pool2d_with_indices", TensorDesc::Contiguous(DType::kFloat32, {2, 3, 8, 8}),
                                     {2, 2}, {2, 2}, {0, 0}, {1, 1}, false));
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  ExpectOldPointsKeepTheirSources(*found->family, golden, [](const OpKey&, const Point&) { return true; });
}

// minb 1 asks for the launch bounds' one block an SM, in every strategy's kernel, and changes nothing else.
TEST(PoolSpace, MinBlocksSetsTheLaunchBoundsAlone) {
  const DeviceFacts device = DeviceFacts::H200();
  auto found = FindFamily(MaxPoolKey("aten::max_pool3d_with_indices",
                                     TensorDesc::Contiguous(DType::kFloat32, {15, 32, 63, 127, 127}), {3, 3, 3}, {2, 2, 2},
                                     {1, 1, 1}, {1, 1, 1}, false));
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  const Family& f = *found->family;
  std::set<int64_t> with_one, with_zero;
  for (const Point& p : ValidPoints(f, *found->problem, device)) {
    if (p.at("minb") != 1) {
      with_zero.insert(p.at("strategy"));
      continue;
    }
    with_one.insert(p.at("strategy"));
    Point zero = p;
    zero["minb"] = 0;
    auto one = f.Generate(*found->problem, p, device);
    auto none = f.Generate(*found->problem, zero, device);
    ASSERT_TRUE(one.ok() && none.ok()) << PointToString(p);
    const std::string shown = "// point " + PointToString(zero) + "\n";
    std::string expected = none->source;
    ASSERT_NE(expected.find(shown), std::string::npos) << PointToString(zero);
    expected.replace(expected.find(shown), shown.size(), "// point " + PointToString(p) + "\n");
    const std::string bounds = "__launch_bounds__(THREADS)";
    ASSERT_NE(expected.find(bounds), std::string::npos);
    expected.replace(expected.find(bounds), bounds.size(), "__launch_bounds__(THREADS, 1)");
    EXPECT_EQ(one->source, expected) << PointToString(p);
    EXPECT_EQ(one->launch.grid[0], none->launch.grid[0]);
    EXPECT_EQ(one->launch.block[0], none->launch.block[0]);
  }
  EXPECT_EQ(with_one, with_zero) << "every strategy takes both values";
  EXPECT_GE(with_one.size(), 3u);
}

TEST(PoolSpace, MaxPoolingIsComparedBitwise) {
  (void)Families();  // declares the traits
  EXPECT_EQ(TraitsFor("aten::max_pool2d_with_indices").compare, ComparePolicy::kBitwise);
  EXPECT_EQ(TraitsFor("aten::max_pool3d_with_indices").compare, ComparePolicy::kBitwise);
  EXPECT_EQ(TraitsFor("aten::avg_pool2d").compare, ComparePolicy::kClose);
  EXPECT_TRUE(TraitsFor("aten::avg_pool3d").special_values);
}

}  // namespace
}  // namespace kjit::policy
