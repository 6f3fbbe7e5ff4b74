// The the reductions (sum, mean, amax, prod, argmax, ...) design space, on CPU: what it declines, the checks that follow the
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

OpKey SumKey(TensorDesc x, Arg dims, bool keepdim = false, Arg dtype = NoneArg{}) {
  return OpKey::Single("aten::sum", "dim_IntList", {std::move(x), std::move(dims), keepdim, std::move(dtype)}, 90);
}
OpKey ArgKey(const char* op, TensorDesc x, Arg dim, bool keepdim = false) {
  return OpKey::Single(op, "", {std::move(x), std::move(dim), keepdim}, 90);
}

TEST(ReduceSpace, DeclinesWhatItCannotServe) {
  auto reason = [](const OpKey& key) {
    auto found = FindFamily(key);
    EXPECT_FALSE(found.ok()) << key.ToString();
    return found.ok() ? std::string() : found.status().message();
  };
  const TensorDesc x = TensorDesc::Contiguous(DType::kFloat32, {8, 16, 32});
  // Overloads without a CUDA kernel of their own (sum(self) and mean(self) call the dim overloads).
  EXPECT_NE(reason(OpKey::Single("aten::sum", "", {x, NoneArg{}}, 90)).find("CUDA kernel"), std::string::npos);
  EXPECT_FALSE(FindFamily(OpKey::Single("aten::max", "dim", {x, int64_t{1}, false}, 90)).ok());
  EXPECT_NE(reason(SumKey(TensorDesc::Contiguous(DType::kInt32, {4, 4}), IntList{1})).find("not served"),
            std::string::npos);
  EXPECT_NE(reason(SumKey(TensorDesc::Contiguous(DType::kFloat64, {4, 4}), IntList{1})).find("not served"),
            std::string::npos);
  TensorDesc gaps = TensorDesc::Contiguous(DType::kFloat32, {4, 4});
  gaps.strides = {8, 1};
  EXPECT_NE(reason(SumKey(gaps, IntList{1})).find("not dense"), std::string::npos);
  TensorDesc broadcast = TensorDesc::Contiguous(DType::kFloat32, {4, 4});
  broadcast.strides = {0, 1};
  EXPECT_NE(reason(SumKey(broadcast, IntList{1})).find("not dense"), std::string::npos);
  // channels_last over N: the kept C, H, W lie in memory as H, W, C, but the output is [C, H, W].
  EXPECT_NE(reason(SumKey(ChannelsLast(DType::kFloat32, {2, 3, 4, 5}), IntList{0})).find("logical order"),
            std::string::npos);
  // channels_last over C and H: memory order H, W, C leaves W between them.
  EXPECT_NE(reason(SumKey(ChannelsLast(DType::kFloat32, {2, 3, 4, 5}), IntList{1, 2})).find("more than one run"),
            std::string::npos);
  TensorDesc transposed = TensorDesc::Contiguous(DType::kFloat32, {4, 5});
  transposed.strides = {1, 4};
  EXPECT_NE(reason(ArgKey("aten::argmax", transposed, NoneArg{})).find("flattened"), std::string::npos);
  EXPECT_NE(reason(SumKey(TensorDesc::Contiguous(DType::kFloat32, {0, 4}), IntList{1})).find("empty"), std::string::npos);
  EXPECT_NE(reason(SumKey(TensorDesc::Contiguous(DType::kFloat32, {}), IntList{})).find("0-d"), std::string::npos);
  EXPECT_NE(reason(SumKey(x, IntList{3})).find("out of range"), std::string::npos);
  EXPECT_NE(reason(ArgKey("aten::argmax", x, int64_t{-4})).find("out of range"), std::string::npos);
  EXPECT_NE(reason(SumKey(x, IntList{1, -2})).find("twice"), std::string::npos);
  // Kept, reduced, kept, reduced: two reduced runs that are not around one kept run.
  EXPECT_NE(reason(SumKey(TensorDesc::Contiguous(DType::kFloat32, {2, 3, 4, 5}), IntList{1, 3})).find("more than one run"),
            std::string::npos);
  // A narrower dtype rounds the input first; float64 is not served.
  EXPECT_NE(reason(SumKey(x, IntList{1}, false, DType::kFloat16)).find("left to PyTorch"), std::string::npos);
  EXPECT_NE(reason(SumKey(TensorDesc::Contiguous(DType::kFloat16, {4, 4}), IntList{1}, false, DType::kFloat64))
                .find("left to PyTorch"),
            std::string::npos);
  // A long reduction to a handful of column outputs: no kernel without a grid-wide split fills the GPU
  // (rows have the split strategy, columns not yet).
  EXPECT_NE(reason(OpKey::Single("aten::amax", "", {TensorDesc::Contiguous(DType::kFloat32, {1 << 20, 32}), IntList{0}, false},
                                 90))
                .find("grid-wide"),
            std::string::npos);
  // Long rows to a handful of outputs are served (the split strategy).
  EXPECT_TRUE(FindFamily(SumKey(TensorDesc::Contiguous(DType::kFloat32, {128, 4096, 512}), NoneArg{})).ok());
  EXPECT_TRUE(FindFamily(ArgKey("aten::argmax", TensorDesc::Contiguous(DType::kFloat32, {1 << 25}), NoneArg{})).ok());
  // Served: every dim (None, [], prod's own overload), size-1 dims between reduced ones, keepdim,
  // float32 results of float16 inputs, a dtype equal to the input's.
  EXPECT_TRUE(FindFamily(SumKey(x, NoneArg{})).ok());
  EXPECT_TRUE(FindFamily(SumKey(x, IntList{})).ok());
  EXPECT_TRUE(FindFamily(OpKey::Single("aten::prod", "", {x, NoneArg{}}, 90)).ok());
  EXPECT_TRUE(FindFamily(SumKey(TensorDesc::Contiguous(DType::kFloat32, {4, 1, 5, 6}), IntList{0, 2}, true)).ok());
  EXPECT_TRUE(FindFamily(SumKey(TensorDesc::Contiguous(DType::kBFloat16, {4, 6}), IntList{0}, false, DType::kFloat32)).ok());
  EXPECT_TRUE(FindFamily(SumKey(x, IntList{1}, false, DType::kFloat32)).ok());
  EXPECT_TRUE(FindFamily(OpKey::Single("aten::amin", "", {x, IntList{}, true}, 90)).ok());
  EXPECT_TRUE(FindFamily(ArgKey("aten::argmin", x, NoneArg{}, true)).ok());
  EXPECT_TRUE(FindFamily(OpKey::Single("aten::mean", "dim", {x, IntList{-1, -2}, true, NoneArg{}}, 90)).ok());
}

