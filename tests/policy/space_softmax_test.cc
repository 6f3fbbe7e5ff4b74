// The softmax and log_softmax design space, on CPU: what it declines, the checks that follow the
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

TEST(SoftmaxSpace, DeclinesWhatItCannotServe) {
  auto decline = [](std::vector<Arg> args) {
    return FindFamily(OpKey::Single("aten::_softmax", "", std::move(args), 90)).status();
  };
  TensorDesc transposed = TensorDesc::Contiguous(DType::kFloat32, {64, 128});
  transposed.strides = {1, 64};
  Status st = decline({transposed, int64_t{-1}, false});
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_NE(st.message().find("non-contiguous"), std::string::npos) << st.message();
  st = decline({TensorDesc::Contiguous(DType::kFloat64, {4, 4}), int64_t{-1}, false});
  EXPECT_NE(st.message().find("not served"), std::string::npos) << st.message();
  st = decline({TensorDesc::Contiguous(DType::kFloat32, {4, 4}), int64_t{-1}, true});
  EXPECT_NE(st.message().find("half_to_float"), std::string::npos) << st.message();
  st = decline({TensorDesc::Contiguous(DType::kFloat32, {0, 4}), int64_t{-1}, false});
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_EQ(FindFamily(OpKey::Single("aten::relu", "", {TensorDesc::Contiguous(DType::kFloat32, {4})}, 90))
                .status()
                .code(),
            StatusCode::kNotFound);
}

// The softmax expert default on the H200 for an f32 tensor of these sizes, over its last dim.
Point SoftmaxDefaultOnH200(std::vector<int64_t> sizes) {
  auto found = FindFamily(OpKey::Single(
      "aten::_softmax", "", {TensorDesc::Contiguous(DType::kFloat32, std::move(sizes)), int64_t{-1}, false}, 90));
  EXPECT_TRUE(found.ok()) << found.status().ToString();
  if (!found.ok()) return {};
  return found->family->ExpertDefault(*found->problem, DeviceFacts::H200());
}

TEST(SoftmaxSpace, LongFewRowsSplitAcrossAClusterByDefault) {
  const Family& f = *FindFamily(OpKey::Single("aten::_softmax", "",
                                              {TensorDesc::Contiguous(DType::kFloat32, {64, 1048576}), int64_t{-1},
                                               false},
                                              90))
                         ->family;
  auto problem = f.Match(OpKey::Single("aten::_softmax", "",
                                       {TensorDesc::Contiguous(DType::kFloat32, {64, 1048576}), int64_t{-1}, false}, 90));
  ASSERT_TRUE(problem.ok());
  const Point p = f.ExpertDefault(**problem, DeviceFacts::H200());
  EXPECT_EQ(p.at("strategy"), 4) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 4) << PointToString(p);
  // Four vectors a thread loaded before any is used (H200: 212.8 us, against 244.1 one at a time).
  EXPECT_EQ(p.at("unroll"), 4) << PointToString(p);
  EXPECT_EQ(p.at("hint"), 0) << PointToString(p);
  // 64 rows are at most half the SMs: clusters of 16 blocks of 512 (H200: 209.4 us, against 212.2 in
  // clusters of 8 blocks of 1024).
  EXPECT_EQ(p.at("cluster"), 16) << PointToString(p);
  EXPECT_EQ(p.at("threads"), 512) << PointToString(p);
}

