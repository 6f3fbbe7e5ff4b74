// The group_norm_backward design space, on CPU: what it declines, its checks, its expert defaults and what its
// sources are specialised on (space_test.cc compiles every family's points and pins their sources).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kjit/policy/design_space.h"
#include "space_test_util.h"

namespace kjit::policy {
namespace {

constexpr DType f32 = DType::kFloat32, f16 = DType::kFloat16, bf16 = DType::kBFloat16;

OpKey GroupNormBackward(DType dt, std::vector<int64_t> sizes, int64_t groups, bool weight, IntList mask) {
  int64_t hxw = 1;
  for (size_t i = 2; i < sizes.size(); ++i) hxw *= sizes[i];
  const int64_t n = sizes[0], c = sizes[1];
  return OpKey::Single("aten::native_group_norm_backward", "",
                       {TensorDesc::Contiguous(dt, sizes), TensorDesc::Contiguous(dt, sizes),
                        TensorDesc::Contiguous(dt, {n, groups}), TensorDesc::Contiguous(dt, {n, groups}),
                        weight ? Arg(TensorDesc::Contiguous(dt, {c})) : Arg(NoneArg{}), n, c, hxw, groups,
                        std::move(mask)},
                       90);
}

std::string Reason(const OpKey& key) { return FindFamily(key).status().message(); }

TEST(GroupNormBackwardSpace, DeclinesWhatItCannotServe) {
  EXPECT_TRUE(FindFamily(GroupNormBackward(f32, {4, 64, 8, 8}, 8, true, {1, 1, 1})).ok());
  EXPECT_TRUE(FindFamily(GroupNormBackward(bf16, {4, 64, 8, 8}, 8, false, {1, 0, 0})).ok());
  EXPECT_NE(Reason(GroupNormBackward(DType::kFloat64, {4, 64, 8, 8}, 8, true, {1, 1, 1})).find("not served"),
            std::string::npos);
  EXPECT_NE(Reason(GroupNormBackward(f32, {4, 64, 8, 8}, 8, true, {0, 0, 0})).find("no gradient"), std::string::npos);
  // PyTorch allocates both parameter gradients like the weight.
  EXPECT_NE(Reason(GroupNormBackward(f32, {4, 64, 8, 8}, 8, false, {1, 0, 1})).find("without a weight"),
            std::string::npos);
  EXPECT_NE(Reason(GroupNormBackward(f32, {4, 64, 8, 8}, 8, true, {1, 3, 1})).find("bool"), std::string::npos);
  EXPECT_NE(Reason(GroupNormBackward(f32, {4, 64, 8, 8}, 7, true, {1, 1, 1})).find("divide"), std::string::npos);
  // HxW == 1: PyTorch's 1-d formulas.
  EXPECT_NE(Reason(GroupNormBackward(f32, {512, 256}, 16, true, {1, 1, 1})).find("1-d"), std::string::npos);
  EXPECT_EQ(FindFamily(GroupNormBackward(f32, {0, 64, 8, 8}, 8, true, {1, 1, 1})).status().code(),
            StatusCode::kNotFound);
  EXPECT_NE(Reason(GroupNormBackward(f32, {2, 8192, 4, 4}, 1, true, {1, 1, 1})).find("shared memory"),
            std::string::npos);
  OpKey float_stats = GroupNormBackward(f16, {4, 64, 8, 8}, 8, true, {1, 1, 1});
  float_stats.calls[0].args[3] = TensorDesc::Contiguous(f32, {4, 8});
  EXPECT_NE(Reason(float_stats).find("input's dtype"), std::string::npos) << Reason(float_stats);
  OpKey sizes = GroupNormBackward(f32, {4, 64, 8, 8}, 8, true, {1, 1, 1});
  sizes.calls[0].args[7] = int64_t{32};
  EXPECT_NE(Reason(sizes).find("[N, C, *spatial]"), std::string::npos) << Reason(sizes);
}

TEST(GroupNormBackwardSpace, ChecksAndDefaults) {
  const DeviceFacts dev = DeviceFacts::H200();
  auto found = FindFamily(GroupNormBackward(f32, {16, 128, 64, 64}, 32, true, {1, 1, 1}));
  ASSERT_TRUE(found.ok());
  const Family& f = *found->family;
  EXPECT_EQ(f.name(), "group_norm_backward");
  // 4 channels a group: 4 warps, 16-byte vectors.
  const Point p = f.ExpertDefault(*found->problem, dev);
  EXPECT_EQ(p.at("threads"), 128) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 4) << PointToString(p);
  EXPECT_TRUE(f.Check(*found->problem, p, dev).ok());
  EXPECT_FALSE(f.Check(*found->problem, {{"threads", 256}, {"vec", 4}, {"hint", 0}}, dev).ok());  // 8 warps, 4 channels
  EXPECT_FALSE(f.Check(*found->problem, {{"threads", 128}, {"vec", 8}, {"hint", 0}}, dev).ok());  // 32-byte vectors
  auto odd = FindFamily(GroupNormBackward(f32, {3, 30, 17, 19}, 5, false, {1, 0, 0}));
  ASSERT_TRUE(odd.ok());
  EXPECT_EQ(f.ExpertDefault(*odd->problem, dev).at("vec"), 1);
  EXPECT_FALSE(f.Check(*odd->problem, {{"threads", 64}, {"vec", 2}, {"hint", 0}}, dev).ok());  // HxW = 323
  auto columns = FindFamily(GroupNormBackward(bf16, {32, 64, 8, 8}, 4, true, {0, 1, 1}));
  ASSERT_TRUE(columns.ok());
  EXPECT_FALSE(f.Check(*columns->problem, {{"threads", 64}, {"vec", 8}, {"hint", 1}}, dev).ok());  // no second read
  EXPECT_TRUE(f.Check(*columns->problem, {{"threads", 64}, {"vec", 8}, {"hint", 0}}, dev).ok());
}

TEST(GroupNormBackwardSpace, SourcesAreSpecialisedOnTheMaskAndTheSamples) {
  const DeviceFacts dev = DeviceFacts::H200();
  auto generate = [&](const OpKey& key) {
    auto found = FindFamily(key);
    EXPECT_TRUE(found.ok()) << found.status().ToString();
    auto c = found->family->Generate(*found->problem, found->family->ExpertDefault(*found->problem, dev), dev);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return *c;
  };
  const Candidate all = generate(GroupNormBackward(f16, {8, 320, 32, 32}, 32, true, {1, 1, 1}));
  EXPECT_EQ(all.entry_point, "kjit_group_norm_backward");
  EXPECT_EQ(all.launch.grid[0], 8u * 32u);
  // Eight samples' terms meet in the workspace: 32 counters, then two [8, 320] float arrays.
  EXPECT_EQ(all.launch.workspace_bytes, 128u + 2u * 8u * 320u * 4u);
  EXPECT_NE(all.source.find("#define DX 1\n#define DW 1\n#define DB 1\n#define ONE_SAMPLE 0"), std::string::npos);
  const Candidate one = generate(GroupNormBackward(f32, {1, 64, 16, 16}, 64, true, {1, 1, 1}));
  EXPECT_EQ(one.launch.workspace_bytes, 0u);
  EXPECT_NE(one.source.find("unsigned char* ws = nullptr"), std::string::npos);
  const Candidate dx_only = generate(GroupNormBackward(f32, {3, 30, 17, 19}, 5, false, {1, 0, 0}));
  EXPECT_EQ(dx_only.launch.workspace_bytes, 0u);
  EXPECT_NE(dx_only.source.find("#define HAS_W 0"), std::string::npos);
}

}  // namespace
}  // namespace kjit::policy
