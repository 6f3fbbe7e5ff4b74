// Every op family's design space, on CPU: sample keys match, the expert
// default is valid, invalid points are refused, and the generated kernels
// compile with NVRTC for sm_90: every valid point where the space is small,
// otherwise a pairwise cover (every value of every knob and every pair of
// values occurring together); KJIT_FULL_SWEEP=1 compiles every valid point.
#include <functional>
#include <sstream>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>

#include "kjit/policy/design_space.h"
#include "kjit/runtime/compiler.h"
#include "kjit/runtime/untrusted_source.h"

namespace kjit::policy {
namespace {

// A family with at most this many valid points over its sample keys compiles
// all of them here (0.1-0.2 s each: NVRTC serialises within a process, so a
// few minutes); a larger one compiles a pairwise cover here and everything in
// the GPU script's full sweep (KJIT_FULL_SWEEP=1). KJIT_SPACE_SWEEP=cover
// asks for the cover whatever the size (the sanitizer build, which checks
// kjit's own code, not NVRTC's, uses it).
constexpr size_t kCompileAllUpTo = 2000;

struct SweepResult {
  size_t compiled = 0;
  std::vector<std::string> failures;
};

SweepResult CompileAll(const Family& family, const Problem& problem, const std::vector<Point>& points,
                       const DeviceFacts& device) {
  static Compiler compiler;
  SweepResult result;
  std::mutex mu;
  std::atomic<size_t> next{0};
  const unsigned workers = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < workers; ++w) {
    pool.emplace_back([&] {
      for (size_t i = next++; i < points.size(); i = next++) {
        auto candidate = family.Generate(problem, points[i], device);
        std::string failure;
        if (!candidate.ok()) {
          failure = candidate.status().ToString();
        } else if (Status st = CheckUntrustedCandidate(candidate->source, candidate->options); !st.ok()) {
          // kjit's own kernels pass the checks a submitted kernel must (kjitd checks every submission).
          failure = st.ToString();
        } else {
          CompileRequest request;
          request.source = candidate->source;
          request.program_name = std::string(family.name()) + ".cu";
          request.arch = 90;
          request.options = candidate->options;
          auto compiled = compiler.Compile(request);
          if (!compiled.ok()) failure = compiled.status().ToString().substr(0, 3000);
          const auto& l = candidate->launch;
          if (l.grid[0] == 0 || l.block[0] == 0 || l.block[0] * l.block[1] * l.block[2] > 1024 ||
              l.dynamic_shared_bytes > static_cast<uint32_t>(device.max_shared_bytes_per_block)) {
            failure += " launch shape out of limits";
          }
        }
        std::lock_guard<std::mutex> lock(mu);
        if (failure.empty()) {
          ++result.compiled;
        } else {
          result.failures.push_back(PointToString(points[i]) + ": " + failure);
        }
      }
    });
  }
  for (auto& t : pool) t.join();
  return result;
}

class SpaceTest : public ::testing::TestWithParam<const Family*> {};

TEST_P(SpaceTest, SampleKeysMatchAndDefaultsAreValid) {
  const Family& f = *GetParam();
  const DeviceFacts device = DeviceFacts::H200();
  ASSERT_FALSE(f.SampleKeys().empty());
  for (const OpKey& key : f.SampleKeys()) {
    auto problem = f.Match(key);
    ASSERT_TRUE(problem.ok()) << key.ToString() << ": " << problem.status().ToString();
    const Point def = f.ExpertDefault(**problem, device);
    EXPECT_TRUE(f.Check(**problem, def, device).ok())
        << (*problem)->description << ": default " << PointToString(def) << ": "
        << f.Check(**problem, def, device).ToString();
    auto found = FindFamily(key);
    ASSERT_TRUE(found.ok()) << found.status().ToString();
    EXPECT_EQ(found->family, &f);
    // Every knob of the space is in every point, and nothing else.
    const Space space = f.MakeSpace(**problem, device);
    EXPECT_EQ(def.size(), space.knobs.size());
    for (const Knob& k : space.knobs) EXPECT_TRUE(def.count(k.name)) << k.name;
  }
}

TEST_P(SpaceTest, InvalidPointsAreRefusedWithAReason) {
  const Family& f = *GetParam();
  const DeviceFacts device = DeviceFacts::H200();
  size_t refused = 0;
  for (const OpKey& key : f.SampleKeys()) {
    auto problem = f.Match(key);
    ASSERT_TRUE(problem.ok());
    const Space space = f.MakeSpace(**problem, device);
    const char* sweep = std::getenv("KJIT_SPACE_SWEEP");
    if (sweep != nullptr && std::string(sweep) == "cover") {
      // Under the sanitizers: enumerating matmul's cross product (6.2 million points a key) takes longer
      // than the test's time limit; the expert default stands for "some point is valid".
      EXPECT_TRUE(f.Check(**problem, f.ExpertDefault(**problem, device), device).ok()) << (*problem)->description;
    } else {
      const std::vector<Point> valid = ValidPoints(f, **problem, device);
      EXPECT_FALSE(valid.empty()) << (*problem)->description;
      EXPECT_LT(valid.size(), space.size()) << "a space with no invalid point has no rules";
    }
    // Walk the cross product once more: a refused point says why, and Generate refuses it too.
    Point p;
    for (const Knob& k : space.knobs) p[k.name] = k.values.back();
    Status st = f.Check(**problem, p, device);
    if (!st.ok()) {
      ++refused;
      EXPECT_FALSE(st.message().empty());
      EXPECT_FALSE(f.Generate(**problem, p, device).ok());
    }
  }
  EXPECT_GT(refused, 0u);
}

// Under the sanitizers (KJIT_SPACE_SWEEP=cover), the largest cross product a key EveryPointCompilesForSm90
// enumerates: every family but matmul (6.2 million) is far below it.
constexpr size_t kSanitizerSweepLimit = 4'000'000;

TEST_P(SpaceTest, EveryPointCompilesForSm90) {
  const Family& f = *GetParam();
  const DeviceFacts device = DeviceFacts::H200();
  const bool full = std::getenv("KJIT_FULL_SWEEP") != nullptr;
  size_t total_valid = 0, total_compiled = 0;
  const char* sweep = std::getenv("KJIT_SPACE_SWEEP");
  const bool cover_only = sweep != nullptr && std::string(sweep) == "cover";
  if (cover_only) {
    // The cover is chosen from every valid point, so the whole cross product is enumerated (twice): under
    // the sanitizers matmul's (6.2 million points a key since stage 5) takes longer than the time limit.
    // The release run compiles its cover; MatmulSpace's tests generate kernels under the sanitizers too.
    size_t largest = 0;
    for (const OpKey& key : f.SampleKeys()) {
      auto problem = f.Match(key);
      ASSERT_TRUE(problem.ok());
      largest = std::max(largest, f.MakeSpace(**problem, device).size());
    }
    if (largest > kSanitizerSweepLimit) {
      GTEST_SKIP() << f.name() << "'s cross product has " << largest << " points a key, over the "
                   << kSanitizerSweepLimit << " enumerated under the sanitizers (KJIT_SPACE_SWEEP=cover); the "
                   << "release run compiles its pairwise cover";
    }
  }
  // Counting the valid points enumerates the whole space, which under the sanitizers is most of the
  // test's time: only when the count decides between all points and the cover.
  if (!full && !cover_only) {
    for (const OpKey& key : f.SampleKeys()) {
      auto problem = f.Match(key);
      ASSERT_TRUE(problem.ok());
      total_valid += ValidPoints(f, **problem, device).size();
    }
  }
  const bool all = full || (!cover_only && total_valid <= kCompileAllUpTo);
  total_valid = 0;
  const auto started = std::chrono::steady_clock::now();
  for (const OpKey& key : f.SampleKeys()) {
    auto problem = f.Match(key);
    ASSERT_TRUE(problem.ok());
    const std::vector<Point> valid = ValidPoints(f, **problem, device);
    const std::vector<Point> points = all ? valid : PairwiseCover(f, **problem, device);
    const SweepResult r = CompileAll(f, **problem, points, device);
    total_valid += valid.size();
    total_compiled += r.compiled;
    std::printf("[ sweep ] %s: %zu valid points, compiled %zu (%s)\n", (*problem)->description.c_str(),
                valid.size(), r.compiled, all ? "all" : "pairwise cover");
    for (const std::string& failure : r.failures) ADD_FAILURE() << (*problem)->description << ": " << failure;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("[ sweep ] %s: %zu valid points over %zu keys, %zu compiled in %.1f s\n", std::string(f.name()).c_str(),
              total_valid, f.SampleKeys().size(), total_compiled, seconds);
}

INSTANTIATE_TEST_SUITE_P(Families, SpaceTest, ::testing::ValuesIn(Families()),
                         [](const ::testing::TestParamInfo<const Family*>& param_info) {
                           return std::string(param_info.param->name());
                         });

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

// FNV-1a over a candidate's source and launch shape: the digests the OldPointsKeepTheirSources tests keep.
constexpr uint64_t kFnvOffset = 1469598103934665603ull;
uint64_t HashCandidate(uint64_t h, const Candidate& c) {
  const std::string s = c.source + "|" + std::to_string(c.launch.grid[0]) + "," + std::to_string(c.launch.block[0]) +
                        "," + std::to_string(c.launch.dynamic_shared_bytes);
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

// The digest of the old points of each of the family's sample keys (`is_old`, in ValidPoints' order) must be
// `golden`'s: their dataset rows stay true of what they measured. `each`, when given, sees every valid point's
// candidate (old or not).
struct SourceGolden { size_t old_points; uint64_t digest; };
void ExpectOldPointsKeepTheirSources(const Family& f, const std::vector<SourceGolden>& golden,
                                     const std::function<bool(const OpKey&, const Point&)>& is_old,
                                     const std::function<void(const OpKey&, const Point&, const Candidate&)>& each = {}) {
  const DeviceFacts device = DeviceFacts::H200();
  const std::vector<OpKey> keys = f.SampleKeys();
  ASSERT_EQ(keys.size(), golden.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto problem = f.Match(keys[i]);
    ASSERT_TRUE(problem.ok());
    uint64_t h = kFnvOffset;
    size_t old_points = 0;
    for (const Point& p : ValidPoints(f, **problem, device)) {
      const bool old = is_old(keys[i], p);
      if (!old && !each) continue;
      auto c = f.Generate(**problem, p, device);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      if (each) each(keys[i], p, *c);
      if (!old) continue;
      ++old_points;
      h = HashCandidate(h, *c);
    }
    EXPECT_EQ(old_points, golden[i].old_points) << (*problem)->description;
    EXPECT_EQ(h, golden[i].digest) << (*problem)->description << ": an old point's source changed; digest 0x" << std::hex
                                   << h;
  }
}

// The points codegen 7 had (strategies 0-8, clusters up to 8) keep their kernels byte for byte when
// strategies or cluster sizes are added: their dataset rows stay true of what they measured.
TEST(SoftmaxSpace, OldPointsKeepTheirSources) {
  const std::vector<SourceGolden> golden = {
      {418u, 0x1ad3d14fe79cfad3ull},  // softmax f32->f32 outer=4096 len=16384 inner=1
      {522u, 0x4e96dbb02982d5e5ull},  // softmax f32->f32 outer=64 len=1048576 inner=1
      {110u, 0x7a525c4f172d1973ull},  // softmax f32->f32 outer=262144 len=256 inner=1
      {164u, 0xb6f16e4ca88173bfull},  // softmax f16->f32 outer=1000 len=1000 inner=1
      {538u, 0xeca87ee79315152full},  // log_softmax bf16->bf16 outer=8192 len=50257 inner=1
      {198u, 0x21690aba6780c311ull},  // softmax f32->f32 outer=32 len=1000 inner=64
      {264u, 0x809e51fa7cd18545ull},  // log_softmax f16->f16 outer=128 len=24 inner=96
      {378u, 0xa8a25430fa4bcbe5ull},  // log_softmax f32->f32 outer=48 len=100003 inner=1
  };
  ExpectOldPointsKeepTheirSources(*F32SoftmaxMatch({64, 1024}).family, golden, [](const OpKey&, const Point& p) {
    return p.at("strategy") <= 8 && p.at("cluster") <= 8 && p.at("reverse") == 0 && p.at("per_sm") == 0;
  });
}


OpKey LayerNormKey(TensorDesc x, std::vector<int64_t> shape, Arg weight, Arg bias, double eps = 1e-5) {
  return OpKey::Single("aten::native_layer_norm", "", {std::move(x), IntList(shape), std::move(weight), std::move(bias), eps},
                       90);
}

TEST(LayerNormSpace, DeclinesWhatItCannotServe) {
  auto reason = [](const OpKey& key) {
    auto found = FindFamily(key);
    EXPECT_FALSE(found.ok()) << key.ToString();
    return found.ok() ? std::string() : found.status().message();
  };
  const TensorDesc x = TensorDesc::Contiguous(DType::kFloat32, {64, 128});
  const TensorDesc w = TensorDesc::Contiguous(DType::kFloat32, {128});
  TensorDesc transposed = TensorDesc::Contiguous(DType::kFloat32, {128, 64});
  transposed.sizes = {64, 128};
  transposed.strides = {1, 64};
  EXPECT_NE(reason(LayerNormKey(transposed, {128}, w, w)).find("non-contiguous"), std::string::npos);
  TensorDesc strided_w = TensorDesc::Contiguous(DType::kFloat32, {256});
  strided_w.sizes = {128};
  strided_w.strides = {2};
  EXPECT_NE(reason(LayerNormKey(x, {128}, strided_w, NoneArg{})).find("non-contiguous weight"), std::string::npos);
  EXPECT_NE(reason(LayerNormKey(x, {128}, TensorDesc::Contiguous(DType::kFloat16, {128}), NoneArg{})).find("dtype"),
            std::string::npos);
  EXPECT_NE(reason(LayerNormKey(x, {128}, NoneArg{}, TensorDesc::Contiguous(DType::kBFloat16, {128}))).find("dtype"),
            std::string::npos);
  EXPECT_NE(reason(LayerNormKey(TensorDesc::Contiguous(DType::kFloat64, {4, 4}), {4}, NoneArg{}, NoneArg{}))
                .find("not served"),
            std::string::npos);
  EXPECT_NE(reason(LayerNormKey(TensorDesc::Contiguous(DType::kFloat32, {0, 4}), {4}, NoneArg{}, NoneArg{}))
                .find("empty"),
            std::string::npos);
  EXPECT_NE(reason(LayerNormKey(x, {64}, NoneArg{}, NoneArg{})).find("trailing"), std::string::npos);
  EXPECT_NE(reason(LayerNormKey(x, {128}, TensorDesc::Contiguous(DType::kFloat32, {64}), NoneArg{})).find("shape"),
            std::string::npos);
  // rms_norm with eps None stays with PyTorch (its default epsilon is not pinned yet).
  EXPECT_NE(reason(OpKey::Single("aten::_fused_rms_norm", "", {x, IntList{128}, w, NoneArg{}}, 90)).find("eps None"),
            std::string::npos);
  // A fusion graph is not a single call.
  OpKey graph = LayerNormKey(x, {128}, w, w);
  graph.calls.push_back(graph.calls[0]);
  graph.calls[1].args[0] = ValueRef{0, 0};
  EXPECT_FALSE(FindFamily(graph).ok());
}

TEST(LayerNormSpace, SpecialisesOnWeightAndBiasAndTheAbi) {
  const DeviceFacts device = DeviceFacts::H200();
  const TensorDesc x = TensorDesc::Contiguous(DType::kFloat16, {32, 7, 96});
  const TensorDesc w = TensorDesc::Contiguous(DType::kFloat16, {96});
  for (int mask = 0; mask < 4; ++mask) {
    const Arg weight = (mask & 1) ? Arg(w) : Arg(NoneArg{});
    const Arg bias = (mask & 2) ? Arg(w) : Arg(NoneArg{});
    auto found = FindFamily(LayerNormKey(x, {96}, weight, bias));
    ASSERT_TRUE(found.ok()) << found.status().ToString();
    EXPECT_EQ(found->family->name(), "layer_norm");
    auto c = found->family->Generate(*found->problem, found->family->ExpertDefault(*found->problem, device), device);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_NE(c->source.find(std::string("HAS_W = ") + ((mask & 1) ? "true" : "false")), std::string::npos);
    EXPECT_NE(c->source.find(std::string("HAS_B = ") + ((mask & 2) ? "true" : "false")), std::string::npos);
    // (x, weight, bias, y, mean, rstd): the pointers are passed whether or not the weight and bias are.
    EXPECT_NE(c->source.find("const in_t* __restrict__ b, in_t* __restrict__ y, float* __restrict__ mean_out"),
              std::string::npos);
  }
  auto rms = FindFamily(OpKey::Single("aten::_fused_rms_norm", "", {x, IntList{96}, NoneArg{}, 1e-6}, 90));
  ASSERT_TRUE(rms.ok()) << rms.status().ToString();
  auto c = rms->family->Generate(*rms->problem, rms->family->ExpertDefault(*rms->problem, device), device);
  ASSERT_TRUE(c.ok());
  // (x, weight, y, rstd).
  EXPECT_NE(c->source.find("const in_t* __restrict__ w, in_t* __restrict__ y, float* __restrict__ rstd_out"),
            std::string::npos);
}

TEST(LayerNormSpace, MisalignedWeightNarrowsTheVector) {
  const DeviceFacts device = DeviceFacts::H200();
  TensorDesc w = TensorDesc::Contiguous(DType::kFloat32, {1024});
  w.alignment = 4;
  auto found = FindFamily(LayerNormKey(TensorDesc::Contiguous(DType::kFloat32, {256, 1024}), {1024}, w, NoneArg{}));
  ASSERT_TRUE(found.ok());
  const Point p = found->family->ExpertDefault(*found->problem, device);
  EXPECT_EQ(p.at("vec"), 1) << PointToString(p);
  for (const Point& v : ValidPoints(*found->family, *found->problem, device)) EXPECT_EQ(v.at("vec"), 1);
}


// (x, weight, bias, running_mean, running_var, training, momentum, eps).
OpKey BatchNormKey(const char* op, TensorDesc x, Arg weight, Arg bias, Arg mean, Arg var, bool training) {
  return OpKey::Single(op, "", {std::move(x), std::move(weight), std::move(bias), std::move(mean), std::move(var),
                                training, 0.1, 1e-5},
                       90);
}

TEST(BatchNormSpace, DeclinesWhatItCannotServe) {
  auto reason = [](const OpKey& key) {
    auto found = FindFamily(key);
    EXPECT_FALSE(found.ok()) << key.ToString();
    return found.ok() ? std::string() : found.status().message();
  };
  const char* native = "aten::native_batch_norm";
  const TensorDesc x = TensorDesc::Contiguous(DType::kFloat32, {8, 16, 32, 32});
  const TensorDesc p = TensorDesc::Contiguous(DType::kFloat32, {16});
  // Training with running statistics would update them in place.
  EXPECT_NE(reason(BatchNormKey(native, x, p, p, p, p, true)).find("in place"), std::string::npos);
  EXPECT_NE(reason(BatchNormKey("aten::cudnn_batch_norm", x, p, p, p, p, true)).find("in place"), std::string::npos);
  // Inference needs them.
  EXPECT_NE(reason(BatchNormKey(native, x, p, p, NoneArg{}, NoneArg{}, false)).find("running_mean"), std::string::npos);
  EXPECT_NE(reason(BatchNormKey(native, x, p, p, p, NoneArg{}, false)).find("both"), std::string::npos);
  // Neither contiguous nor channels_last: a transposed H and W.
  TensorDesc transposed = x;
  transposed.strides = {16 * 32 * 32, 32 * 32, 1, 32};
  EXPECT_NE(reason(BatchNormKey(native, transposed, p, p, p, p, false)).find("neither contiguous"), std::string::npos);
  // channels_last is served in inference only.
  TensorDesc channels_last = x;
  channels_last.strides = {16 * 32 * 32, 1, 32 * 16, 16};
  EXPECT_TRUE(FindFamily(BatchNormKey(native, channels_last, p, p, p, p, false)).ok());
  EXPECT_NE(reason(BatchNormKey(native, channels_last, p, p, NoneArg{}, NoneArg{}, true)).find("channels_last"),
            std::string::npos);
  // Parameters: [C], one dtype, the input's or float32; cudnn's float32.
  const TensorDesc h = TensorDesc::Contiguous(DType::kFloat16, {16});
  const TensorDesc xh = TensorDesc::Contiguous(DType::kFloat16, {8, 16, 32, 32});
  EXPECT_NE(reason(BatchNormKey(native, xh, h, h, p, p, false)).find("different dtypes"), std::string::npos);
  EXPECT_NE(reason(BatchNormKey("aten::cudnn_batch_norm", xh, h, h, h, h, false)).find("float32"), std::string::npos);
  EXPECT_NE(reason(BatchNormKey(native, x, h, h, h, h, false)).find("dtype"), std::string::npos);
  EXPECT_NE(reason(BatchNormKey(native, x, TensorDesc::Contiguous(DType::kFloat32, {8}), NoneArg{}, p, p, false))
                .find("[C]"),
            std::string::npos);
  EXPECT_NE(reason(BatchNormKey(native, TensorDesc::Contiguous(DType::kFloat64, {4, 4}), NoneArg{}, NoneArg{},
                                NoneArg{}, NoneArg{}, true))
                .find("not served"),
            std::string::npos);
  EXPECT_NE(reason(BatchNormKey(native, TensorDesc::Contiguous(DType::kFloat32, {16}), NoneArg{}, NoneArg{}, NoneArg{},
                                NoneArg{}, true))
                .find("2 or more dims"),
            std::string::npos);
}

TEST(BatchNormSpace, TheAbiListsEveryOutput) {
  const DeviceFacts device = DeviceFacts::H200();
  const TensorDesc x = TensorDesc::Contiguous(DType::kFloat16, {8, 16, 32, 32});
  const TensorDesc p = TensorDesc::Contiguous(DType::kFloat32, {16});
  // (x, weight, bias, running_mean, running_var, out, save_mean, save_invstd[, reserve]).
  for (const char* op : {"aten::native_batch_norm", "aten::cudnn_batch_norm"}) {
    auto found = FindFamily(BatchNormKey(op, x, p, p, p, p, false));
    ASSERT_TRUE(found.ok()) << found.status().ToString();
    EXPECT_EQ(found->family->name(), "batch_norm");
    auto c = found->family->Generate(*found->problem, found->family->ExpertDefault(*found->problem, device), device);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_NE(c->source.find("const p_t* __restrict__ rv, out_t* __restrict__ y, float* __restrict__ save_mean, "
                             "float* __restrict__ save_invstd"),
              std::string::npos);
    const bool cudnn = std::string(op) == "aten::cudnn_batch_norm";
    EXPECT_EQ(c->source.find("unsigned char* __restrict__ reserve") != std::string::npos, cudnn);
    // cudnn's inference outputs beyond out have zero elements: nothing to write.
    EXPECT_NE(c->source.find(std::string("WRITE_SAVE = ") + (cudnn ? "false" : "true")), std::string::npos);
  }
}

TEST(BatchNormSpace, InstanceNormSplitsLongChannelsAcrossAClusterByDefault) {
  auto found = FindFamily(BatchNormKey("aten::native_batch_norm",
                                       TensorDesc::Contiguous(DType::kFloat32, {1, 2048, 256, 256}), NoneArg{},
                                       NoneArg{}, NoneArg{}, NoneArg{}, true));
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  const Point p = found->family->ExpertDefault(*found->problem, DeviceFacts::H200());
  EXPECT_EQ(p.at("strategy"), 7) << PointToString(p);
  EXPECT_GT(p.at("cluster"), 1) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 4) << PointToString(p);
}

// Channels a block of 1024 holds in registers within the register budget (36 floats a thread)
// are held there rather than staged (H200: 1x512x192x192 1.22x the floor against 2.16x; 1x1020x191x191
// 1.38x against 2.41x); 64 a thread would spill, so 1x2048x256x256 stays split over a cluster.
TEST(BatchNormSpace, ChannelsOfUpTo40FloatsAThreadStayInRegisters) {
  for (const auto& [sizes, vec] : std::vector<std::pair<std::vector<int64_t>, int64_t>>{
           {{1, 512, 192, 192}, 4}, {{1, 1020, 191, 191}, 1}}) {
    auto found = FindFamily(BatchNormKey("aten::native_batch_norm", TensorDesc::Contiguous(DType::kFloat32, sizes),
                                         NoneArg{}, NoneArg{}, NoneArg{}, NoneArg{}, true));
    ASSERT_TRUE(found.ok()) << found.status().ToString();
    const Point p = found->family->ExpertDefault(*found->problem, DeviceFacts::H200());
    EXPECT_EQ(p.at("strategy"), 3) << PointToString(p);
    EXPECT_EQ(p.at("threads"), 1024) << PointToString(p);
    EXPECT_EQ(p.at("vec"), vec) << PointToString(p);
    EXPECT_EQ(p.at("stats"), 0) << PointToString(p);
  }
}

// Channels too long for registers within budget: staged over a cluster with streaming stores
// where the tensors outgrow L2 (H200: 1x1024x256x256 276 -> 161 us), no hint on small tensors;
// an odd channel of up to 64 floats a thread (no cluster split, no shared memory) held in
// registers at 1024 threads with Welford and the hint (1x1984x255x255: 413 us against 681 from
// global memory); longer odd channels from global memory at 1024 threads, without the hint on
// 4-byte loads.
TEST(BatchNormSpace, LargeTrainingTensorsStreamTheirStores) {
  const DeviceFacts device = DeviceFacts::H200();
  auto expert = [&](std::vector<int64_t> sizes) {
    auto found = FindFamily(BatchNormKey("aten::native_batch_norm", TensorDesc::Contiguous(DType::kFloat32, sizes),
                                         NoneArg{}, NoneArg{}, NoneArg{}, NoneArg{}, true));
    EXPECT_TRUE(found.ok()) << found.status().ToString();
    if (!found.ok()) return Point{};
    const Point p = found->family->ExpertDefault(*found->problem, device);
    EXPECT_TRUE(found->family->Check(*found->problem, p, device).ok()) << PointToString(p);
    return p;
  };
  for (const auto& sizes : std::vector<std::vector<int64_t>>{{1, 1024, 256, 256}, {1, 2048, 256, 256}}) {
    const Point p = expert(sizes);
    ASSERT_FALSE(p.empty());
    EXPECT_EQ(p.at("strategy"), 7) << PointToString(p);
    EXPECT_EQ(p.at("cluster"), 4) << PointToString(p);
    EXPECT_EQ(p.at("threads"), 512) << PointToString(p);
    EXPECT_EQ(p.at("vec"), 4) << PointToString(p);
    EXPECT_EQ(p.at("hint"), 1) << PointToString(p);
  }
  {
    // 96 channels of 256x256 f32: 24 MiB in, 24 out, within reach of L2: staged without the hint.
    const Point p = expert({1, 96, 256, 256});
    ASSERT_FALSE(p.empty());
    EXPECT_EQ(p.at("strategy"), 7) << PointToString(p);
    EXPECT_EQ(p.at("hint"), 0) << PointToString(p);
  }
  {
    const Point p = expert({1, 1984, 255, 255});
    ASSERT_FALSE(p.empty());
    EXPECT_EQ(p.at("strategy"), 3) << PointToString(p);
    EXPECT_EQ(p.at("threads"), 1024) << PointToString(p);
    EXPECT_EQ(p.at("vec"), 1) << PointToString(p);
    EXPECT_EQ(p.at("stats"), 1) << PointToString(p);
    EXPECT_EQ(p.at("hint"), 1) << PointToString(p);
  }
  {
    // 66049 elements a channel (odd): more than 64 floats a thread at 1024 threads.
    const Point p = expert({1, 1984, 257, 257});
    ASSERT_FALSE(p.empty());
    EXPECT_EQ(p.at("strategy"), 5) << PointToString(p);
    EXPECT_EQ(p.at("threads"), 1024) << PointToString(p);
    EXPECT_EQ(p.at("vec"), 1) << PointToString(p);
    EXPECT_EQ(p.at("hint"), 0) << PointToString(p);
  }
}

TEST(BatchNormSpace, OddSizesAndMisalignedInputsRefuseVectors) {
  const DeviceFacts device = DeviceFacts::H200();
  TensorDesc x = TensorDesc::Contiguous(DType::kFloat16, {8, 64, 32, 32});
  x.alignment = 2;
  const TensorDesc p = TensorDesc::Contiguous(DType::kFloat16, {64});
  for (const OpKey& key : {BatchNormKey("aten::native_batch_norm", x, p, p, p, p, false),
                           BatchNormKey("aten::native_batch_norm", x, p, p, NoneArg{}, NoneArg{}, true),
                           BatchNormKey("aten::native_batch_norm", TensorDesc::Contiguous(DType::kFloat32, {3, 7, 17, 19}),
                                        NoneArg{}, NoneArg{}, NoneArg{}, NoneArg{}, true)}) {
    auto found = FindFamily(key);
    ASSERT_TRUE(found.ok()) << found.status().ToString();
    for (const Point& v : ValidPoints(*found->family, *found->problem, device)) EXPECT_EQ(v.at("vec"), 1);
  }
}

OpKey GroupNormKey(TensorDesc x, int64_t groups, Arg weight, Arg bias) {
  int64_t hxw = 1;
  for (size_t i = 2; i < x.sizes.size(); ++i) hxw *= x.sizes[i];
  const int64_t n = x.sizes.size() > 0 ? x.sizes[0] : 1, c = x.sizes.size() > 1 ? x.sizes[1] : 1;
  return OpKey::Single("aten::native_group_norm", "",
                       {std::move(x), std::move(weight), std::move(bias), n, c, hxw, groups, 1e-5}, 90);
}

// The group_norm expert default on the H200 for an f32 NCHW tensor in 8 groups, no affine.
Point GroupNormDefaultOnH200(std::vector<int64_t> sizes) {
  auto found = FindFamily(GroupNormKey(TensorDesc::Contiguous(DType::kFloat32, std::move(sizes)), 8, NoneArg{}, NoneArg{}));
  EXPECT_TRUE(found.ok()) << found.status().ToString();
  if (!found.ok()) return {};
  return found->family->ExpertDefault(*found->problem, DeviceFacts::H200());
}

// Slices staged over a cluster only where three blocks share an SM (512 KB slices: 8 blocks of
// 512); slices too long for that are read twice by a cluster whose parts are at most 256 KB.
TEST(GroupNormSpace, ClusterPartsStagedOnlyThreeBlocksAnSm) {
  for (int64_t n : {16, 32, 64}) {
    const Point p = GroupNormDefaultOnH200({n, 64, 128, 128});
    EXPECT_EQ(p.at("strategy"), 5) << PointToString(p);
    EXPECT_EQ(p.at("cluster"), 8) << PointToString(p);
    EXPECT_EQ(p.at("threads"), 512) << PointToString(p);
    EXPECT_EQ(p.at("hint"), 1) << PointToString(p);
  }
  const Point one_mb = GroupNormDefaultOnH200({32, 128, 128, 128});
  EXPECT_EQ(one_mb.at("strategy"), 4) << PointToString(one_mb);
  EXPECT_EQ(one_mb.at("cluster"), 4) << PointToString(one_mb);
  for (const std::vector<int64_t>& sizes : {std::vector<int64_t>{32, 64, 256, 256}, {31, 64, 255, 255}}) {
    const Point two_mb = GroupNormDefaultOnH200(sizes);
    EXPECT_EQ(two_mb.at("strategy"), 4) << PointToString(two_mb);
    EXPECT_EQ(two_mb.at("cluster"), 8) << PointToString(two_mb);
    EXPECT_EQ(two_mb.at("threads"), 1024) << PointToString(two_mb);
  }
}

TEST(GroupNormSpace, DeclinesWhatItCannotServe) {
  auto reason = [](const OpKey& key) {
    auto found = FindFamily(key);
    EXPECT_FALSE(found.ok()) << key.ToString();
    return found.ok() ? std::string() : found.status().message();
  };
  const TensorDesc x = TensorDesc::Contiguous(DType::kFloat16, {8, 16, 32, 32});
  const TensorDesc w = TensorDesc::Contiguous(DType::kFloat16, {16});
  // channels_last: PyTorch makes the input contiguous before the op, so a strided one is not served.
  TensorDesc channels_last = x;
  channels_last.strides = {16 * 32 * 32, 1, 32 * 16, 16};
  EXPECT_NE(reason(GroupNormKey(channels_last, 4, w, w)).find("non-contiguous"), std::string::npos);
  EXPECT_NE(reason(GroupNormKey(x, 4, TensorDesc::Contiguous(DType::kFloat32, {16}), w)).find("dtype"),
            std::string::npos);
  EXPECT_NE(reason(GroupNormKey(x, 4, NoneArg{}, TensorDesc::Contiguous(DType::kBFloat16, {16}))).find("dtype"),
            std::string::npos);
  EXPECT_NE(reason(GroupNormKey(x, 4, TensorDesc::Contiguous(DType::kFloat16, {8}), NoneArg{})).find("shape"),
            std::string::npos);
  EXPECT_NE(reason(GroupNormKey(x, 5, w, w)).find("divide"), std::string::npos);
  EXPECT_NE(reason(GroupNormKey(x, 0, w, w)).find("divide"), std::string::npos);
  EXPECT_NE(reason(GroupNormKey(TensorDesc::Contiguous(DType::kFloat64, {2, 4, 3}), 2, NoneArg{}, NoneArg{}))
                .find("not served"),
            std::string::npos);
  EXPECT_NE(reason(GroupNormKey(TensorDesc::Contiguous(DType::kFloat32, {0, 4, 3}), 2, NoneArg{}, NoneArg{}))
                .find("empty"),
            std::string::npos);
  // N, C, HxW that are not the input's sizes.
  OpKey mismatched = GroupNormKey(x, 4, w, w);
  mismatched.calls[0].args[5] = int64_t{512};
  EXPECT_NE(reason(mismatched).find("HxW"), std::string::npos);
}

TEST(GroupNormSpace, VectorsStayInOneChannelAndWithinAlignment) {
  const DeviceFacts device = DeviceFacts::H200();
  // HxW = 17 * 19: no vector fits a whole number of times in a channel.
  auto odd = FindFamily(GroupNormKey(TensorDesc::Contiguous(DType::kFloat32, {3, 30, 17, 19}), 5, NoneArg{}, NoneArg{}));
  ASSERT_TRUE(odd.ok()) << odd.status().ToString();
  for (const Point& p : ValidPoints(*odd->family, *odd->problem, device)) EXPECT_EQ(p.at("vec"), 1) << PointToString(p);
  // A 4-byte aligned f16 input (a contiguous view at an odd offset in pairs) allows vectors of 2.
  TensorDesc x = TensorDesc::Contiguous(DType::kFloat16, {8, 16, 32, 32});
  x.alignment = 4;
  auto found = FindFamily(GroupNormKey(x, 4, NoneArg{}, NoneArg{}));
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  for (const Point& p : ValidPoints(*found->family, *found->problem, device)) EXPECT_LE(p.at("vec"), 2);
}

TEST(GroupNormSpace, HeadroomCaseSplitsSlicesAcrossAClusterAndKeepsTheAbi) {
  const DeviceFacts device = DeviceFacts::H200();
  const TensorDesc w = TensorDesc::Contiguous(DType::kFloat32, {64});
  auto found = FindFamily(GroupNormKey(TensorDesc::Contiguous(DType::kFloat32, {32, 64, 256, 256}), 8, w, w));
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  const Point p = found->family->ExpertDefault(*found->problem, device);
  EXPECT_EQ(p.at("strategy"), 4) << PointToString(p);  // read twice by the cluster, the second from L2
  EXPECT_EQ(p.at("cluster"), 8) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 4) << PointToString(p);
  auto c = found->family->Generate(*found->problem, p, device);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->launch.grid[0], 32u * 8u * 8u);
  EXPECT_LE(c->launch.dynamic_shared_bytes, static_cast<uint32_t>(device.max_shared_bytes_per_block));
  // (x, weight, bias, y, mean, rstd), mean and rstd in the input's dtype.
  EXPECT_NE(c->source.find("const in_t* __restrict__ b, out_t* __restrict__ y, out_t* __restrict__ mean_out, "
                           "out_t* __restrict__ rstd_out"),
            std::string::npos);
  // Two-pass statistics need the whole part held: with 2 MB slices they are refused.
  Point two_pass = p;
  two_pass["stats"] = 0;
  EXPECT_FALSE(found->family->Check(*found->problem, two_pass, device).ok());
}