// Clusters of 16 only while the rows are at most half the SMs (66 on the H200) and a block's part holds 6
// batches of 4 vectors a thread in blocks of 512; without non-portable clusters, clusters of 8.
TEST(SoftmaxSpace, FewLongRowsTakeClustersOf16) {
  for (std::vector<int64_t> sizes :
       std::vector<std::vector<int64_t>>{{32, 1048576}, {16, 1048576}, {32, 1000003}, {48, 2000003}, {66, 1048576}}) {
    const Point p = SoftmaxDefaultOnH200(sizes);
    EXPECT_EQ(p.at("strategy"), 4) << sizes[0] << "x" << sizes[1];
    EXPECT_EQ(p.at("cluster"), 16) << sizes[0] << "x" << sizes[1];
    EXPECT_EQ(p.at("threads"), 512) << sizes[0] << "x" << sizes[1];
  }
  // 67 rows: more than half the SMs; 32x500003: 3.8 batches a thread.
  for (std::vector<int64_t> sizes : std::vector<std::vector<int64_t>>{{67, 1048576}, {32, 500003}, {128, 1048576}}) {
    EXPECT_EQ(SoftmaxDefaultOnH200(sizes).at("cluster"), 8) << sizes[0] << "x" << sizes[1];
  }
  const OpKey key = OpKey::Single("aten::_softmax", "",
                                  {TensorDesc::Contiguous(DType::kFloat32, {32, 1048576}), int64_t{-1}, false}, 90);
  auto found = FindFamily(key);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  DeviceFacts portable_only = DeviceFacts::H200();
  portable_only.max_nonportable_cluster_size = 8;
  const Point p = found->family->ExpertDefault(*found->problem, portable_only);
  EXPECT_EQ(p.at("cluster"), 8) << PointToString(p);
  EXPECT_TRUE(found->family->Check(*found->problem, p, portable_only).ok());
}

// A prime row length: the cluster's blocks share the row's whole vectors unevenly, and rank 0 takes
// the scalar head and tail (H200: 64x1000003 225.9 us in blocks of 512 with batched loads, codegen 7; 422.7
// for the online block of 1024 it had before codegen 6; 128x1000003 409.1 us). With more rows than half the
// SMs, clusters of 8: blocks of 1024 from a third of a row an SM to one row an SM where each thread's part
// holds 8 batches of 4 vectors, 512 otherwise.
TEST(SoftmaxSpace, OddLongFewRowsSplitAcrossAClusterToo) {
  const Point p = SoftmaxDefaultOnH200({128, 1000003});
  EXPECT_EQ(p.at("strategy"), 4) << PointToString(p);
  EXPECT_EQ(p.at("cluster"), 8) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 4) << PointToString(p);
  EXPECT_EQ(p.at("threads"), 512) << PointToString(p);  // 125000 floats a block: short of 8 batches of 1024
  EXPECT_EQ(SoftmaxDefaultOnH200({128, 1048576}).at("threads"), 1024);
  EXPECT_EQ(SoftmaxDefaultOnH200({100, 2000003}).at("threads"), 1024);
  for (int64_t rows : {32, 160}) EXPECT_EQ(SoftmaxDefaultOnH200({rows, 500003}).at("threads"), 512) << rows;
  // Parts too short for 8 batches of 4 vectors a thread in blocks of 1024 (H200: 96x500003 162.0 us in
  // blocks of 512, 212.6 in blocks of 1024).
  EXPECT_EQ(SoftmaxDefaultOnH200({96, 500003}).at("threads"), 512);
}

// Rows too long for two staged rows an SM read twice by blocks of 1024 (H200, f32 2047x32767:
// 204.4 us against 302.8 staged one row an SM); rows that leave room for two stay staged.
TEST(SoftmaxSpace, RowsStagedAloneOnAnSmAreReadTwiceInstead) {
  auto def = SoftmaxDefaultOnH200;
  const Point p = def({2047, 32767});
  EXPECT_EQ(p.at("strategy"), 3) << PointToString(p);
  EXPECT_EQ(p.at("threads"), 1024) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 4) << PointToString(p);
  EXPECT_EQ(p.at("hint"), 1) << PointToString(p);
  EXPECT_EQ(p.at("unroll"), 2) << PointToString(p);  // two vectors in flight: 173.5 us, against 189.2
  EXPECT_EQ(def({4095, 16383}).at("strategy"), 2) << PointToString(def({4095, 16383}));
}