TEST(ReduceSpace, KeysBecomeOuterLenInner) {
  auto desc = [](const OpKey& key) {
    auto found = FindFamily(key);
    EXPECT_TRUE(found.ok()) << found.status().ToString();
    return found.ok() ? found->problem->description : std::string();
  };
  const TensorDesc x = TensorDesc::Contiguous(DType::kFloat32, {128, 4096, 512});
  EXPECT_EQ(desc(ArgKey("aten::argmax", x, int64_t{1})), "argmax f32 outer=128 len=4096 inner=512");
  EXPECT_EQ(desc(SumKey(x, IntList{-1})), "sum f32 outer=524288 len=512 inner=1");
  EXPECT_EQ(desc(OpKey::Single("aten::amax", "", {x, IntList{0}, false}, 90)), "amax f32 outer=1 len=128 inner=2097152");
  EXPECT_EQ(desc(SumKey(x, IntList{1, 2})), "sum f32 outer=128 len=2097152 inner=1");
  // Size-1 dims move nothing: (4, 1, 5, 6) over dims 0 and 2 is one run of 20.
  EXPECT_EQ(desc(SumKey(TensorDesc::Contiguous(DType::kFloat32, {4, 1, 5, 6}), IntList{0, 2})),
            "sum f32 outer=1 len=20 inner=6");
  EXPECT_EQ(desc(ArgKey("aten::argmin", TensorDesc::Contiguous(DType::kFloat16, {10, 37}), NoneArg{})),
            "argmin f16 outer=1 len=370 inner=1");
  EXPECT_EQ(desc(OpKey::Single("aten::prod", "dim_int", {TensorDesc::Contiguous(DType::kBFloat16, {3, 9}), int64_t{0},
                                                        true, DType::kFloat32},
                               90)),
            "prod bf16->f32 outer=1 len=3 inner=9");
  // Dense permutations, in memory order: channels_last means over H and W are columns of C,
  // over C rows of C; a transposed matrix summed over dim 1 is columns.
  EXPECT_EQ(desc(OpKey::Single("aten::mean", "dim", {ChannelsLast(DType::kBFloat16, {8, 64, 7, 9}), IntList{-1, -2}, true,
                                                     NoneArg{}},
                               90)),
            "mean bf16 outer=8 len=63 inner=64 (memory order)");
  EXPECT_EQ(desc(SumKey(ChannelsLast(DType::kFloat32, {8, 64, 7, 9}), IntList{1})),
            "sum f32 outer=504 len=64 inner=1 (memory order)");
  TensorDesc transposed = TensorDesc::Contiguous(DType::kFloat32, {4, 5});
  transposed.strides = {1, 4};
  EXPECT_EQ(desc(SumKey(transposed, IntList{1})), "sum f32 outer=1 len=5 inner=4 (memory order)");
  EXPECT_EQ(desc(ArgKey("aten::argmin", transposed, int64_t{0})), "argmin f32 outer=5 len=4 inner=1 (memory order)");
  // Reduced runs around one kept run: segments (per-channel statistics of NCHW).
  EXPECT_EQ(desc(SumKey(TensorDesc::Contiguous(DType::kFloat32, {32, 64, 256, 256}), IntList{0, 2, 3})),
            "sum f32 segs=32 outer=64 len=65536 inner=1");
  EXPECT_EQ(desc(OpKey::Single("aten::amax", "", {x, IntList{0, 2}, true}, 90)),
            "amax f32 segs=128 outer=4096 len=512 inner=1");
  // A size-1 reduced dim: a copy (len 1), still served.
  EXPECT_EQ(desc(SumKey(TensorDesc::Contiguous(DType::kFloat32, {6, 1, 7}), IntList{1})), "sum f32 outer=42 len=1 inner=1");
}

