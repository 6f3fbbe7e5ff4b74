// The group_norm design space, on CPU: what it declines, the checks that follow the
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

}  // namespace
}  // namespace kjit::policy