// Staged rows whose length the vector width does not divide take the streaming hint (H200, f32
// rows of 16383: 9-15% faster); aligned rows do not (0-2% slower with it).
TEST(SoftmaxSpace, OddStagedRowsTakeTheStreamingHint) {
  auto def = SoftmaxDefaultOnH200;
  for (int64_t rows : {1023, 4095, 12287}) {
    const Point odd = def({rows, 16383});
    EXPECT_EQ(odd.at("strategy"), 2) << PointToString(odd);
    EXPECT_EQ(odd.at("threads"), 512) << PointToString(odd);
    EXPECT_EQ(odd.at("vec"), 4) << PointToString(odd);
    EXPECT_EQ(odd.at("hint"), 1) << PointToString(odd);
  }
  const Point aligned = def({4096, 20000});  // staged too (too long for 16 floats a thread)
  EXPECT_EQ(aligned.at("strategy"), 2) << PointToString(aligned);
  EXPECT_EQ(aligned.at("vec"), 4) << PointToString(aligned);
  EXPECT_EQ(aligned.at("hint"), 0) << PointToString(aligned);
}


// An odd row length: the strategies that give a row a block or a cluster take whole
// vectors between a scalar head and tail (each row starts at another alignment); the
// strategies that hold the row in registers still need VEC to divide it.
TEST(SoftmaxSpace, OddRowsKeepVectorsWhereABlockOrAClusterOwnsTheRow) {
  const OpKey key = OpKey::Single("aten::_softmax", "",
                                  {TensorDesc::Contiguous(DType::kFloat32, {4095, 16383}), int64_t{-1}, false}, 90);
  auto found = FindFamily(key);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  const Family& f = *found->family;
  const DeviceFacts dev = DeviceFacts::H200();
  auto point = [](int64_t strategy, int64_t threads, int64_t vec, int64_t cluster) {
    return Point{{"strategy", strategy}, {"threads", threads}, {"vec", vec},
                 {"cluster", cluster},   {"unroll", 1},        {"hint", 0}};
  };
  // Shared memory, online, and the two cluster strategies over 2 blocks (4095 vectors: 2048 and 2047).
  for (const Point& p : {point(2, 512, 4, 1), point(3, 512, 4, 1), point(4, 256, 4, 2), point(5, 256, 4, 2)}) {
    EXPECT_TRUE(f.Check(*found->problem, p, dev).ok()) << PointToString(p);
    auto c = f.Generate(*found->problem, p, dev);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_NE(c->source.find("constexpr bool RAGGED = true;"), std::string::npos);
    // A staged cluster block holds its share of the vectors, at most one more than the others.
    if (p.at("strategy") == 5) {
      EXPECT_EQ(c->launch.dynamic_shared_bytes, 2048u * 4 * 4);
    }
  }
  EXPECT_FALSE(f.Check(*found->problem, point(1, 1024, 4, 1), dev).ok());  // registers
  // Clusters of 8: 4095 vectors leave each block 511, short of one pass of 512 threads.
  EXPECT_FALSE(f.Check(*found->problem, point(5, 512, 4, 8), dev).ok());
  EXPECT_TRUE(f.Check(*found->problem, point(5, 256, 4, 8), dev).ok());
  const Point def = f.ExpertDefault(*found->problem, dev);
  EXPECT_EQ(def.at("vec"), 4) << PointToString(def);
  // A length the vector divides generates the plain loops.
  auto even = FindFamily(OpKey::Single("aten::_softmax", "",
                                       {TensorDesc::Contiguous(DType::kFloat32, {4096, 16384}), int64_t{-1}, false}, 90));
  ASSERT_TRUE(even.ok());
  auto c = even->family->Generate(*even->problem, point(3, 512, 4, 1), dev);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_NE(c->source.find("constexpr bool RAGGED = false;"), std::string::npos);
}