TEST(ReduceSpace, ChecksFollowTheLayout) {
  const DeviceFacts device = DeviceFacts::H200();
  auto point = [](int64_t strategy, int64_t threads, int64_t vec, int64_t unroll, int64_t cluster) {
    return Point{{"strategy", strategy}, {"threads", threads}, {"vec", vec},
                 {"unroll", unroll},     {"cluster", cluster}, {"hint", 0}};
  };
  auto match = [](const OpKey& key) {
    auto found = FindFamily(key);
    EXPECT_TRUE(found.ok()) << found.status().ToString();
    return std::move(*found);
  };
  auto why = [&](const Match& m, const Point& p) { return m.family->Check(*m.problem, p, device).message(); };
  const Match middle = match(ArgKey("aten::argmax", TensorDesc::Contiguous(DType::kFloat32, {128, 4096, 512}), int64_t{1}));
  EXPECT_TRUE(middle.family->Check(*middle.problem, point(3, 256, 4, 4, 1), device).ok());
  EXPECT_TRUE(middle.family->Check(*middle.problem, point(3, 256, 4, 2, 4), device).ok());
  EXPECT_TRUE(middle.family->Check(*middle.problem, point(2, 128, 4, 2, 1), device).ok());
  EXPECT_NE(why(middle, point(0, 256, 4, 4, 1)).find("rows"), std::string::npos);
  EXPECT_NE(why(middle, point(2, 128, 4, 2, 2)).find("clusters"), std::string::npos);
  EXPECT_NE(why(middle, point(3, 256, 8, 1, 1)).find("16 bytes"), std::string::npos);
  // argmax holds an index per accumulator: 8 rows of 4 columns in flight is too many.
  EXPECT_NE(why(middle, point(3, 256, 4, 8, 1)).find("in flight"), std::string::npos);
  EXPECT_NE(why(middle, point(3, 1024, 4, 1, 1)).find("shared memory"), std::string::npos);
  const Match rows = match(SumKey(TensorDesc::Contiguous(DType::kFloat16, {4095, 1023}), IntList{1}));
  EXPECT_NE(why(rows, point(3, 256, 1, 1, 1)).find("columns"), std::string::npos);
  // Rows of 1023: vectors still apply (a scalar head and tail around them), and the source says so.
  EXPECT_TRUE(rows.family->Check(*rows.problem, point(0, 256, 8, 2, 1), device).ok());
  auto split = rows.family->Generate(*rows.problem, point(0, 256, 8, 2, 1), device);
  ASSERT_TRUE(split.ok());
  EXPECT_NE(split->source.find("#define ROW_SPLIT 1"), std::string::npos);
  EXPECT_NE(why(rows, point(0, 256, 1, 1, 2)).find("clusters"), std::string::npos);
  EXPECT_NE(why(rows, point(1, 1024, 1, 1, 8)).find("idle"), std::string::npos);
  const Match short_rows = match(SumKey(TensorDesc::Contiguous(DType::kFloat16, {4096, 13}), IntList{1}));
  EXPECT_NE(why(short_rows, point(0, 256, 8, 1, 1)).find("four vectors"), std::string::npos);
  // Columns: a vector must divide the kept inner extent (every row of a column tile starts aligned).
  const Match odd_cols = match(SumKey(TensorDesc::Contiguous(DType::kFloat32, {8, 300, 511}), IntList{1}));
  for (const Point& v : ValidPoints(*odd_cols.family, *odd_cols.problem, device)) EXPECT_EQ(v.at("vec"), 1);
  // A 4-byte aligned float16 input allows vectors of 2 at most.
  TensorDesc misaligned = TensorDesc::Contiguous(DType::kFloat16, {64, 4096});
  misaligned.alignment = 4;
  const Match narrow = match(SumKey(misaligned, IntList{1}));
  for (const Point& v : ValidPoints(*narrow.family, *narrow.problem, device)) EXPECT_LE(v.at("vec"), 2);
  // Every column layout keeps a point: a thread per single column, one row in flight.
  const Match tiny = match(ArgKey("aten::argmin", TensorDesc::Contiguous(DType::kBFloat16, {1, 2, 3}), int64_t{1}));
  EXPECT_TRUE(tiny.family->Check(*tiny.problem, point(2, 32, 1, 1, 1), device).ok());
}

