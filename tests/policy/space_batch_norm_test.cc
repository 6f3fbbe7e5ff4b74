// The batch_norm (native and cuDNN) design space, on CPU: what it declines, the checks that follow the
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

}  // namespace
}  // namespace kjit::policy
