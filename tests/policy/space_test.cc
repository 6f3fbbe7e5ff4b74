// Every op family's design space, on CPU: sample keys match, the expert
// default is valid, invalid points are refused, and the generated kernels
// compile with NVRTC for sm_90: a pairwise cover of each sample key's valid
// points (every value of every knob and every pair of values occurring
// together); KJIT_FULL_SWEEP=1 (scripts/test.sh --full-sweep) compiles every
// valid point.
#include <functional>
#include <sstream>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <map>
#include <set>
#include <thread>

#include "kjit/policy/design_space.h"
#include "kjit/runtime/compiler.h"
#include "kjit/runtime/untrusted_source.h"
#include "space_test_util.h"

namespace kjit::policy {
namespace {

// NVRTC compiles one kernel in 0.1-0.2 s and serialises within a process. CI compiles each sample key's
// pairwise cover (tens to hundreds of points a family); compiling every valid point (up to tens of thousands
// a family, hours on two cores) is KJIT_FULL_SWEEP=1's job: scripts/test.sh --full-sweep, before a change to
// a family's generator lands. KJIT_SPACE_SWEEP=cover (the sanitizer build, which checks kjit's own code, not
// NVRTC's) also keeps InvalidPointsAreRefusedWithAReason from enumerating matmul's cross product.

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
    // Some point is valid and some is not: the cross product is walked only until both are seen (matmul's has
    // 6.2 million points a key, a walk of two minutes in the release build and longer than the time limit
    // under the sanitizers).
    bool seen_valid = f.Check(**problem, f.ExpertDefault(**problem, device), device).ok(), seen_invalid = false;
    ForEachPoint(space, [&](const Point& point) {
      (f.Check(**problem, point, device).ok() ? seen_valid : seen_invalid) = true;
      return !(seen_valid && seen_invalid);
    });
    EXPECT_TRUE(seen_valid) << (*problem)->description;
    EXPECT_TRUE(seen_invalid) << (*problem)->description << ": a space with no invalid point has no rules";
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
    // The cover is chosen from every valid point, so the whole cross product is enumerated: under
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
  const bool all = full;
  total_valid = 0;
  const auto started = std::chrono::steady_clock::now();
  for (const OpKey& key : f.SampleKeys()) {
    auto problem = f.Match(key);
    ASSERT_TRUE(problem.ok());
    const std::vector<Point> valid = ValidPoints(f, **problem, device);
    std::vector<Point> cover;
    if (!all) {
      for (size_t i : PairwiseCoverOf(valid)) cover.push_back(valid[i]);  // not PairwiseCover: one walk, not two
    }
    const std::vector<Point>& points = all ? valid : cover;
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

// The expert default and 4,000 points of each sample key's cross product, drawn by a fixed generator, in one FNV-1a digest per family: a
// valid point's source and launch, an invalid point's reason. A change to the shared code generation or checks
// (policy/src) or a family's move of its CUDA into files shows here as a changed digest, to be explained where
// the golden is updated. (The family tests' OldPointsKeepTheirSources pin what dataset rows depend on; this
// pins a sample of everything, new points and refusals included, without enumerating matmul's large spaces.)
TEST_P(SpaceTest, SampledSourcesArePinned) {
  struct Golden { size_t valid; uint64_t digest; };
  static const std::map<std::string, Golden> kGolden = {
      {"softmax", {842, 0xc1251ba1fb2d17f0ull}},  // #pragma unroll kUnroll (see SoftmaxSpace.OldPoints...)
      {"layer_norm", {9773, 0x7030d53244c0c873ull}},
      {"batch_norm", {12811, 0x4f96d5904f3bc029ull}},  // #pragma unroll kUnroll in kEvalPlaneBody: same PTX
      {"group_norm", {774, 0xb62b0f2d195fa507ull}},
      {"scan", {2470, 0x304fde1d215ce4ddull}},
      {"pool", {6022, 0xc3c5293bdd37783bull}},  // pool.cuh: same PTX (see PoolSpace.OldPoints...)
      {"reduce", {1680, 0x1556f57f907b41fdull}},
      {"depthwise_conv", {6758, 0xe6766e40bd51a5e5ull}},  // depthwise_conv.cuh, macros for the splices: same PTX (245 cover points)
      {"matmul", {154, 0x67d5cc8a00584986ull}},  // the 64x64 f32 bmm's default is stage 5, not the ring (racecheck)
      {"softmax_backward", {6254, 0xb8f7788960fdca47ull}},  // new family (codegen 1)
      {"layer_norm_backward", {11429, 0xaf27a94de9d16d3bull}},  // new family (codegen 1)
      {"group_norm_backward", {8646, 0x6b0e82bb5d5a2ac0ull}},  // new family (codegen 1)
      {"pool_backward", {57513, 0x186ef78743ddb431ull}},  // 3-D avg and max (DIMS3), window_of: the 2-D kernels' PTX unchanged
      {"batch_norm_backward", {13778, 0xbe2522bbf199f8c0ull}},  // new family (codegen 1)
      {"elementwise_chain", {21202, 0x03c84e19e021e944ull}},  // new family (codegen 1); kjit::input in its GELU and SiLU keys
      {"depthwise_conv_backward", {20263, 0x90cb1bc1f6e60fd7ull}},  // new family (codegen 1)
      {"row_chain", {10483, 0x642789f836f7bdc1ull}},  // new family (codegen 1); cumsum keys
  };
  const Family& f = *GetParam();
  const DeviceFacts device = DeviceFacts::H200();
  uint64_t h = kFnvOffset, state = 0x9E3779B97F4A7C15ull;
  size_t valid = 0;
  auto next = [&state] {  // splitmix64: the same draw on every platform
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  for (const OpKey& key : f.SampleKeys()) {
    auto problem = f.Match(key);
    ASSERT_TRUE(problem.ok());
    const Space space = f.MakeSpace(**problem, device);
    auto expert = f.Generate(**problem, f.ExpertDefault(**problem, device), device);
    ASSERT_TRUE(expert.ok()) << expert.status().ToString();
    h = HashCandidate(h, *expert);
    for (int draw = 0; draw < 4000; ++draw) {
      Point point;
      for (const Knob& knob : space.knobs) point[knob.name] = knob.values[next() % knob.values.size()];
      if (Status st = f.Check(**problem, point, device); !st.ok()) {
        h = HashCandidate(h, Candidate{st.ToString(), "", {}, {}, {}});
        continue;
      }
      auto c = f.Generate(**problem, point, device);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      h = HashCandidate(h, *c);
      ++valid;
    }
  }
  std::printf("[ pinned ] {\"%s\", {%zu, 0x%016llxull}},\n", std::string(f.name()).c_str(), valid,
              static_cast<unsigned long long>(h));
  auto it = kGolden.find(std::string(f.name()));
  ASSERT_NE(it, kGolden.end()) << "no golden for " << f.name();
  EXPECT_EQ(valid, it->second.valid);
  EXPECT_EQ(h, it->second.digest) << f.name() << ": a sampled point's source or reason changed";
}

// The op registry (policy/<family>/intercept.inc, gathered into kjit/intercepted_ops.inc) lists what each
// family serves under the family's own name, and nothing of a family that does not exist: the shim intercepts
// exactly the ops the families declare (several overloads of one op, such as prod and prod.dim_int, are one op
// to a family). A chain family may fuse ops another family intercepts (row_chain: elementwise_chain's ops, and the
// reductions, which join chains: KJIT_JOINS_CHAINS): every op a family fuses is intercepted by some family.
TEST(OpRegistry, EachFamilyContributesExactlyItsOps) {
  std::map<std::string, std::set<std::string>> registry, joins;
  std::set<std::string> names, intercepted;
  auto add = [&](const std::string& family, std::string_view name) {
    EXPECT_TRUE(names.insert(std::string(name)).second) << name << " is registered twice";
    registry[family].insert("aten::" + std::string(name.substr(0, name.find('.'))));
    intercepted.insert("aten::" + std::string(name.substr(0, name.find('.'))));
  };
  std::vector<std::string> joined;  // checked once every family's entries are read (the files come in any order)
  auto join = [&](const std::string& family, std::string_view name) {
    joined.emplace_back(name);
    joins[family].insert("aten::" + std::string(name.substr(0, name.find('.'))));
  };
#define KJIT_INTERCEPT(FAMILY, OP, NAME, FILTER, ALL_NUMERICS, FN, SYMBOL, SIGNATURE) add(#FAMILY, NAME);
#define KJIT_JOINS_CHAINS(FAMILY, NAME, OUT) join(#FAMILY, NAME);
#include "kjit/intercepted_ops.inc"
#undef KJIT_JOINS_CHAINS
#undef KJIT_INTERCEPT
  for (const std::string& name : joined) EXPECT_TRUE(names.count(name)) << name << " joins chains but is not intercepted";
  std::set<std::string> families;
  for (const Family* f : Families()) {
    const std::string name(f->name());
    families.insert(name);
    std::set<std::string> own, fused;
    for (const std::string& op : f->ops()) own.insert(op);
    for (const std::string& op : f->chain_ops()) fused.insert(op);  // recorded into chains, not served alone
    for (const std::string& op : own) EXPECT_TRUE(registry[name].count(op)) << name << " serves " << op << ", not intercepted";
    for (const std::string& op : registry[name]) {
      EXPECT_TRUE(own.count(op) || fused.count(op)) << name << " intercepts " << op << ", which it neither serves nor fuses";
    }
    for (const std::string& op : fused) EXPECT_TRUE(intercepted.count(op)) << name << " fuses " << op << ", not intercepted";
    for (const std::string& op : joins[name]) EXPECT_TRUE(fused.count(op)) << name << " joins " << op << " to chains, not fused";
    std::printf("[ registry ] %s: %zu ops\n", name.c_str(), registry[name].size());
  }
  for (const auto& [family, ops] : registry) EXPECT_TRUE(families.count(family)) << "no family " << family;
  for (const auto& [family, ops] : joins) EXPECT_TRUE(families.count(family)) << "no family " << family;
}

// Families() in the positions the families' kjit_family() calls give: the policy's family features, which
// stored checkpoints were trained with. A new family appends; moving one sets every checkpoint aside.
TEST(FamilyRegistry, FamiliesKeepTheirPositions) {
  const std::vector<std::string> expected = {"softmax", "layer_norm", "batch_norm",     "group_norm", "scan",
                                             "pool",    "reduce",     "depthwise_conv", "matmul",     "softmax_backward",
                                             "layer_norm_backward", "group_norm_backward", "pool_backward",
                                             "batch_norm_backward", "elementwise_chain", "depthwise_conv_backward",
                                             "row_chain"};
  std::vector<std::string> names;
  for (const Family* f : Families()) names.emplace_back(f->name());
  ASSERT_GE(names.size(), expected.size()) << "a family is missing from the registry";
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + expected.size()), expected);
}

INSTANTIATE_TEST_SUITE_P(Families, SpaceTest, ::testing::ValuesIn(Families()),
                         [](const ::testing::TestParamInfo<const Family*>& param_info) {
                           return std::string(param_info.param->name());
                         });

}  // namespace
}  // namespace kjit::policy