OpKey ScanKey(const char* op, TensorDesc x, int64_t dim, Arg dtype = NoneArg{}) {
  return OpKey::Single(op, "", {std::move(x), dim, std::move(dtype)}, 90);
}

TEST(ScanSpace, DeclinesWhatItCannotServe) {
  auto reason = [](const OpKey& key) {
    auto found = FindFamily(key);
    EXPECT_FALSE(found.ok()) << key.ToString();
    return found.ok() ? std::string() : found.status().message();
  };
  const TensorDesc x = TensorDesc::Contiguous(DType::kFloat32, {64, 128});
  TensorDesc transposed = x;
  transposed.strides = {1, 64};
  EXPECT_NE(reason(ScanKey("aten::cumsum", transposed, 1)).find("non-contiguous"), std::string::npos);
  // Integer inputs scan into int64 in PyTorch.
  EXPECT_NE(reason(ScanKey("aten::cumsum", TensorDesc::Contiguous(DType::kInt32, {4, 4}), 1)).find("not served"),
            std::string::npos);
  EXPECT_NE(reason(ScanKey("aten::cumprod", TensorDesc::Contiguous(DType::kFloat64, {4, 4}), 1)).find("not served"),
            std::string::npos);
  EXPECT_NE(reason(ScanKey("aten::cumsum", x, 1, DType::kFloat32)).find("explicit dtype"), std::string::npos);
  EXPECT_NE(reason(ScanKey("aten::cumsum", TensorDesc::Contiguous(DType::kFloat32, {0, 4}), 1)).find("empty"),
            std::string::npos);
  EXPECT_NE(reason(ScanKey("aten::cumsum", TensorDesc::Contiguous(DType::kFloat32, {}), 0)).find("0-d"),
            std::string::npos);
  EXPECT_NE(reason(ScanKey("aten::cumsum", x, 2)).find("dim out of range"), std::string::npos);
  EXPECT_NE(reason(ScanKey("aten::cumsum", x, -3)).find("dim out of range"), std::string::npos);
  // The out= overload is not the functional call.
  OpKey out = ScanKey("aten::cumsum", x, 1);
  out.calls[0].overload = "out";
  EXPECT_NE(reason(out).find("overload"), std::string::npos);
  OpKey graph = ScanKey("aten::cumsum", x, 1);
  graph.calls.push_back(graph.calls[0]);
  graph.calls[1].args[0] = ValueRef{0, 0};
  EXPECT_FALSE(FindFamily(graph).ok());
  // Served: negative dims, a 1-D tensor, each float dtype, both ops.
  EXPECT_TRUE(FindFamily(ScanKey("aten::cumsum", x, -1)).ok());
  EXPECT_TRUE(FindFamily(ScanKey("aten::cumprod", TensorDesc::Contiguous(DType::kBFloat16, {7}), 0)).ok());
  EXPECT_TRUE(FindFamily(ScanKey("aten::cumsum", TensorDesc::Contiguous(DType::kFloat16, {3, 5, 7}), -2)).ok());
}