TEST(ReduceSpace, ExpertDefaultsFitTheShapeAndTheAbi) {
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
  const TensorDesc big = TensorDesc::Contiguous(DType::kFloat32, {128, 4096, 512});
  // The middle-dim headroom case: column tiles of 128 floats in 16-byte vectors, the dim over 8 warps;
  // 512 tiles fill the GPU without a cluster; the 1 GiB input streams.
  Candidate c;
  Point p = default_of(ArgKey("aten::argmax", big, int64_t{1}), &c);
  EXPECT_EQ(p.at("strategy"), 3) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 4) << PointToString(p);
  EXPECT_EQ(p.at("cluster"), 1) << PointToString(p);
  EXPECT_EQ(p.at("threads"), 128) << PointToString(p);  // 512 blocks of 4 warps: one wave
  EXPECT_EQ(p.at("hint"), 1) << PointToString(p);
  // (x, y): y int64.
  EXPECT_NE(c.source.find("typedef long long y_t;"), std::string::npos);
  EXPECT_NE(c.source.find("kjit_reduce(const in_t* __restrict__ x, y_t* __restrict__ y)"), std::string::npos);
  EXPECT_EQ(c.entry_point, "kjit_reduce");
  EXPECT_EQ(c.launch.grid[0], 128u * 4u);
  // Many short rows: a warp each; odd rows keep 16-byte vectors.
  p = default_of(SumKey(big, IntList{2}));
  EXPECT_EQ(p.at("strategy"), 0) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 4) << PointToString(p);
  p = default_of(SumKey(TensorDesc::Contiguous(DType::kFloat32, {127, 4095, 511}), IntList{2}));
  EXPECT_EQ(p.at("strategy"), 0) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 4) << PointToString(p);
  // Few long rows: a cluster of 8 per row, float16 read into float32.
  p = default_of(SumKey(TensorDesc::Contiguous(DType::kFloat16, {4, 262144}), IntList{-1}, false, DType::kFloat32), &c);
  EXPECT_EQ(p.at("strategy"), 1) << PointToString(p);
  EXPECT_EQ(p.at("cluster"), 8) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 8) << PointToString(p);
  EXPECT_NE(c.source.find("typedef __half in_t;"), std::string::npos);
  EXPECT_NE(c.source.find("typedef float y_t;"), std::string::npos);
  // Few columns over a long dim: the tile over a cluster.
  p = default_of(OpKey::Single("aten::mean", "dim", {TensorDesc::Contiguous(DType::kFloat16, {8192, 96}), IntList{0},
                                                     false, NoneArg{}},
                               90),
                 &c);
  EXPECT_EQ(p.at("strategy"), 3) << PointToString(p);
  EXPECT_GT(p.at("cluster"), 1) << PointToString(p);
  // MeanOps' factor, float(outputs) / float(inputs): 96 / 786432 = 2^-13 exactly.
  EXPECT_NE(c.source.find("#define MEAN_FACTOR 0x1p-13f"), std::string::npos);
  // Odd, tiny, short and copies: each has a valid default that generates.
  default_of(ArgKey("aten::argmin", TensorDesc::Contiguous(DType::kBFloat16, {33, 7, 65}), int64_t{1}, true));
  default_of(OpKey::Single("aten::prod", "", {TensorDesc::Contiguous(DType::kFloat16, {3, 5, 7}), NoneArg{}}, 90));
  default_of(SumKey(TensorDesc::Contiguous(DType::kFloat32, {6, 1, 7}), IntList{1}));
  default_of(OpKey::Single("aten::amin", "", {TensorDesc::Contiguous(DType::kFloat16, {4095, 1023}), IntList{1}, false}, 90));
  default_of(ArgKey("aten::argmax", TensorDesc::Contiguous(DType::kFloat32, {1}), NoneArg{}));
  default_of(SumKey(TensorDesc::Contiguous(DType::kFloat32, {3, 100000, 7}), IntList{1}));
  // Per-channel statistics: 64 outputs of 32 segments of 65536: a cluster of blocks each, whole vectors.
  p = default_of(OpKey::Single("aten::mean", "dim", {TensorDesc::Contiguous(DType::kFloat32, {32, 64, 256, 256}),
                                                     IntList{0, 2, 3}, false, NoneArg{}},
                               90),
                 &c);
  EXPECT_EQ(p.at("strategy"), 1) << PointToString(p);
  EXPECT_EQ(p.at("cluster"), 8) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 4) << PointToString(p);
  EXPECT_NE(c.source.find("#define SEGS 32LL"), std::string::npos);
  // Segments of 33 elements: vectors must divide them.
  p = default_of(SumKey(TensorDesc::Contiguous(DType::kFloat32, {5, 6, 33}), IntList{0, 2}));
  EXPECT_EQ(p.at("vec"), 1) << PointToString(p);
  // One long row (sum of everything): split over 1024 blocks of 512 threads (4 per SM), partials
  // and a counter in the workspace, the kernel's third parameter (kernel ABI v2).
  p = default_of(SumKey(big, NoneArg{}), &c);
  EXPECT_EQ(p.at("strategy"), 4) << PointToString(p);
  EXPECT_EQ(p.at("chunks"), 1024) << PointToString(p);
  EXPECT_EQ(p.at("threads"), 512) << PointToString(p);
  EXPECT_EQ(c.launch.grid[0], 1024u);
  EXPECT_EQ(c.launch.workspace_bytes, 16u + 1024u * 4u);
  EXPECT_NE(c.source.find("kjit_reduce(const in_t* __restrict__ x, y_t* __restrict__ y, unsigned char* __restrict__ ws)"),
            std::string::npos);
  // argmax of a flattened 2^25: indices in the workspace too (32-bit: the row is shorter than 2^31 - 1).
  p = default_of(ArgKey("aten::argmax", TensorDesc::Contiguous(DType::kFloat32, {1 << 25}), NoneArg{}), &c);
  EXPECT_EQ(p.at("strategy"), 4) << PointToString(p);
  EXPECT_EQ(c.launch.workspace_bytes, 16u + 2 * 1024u * 4u);
  // Three per-channel means of [128, 3, 256, 256]: 3 rows of segments, 256 blocks each.
  p = default_of(OpKey::Single("aten::mean", "dim", {TensorDesc::Contiguous(DType::kBFloat16, {128, 3, 256, 256}),
                                                     IntList{0, 2, 3}, false, DType::kFloat32},
                               90),
                 &c);
  EXPECT_EQ(p.at("strategy"), 4) << PointToString(p);
  EXPECT_EQ(p.at("chunks"), 256) << PointToString(p);
  EXPECT_EQ(c.launch.grid[0], 3u * 256u);
  EXPECT_EQ(c.launch.workspace_bytes, 16u + 3u * 256u * 4u);
  // Rows that clusters fill the GPU with keep them (no workspace).
  p = default_of(SumKey(TensorDesc::Contiguous(DType::kFloat16, {4, 262144}), IntList{-1}, false, DType::kFloat32), &c);
  EXPECT_EQ(c.launch.workspace_bytes, 0u);
}

