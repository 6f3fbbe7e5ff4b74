// The batch_norm_backward design space, on CPU: what it declines, its checks, its expert defaults and what its
// sources are specialised on (space_test.cc compiles every family's points and pins their sources).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kjit/policy/design_space.h"
#include "space_test_util.h"

namespace kjit::policy {
namespace {

constexpr DType f32 = DType::kFloat32, f16 = DType::kFloat16, bf16 = DType::kBFloat16;

// native_batch_norm_backward(grad_out, input, weight?, running_mean?, running_var?, save_mean, save_invstd,
// train, eps, output_mask): weight (and running statistics) of `param` dtype when `weight`.
OpKey Native(DType dt, std::vector<int64_t> sizes, bool weight, IntList mask, bool train = true, DType param = f32) {
  const int64_t c = sizes[1];
  const Arg w = weight ? Arg(TensorDesc::Contiguous(param, {c})) : Arg(NoneArg{});
  const Arg stats = TensorDesc::Contiguous(f32, {c});
  return OpKey::Single("aten::native_batch_norm_backward", "",
                       {TensorDesc::Contiguous(dt, sizes), TensorDesc::Contiguous(dt, sizes), w, w, w, stats, stats,
                        train, 1e-5, std::move(mask)},
                       90);
}

OpKey Cudnn(DType dt, std::vector<int64_t> sizes) {
  const Arg p = TensorDesc::Contiguous(f32, {sizes[1]});
  return OpKey::Single("aten::cudnn_batch_norm_backward", "",
                       {TensorDesc::Contiguous(dt, sizes), TensorDesc::Contiguous(dt, sizes), p, p, p, p, p, 1e-5,
                        TensorDesc::Contiguous(DType::kUInt8, {0})},
                       90);
}

std::string Reason(const OpKey& key) { return FindFamily(key).status().message(); }

TEST(BatchNormBackwardSpace, DeclinesWhatItCannotServe) {
  EXPECT_TRUE(FindFamily(Native(f32, {32, 64, 56, 56}, true, {1, 1, 1})).ok());
  EXPECT_TRUE(FindFamily(Native(f16, {32, 64, 56, 56}, true, {1, 1, 1}, true, f16)).ok());
  EXPECT_TRUE(FindFamily(Native(bf16, {256, 512}, false, {1, 0, 0})).ok());
  EXPECT_TRUE(FindFamily(Cudnn(f16, {8, 16, 32, 32})).ok());
  // PyTorch refuses cudnn_batch_norm_backward on a bfloat16 input with a float32 weight (seen on the H200).
  EXPECT_NE(FindFamily(Cudnn(bf16, {8, 16, 32, 32})).status().message().find("refuses"), std::string::npos);
  EXPECT_EQ(FindFamily(Native(f32, {4, 8, 5, 5}, true, {1, 1, 1}))->family->name(), "batch_norm_backward");
  EXPECT_NE(Reason(Native(f32, {4, 8, 5, 5}, true, {1, 1, 1}, false)).find("eval-mode"), std::string::npos);
  EXPECT_NE(Reason(Native(DType::kFloat64, {4, 8, 5, 5}, true, {1, 1, 1}, true, DType::kFloat64)).find("not served"),
            std::string::npos);
  EXPECT_NE(Reason(Native(f32, {4, 8, 5, 5}, true, {0, 0, 0})).find("no gradient"), std::string::npos);
  EXPECT_NE(Reason(Native(f32, {4, 8, 5, 5}, true, {1, 2, 1})).find("bool"), std::string::npos);
  EXPECT_NE(Reason(Native(f32, {4, 8, 5, 5}, false, {1, 1, 0})).find("without a weight"), std::string::npos);
  EXPECT_EQ(FindFamily(Native(f32, {0, 8, 5, 5}, true, {1, 1, 1})).status().code(), StatusCode::kNotFound);
  // A float16 input with a bfloat16 weight: neither the input's dtype nor float32.
  EXPECT_NE(Reason(Native(f16, {4, 8, 5, 5}, true, {1, 1, 1}, true, bf16)).find("neither"), std::string::npos);
  // channels_last: PyTorch's NHWC kernels.
  OpKey cl = Native(f32, {4, 8, 5, 5}, true, {1, 1, 1});
  for (int i : {0, 1}) std::get<TensorDesc>(cl.calls[0].args[i]).strides = {200, 1, 40, 8};
  EXPECT_NE(Reason(cl).find("channels_last"), std::string::npos) << Reason(cl);
  // Saved statistics in the input's dtype are not what native_batch_norm returns.
  OpKey half_stats = Native(f16, {4, 8, 5, 5}, true, {1, 1, 1});
  half_stats.calls[0].args[6] = TensorDesc::Contiguous(f16, {8});
  EXPECT_NE(Reason(half_stats).find("float32"), std::string::npos) << Reason(half_stats);
  OpKey no_stats = Native(f32, {4, 8, 5, 5}, true, {1, 1, 1});
  no_stats.calls[0].args[5] = NoneArg{};
  EXPECT_NE(Reason(no_stats).find("save_mean"), std::string::npos) << Reason(no_stats);
  // Mixed parameter dtypes (a float32 weight, float16 running statistics).
  OpKey mixed = Native(f16, {4, 8, 5, 5}, true, {1, 1, 1});
  mixed.calls[0].args[3] = mixed.calls[0].args[4] = TensorDesc::Contiguous(f16, {8});
  EXPECT_NE(Reason(mixed).find("different dtypes"), std::string::npos) << Reason(mixed);
  OpKey cudnn_half_weight = Cudnn(f16, {4, 8, 5, 5});
  cudnn_half_weight.calls[0].args[2] = TensorDesc::Contiguous(f16, {8});
  EXPECT_NE(Reason(cudnn_half_weight).find("float32"), std::string::npos) << Reason(cudnn_half_weight);
}

TEST(BatchNormBackwardSpace, ChecksAndDefaults) {
  const DeviceFacts dev = DeviceFacts::H200();
  auto found = FindFamily(Native(f32, {32, 64, 56, 56}, true, {1, 1, 1}));
  ASSERT_TRUE(found.ok());
  const Family& f = *found->family;
  // 64 channels on 132 SMs: each over a cluster of 8, 16-byte vectors, 512 threads (3136 vectors a block).
  const Point p = f.ExpertDefault(*found->problem, dev);
  EXPECT_EQ(p.at("cluster"), 8) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 4) << PointToString(p);
  EXPECT_EQ(p.at("threads"), 512) << PointToString(p);
  EXPECT_TRUE(f.Check(*found->problem, p, dev).ok());
  EXPECT_FALSE(f.Check(*found->problem, {{"threads", 256}, {"vec", 8}, {"cluster", 1}, {"hint", 0}}, dev).ok());
  DeviceFacts a100 = dev;
  a100.arch = 80;
  EXPECT_FALSE(f.Check(*found->problem, p, a100).ok());  // no clusters before sm_90
  EXPECT_EQ(f.ExpertDefault(*found->problem, a100).at("cluster"), 1);
  auto odd = FindFamily(Native(f32, {3, 7, 17, 19}, false, {1, 0, 0}));
  ASSERT_TRUE(odd.ok());
  const Point po = f.ExpertDefault(*odd->problem, dev);
  EXPECT_EQ(po.at("vec"), 1) << PointToString(po);
  EXPECT_EQ(po.at("threads"), 128) << PointToString(po);
  EXPECT_EQ(po.at("cluster"), 1) << PointToString(po);  // 969 elements a channel: not a pass of two blocks
  EXPECT_FALSE(f.Check(*odd->problem, {{"threads", 128}, {"vec", 2}, {"cluster", 1}, {"hint", 0}}, dev).ok());
  EXPECT_FALSE(f.Check(*odd->problem, {{"threads", 1024}, {"vec", 1}, {"cluster", 1}, {"hint", 0}}, dev).ok());
  auto columns = FindFamily(Native(f16, {2, 32, 8, 12, 12}, true, {0, 1, 1}, true, f16));
  ASSERT_TRUE(columns.ok());
  EXPECT_FALSE(f.Check(*columns->problem, {{"threads", 128}, {"vec", 8}, {"cluster", 1}, {"hint", 1}}, dev).ok());
  EXPECT_TRUE(f.Check(*columns->problem, {{"threads", 128}, {"vec", 8}, {"cluster", 1}, {"hint", 0}}, dev).ok());
}

TEST(BatchNormBackwardSpace, SourcesAreSpecialisedOnTheKernelPyTorchRuns) {
  const DeviceFacts dev = DeviceFacts::H200();
  auto generate = [&](const OpKey& key) {
    auto found = FindFamily(key);
    EXPECT_TRUE(found.ok()) << found.status().ToString();
    auto c = found->family->Generate(*found->problem, found->family->ExpertDefault(*found->problem, dev), dev);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return *c;
  };
  // NCHW: the fused kernel's order, 1 / M in float (M = 32 x 3136 = 100352), a cluster of 8 a channel.
  const Candidate resnet = generate(Native(f16, {32, 64, 56, 56}, true, {1, 1, 1}));
  EXPECT_EQ(resnet.entry_point, "kjit_batch_norm_backward");
  EXPECT_EQ(resnet.launch.grid[0], 64u * 8u);
  EXPECT_EQ(resnet.launch.workspace_bytes, 0u);
  EXPECT_NE(resnet.source.find("typedef __half in_t;\ntypedef in_t out_t;\ntypedef float p_t;"), std::string::npos);
  EXPECT_NE(resnet.source.find("#define DX 1\n#define DW 1\n#define DB 1\n#define FUSED 1"), std::string::npos);
  EXPECT_NE(resnet.source.find("__cluster_dims__(CLUSTER, 1, 1)"), std::string::npos);
  const float norm = 1.0f / 100352.0f;
  uint32_t bits = 0;
  std::memcpy(&bits, &norm, 4);
  EXPECT_NE(resnet.source.find("#define NORM __uint_as_float(" + std::to_string(bits) + "u)"), std::string::npos);
  // [N, C]: PyTorch's channels-last reduce and elementwise kernels, a block a channel.
  const Candidate features = generate(Native(f32, {256, 512}, true, {1, 1, 1}));
  EXPECT_NE(features.source.find("#define FUSED 0"), std::string::npos);
  EXPECT_EQ(features.launch.grid[0], 512u);
  EXPECT_NE(features.source.find("#define KJIT_CLUSTER \n"), std::string::npos);
  // No weight, the input's gradient only.
  const Candidate dx_only = generate(Native(f32, {3, 7, 17, 19}, false, {1, 0, 0}));
  EXPECT_NE(dx_only.source.find("#define HAS_W 0\n#define DX 1\n#define DW 0\n#define DB 0"), std::string::npos);
  // cudnn: the input first, the reserve passed and never read.
  const Candidate cudnn = generate(Cudnn(f16, {8, 128, 28, 28}));
  EXPECT_NE(cudnn.source.find("#define KJIT_PARAMS const in_t* __restrict__ x, const in_t* __restrict__ dy"),
            std::string::npos);
  EXPECT_NE(cudnn.source.find("const unsigned char* __restrict__ reserve, out_t* __restrict__ dx"), std::string::npos);
}

}  // namespace
}  // namespace kjit::policy