TEST(ScanSpace, ChecksFollowTheLayout) {
  const DeviceFacts device = DeviceFacts::H200();
  auto problem_of = [](const OpKey& key) {
    auto found = FindFamily(key);
    EXPECT_TRUE(found.ok()) << found.status().ToString();
    return std::move(*found);
  };
  auto point = [](int64_t strategy, int64_t threads, int64_t vec, int64_t items, int64_t cluster, int64_t prefetch) {
    return Point{{"strategy", strategy}, {"threads", threads}, {"vec", vec},           {"items", items},
                 {"cluster", cluster},   {"prefetch", prefetch}, {"hint", 0}};
  };
  auto why = [&](const Match& m, const Point& p) { return m.family->Check(*m.problem, p, device).message(); };
  const Match rows = problem_of(ScanKey("aten::cumsum", TensorDesc::Contiguous(DType::kFloat32, {4096, 32768}), 1));
  EXPECT_TRUE(rows.family->Check(*rows.problem, point(0, 128, 4, 4, 1, 1), device).ok());
  EXPECT_TRUE(rows.family->Check(*rows.problem, point(1, 512, 4, 4, 1, 1), device).ok());
  EXPECT_TRUE(rows.family->Check(*rows.problem, point(2, 512, 4, 2, 4, 0), device).ok());
  EXPECT_NE(why(rows, point(3, 128, 4, 4, 1, 0)).find("dim not last"), std::string::npos);
  EXPECT_NE(why(rows, point(1, 512, 4, 4, 2, 0)).find("cluster"), std::string::npos);
  EXPECT_NE(why(rows, point(2, 512, 4, 4, 1, 0)).find("cluster"), std::string::npos);
  EXPECT_NE(why(rows, point(2, 512, 4, 4, 16, 0)).find("no such cluster"), std::string::npos);
  EXPECT_NE(why(rows, point(0, 128, 8, 4, 1, 0)).find("16 bytes"), std::string::npos);
  EXPECT_NE(why(rows, point(0, 128, 4, 16, 1, 1)).find("values per thread"), std::string::npos);
  EXPECT_NE(why(rows, point(1, 32, 4, 4, 1, 0)).find("warp strategy"), std::string::npos);
  // One tile covers a short row: nothing to prefetch; a large tile: fewer items do.
  const Match short_rows =
      problem_of(ScanKey("aten::cumsum", TensorDesc::Contiguous(DType::kFloat16, {65536, 100}), 1));
  EXPECT_NE(why(short_rows, point(0, 128, 4, 1, 1, 1)).find("nothing to prefetch"), std::string::npos);
  EXPECT_NE(why(short_rows, point(0, 128, 4, 4, 1, 0)).find("fewer items"), std::string::npos);
  // Odd rows take vectors (each row's tiles shifted to an aligned start); odd columns and misaligned
  // inputs refuse them.
  const Match odd = problem_of(ScanKey("aten::cumprod", TensorDesc::Contiguous(DType::kBFloat16, {1024, 4095}), 1));
  EXPECT_TRUE(odd.family->Check(*odd.problem, point(0, 128, 8, 2, 1, 1), device).ok());
  EXPECT_TRUE(odd.family->Check(*odd.problem, point(1, 256, 8, 1, 1, 1), device).ok());
  const Match odd_long = problem_of(ScanKey("aten::cumsum", TensorDesc::Contiguous(DType::kFloat32, {16, 262143}), 1));
  EXPECT_TRUE(odd_long.family->Check(*odd_long.problem, point(2, 512, 4, 2, 4, 1), device).ok());
  TensorDesc misaligned = TensorDesc::Contiguous(DType::kFloat32, {64, 4096});
  misaligned.alignment = 8;
  const Match narrow = problem_of(ScanKey("aten::cumsum", misaligned, 1));
  for (const Point& v : ValidPoints(*narrow.family, *narrow.problem, device)) EXPECT_LE(v.at("vec"), 2);
  // A middle dim: the columns strategies only; vectors along the inner extent.
  const Match middle =
      problem_of(ScanKey("aten::cumsum", TensorDesc::Contiguous(DType::kFloat32, {128, 4096, 512}), 1));
  EXPECT_NE(why(middle, point(0, 128, 4, 4, 1, 0)).find("dim last"), std::string::npos);
  EXPECT_NE(why(middle, point(3, 128, 4, 4, 1, 1)).find("prefetch"), std::string::npos);
  const Match halves =
      problem_of(ScanKey("aten::cumprod", TensorDesc::Contiguous(DType::kFloat16, {64, 512, 24}), 1));
  EXPECT_TRUE(halves.family->Check(*halves.problem, point(4, 512, 8, 4, 1, 0), device).ok());
  EXPECT_NE(why(halves, point(4, 1024, 8, 4, 1, 0)).find("shared memory"), std::string::npos);
  const Match odd_inner = problem_of(ScanKey("aten::cumprod", TensorDesc::Contiguous(DType::kFloat32, {8, 33, 7}), 1));
  for (const Point& v : ValidPoints(*odd_inner.family, *odd_inner.problem, device)) {
    EXPECT_EQ(v.at("vec"), 1) << PointToString(v);
    EXPECT_GE(v.at("strategy"), 3) << PointToString(v);
  }
}