// Rows of 4 MB (64 x 1M f32) split over a cluster of 8 leave each block 512 KB: more than a block's shared
// memory. Strategy 5 stages what fits (by bulk copies where a vector is 16 bytes) and reads the rest twice,
// in an online loop that takes unroll; a part that fits is staged whole and has no such loop.
TEST(SoftmaxSpace, ClusterPartsLargerThanSharedMemoryStageWhatFits) {
  auto found = FindFamily(OpKey::Single(
      "aten::_softmax", "", {TensorDesc::Contiguous(DType::kFloat32, {64, 1048576}), int64_t{-1}, false}, 90));
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  const Family& f = *found->family;
  const DeviceFacts dev = DeviceFacts::H200();
  auto point = [](int64_t threads, int64_t vec, int64_t cluster, int64_t unroll) {
    return Point{{"strategy", 5}, {"threads", threads}, {"vec", vec},
                 {"cluster", cluster}, {"unroll", unroll}, {"hint", 1}};
  };
  const int64_t cap_floats = (dev.max_shared_bytes_per_block - 1024) / 4 / 4 * 4;  // whole vectors of 4
  // Blocks of 512 or fewer stage half an SM's worth, two an SM.
  const int64_t half_sm_floats = (dev.shared_bytes_per_sm / 2 - 2048) / 4 / 4 * 4;
  for (const auto& [p, floats] : {std::pair{point(1024, 4, 8, 1), cap_floats}, {point(512, 4, 2, 4), half_sm_floats}}) {
    ASSERT_TRUE(f.Check(*found->problem, p, dev).ok()) << PointToString(p);
    auto c = f.Generate(*found->problem, p, dev);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->launch.dynamic_shared_bytes, static_cast<uint32_t>(floats * 4)) << PointToString(p);
    EXPECT_NE(c->source.find("constexpr long long STAGE = " + std::to_string(floats) + "LL;"), std::string::npos);
    EXPECT_NE(c->source.find("constexpr bool BULK = true;"), std::string::npos);
  }
  // Vectors of 8 bytes: each thread stages what it reads, as floats.
  auto c = f.Generate(*found->problem, point(1024, 2, 8, 2), dev);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_NE(c->source.find("constexpr bool BULK = false;"), std::string::npos);
  EXPECT_NE(c->source.find("typedef float stage_t;"), std::string::npos);
  // A part that fits (4095 x 16383 over 2 blocks: 32 KB each) has nothing to unroll.
  auto fits = FindFamily(OpKey::Single(
      "aten::_softmax", "", {TensorDesc::Contiguous(DType::kFloat32, {4095, 16383}), int64_t{-1}, false}, 90));
  ASSERT_TRUE(fits.ok());
  EXPECT_TRUE(f.Check(*fits->problem, point(256, 4, 2, 1), dev).ok());
  EXPECT_FALSE(f.Check(*fits->problem, point(256, 4, 2, 2), dev).ok());
}

// The family match of an f32 softmax over the last dim of `sizes`.
Match F32SoftmaxMatch(std::vector<int64_t> sizes, const char* op = "aten::_softmax") {
  auto found = FindFamily(
      OpKey::Single(op, "", {TensorDesc::Contiguous(DType::kFloat32, std::move(sizes)), int64_t{-1}, false}, 90));
  EXPECT_TRUE(found.ok()) << found.status().ToString();
  return std::move(*found);
}