TEST(ReduceSpace, SplitStrategyChecksAndOlderPoints) {
  const DeviceFacts device = DeviceFacts::H200();
  auto found = FindFamily(SumKey(TensorDesc::Contiguous(DType::kFloat32, {4, 1 << 22}), IntList{1}));
  ASSERT_TRUE(found.ok());
  const Family& f = *found->family;
  const Problem& problem = *found->problem;
  auto point = [](int64_t strategy, int64_t threads, int64_t chunks, int64_t cluster = 1, int64_t unroll = 2) {
    return Point{{"strategy", strategy}, {"threads", threads}, {"vec", 4}, {"unroll", unroll},
                 {"cluster", cluster},   {"hint", 0},          {"chunks", chunks}};
  };
  EXPECT_TRUE(f.Check(problem, point(4, 512, 256), device).ok());
  EXPECT_NE(f.Check(problem, point(4, 512, 1), device).message().find("block strategy"), std::string::npos);
  EXPECT_NE(f.Check(problem, point(1, 512, 16), device).message().find("split strategy"), std::string::npos);
  EXPECT_NE(f.Check(problem, point(4, 512, 16, 2), device).message().find("clusters"), std::string::npos);
  // 2^18 vectors per row over 1024 blocks of 1024 threads: most would idle.
  auto shorter = FindFamily(SumKey(TensorDesc::Contiguous(DType::kFloat32, {4, 1 << 20}), IntList{1}));
  ASSERT_TRUE(shorter.ok());
  EXPECT_NE(f.Check(*shorter->problem, point(4, 1024, 1024, 1, 1), device).message().find("idle"), std::string::npos);
  // Columns have no split strategy.
  auto columns = FindFamily(SumKey(TensorDesc::Contiguous(DType::kFloat32, {64, 300, 64}), IntList{1}));
  ASSERT_TRUE(columns.ok());
  EXPECT_FALSE(columns->family->Check(*columns->problem, point(4, 128, 4), device).ok());
  // A point measured before the chunks knob existed (codegen 1): one block per row, as today's chunks=1.
  Point old = point(1, 512, 1, 4);
  old.erase("chunks");
  EXPECT_TRUE(f.Check(problem, old, device).ok());
  const Space space = f.MakeSpace(problem, device);
  ASSERT_EQ(space.absent_as.count("chunks"), 1u);
  EXPECT_EQ(space.absent_as.at("chunks"), 1);
  // Every valid split point generates, with a workspace that holds a counter and a partial per block.
  int split_points = 0;
  for (const Point& v : ValidPoints(f, problem, device)) {
    if (v.at("strategy") != 4) continue;
    ++split_points;
    auto c = f.Generate(problem, v, device);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->launch.workspace_bytes, 16u + static_cast<uint64_t>(4 * v.at("chunks")) * 4u) << PointToString(v);
    EXPECT_EQ(c->launch.grid[0], static_cast<uint32_t>(4 * v.at("chunks")));
  }
  EXPECT_GT(split_points, 0);
}

TEST(ReduceSpace, TraitsFollowWhatPyTorchFixes) {
  (void)Families();  // declares the traits
  EXPECT_EQ(TraitsFor("aten::argmax").compare, ComparePolicy::kBitwise);
  EXPECT_EQ(TraitsFor("aten::argmin").compare, ComparePolicy::kBitwise);
  EXPECT_EQ(TraitsFor("aten::amax").atol, 0.0);
  EXPECT_EQ(TraitsFor("aten::amin").rtol, 0.0);
  EXPECT_EQ(TraitsFor("aten::sum").tolerance_by_dtype.at(DType::kFloat32).rtol, 1e-5);
  EXPECT_TRUE(TraitsFor("aten::sum").special_values);
  EXPECT_TRUE(TraitsFor("aten::mean").no_special_inputs.empty());
  EXPECT_TRUE(TraitsFor("aten::prod").no_special_inputs.count(DType::kFloat32));
}

}  // namespace
}  // namespace kjit::policy