TEST(ScanSpace, ExpertDefaultsFitTheShape) {
  const DeviceFacts device = DeviceFacts::H200();
  auto default_of = [&](const OpKey& key) {
    auto found = FindFamily(key);
    EXPECT_TRUE(found.ok()) << found.status().ToString();
    const Point p = found->family->ExpertDefault(*found->problem, device);
    EXPECT_TRUE(found->family->Check(*found->problem, p, device).ok()) << PointToString(p);
    return p;
  };
  // The headroom case (4096 rows of 32768): a warp per row, 16-byte vectors, the next tile prefetched.
  Point p = default_of(ScanKey("aten::cumsum", TensorDesc::Contiguous(DType::kFloat32, {4096, 32768}), 1));
  EXPECT_EQ(p.at("strategy"), 0) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 4) << PointToString(p);
  EXPECT_EQ(p.at("prefetch"), 1) << PointToString(p);
  // Few long rows: split over a cluster.
  p = default_of(ScanKey("aten::cumprod", TensorDesc::Contiguous(DType::kFloat32, {16, 262144}), -1));
  EXPECT_EQ(p.at("strategy"), 2) << PointToString(p);
  EXPECT_EQ(p.at("cluster"), 8) << PointToString(p);
  // A middle dim with few columns: the dim split over a block's warps; with many, a thread per columns.
  p = default_of(ScanKey("aten::cumsum", TensorDesc::Contiguous(DType::kFloat32, {128, 4096, 512}), 1));
  EXPECT_EQ(p.at("strategy"), 4) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 4) << PointToString(p);
  p = default_of(ScanKey("aten::cumsum", TensorDesc::Contiguous(DType::kFloat16, {64, 64, 16384}), 1));
  EXPECT_EQ(p.at("strategy"), 3) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 8) << PointToString(p);
  // Every dtype, odd sizes, 1-D and a length of one have a valid default that generates.
  for (const OpKey& key : {ScanKey("aten::cumsum", TensorDesc::Contiguous(DType::kBFloat16, {1}), 0),
                           ScanKey("aten::cumprod", TensorDesc::Contiguous(DType::kFloat16, {1000003}), 0),
                           ScanKey("aten::cumsum", TensorDesc::Contiguous(DType::kFloat32, {300, 1}), 1),
                           ScanKey("aten::cumsum", TensorDesc::Contiguous(DType::kFloat32, {3, 1, 7}), 1),
                           ScanKey("aten::cumprod", TensorDesc::Contiguous(DType::kBFloat16, {5, 777, 3}), 1)}) {
    auto found = FindFamily(key);
    ASSERT_TRUE(found.ok()) << found.status().ToString();
    const Point d = found->family->ExpertDefault(*found->problem, device);
    auto c = found->family->Generate(*found->problem, d, device);
    EXPECT_TRUE(c.ok()) << key.ToString() << " " << PointToString(d) << ": " << c.status().ToString();
  }
}

// The points that existed before odd rows took vectors (columns, and rows VEC divides) keep their kernels
// byte for byte: their dataset rows stay true of what they measured. Ragged points carry row_shift.
TEST(ScanSpace, OldPointsKeepTheirSources) {
  const std::vector<SourceGolden> golden = {
      {1166u, 0xb37a1661a878ba3dull},  // cumsum f32 4096x32768
      {1328u, 0x324e2aeb1a9aea7dull},  // cumsum f32 16x262144
      {118u, 0x558a1cc9285f73e1ull},  // cumsum f16 65536x100
      {460u, 0x6b6077a274b85aafull},  // cumsum bf16 3x1000003
      {330u, 0x7e74bd4ada313355ull},  // cumsum f32 128x4096x512 dim 1
      {50u, 0xf4704ddb78d67497ull},  // cumprod f32 8x33x7 dim -2
      {300u, 0x6a65176eface294bull},  // cumprod bf16 1024x4095
      {384u, 0x50aef6b5052d817bull},  // cumprod f16 64x512x24 dim 1
  };
  // A point is ragged where a row strategy's vector does not divide the scanned length.
  auto ragged = [](const OpKey& key, const Point& p) {
    const auto& x = std::get<TensorDesc>(key.calls[0].args[0]);
    const int64_t dim = std::get<int64_t>(key.calls[0].args[1]);
    const int64_t len = x.sizes[static_cast<size_t>(dim < 0 ? dim + static_cast<int64_t>(x.sizes.size()) : dim)];
    return p.at("strategy") <= 2 && len % p.at("vec") != 0;
  };
  auto found = FindFamily(ScanKey("aten::cumsum", TensorDesc::Contiguous(DType::kFloat32, {64, 1024}), 1));
  ASSERT_TRUE(found.ok());
  ExpectOldPointsKeepTheirSources(
      *found->family, golden, [&](const OpKey& key, const Point& p) { return !ragged(key, p); },
      [&](const OpKey& key, const Point& p, const Candidate& c) {
        EXPECT_EQ(c.source.find("row_shift") != std::string::npos, ragged(key, p)) << PointToString(p);
      });
}

TEST(ScanSpace, TraitsKeepOrderDependentInputsAway) {
  (void)Families();  // declares the traits
  EXPECT_TRUE(TraitsFor("aten::cumsum").no_large_inputs.count(DType::kFloat16));
  EXPECT_FALSE(TraitsFor("aten::cumsum").no_large_inputs.count(DType::kFloat32));
  EXPECT_TRUE(TraitsFor("aten::cumsum").no_special_inputs.empty());
  EXPECT_TRUE(TraitsFor("aten::cumprod").no_large_inputs.count(DType::kBFloat16));
  EXPECT_TRUE(TraitsFor("aten::cumprod").no_special_inputs.count(DType::kFloat16));
  EXPECT_EQ(TraitsFor("aten::cumsum").tolerance_by_dtype.at(DType::kFloat32).rtol, 1e-5);
}