// Strategy 9 holds a part on chip: shared memory as far as it goes (one block an SM), the rest in registers.
// A 4 MB row needs a cluster of 16 (non-portable); a cluster of 8 would hold 72 floats a thread.
TEST(SoftmaxSpace, ClusterHoldKeepsThePartOnChip) {
  const Match found = F32SoftmaxMatch({64, 1048576});
  const Family& f = *found.family;
  const DeviceFacts dev = DeviceFacts::H200();
  auto point = [](int64_t threads, int64_t vec, int64_t cluster) {
    return Point{{"strategy", 9}, {"threads", threads}, {"vec", vec}, {"cluster", cluster}, {"unroll", 1}, {"hint", 0}};
  };
  const int64_t staged = (dev.max_shared_bytes_per_block - 1024) / 4 / 4 * 4;  // 57856 floats
  auto c = f.Generate(*found.problem, point(1024, 4, 16), dev);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->launch.dynamic_shared_bytes, static_cast<uint32_t>(staged * 4));
  EXPECT_EQ(c->launch.grid[0], 64u * 16u);
  // 65536 - 57856 = 7680 floats left: two vectors of 4 a thread.
  EXPECT_NE(c->source.find("constexpr int HOLD = 2;"), std::string::npos);
  EXPECT_NE(c->source.find("CLUSTER = 16;"), std::string::npos);
  EXPECT_FALSE(f.Check(*found.problem, point(1024, 4, 8), dev).ok());  // 18 vectors a thread
  Point unrolled = point(1024, 4, 16);
  unrolled["unroll"] = 2;
  EXPECT_FALSE(f.Check(*found.problem, unrolled, dev).ok());  // nothing streams: unroll stays 1
  // Without the non-portable size, no cluster of 16.
  DeviceFacts portable = dev;
  portable.max_nonportable_cluster_size = 8;
  EXPECT_FALSE(f.Check(*found.problem, point(1024, 4, 16), portable).ok());
  // A part that fits in shared memory is strategy 5's.
  auto fits = FindFamily(OpKey::Single(
      "aten::_softmax", "", {TensorDesc::Contiguous(DType::kFloat32, {64, 262144}), int64_t{-1}, false}, 90));
  ASSERT_TRUE(fits.ok());
  EXPECT_FALSE(f.Check(*fits->problem, point(1024, 4, 8), dev).ok());
  EXPECT_TRUE(f.Check(*fits->problem, point(1024, 4, 4), dev).ok());  // 65536 floats a block, as above
}

// The points codegen 7 had (strategies 0-8, clusters up to 8) keep their kernels byte for byte when
// strategies or cluster sizes are added: their dataset rows stay true of what they measured.
// The strategy 2, 6, 7 and 8 kernels' `#pragma unroll UNROLL` became `#pragma unroll kUnroll` (a constexpr of
// UNROLL) at 85949c7+1, for nvcc (which expands no macro there); NVRTC's PTX of every changed point of the
// sample keys' pairwise covers is byte-identical (checked with NVRTC 13.0): the dataset rows still hold.
TEST(SoftmaxSpace, OldPointsKeepTheirSources) {
  const std::vector<SourceGolden> golden = {
      {418u, 0x2eaef664aad3f623ull},  // softmax f32->f32 outer=4096 len=16384 inner=1
      {522u, 0x4e96dbb02982d5e5ull},  // softmax f32->f32 outer=64 len=1048576 inner=1
      {110u, 0x24a319c466bc93a9ull},  // softmax f32->f32 outer=262144 len=256 inner=1
      {164u, 0x23f8bd8b61310f69ull},  // softmax f16->f32 outer=1000 len=1000 inner=1
      {538u, 0x9974a61ac6ed10a1ull},  // log_softmax bf16->bf16 outer=8192 len=50257 inner=1
      {198u, 0xc171fccc14b3e4ebull},  // softmax f32->f32 outer=32 len=1000 inner=64
      {264u, 0x4bef2fb751df0e4bull},  // log_softmax f16->f16 outer=128 len=24 inner=96
      {378u, 0xa8a25430fa4bcbe5ull},  // log_softmax f32->f32 outer=48 len=100003 inner=1
  };
  ExpectOldPointsKeepTheirSources(*F32SoftmaxMatch({64, 1024}).family, golden, [](const OpKey&, const Point& p) {
    return p.at("strategy") <= 8 && p.at("cluster") <= 8 && p.at("reverse") == 0 && p.at("per_sm") == 0;
  });
}

}  // namespace
}  // namespace kjit::policy