OpKey MaxPoolKey(const char* op, TensorDesc x, IntList k, IntList s, IntList p, IntList d, bool ceil) {
  return OpKey::Single(op, "", {std::move(x), k, s, p, d, ceil}, 90);
}
OpKey AvgPoolKey(const char* op, TensorDesc x, IntList k, IntList s, IntList p, bool ceil, bool include, Arg div) {
  return OpKey::Single(op, "", {std::move(x), k, s, p, ceil, include, std::move(div)}, 90);
}
TensorDesc ChannelsLast(DType dt, std::vector<int64_t> s) {
  TensorDesc t = TensorDesc::Contiguous(dt, s);
  t.strides[1] = 1;
  int64_t stride = s[1];
  for (size_t d = s.size() - 1; d >= 2; --d) {
    t.strides[d] = stride;
    stride *= s[d];
  }
  t.strides[0] = stride;
  return t;
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
// valid point of each sample key, recorded at codegen 4.
TEST(PoolSpace, OldPointsKeepTheirSources) {
  const std::vector<SourceGolden> golden = {
      {852u, 0x335236948d7dd797ull},  // max_pool2d f32 N=32 C=64 in=1x256x256 out=1x128x128 k=1x3x3 s=1x2x2 p=0x1x1 d=1x1x1
      {1676u, 0x49690e9eb70e6cd3ull},  // max_pool3d f32 N=16 C=32 in=64x128x128 out=32x64x64 k=3x3x3 s=2x2x2 p=1x1x1 d=1x1x1
      {1676u, 0x87cfcd9d1bf69163ull},  // avg_pool3d f32 N=16 C=32 in=64x128x128 out=32x64x64 k=3x3x3 s=2x2x2 p=1x1x1 include_pad
      {192u, 0x17b8551aca2ebbcfull},  // max_pool2d f16 channels_last N=8 C=64 in=1x56x56 out=1x28x28 k=1x3x3 s=1x2x2 p=0x1x1 d=1x1x1
      {792u, 0x7446904301644267ull},  // max_pool2d bf16 N=3 C=5 in=1x17x19 out=1x8x18 k=1x3x2 s=1x2x1 p=0x1x0 d=1x2x1 ceil
      {260u, 0x4e765572341e2b2full},  // max_pool2d f32 N=4 C=7 in=1x1x1001 out=1x1x335 k=1x1x4 s=1x1x3 p=0x0x2 d=1x1x1 ceil
      {28u, 0xa8f9fda379fcf70bull},  // max_pool2d f32 N=1 C=3 in=1x1x5 out=1x1x1 k=1x1x2 s=1x1x1 p=0x0x1 d=1x1x6
      {192u, 0x66a63a8cc6602aabull},  // max_pool3d bf16 channels_last N=2 C=16 in=9x10x11 out=5x5x11 k=2x3x3 s=2x2x1 p=1x1x1 d=1x2x1 ceil
      {1024u, 0x4c2b40044e8d1123ull},  // max_pool3d f16 N=1 C=8 in=5x7x9 out=3x4x5 k=2x2x2 s=2x2x2 p=0x0x0 d=1x1x1 ceil
      {676u, 0x0486406e7588ce43ull},  // avg_pool2d f32 N=8 C=32 in=1x63x65 out=1x32x33 k=1x3x3 s=1x2x2 p=0x1x1 ceil exclude_pad
      {188u, 0xbb5d799678fc96cbull},  // avg_pool2d bf16 channels_last N=4 C=24 in=1x15x15 out=1x8x8 k=1x2x3 s=1x2x2 p=0x1x1 include_pad divisor=5
      {336u, 0x911ba8a8e6d1e22full},  // avg_pool2d f16 N=16 C=32 in=1x1x4097 out=1x1x2049 k=1x1x3 s=1x1x2 p=0x0x1 ceil include_pad
      {1924u, 0x77f3db3892d654efull},  // avg_pool3d f16 N=2 C=6 in=9x10x11 out=9x5x6 k=3x3x3 s=1x2x2 p=1x1x1 exclude_pad
      {512u, 0x3f33383743ef4543ull},  // avg_pool3d bf16 N=1 C=4 in=5x6x7 out=3x3x4 k=2x2x3 s=2x2x2 p=1x0x1 ceil include_pad divisor=7
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
  EXPECT_NE(c.source.find("(const in_t* __restrict__ x, const in_t* __restrict__ wt, const in_t* __restrict__ bias, "
                          "out_t* __restrict__ y)"),
            std::string::npos);
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
  EXPECT_NE(c.source.find("(const in_t* __restrict__ x, const in_t* __restrict__ wt, out_t* __restrict__ y)"),
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


namespace matmul_test {

OpKey MmKey(TensorDesc a, TensorDesc b, uint32_t numerics = kNumericsDefault) {
  return OpKey::Single("aten::mm", "", {std::move(a), std::move(b)}, 90, numerics);
}
OpKey BmmKey(TensorDesc a, TensorDesc b, uint32_t numerics = kNumericsDefault) {
  return OpKey::Single("aten::bmm", "", {std::move(a), std::move(b)}, 90, numerics);
}
// x.t() of a contiguous [cols, rows] matrix: sizes [rows, cols], strides [1, rows].
TensorDesc Transposed(DType dt, int64_t rows, int64_t cols) {
  TensorDesc d = TensorDesc::Contiguous(dt, {cols, rows});
  d.sizes = {rows, cols};
  d.strides = {1, rows};
  return d;
}
// The batched x.transpose(1, 2) of a contiguous [batch, cols, rows] tensor.
TensorDesc Transposed3(DType dt, int64_t batch, int64_t rows, int64_t cols) {
  TensorDesc d = TensorDesc::Contiguous(dt, {batch, cols, rows});
  d.sizes = {batch, rows, cols};
  d.strides = {rows * cols, 1, rows};
  return d;
}
Point MatmulPoint(int64_t stage, int64_t bm, int64_t bn, int64_t bk, int64_t tm, int64_t tn, int64_t vec, int64_t bpb = 1) {
  return Point{{"stage", stage}, {"bm", bm}, {"bn", bn}, {"bk", bk}, {"tm", tm},
               {"tn", tn},       {"vec", vec}, {"bpb", bpb}, {"hint", 0}, {"minb", 1}};
}

TEST(MatmulSpace, DeclinesWhatItCannotServe) {
  constexpr DType f32 = DType::kFloat32, f16 = DType::kFloat16, bf16 = DType::kBFloat16;
  auto c = [](DType dt, std::vector<int64_t> s) { return TensorDesc::Contiguous(dt, std::move(s)); };
  const Family& f = *FindFamily(MmKey(c(f32, {64, 64}), c(f32, {64, 64})))->family;
  EXPECT_EQ(f.name(), "matmul");
  auto reason = [&](const OpKey& key) {
    auto m = f.Match(key);
    EXPECT_FALSE(m.ok()) << key.ToString();
    return m.ok() ? std::string() : m.status().ToString();
  };
  // Large inner dimensions are cuBLAS's: float32 over 256, the half types over 64.
  EXPECT_NE(reason(MmKey(c(f32, {4096, 512}), c(f32, {512, 4096}))).find("cuBLAS"), std::string::npos);
  EXPECT_NE(reason(BmmKey(c(bf16, {64, 64, 128}), c(bf16, {64, 128, 64}))).find("tensor cores"), std::string::npos);
  EXPECT_TRUE(f.Match(MmKey(c(f32, {4096, 256}), c(f32, {256, 4096}))).ok());
  EXPECT_TRUE(f.Match(MmKey(c(f16, {4096, 64}), c(f16, {64, 4096}))).ok());
  // What PyTorch rejects, other dtypes, empty products, negative strides, other ops and ranks.
  EXPECT_NE(reason(MmKey(c(f32, {8, 16}), c(f16, {16, 8}))).find("mixed"), std::string::npos);
  EXPECT_NE(reason(MmKey(c(f32, {8, 16}), c(f32, {15, 8}))).find("inner"), std::string::npos);
  EXPECT_NE(reason(BmmKey(c(f32, {2, 8, 16}), c(f32, {3, 16, 8}))).find("batch"), std::string::npos);
  EXPECT_NE(reason(MmKey(c(DType::kFloat64, {8, 16}), c(DType::kFloat64, {16, 8}))).find("dtype"), std::string::npos);
  EXPECT_NE(reason(MmKey(c(f32, {0, 16}), c(f32, {16, 8}))).find("empty"), std::string::npos);
  EXPECT_NE(reason(MmKey(c(f32, {8, 0}), c(f32, {0, 8}))).find("empty"), std::string::npos);
  TensorDesc flipped = c(f32, {8, 16});
  flipped.strides = {-16, 1};
  EXPECT_NE(reason(MmKey(flipped, c(f32, {16, 8}))).find("negative"), std::string::npos);
  EXPECT_NE(reason(MmKey(c(f32, {2, 8, 16}), c(f32, {16, 8}))).find("2-D"), std::string::npos);
  EXPECT_NE(reason(BmmKey(c(f32, {8, 16}), c(f32, {16, 8}))).find("3-D"), std::string::npos);
  EXPECT_FALSE(f.Match(OpKey::Single("aten::addmm", "", {c(f32, {8}), c(f32, {8, 16}), c(f32, {16, 8}), 1.0, 1.0}, 90)).ok());
}

TEST(MatmulSpace, TheKeyCarriesTf32AndKernelsUseFp32FmaOnly) {
  const DeviceFacts device = DeviceFacts::H200();
  const TensorDesc a = TensorDesc::Contiguous(DType::kFloat32, {32768, 64});
  const TensorDesc b = TensorDesc::Contiguous(DType::kFloat32, {64, 32768});
  const OpKey off = MmKey(a, b), on = MmKey(a, b, kAllowTF32Matmul);
  // torch.backends.cuda.matmul.allow_tf32 is OpKey::numerics' bit (kjit_torch::CurrentNumerics): the two
  // settings are two keys, so a kernel verified for one is never served to the other.
  EXPECT_NE(off.Hash(), on.Hash());
  for (const OpKey& key : {off, on, MmKey(a, b, kAllowBF16Matmul)}) {
    auto found = FindFamily(key);
    ASSERT_TRUE(found.ok()) << found.status().ToString();
    // Every point multiplies with float32 fused multiply-adds: no inline PTX (mma, cvt.rna.tf32) but the
    // pipelined strategy's cp.async copies (codegen 4) and the bulk strategy's bulk copies, mbarriers and
    // proxy fences (stage 5), no wmma.
    for (const Point& p : PairwiseCover(*found->family, *found->problem, device)) {
      auto c = found->family->Generate(*found->problem, p, device);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      EXPECT_NE(c->source.find("fmaf("), std::string::npos);
      std::istringstream lines(c->source);
      for (std::string line; std::getline(lines, line);) {
        if (line.find("asm") == std::string::npos) continue;
        const bool bulk = p.at("stage") == 5 && (line.find("asm volatile(\"mbarrier.") != std::string::npos ||
                                                 line.find("asm volatile(\"fence.") != std::string::npos ||
                                                 line.find("asm volatile(\"{ .reg .pred p; mbarrier.try_wait.") != std::string::npos);
        EXPECT_TRUE(bulk || line.find("asm volatile(\"cp.async.") != std::string::npos) << PointToString(p) << ": " << line;
      }
      EXPECT_EQ(c->source.find("wmma"), std::string::npos) << PointToString(p);
    }
  }
  EXPECT_NE(FindFamily(off)->problem->description.find("tf32-off"), std::string::npos);
  EXPECT_NE(FindFamily(on)->problem->description.find("tf32-allowed"), std::string::npos);
}

TEST(MatmulSpace, ChecksFollowTheLayout) {
  const DeviceFacts device = DeviceFacts::H200();
  constexpr DType f32 = DType::kFloat32, bf16 = DType::kBFloat16;
  auto why = [&](const OpKey& key, const Point& p) {
    auto found = FindFamily(key);
    EXPECT_TRUE(found.ok()) << found.status().ToString();
    const Status st = found->family->Check(*found->problem, p, device);
    EXPECT_FALSE(st.ok()) << PointToString(p);
    return st.ToString();
  };
  auto ok = [&](const OpKey& key, const Point& p) {
    auto found = FindFamily(key);
    EXPECT_TRUE(found.ok());
    return found->family->Check(*found->problem, p, device).ok();
  };
  const OpKey plain = MmKey(TensorDesc::Contiguous(f32, {256, 64}), TensorDesc::Contiguous(f32, {64, 256}));
  EXPECT_TRUE(ok(plain, MatmulPoint(2, 64, 64, 16, 4, 4, 4)));
  // Threads are bm/tm x bn/tn, a multiple of 32; accumulators are bounded.
  EXPECT_NE(why(plain, MatmulPoint(2, 16, 16, 16, 4, 4, 1)).find("multiple of 32"), std::string::npos);
  EXPECT_NE(why(plain, MatmulPoint(2, 128, 128, 16, 8, 16, 1)).find("accumulators"), std::string::npos);
  // Vectors: 16 bytes at most, not for direct reads, not across a dim without unit stride.
  EXPECT_NE(why(plain, MatmulPoint(2, 64, 64, 16, 4, 4, 8)).find("16 bytes"), std::string::npos);
  EXPECT_NE(why(plain, MatmulPoint(0, 64, 64, 16, 4, 4, 4)).find("direct"), std::string::npos);
  TensorDesc stepped = TensorDesc::Contiguous(f32, {256, 128});
  stepped.sizes = {256, 64};
  stepped.strides = {128, 2};  // x[:, ::2]
  EXPECT_NE(why(MmKey(stepped, TensorDesc::Contiguous(f32, {64, 256})), MatmulPoint(2, 64, 64, 16, 4, 4, 4)).find("unit-stride"),
            std::string::npos);
  EXPECT_TRUE(ok(MmKey(stepped, TensorDesc::Contiguous(f32, {64, 256})), MatmulPoint(2, 64, 64, 16, 4, 4, 1)));
  // A transposed operand is read in vectors along its own contiguous dim (m for A^T).
  EXPECT_TRUE(ok(MmKey(Transposed(f32, 256, 64), TensorDesc::Contiguous(f32, {64, 256})), MatmulPoint(2, 64, 64, 16, 4, 4, 4)));
  // An odd contiguous extent or a misaligned input keeps vectors out.
  EXPECT_NE(why(MmKey(TensorDesc::Contiguous(f32, {256, 66}), TensorDesc::Contiguous(f32, {66, 256})),
                MatmulPoint(2, 64, 64, 16, 4, 4, 4)).find("divide"),
            std::string::npos);
  TensorDesc misaligned = TensorDesc::Contiguous(bf16, {256, 64});
  misaligned.alignment = 4;
  EXPECT_NE(why(MmKey(misaligned, TensorDesc::Contiguous(bf16, {64, 256})), MatmulPoint(2, 64, 64, 16, 4, 4, 8)).find("aligned"),
            std::string::npos);
  EXPECT_TRUE(ok(MmKey(misaligned, TensorDesc::Contiguous(bf16, {64, 256})), MatmulPoint(2, 64, 64, 16, 4, 4, 2)));
  // Double buffering needs two slices; tiles stay within the matrix's next power of two.
  const OpKey small_k = MmKey(TensorDesc::Contiguous(f32, {256, 16}), TensorDesc::Contiguous(f32, {16, 256}));
  EXPECT_NE(why(small_k, MatmulPoint(2, 64, 64, 16, 4, 4, 4)).find("two k slices"), std::string::npos);
  EXPECT_TRUE(ok(small_k, MatmulPoint(1, 64, 64, 16, 4, 4, 4)));
  const OpKey tiny = BmmKey(TensorDesc::Contiguous(f32, {4096, 8, 8}), TensorDesc::Contiguous(f32, {4096, 8, 8}));
  EXPECT_NE(why(tiny, MatmulPoint(1, 32, 16, 8, 1, 1, 1)).find("taller"), std::string::npos);
  // Several matrices a block: bmm only, where one tile covers a matrix.
  EXPECT_TRUE(ok(tiny, MatmulPoint(1, 16, 16, 8, 1, 2, 4, 8)));
  EXPECT_NE(why(plain, MatmulPoint(2, 64, 64, 16, 4, 4, 4, 2)).find("batch"), std::string::npos);
  // Two blocks an SM: only where the cap binds (256 threads or more) and two blocks fit.
  Point two = MatmulPoint(2, 128, 128, 16, 8, 8, 4);
  two["minb"] = 2;
  EXPECT_TRUE(ok(plain, two));
  two = MatmulPoint(2, 64, 64, 16, 8, 8, 4);
  two["minb"] = 2;
  EXPECT_NE(why(plain, two).find("256 threads"), std::string::npos);
  // Resident: the whole K in shared memory up to the opt-in limit (not the slices' 64 KB), its vectors
  // dividing K; two blocks an SM only where two whole-K tiles fit.
  Point res = MatmulPoint(3, 128, 128, 32, 8, 8, 4);
  EXPECT_TRUE(ok(plain, res));
  res["minb"] = 2;
  EXPECT_TRUE(ok(plain, res));
  const OpKey k256 = MmKey(TensorDesc::Contiguous(f32, {4096, 256}), TensorDesc::Contiguous(f32, {256, 4096}));
  EXPECT_NE(why(k256, MatmulPoint(3, 128, 128, 32, 8, 8, 4)).find("shared memory"), std::string::npos);
  EXPECT_TRUE(ok(k256, MatmulPoint(3, 128, 64, 32, 8, 4, 4)));  // 200 KB: one block an SM
  Point res2 = MatmulPoint(3, 128, 64, 32, 8, 4, 4);
  res2["minb"] = 2;
  EXPECT_NE(why(k256, res2).find("two blocks"), std::string::npos);
  const OpKey odd_k = MmKey(TensorDesc::Contiguous(f32, {256, 66}), TensorDesc::Contiguous(f32, {66, 256}));
  EXPECT_NE(why(odd_k, MatmulPoint(3, 64, 64, 16, 4, 4, 4)).find("divide"), std::string::npos);
  EXPECT_TRUE(ok(odd_k, MatmulPoint(3, 64, 64, 16, 4, 4, 2)));
  // Four blocks an SM: 128 threads (a 128-register cap) or 256 with at most 16 accumulators, four whole-K
  // tiles fitting an SM.
  Point four = MatmulPoint(3, 64, 128, 8, 8, 8, 4);
  four["minb"] = 4;
  EXPECT_TRUE(ok(plain, four));
  four = MatmulPoint(3, 128, 128, 8, 8, 8, 4);
  four["minb"] = 4;
  EXPECT_NE(why(plain, four).find("four blocks"), std::string::npos);
  four = MatmulPoint(3, 64, 64, 8, 8, 8, 4);
  four["minb"] = 4;
  EXPECT_NE(why(plain, four).find("four blocks"), std::string::npos);
  four = MatmulPoint(3, 64, 64, 8, 4, 4, 4);
  four["minb"] = 4;
  EXPECT_TRUE(ok(plain, four));
  four = MatmulPoint(3, 64, 128, 8, 8, 8, 4);
  four["minb"] = 4;
  const OpKey k128 = MmKey(TensorDesc::Contiguous(f32, {4096, 128}), TensorDesc::Contiguous(f32, {128, 4096}));
  EXPECT_NE(why(k128, four).find("four blocks"), std::string::npos);  // 100 KB each
  four["minb"] = 3;
  EXPECT_NE(why(plain, four).find("minb"), std::string::npos);
  // Odd K: scalar reads only, the resident 8x8 tile of 128 threads all the same.
  const OpKey k63 = MmKey(TensorDesc::Contiguous(f32, {32767, 63}), TensorDesc::Contiguous(f32, {63, 32767}));
  four = MatmulPoint(3, 64, 128, 8, 8, 8, 1);
  four["minb"] = 4;
  EXPECT_TRUE(ok(k63, four));
  four["vec"] = 2;
  EXPECT_NE(why(k63, four).find("divide"), std::string::npos);
  const OpKey bmm64 = BmmKey(TensorDesc::Contiguous(f32, {4096, 64, 64}), TensorDesc::Contiguous(f32, {4096, 64, 64}));
  EXPECT_NE(why(bmm64, MatmulPoint(2, 32, 32, 16, 2, 2, 4, 2)).find("one tile"), std::string::npos);
  // Span copies (codegen 5): pipelined only, vec 1, tiles that are one contiguous span, not both operands'
  // rows 16-byte aligned already.
  const OpKey bmm63 = BmmKey(TensorDesc::Contiguous(f32, {4095, 63, 63}), TensorDesc::Contiguous(f32, {4095, 63, 63}));
  Point span = MatmulPoint(4, 64, 64, 16, 4, 8, 1);
  span["ahead"] = 1;
  span["span"] = 1;
  EXPECT_TRUE(ok(bmm63, span));
  EXPECT_NE(why(bmm64, span).find("aligned"), std::string::npos);
  span["vec"] = 4;
  EXPECT_NE(why(bmm63, span).find("vec is 1"), std::string::npos);
  span["vec"] = 1;
  span["stage"] = 3;
  EXPECT_NE(why(bmm63, span).find("pipelined"), std::string::npos);
  span["stage"] = 4;
  TensorDesc padded = TensorDesc::Contiguous(f32, {4095, 63, 64});  // rows of 63 of 64 floats
  padded.sizes = {4095, 63, 63};
  EXPECT_NE(why(BmmKey(padded, TensorDesc::Contiguous(f32, {4095, 63, 63})), span).find("contiguous span"),
            std::string::npos);
  // B^T of 63x63 matrices is one span too; an mm's A over several tiles of rows (a span a tile).
  EXPECT_TRUE(ok(BmmKey(TensorDesc::Contiguous(f32, {4095, 63, 63}), Transposed3(f32, 4095, 63, 63)), span));
  span["bm"] = 32;
  span["tm"] = 2;
  EXPECT_TRUE(ok(MmKey(TensorDesc::Contiguous(f32, {1000, 63}), TensorDesc::Contiguous(f32, {63, 63})), span));
  // B's columns over several tiles are not one span.
  EXPECT_NE(why(MmKey(TensorDesc::Contiguous(f32, {1000, 63}), TensorDesc::Contiguous(f32, {63, 99})), span)
                .find("contiguous span"),
            std::string::npos);
}

TEST(MatmulSpace, BulkFollowsTheArchAndTheLayout) {
  DeviceFacts device = DeviceFacts::H200();
  constexpr DType f32 = DType::kFloat32, bf16 = DType::kBFloat16;
  auto why = [&](const OpKey& key, const Point& p) {
    auto found = FindFamily(key);
    EXPECT_TRUE(found.ok()) << found.status().ToString();
    const Status st = found->family->Check(*found->problem, p, device);
    EXPECT_FALSE(st.ok()) << PointToString(p);
    return st.ToString();
  };
  auto ok = [&](const OpKey& key, const Point& p) {
    auto found = FindFamily(key);
    EXPECT_TRUE(found.ok());
    const Status st = found->family->Check(*found->problem, p, device);
    EXPECT_TRUE(st.ok()) << PointToString(p) << ": " << st.ToString();
    return st.ok();
  };
  const OpKey bmm64 = BmmKey(TensorDesc::Contiguous(f32, {4096, 64, 64}), TensorDesc::Contiguous(f32, {4096, 64, 64}));
  Point bulk = MatmulPoint(5, 64, 64, 16, 4, 8, 1);
  bulk["ahead"] = 1;
  bulk["span"] = 0;
  EXPECT_TRUE(ok(bmm64, bulk));
  // Generated: one bulk copy an operand an item (a thread), an mbarrier a buffer; two buffers of both 16 KB
  // tiles unpadded and two 8-byte barriers (64 KB: three blocks an SM), one wave of 3 x 132 blocks.
  {
    auto found = FindFamily(bmm64);
    auto c = found->family->Generate(*found->problem, bulk, device);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_NE(c->source.find("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"), std::string::npos);
    EXPECT_NE(c->source.find("mbarrier.try_wait.parity.shared::cta.b64"), std::string::npos);
    EXPECT_NE(c->source.find("#define STAGE 5"), std::string::npos);
    EXPECT_EQ(c->launch.dynamic_shared_bytes, 2u * (4096u + 4096u) * 4u + 16u);
    EXPECT_EQ(c->launch.grid[0], 3u * 132u);
    EXPECT_EQ(c->launch.block[0], 128u);
  }
  // Up to three items ahead (four buffers: 128 KB, one block an SM), ahead 3 for this strategy only.
  bulk["ahead"] = 3;
  EXPECT_TRUE(ok(bmm64, bulk));
  bulk["stage"] = 4;
  bulk["vec"] = 4;
  EXPECT_NE(why(bmm64, bulk).find("bulk and ring strategies only"), std::string::npos);
  bulk["stage"] = 5;
  bulk["vec"] = 1;
  bulk["ahead"] = 1;
  // Whole tiles a copy: vec 1 only; no span copies.
  bulk["vec"] = 4;
  EXPECT_NE(why(bmm64, bulk).find("vec is 1"), std::string::npos);
  bulk["vec"] = 1;
  bulk["span"] = 1;
  EXPECT_NE(why(bmm64, bulk).find("pipelined"), std::string::npos);
  bulk["span"] = 0;
  // sm_90 or newer: TMA and mbarrier transaction counts; no stage-5 point is valid before it.
  device.arch = 80;
  EXPECT_NE(why(bmm64, bulk).find("sm_90"), std::string::npos);
  {
    auto found = FindFamily(bmm64);
    size_t stage5 = 0;
    for (const Point& p : ValidPoints(*found->family, *found->problem, device)) stage5 += p.at("stage") == 5;
    EXPECT_EQ(stage5, 0u);
  }
  device.arch = 90;
  // Layouts: both operands' tiles contiguous runs (B's tile the whole matrix), 16-byte aligned, of 16-byte rows.
  Point narrow = bulk;
  narrow["bn"] = 32;
  narrow["tn"] = 4;
  EXPECT_NE(why(bmm64, narrow).find("contiguous run"), std::string::npos);  // B's columns over two tiles
  EXPECT_TRUE(ok(bmm64, [&] { Point q = bulk; q["bm"] = 32; q["tm"] = 2; return q; }()));  // A's rows over two tiles
  const OpKey bmm63 = BmmKey(TensorDesc::Contiguous(f32, {4095, 63, 63}), TensorDesc::Contiguous(f32, {4095, 63, 63}));
  EXPECT_NE(why(bmm63, bulk).find("16-byte"), std::string::npos);
  TensorDesc padded = TensorDesc::Contiguous(f32, {4096, 64, 68});  // rows of 64 of 68 floats
  padded.sizes = {4096, 64, 64};
  EXPECT_NE(why(BmmKey(padded, TensorDesc::Contiguous(f32, {4096, 64, 64})), bulk).find("contiguous run"), std::string::npos);
  TensorDesc offset = TensorDesc::Contiguous(f32, {4096, 64, 64});
  offset.alignment = 4;  // a view one float into its storage
  EXPECT_NE(why(BmmKey(offset, TensorDesc::Contiguous(f32, {4096, 64, 64})), bulk).find("16-byte"), std::string::npos);
  // bf16 B^T (rows of n, K of 128 bytes) and the mm of tall A over row tiles (the last one shorter) qualify.
  EXPECT_TRUE(ok(BmmKey(TensorDesc::Contiguous(bf16, {256, 64, 64}), Transposed3(bf16, 256, 64, 64)), bulk));
  EXPECT_TRUE(ok(MmKey(TensorDesc::Contiguous(f32, {1000, 64}), TensorDesc::Contiguous(f32, {64, 64})), bulk));
  EXPECT_NE(why(MmKey(TensorDesc::Contiguous(f32, {1000, 64}), TensorDesc::Contiguous(f32, {64, 4096})), bulk)
                .find("contiguous run"),
            std::string::npos);
}

// Stage 6 (ring) takes the bulk strategy's layout rules and owns its block: bpb consumer groups and a producer
// warp, bpb + ahead buffers with two mbarriers each, one block an SM over a persistent grid, outputs stored from
// registers only (no block-wide barrier after the start).
TEST(MatmulSpace, RingTakesTheBulkRulesAndOwnsItsBlock) {
  DeviceFacts device = DeviceFacts::H200();
  constexpr DType f32 = DType::kFloat32;
  auto check = [&](const OpKey& key, const Point& p) {
    auto found = FindFamily(key);
    EXPECT_TRUE(found.ok()) << found.status().ToString();
    return found->family->Check(*found->problem, p, device);
  };
  const OpKey bmm64 = BmmKey(TensorDesc::Contiguous(f32, {4096, 64, 64}), TensorDesc::Contiguous(f32, {4096, 64, 64}));
  Point ring = MatmulPoint(6, 64, 64, 16, 8, 8, 1, 4);
  ring["ahead"] = 2;
  ring["span"] = 0;
  ASSERT_TRUE(check(bmm64, ring).ok()) << check(bmm64, ring).ToString();
  {
    auto found = FindFamily(bmm64);
    auto c = found->family->Generate(*found->problem, ring, device);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_NE(c->source.find("#define STAGE 6"), std::string::npos);
    EXPECT_NE(c->source.find("mbarrier.arrive.shared::cta.b64"), std::string::npos);  // a buffer freed
    EXPECT_NE(c->source.find("__launch_bounds__(BLOCK6, 1) kjit_matmul("), std::string::npos);
    EXPECT_EQ(c->source.find("#if STAGE == 5\n"), std::string::npos);  // the bulk helpers compiled for stage 6
    // 4 groups of 64 threads and the producer warp; 6 buffers of both 16 KB tiles and 12 barriers; a block an SM.
    EXPECT_EQ(c->launch.block[0], 4u * 64u + 32u);
    EXPECT_EQ(c->launch.dynamic_shared_bytes, 6u * (4096u + 4096u) * 4u + 96u);
    EXPECT_EQ(c->launch.grid[0], 132u);
  }
  auto why = [&](Point p) { return check(bmm64, p).ToString(); };
  EXPECT_NE(why([&] { Point q = ring; q["minb"] = 2; return q; }()).find("ring: minb is 1"), std::string::npos);
  EXPECT_NE(why([&] { Point q = ring; q["vec"] = 4; return q; }()).find("vec is 1"), std::string::npos);
  // 8 groups of 128 threads (32x64 items, 4x4 a thread) and the producer: 1056 threads (9 buffers of 24 KB fit).
  EXPECT_NE(why([&] { Point q = ring; q["bm"] = 32; q["tm"] = 4; q["tn"] = 4; q["bpb"] = 8; q["ahead"] = 1; return q; }())
                .find("too many threads"),
            std::string::npos);
  // 8 + 3 buffers of 32 KB do not fit a block.
  EXPECT_NE(why([&] { Point q = ring; q["bpb"] = 8; q["ahead"] = 3; return q; }()).find("shared memory"), std::string::npos);
  // As the bulk strategy: 16-byte aligned contiguous tiles, sm_90.
  const OpKey bmm63 = BmmKey(TensorDesc::Contiguous(f32, {4095, 63, 63}), TensorDesc::Contiguous(f32, {4095, 63, 63}));
  Point ring63 = ring;
  EXPECT_NE(check(bmm63, ring63).ToString().find("16-byte"), std::string::npos);
  device.arch = 80;
  EXPECT_NE(why(ring).find("sm_90"), std::string::npos);
  device.arch = 90;
  // Outputs from registers only: N of 4 columns (a thread's 8 columns, stored in 4s) qualifies; N = 66 (rows 8
  // bytes apart from 16-byte alignment) would need the bulk strategy's staged stores (and fails its layout rule
  // first, as B's rows are not 16-byte rows either).
  const OpKey bmm_n4 = BmmKey(TensorDesc::Contiguous(f32, {4096, 64, 64}), TensorDesc::Contiguous(f32, {4096, 64, 4}));
  EXPECT_TRUE(check(bmm_n4, [&] { Point q = ring; q["bn"] = 16; q["tn"] = 4; q["tm"] = 4; return q; }()).ok());
}

// Stage 6 with span 1: the ring's bulk copies take the enclosing 16-byte pieces of odd contiguous tiles; its
// buffers are span buffers, outputs leave element by element, and aligned operands keep span 0.
TEST(MatmulSpace, RingSpanCopiesOddContiguousTiles) {
  const DeviceFacts device = DeviceFacts::H200();
  constexpr DType f32 = DType::kFloat32;
  const OpKey bmm63 = BmmKey(TensorDesc::Contiguous(f32, {4095, 63, 63}), TensorDesc::Contiguous(f32, {4095, 63, 63}));
  const OpKey bmm64 = BmmKey(TensorDesc::Contiguous(f32, {4096, 64, 64}), TensorDesc::Contiguous(f32, {4096, 64, 64}));
  auto found = FindFamily(bmm63);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  Point ring = MatmulPoint(6, 64, 64, 16, 8, 8, 1, 4);
  ring["ahead"] = 1;
  ring["span"] = 1;
  ASSERT_TRUE(found->family->Check(*found->problem, ring, device).ok())
      << found->family->Check(*found->problem, ring, device).ToString();
  auto c = found->family->Generate(*found->problem, ring, device);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_NE(c->source.find("struct Span6"), std::string::npos);
  EXPECT_NE(c->source.find("TA5::plain(a, sa"), std::string::npos);  // the issue copies the enclosing pieces
  EXPECT_NE(c->source.find("TA5::offset(a + sbt * SAB"), std::string::npos);  // and the groups read at the offsets
  EXPECT_EQ(c->source.find("typedef Tile5<A_KCONT"), std::string::npos);
  // Span buffers: A's 64 rows of 63 (reads up to row 63's k of 64) and B's 63 k-rows of 63 (reads up to column 63
  // of the last), each with the 3 elements a start can be into its piece, in 16-byte pieces; 5 of them and 10
  // barriers.
  const uint32_t a_pieces = (3 + 63 * 63 + 64 + 3) / 4, b_pieces = (3 + 62 * 63 + 64 + 3) / 4;
  EXPECT_EQ(c->launch.dynamic_shared_bytes, 5u * (a_pieces + b_pieces) * 16u + 80u);
  auto why = [&](const OpKey& key, Point p) {
    auto f = FindFamily(key);
    return f->family->Check(*f->problem, p, device).ToString();
  };
  EXPECT_NE(why(bmm63, [&] { Point q = ring; q["span"] = 0; return q; }()).find("16-byte"), std::string::npos);
  EXPECT_NE(why(bmm63, [&] { Point q = ring; q["span"] = 2; return q; }()).find("ring: span is 0 or 1"), std::string::npos);
  EXPECT_NE(why(bmm64, ring).find("both operands' rows are 16-byte aligned"), std::string::npos);
  // The bulk strategy keeps its rule: no span.
  EXPECT_NE(why(bmm63, [&] { Point q = ring; q["stage"] = 5; q["bpb"] = 2; return q; }()).find("16-byte aligned runs"),
            std::string::npos);
}

// Codegen 6: span copies issue an item's pieces without a bounds test each when they all lie inside the view
// (the tests stay for the items at its ends), and span 2's warps store through output scratch of their own,
// past the landing buffers, so no block barrier precedes the stores; span 1 keeps the barrier (its scratch is
// the buffer just multiplied from).
TEST(MatmulSpace, SpanCopiesTestPiecesOnlyAtTheViewsEnds) {
  const DeviceFacts device = DeviceFacts::H200();
  const OpKey bmm63 = BmmKey(TensorDesc::Contiguous(DType::kFloat32, {4095, 63, 63}),
                             TensorDesc::Contiguous(DType::kFloat32, {4095, 63, 63}));
  auto found = FindFamily(bmm63);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  const std::string unchecked = "if (g >= lo && g + (unsigned long long)n * 16 <= hi) {";
  const std::string barrier = "  __syncthreads();  // every thread is done reading the staged tiles\n"
                              "  const int lane = threadIdx.x % 32, warp";
  for (int64_t span : {1, 2}) {
    Point p = MatmulPoint(4, 64, 64, 16, 8, 4, 1);
    p["ahead"] = 1;
    p["span"] = span;
    ASSERT_TRUE(found->family->Check(*found->problem, p, device).ok()) << PointToString(p);
    auto c = found->family->Generate(*found->problem, p, device);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_NE(c->source.find(unchecked), std::string::npos) << "span " << span;
    EXPECT_EQ(c->source.find(barrier) == std::string::npos, span == 2) << "span " << span;
    // Pieces: A's 64 rows of 63 (reads reach row 63's k of 64), B's 63 k-rows of 63 (reads reach column 63 of
    // the last), each with the 3 elements a start can be into its piece.
    const uint32_t spans = ((3 + 63 * 63 + 64 + 3) / 4 + (3 + 62 * 63 + 64 + 3) / 4) * 16;
    // 128 threads x tn 4 floats x two of a thread's rows a store round (codegen 8, tm 8 even)
    const uint32_t padded = (64 * 68 + 63 * 68) * 4, scratch = 128 * 4 * 4 * 2;
    EXPECT_EQ(c->launch.dynamic_shared_bytes, span == 1 ? 2 * spans : spans + padded + scratch) << "span " << span;
    if (span == 2) {
      EXPECT_NE(c->source.find("float* scratch = reinterpret_cast<float*>(land + AHEAD * SBUF4);"), std::string::npos);
      // The span store (codegen 8): SR4 of a thread's rows a round, and stage 3's one-row store gone.
      EXPECT_NE(c->source.find("constexpr int SR4 = TM % 2 == 0 ? 2 : 1;"), std::string::npos);
      EXPECT_NE(c->source.find("  for (int i = 0; i < TM; i += SR4) {"), std::string::npos);
      EXPECT_EQ(c->source.find("// read before the next row is written"), std::string::npos);
      EXPECT_NE(c->source.find("store_warp3(c + bt * (M_ * N_), m0, n0, scratch, ty, tx, acc);"), std::string::npos);
    }
  }
  // Span 0 (4-byte copies into the padded tiles) has no span copies.
  Point p = MatmulPoint(4, 64, 64, 16, 8, 4, 1);
  p["ahead"] = 1;
  p["span"] = 0;
  auto c = found->family->Generate(*found->problem, p, device);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->source.find(unchecked), std::string::npos);
  EXPECT_NE(c->source.find(barrier), std::string::npos);
}

// Span 3 (sm_90): span 2's repack and stores with the pieces landed by one thread's bulk copies (the ring's
// span issue: the view's end pieces element by element), an mbarrier a landing buffer after the output scratch.
TEST(MatmulSpace, SpanThreeLandsPiecesByBulkCopies) {
  DeviceFacts device = DeviceFacts::H200();
  const OpKey bmm63 = BmmKey(TensorDesc::Contiguous(DType::kFloat32, {4095, 63, 63}),
                             TensorDesc::Contiguous(DType::kFloat32, {4095, 63, 63}));
  auto found = FindFamily(bmm63);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  const uint32_t spans = ((3 + 63 * 63 + 64 + 3) / 4 + (3 + 62 * 63 + 64 + 3) / 4) * 16;
  const uint32_t padded = (64 * 68 + 63 * 68) * 4, scratch = 128 * 4 * 4 * 2;  // two rows a store round
  for (int64_t ahead : {1, 2}) {
    Point p = MatmulPoint(4, 64, 64, 16, 8, 4, 1);
    p["ahead"] = ahead;
    p["span"] = 3;
    ASSERT_TRUE(found->family->Check(*found->problem, p, device).ok())
        << found->family->Check(*found->problem, p, device).ToString();
    auto c = found->family->Generate(*found->problem, p, device);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_NE(c->source.find("  pipelined4b(a, b, c, reinterpret_cast<raw_t*>(smem));"), std::string::npos);
    EXPECT_NE(c->source.find("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"), std::string::npos);
    EXPECT_NE(c->source.find("TA5::plain(a, sa"), std::string::npos);
    EXPECT_EQ(c->source.find("K4UNROLL"), std::string::npos);
    EXPECT_EQ(c->launch.dynamic_shared_bytes, ahead * spans + padded + scratch + ahead * 8) << "ahead " << ahead;
  }
  {
    // An odd tm stores one of a thread's rows a round: 1024 threads x tn 4 floats of scratch.
    Point p = MatmulPoint(4, 64, 64, 16, 1, 4, 1);
    p["ahead"] = 1;
    p["span"] = 3;
    ASSERT_TRUE(found->family->Check(*found->problem, p, device).ok())
        << found->family->Check(*found->problem, p, device).ToString();
    auto c = found->family->Generate(*found->problem, p, device);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->launch.dynamic_shared_bytes, spans + padded + 1024 * 4 * 4 + 8);
  }
  auto why = [&](Point p) { return found->family->Check(*found->problem, p, device).ToString(); };
  Point p = MatmulPoint(4, 64, 64, 16, 8, 4, 1);
  p["ahead"] = 1;
  p["span"] = 3;
  EXPECT_NE(why([&] { Point q = p; q["stage"] = 6; q["tm"] = 8; q["tn"] = 8; return q; }()).find("ring: span is 0 or 1"),
            std::string::npos);
  EXPECT_NE(why([&] { Point q = p; q["span"] = 5; return q; }()).find("span is 0 to 4"), std::string::npos);
  device.arch = 80;
  EXPECT_NE(why(p).find("sm_90"), std::string::npos);
  p["span"] = 2;
  EXPECT_TRUE(found->family->Check(*found->problem, p, device).ok());
}

// Span 4: span 3's landing buffer inside the padded tiles' region (the larger of the two), so the odd bmm's block
// takes 38,648 bytes (against span 3's 70,696), five blocks an SM on the H200: the grid and the launch bounds
// follow (registers for five blocks of 128 threads), and the repack goes through registers in place.
TEST(MatmulSpace, SpanFourRepacksInPlace) {
  DeviceFacts device = DeviceFacts::H200();
  auto bmm = [](int64_t batch) {
    return BmmKey(TensorDesc::Contiguous(DType::kFloat32, {batch, 63, 63}),
                  TensorDesc::Contiguous(DType::kFloat32, {batch, 63, 63}));
  };
  auto found = FindFamily(bmm(4095));
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  const uint32_t spans = ((3 + 63 * 63 + 64 + 3) / 4 + (3 + 62 * 63 + 64 + 3) / 4) * 16;
  const uint32_t padded = (64 * 68 + 63 * 68) * 4, scratch = 128 * 4 * 4 * 2;
  ASSERT_GT(padded, spans);  // the region is the padded tiles'
  Point p = MatmulPoint(4, 64, 64, 16, 8, 4, 1);
  p["ahead"] = 1;
  p["span"] = 4;
  ASSERT_TRUE(found->family->Check(*found->problem, p, device).ok())
      << found->family->Check(*found->problem, p, device).ToString();
  auto c = found->family->Generate(*found->problem, p, device);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->launch.dynamic_shared_bytes, padded + scratch + 8);
  const uint32_t per_sm = device.shared_bytes_per_sm / (c->launch.dynamic_shared_bytes + 1024);
  EXPECT_EQ(per_sm, 5u);
  EXPECT_EQ(c->launch.grid[0], per_sm * device.sm_count);
  EXPECT_NE(c->source.find("MINB = 5,"), std::string::npos);
  EXPECT_NE(c->source.find("  pipelined4b(a, b, c, reinterpret_cast<raw_t*>(smem));"), std::string::npos);
  EXPECT_NE(c->source.find("Staged4<TA4, A_KCONT, BM, M_> r;"), std::string::npos);
  EXPECT_NE(c->source.find("  raw_t* land = smem4 + LOFF4;"), std::string::npos);
  EXPECT_EQ(c->source.find("repack4<TA4"), std::string::npos);  // (the function remains, uncalled)
  // The refill after the multiply: the next copies are issued after the last fragment read.
  const size_t multiply = c->source.find("chunk4<4>(As, Bs, k, ty, tx, acc);\n  if (K_ % 4");
  const size_t refill = c->source.find("  refill();\n", c->source.find("Staged4<TB4"));
  ASSERT_NE(multiply, std::string::npos);
  ASSERT_NE(refill, std::string::npos);
  EXPECT_LT(multiply, refill);
  // Fewer matrices than blocks the SMs hold: one block a matrix.
  auto small = FindFamily(bmm(600));
  ASSERT_TRUE(small.ok());
  auto c600 = small->family->Generate(*small->problem, p, device);
  ASSERT_TRUE(c600.ok()) << c600.status().ToString();
  EXPECT_EQ(c600->launch.grid[0], 600u);

  auto why = [&](Point q) { return found->family->Check(*found->problem, q, device).ToString(); };
  EXPECT_NE(why([&] { Point q = p; q["ahead"] = 2; return q; }()).find("ahead is 1"), std::string::npos);
  EXPECT_NE(why([&] { Point q = p; q["minb"] = 2; return q; }()).find("minb is 1"), std::string::npos);
  // A thread would hold 16 rows x 8 columns of a tile with K = 255 in registers between loads and stores.
  auto wide = FindFamily(BmmKey(TensorDesc::Contiguous(DType::kFloat32, {64, 63, 255}),
                                TensorDesc::Contiguous(DType::kFloat32, {64, 255, 63})));
  ASSERT_TRUE(wide.ok());
  const Status held = wide->family->Check(*wide->problem, p, device);
  EXPECT_NE(held.ToString().find("over 64 elements"), std::string::npos) << held.ToString();
  device.arch = 80;
  EXPECT_NE(why(p).find("sm_90"), std::string::npos);
}

// Stage 5, ahead 3 and span 3 and 4 are new values of existing knobs: every point valid before them (stage 4 or less,
// ahead 1 or 2, span 0 to 2) still generates the same source and launch shape, byte for byte (the datasets store measured
// sources). Digests of every 64th such point of each sample key (FNV-1a over the source and the launch).
// Codegens 6 and 7 changed the span points' kernels (stage 4, span 1 or 2; 7: span 2's repack by rows) and only
// theirs: the other points' digest (`digest`, their version stamp read as codegen 5's) was recorded at codegen 5
// (4f6715a) with this test, and the span points' (`span_digest`) at codegen 7.
TEST(MatmulSpace, OldPointsKeepTheirSources) {
  // (Enumerating every sample key's valid points takes ~40 s here, many times that under the sanitizers, whose
  // build checks kjit's own code: skipped there.)
  const char* sweep = std::getenv("KJIT_SPACE_SWEEP");
  if (sweep != nullptr && std::string(sweep) == "cover") GTEST_SKIP() << "KJIT_SPACE_SWEEP=cover";
  const DeviceFacts device = DeviceFacts::H200();
  struct Golden { size_t old_points, span_points, hashed, span_hashed; uint64_t digest, span_digest; };
  const Golden golden[] = {
      {41784u, 0u, 653u, 0u, 0xdfac7630af8e2a56ull, 0x14650fb0739d0383ull},  // matmul f32 bmm 4096x(64x64 @ 64x64) A B tf32-off
      {54594u, 0u, 854u, 0u, 0x6f85f0122ef0ce26ull, 0x14650fb0739d0383ull},  // matmul f32 mm (32768x64 @ 64x32768) A B tf32-off
      {62172u, 0u, 972u, 0u, 0xd7b59e397bc386e0ull, 0x14650fb0739d0383ull},  // matmul f32 mm (8192x32 @ 32x8192) A B tf32-allowed (fp32 fma)
      {43920u, 0u, 687u, 0u, 0x96a110a088ff6acbull, 0x14650fb0739d0383ull},  // matmul f16 bmm 512x(33x48 @ 48x40) A B tf32-off
      {42768u, 0u, 669u, 0u, 0x9e8399d897180180ull, 0x14650fb0739d0383ull},  // matmul bf16 bmm 256x(64x64 @ 64x64) A B^T tf32-off
      {18892u, 0u, 296u, 0u, 0x4049764196ae584cull, 0x14650fb0739d0383ull},  // matmul f32 mm (1000x33 @ 33x777) A^T B tf32-off
      {69448u, 0u, 1086u, 0u, 0xe7a0d905217b5f14ull, 0x14650fb0739d0383ull},  // matmul bf16 mm (4096x64 @ 64x4096) A B tf32-off
      {1248u, 0u, 20u, 0u, 0xd1c6d314db8e13e2ull, 0x14650fb0739d0383ull},  // matmul f32 bmm 16384x(8x8 @ 8x8) A B tf32-off
      {18040u, 0u, 282u, 0u, 0x6c0ed05fe1caf40dull, 0x14650fb0739d0383ull},  // matmul f16 mm (1x64 @ 64x4096) A B tf32-off
      {27600u, 0u, 432u, 0u, 0x7db4c7fd4bfd6d9eull, 0x14650fb0739d0383ull},  // matmul f32 bmm 24x(100x64 @ 64x24) A B B broadcast tf32-off
      {14808u, 6000u, 232u, 94u, 0x35b144934ae25fe9ull, 0x778245e2e05de99eull},  // matmul f32 bmm 600x(63x63 @ 63x63) A B tf32-off
  };
  auto found = FindFamily(BmmKey(TensorDesc::Contiguous(DType::kFloat32, {4096, 64, 64}),
                                 TensorDesc::Contiguous(DType::kFloat32, {4096, 64, 64})));
  ASSERT_TRUE(found.ok());
  const Family& f = *found->family;
  const std::string stamp = "// kjit matmul family, codegen " + std::to_string(f.codegen_version()) + ":";
  const std::string stamp5 = "// kjit matmul family, codegen 5:";
  const std::vector<OpKey> keys = f.SampleKeys();
  ASSERT_EQ(keys.size(), std::size(golden));
  for (size_t i = 0; i < keys.size(); ++i) {
    auto problem = f.Match(keys[i]);
    ASSERT_TRUE(problem.ok());
    uint64_t h = kFnvOffset, hs = kFnvOffset;
    size_t old_points = 0, span_points = 0, hashed = 0, span_hashed = 0;
    for (const Point& p : ValidPoints(f, **problem, device)) {
      if (p.at("stage") > 4 || p.at("ahead") > 2 || (p.count("span") != 0 && p.at("span") >= 3)) continue;
      // Span points are sampled apart from the others, so a change to theirs (which valid points there are,
      // by their shared memory) leaves the other points' sample and digest alone.
      if (p.at("stage") == 4 && p.count("span") != 0 && p.at("span") != 0) {
        if (span_points++ % 64 != 0) continue;
        auto c = f.Generate(**problem, p, device);
        ASSERT_TRUE(c.ok()) << c.status().ToString();
        hs = HashCandidate(hs, *c);
        ++span_hashed;
        continue;
      }
      if (old_points++ % 64 != 0) continue;
      auto c = f.Generate(**problem, p, device);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      const size_t at = c->source.find(stamp);
      ASSERT_NE(at, std::string::npos) << "no version stamp";
      c->source.replace(at, stamp.size(), stamp5);
      h = HashCandidate(h, *c);
      ++hashed;
    }
    EXPECT_EQ(old_points, golden[i].old_points) << (*problem)->description;
    EXPECT_EQ(span_points, golden[i].span_points) << (*problem)->description;
    EXPECT_EQ(hashed, golden[i].hashed) << (*problem)->description;
    EXPECT_EQ(span_hashed, golden[i].span_hashed) << (*problem)->description;
    EXPECT_EQ(h, golden[i].digest) << (*problem)->description << ": an old point's source changed; digest 0x"
                                   << std::hex << h;
    EXPECT_EQ(hs, golden[i].span_digest) << (*problem)->description << ": a span point's source changed; digest 0x"
                                         << std::hex << hs;
  }
}

TEST(MatmulSpace, ExpertDefaultsFitTheShapeAndTheAbi) {
  const DeviceFacts device = DeviceFacts::H200();
  constexpr DType f32 = DType::kFloat32, f16 = DType::kFloat16, bf16 = DType::kBFloat16;
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
  // Tall-skinny headroom case (compute-bound): resident 64x128 tiles of 8x8 per thread (the whole K = 64
  // staged once, four 128-thread blocks an SM, registers capped at 128 by minb=4: 512 threads, as many as
  // 128x128 or 128x256 keep, in more blocks), float4 fetches, streaming stores (a 4 GB output), 8 trips.
  Candidate c;
  Point p = default_of(MmKey(TensorDesc::Contiguous(f32, {32768, 64}), TensorDesc::Contiguous(f32, {64, 32768})), &c);
  EXPECT_EQ(p.at("stage"), 3) << PointToString(p);
  EXPECT_EQ(p.at("minb"), 4) << PointToString(p);
  EXPECT_EQ(p.at("bm"), 64) << PointToString(p);
  EXPECT_EQ(p.at("bn"), 128) << PointToString(p);
  EXPECT_EQ(p.at("tm"), 8) << PointToString(p);
  EXPECT_EQ(p.at("tn"), 8) << PointToString(p);
  EXPECT_EQ(p.at("bk"), 8) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 4) << PointToString(p);
  EXPECT_EQ(p.at("hint"), 1) << PointToString(p);
  EXPECT_EQ(c.launch.grid[0], 512u * 256u);
  EXPECT_EQ(c.launch.block[0], 128u);
  EXPECT_EQ(c.launch.dynamic_shared_bytes, 64u * (68u + 132u) * 4u);
  // K = 128: two 64x128 blocks (256 threads) or one 128x128 (256) an SM; one 128x256 block keeps 512.
  p = default_of(MmKey(TensorDesc::Contiguous(f32, {32768, 128}), TensorDesc::Contiguous(f32, {128, 32768})), &c);
  EXPECT_EQ(p.at("stage"), 3) << PointToString(p);
  EXPECT_EQ(p.at("bm"), 128) << PointToString(p);
  EXPECT_EQ(p.at("bn"), 256) << PointToString(p);
  EXPECT_EQ(p.at("bk"), 16) << PointToString(p);
  EXPECT_EQ(p.at("minb"), 1) << PointToString(p);
  EXPECT_EQ(c.launch.block[0], 512u);
  // Odd sizes: the same tile, scalar reads (coalesced along k), float4 fragments all the same.
  p = default_of(MmKey(TensorDesc::Contiguous(f32, {32767, 63}), TensorDesc::Contiguous(f32, {63, 32767})), &c);
  EXPECT_EQ(p.at("stage"), 3) << PointToString(p);
  EXPECT_EQ(p.at("bm"), 64) << PointToString(p);
  EXPECT_EQ(p.at("bn"), 128) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 1) << PointToString(p);
  // (self, mat2, out).
  EXPECT_NE(c.source.find("kjit_matmul(const in_t* __restrict__ a,"), std::string::npos);
  EXPECT_EQ(c.entry_point, "kjit_matmul");
  // Batched 64x64 float32 headroom case, sm_90: the ring (stage 6, measured faster than stage 5's default at
  // 2048, 4096 and 8192 matrices): whole matrices, 8x8 a thread (64 threads a group), 4 groups and the producer
  // warp, 5 buffers, one block an SM.
  p = default_of(BmmKey(TensorDesc::Contiguous(f32, {4096, 64, 64}), TensorDesc::Contiguous(f32, {4096, 64, 64})), &c);
  EXPECT_EQ(p.at("stage"), 6) << PointToString(p);
  EXPECT_EQ(p.at("bm"), 64) << PointToString(p);
  EXPECT_EQ(p.at("bn"), 64) << PointToString(p);
  EXPECT_EQ(p.at("tm"), 8) << PointToString(p);
  EXPECT_EQ(p.at("tn"), 8) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 1) << PointToString(p);
  EXPECT_EQ(p.at("bpb"), 4) << PointToString(p);
  EXPECT_EQ(p.at("ahead"), 1) << PointToString(p);
  EXPECT_EQ(p.at("hint"), 0) << PointToString(p);
  EXPECT_EQ(c.launch.block[0], 4u * 64u + 32u);
  EXPECT_EQ(c.launch.grid[0], 132u);
  p = default_of(BmmKey(TensorDesc::Contiguous(f32, {2048, 64, 64}), TensorDesc::Contiguous(f32, {2048, 64, 64})));
  EXPECT_EQ(p.at("stage"), 6) << PointToString(p);
  // Other batched shapes keep the bulk strategy (stage 5, measured at 64x64 before the ring): half-matrix row
  // tiles (here the whole 32x32 matrix) against B's whole matrix, 8x4 a thread, 4 items a block.
  p = default_of(BmmKey(TensorDesc::Contiguous(f32, {4096, 32, 32}), TensorDesc::Contiguous(f32, {4096, 32, 32})), &c);
  EXPECT_EQ(p.at("stage"), 5) << PointToString(p);
  EXPECT_EQ(p.at("bm"), 32) << PointToString(p);
  EXPECT_EQ(p.at("tn"), 4) << PointToString(p);
  EXPECT_EQ(c.launch.block[0], 32u);
  // Before sm_90 (no bulk copies): pipelined (codegen 4), one 64x64 tile a matrix, 4x8 a thread, float4
  // copies, two buffers of both tiles (68 KB: three blocks an SM), one wave of 3 x 132 blocks.
  DeviceFacts ampere = device;
  ampere.arch = 80;
  {
    auto found = FindFamily(BmmKey(TensorDesc::Contiguous(f32, {4096, 64, 64}), TensorDesc::Contiguous(f32, {4096, 64, 64})));
    ASSERT_TRUE(found.ok()) << found.status().ToString();
    p = found->family->ExpertDefault(*found->problem, ampere);
    auto g = found->family->Generate(*found->problem, p, ampere);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    c = *g;
  }
  EXPECT_EQ(p.at("stage"), 4) << PointToString(p);
  EXPECT_EQ(c.launch.dynamic_shared_bytes, 2u * 64u * (68u + 68u) * 4u);
  EXPECT_EQ(p.at("bm"), 64) << PointToString(p);
  EXPECT_EQ(p.at("bn"), 64) << PointToString(p);
  EXPECT_EQ(p.at("tm"), 4) << PointToString(p);
  EXPECT_EQ(p.at("tn"), 8) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 4) << PointToString(p);
  EXPECT_EQ(p.at("ahead"), 1) << PointToString(p);
  EXPECT_EQ(p.at("span"), 0) << PointToString(p);
  EXPECT_EQ(c.launch.grid[0], 3u * 132u);
  EXPECT_EQ(c.launch.block[0], 128u);
  // Odd 63x63 batches: pipelined with span copies (codegen 5): 16-byte pieces of each matrix's 3969 floats
  // landing in one buffer, repacked into padded tiles (65 KB in all: three blocks an SM), 8x4 a thread; on
  // sm_90 the pieces landed by bulk copies (span 3), before it by cp.async (span 2).
  const OpKey odd = BmmKey(TensorDesc::Contiguous(f32, {4095, 63, 63}), TensorDesc::Contiguous(f32, {4095, 63, 63}));
  p = default_of(odd, &c);
  EXPECT_EQ(p.at("stage"), 4) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 1) << PointToString(p);
  EXPECT_EQ(p.at("bpb"), 1) << PointToString(p);
  EXPECT_EQ(p.at("span"), 3) << PointToString(p);
  EXPECT_EQ(p.at("tm"), 8) << PointToString(p);
  EXPECT_EQ(p.at("tn"), 4) << PointToString(p);
  EXPECT_EQ(c.launch.grid[0], 3u * 132u);
  {
    DeviceFacts a100 = device;
    a100.arch = 80;
    auto found = FindFamily(odd);
    ASSERT_TRUE(found.ok());
    const Point before = found->family->ExpertDefault(*found->problem, a100);
    EXPECT_EQ(before.at("span"), 2) << PointToString(before);
    EXPECT_EQ(before.at("tm"), 8) << PointToString(before);
  }
  // Tiny matrices: several a block.
  p = default_of(BmmKey(TensorDesc::Contiguous(f32, {65536, 8, 8}), TensorDesc::Contiguous(f32, {65536, 8, 8})));
  EXPECT_GT(p.at("bpb"), 1) << PointToString(p);
  // Odd, transposed, half-type, strided and one-row keys each have a valid default that generates.
  default_of(MmKey(Transposed(f32, 1000, 33), TensorDesc::Contiguous(f32, {33, 777})));
  default_of(BmmKey(TensorDesc::Contiguous(bf16, {3, 33, 40}), TensorDesc::Contiguous(bf16, {3, 40, 24})));
  default_of(MmKey(TensorDesc::Contiguous(f16, {1, 64}), TensorDesc::Contiguous(f16, {64, 1})));
  default_of(MmKey(TensorDesc::Contiguous(f32, {5, 1}), TensorDesc::Contiguous(f32, {1, 7})));
  default_of(MmKey(TensorDesc::Contiguous(f32, {100000, 256}), TensorDesc::Contiguous(f32, {256, 3})));
  // K = 256 with 128x128 tiles: two resident blocks do not fit an SM, so double-buffered slices.
  p = default_of(MmKey(TensorDesc::Contiguous(f32, {8192, 256}), TensorDesc::Contiguous(f32, {256, 8192})));
  EXPECT_EQ(p.at("stage"), 2) << PointToString(p);
  EXPECT_EQ(p.at("bm"), 128) << PointToString(p);
}

TEST(MatmulSpace, TraitsAllowReorderedSumsAndKeepHalfOverflowAway) {
  (void)Families();  // declares the traits
  for (const char* op : {"aten::mm", "aten::bmm"}) {
    const OpTraits t = TraitsFor(op);
    EXPECT_TRUE(t.special_values);
    EXPECT_EQ(t.compare, ComparePolicy::kClose);
    EXPECT_DOUBLE_EQ(t.tolerance_by_dtype.at(DType::kFloat32).rtol, 1e-5);
    EXPECT_EQ(t.no_large_inputs.count(DType::kFloat16), 1u);
    EXPECT_EQ(t.no_large_inputs.count(DType::kFloat32), 0u);
  }
}

}  // namespace matmul_test

}  // namespace
}  // namespace kjit::policy
