// Input generation on CUDA tensors, where the evaluator draws them: exact
// layouts, determinism per seed, the value distributions and the sure special
// values, checked on copies brought back to the host.
#include <ATen/ATen.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kjit/evaluator/evaluator.h"
#include "kjit/evaluator/inputs.h"
#include "kjit/torch/call_key.h"

namespace kjit::eval {
namespace {

class InputsGpu : public ::testing::Test {
 protected:
  static inline std::string skip_reason_;
  static void SetUpTestSuite() {
    Status loaded = LoadTorchCuda();
    if (!loaded.ok()) {
      skip_reason_ = loaded.ToString();
      return;
    }
    try {
      if (c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).deviceCount() <= 0) skip_reason_ = "no CUDA device";
    } catch (const std::exception& e) {
      skip_reason_ = std::string("no CUDA in PyTorch: ") + e.what();
    }
  }
  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
  }

  static at::Tensor Make(const TensorDesc& desc, InputKind kind, uint64_t seed) {
    auto t = MakeTensor(desc, c10::Device(c10::kCUDA, 0), kind, seed);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? *t : at::Tensor();
  }
  // The whole storage (holes and the offset included), on the host, as bytes.
  static at::Tensor Bytes(const at::Tensor& t) { return StorageBytes(t).cpu(); }
};

TensorDesc Strided(DType dtype) {
  TensorDesc d;
  d.dtype = dtype;
  d.sizes = {8, 5};
  d.strides = {1, 9};
  d.storage_offset = 2;
  d.alignment = 8;
  return d;
}

const InputKind kKinds[] = {InputKind::kNormal, InputKind::kUniform, InputKind::kLarge, InputKind::kSmall,
                            InputKind::kSpecial};

TEST_F(InputsGpu, ExactLayoutOnTheDevice) {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64, DType::kInt64}) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    const TensorDesc desc = Strided(dtype);
    at::Tensor t = Make(desc, InputKind::kNormal, 3);
    ASSERT_TRUE(t.defined());
    EXPECT_TRUE(t.is_cuda());
    auto got = kjit::torch::DescribeTensor(t);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, desc);
  }
}

TEST_F(InputsGpu, DeterministicPerSeed) {
  for (InputKind kind : kKinds) {
    SCOPED_TRACE(std::string(InputKindName(kind)));
    const TensorDesc desc = Strided(DType::kFloat32);
    EXPECT_TRUE(at::equal(Bytes(Make(desc, kind, 42)), Bytes(Make(desc, kind, 42))));
    EXPECT_FALSE(at::equal(Bytes(Make(desc, kind, 42)), Bytes(Make(desc, kind, 43))));
  }
}

TEST_F(InputsGpu, Distributions) {
  const TensorDesc big = TensorDesc::Contiguous(DType::kFloat32, {1 << 20});
  at::Tensor n = Make(big, InputKind::kNormal, 1).cpu().to(at::kDouble);
  EXPECT_NEAR(n.mean().item<double>(), 0.0, 0.01);
  EXPECT_NEAR(n.std().item<double>(), 1.0, 0.01);
  at::Tensor u = Make(big, InputKind::kUniform, 1).cpu();
  EXPECT_GE(u.min().item<double>(), -1.0);
  EXPECT_LT(u.max().item<double>(), 1.0);
  at::Tensor large = Make(big, InputKind::kLarge, 1).cpu().to(at::kDouble).abs();
  EXPECT_GE(large.min().item<double>(), 8192.0);
  EXPECT_LE(large.max().item<double>(), 1048576.0);
  at::Tensor small = Make(big, InputKind::kSmall, 1).cpu().to(at::kDouble).abs();
  EXPECT_TRUE(small.gt(0).logical_and(small.lt(1.1754943508222875e-38)).any().item<bool>());  // subnormals
}

TEST_F(InputsGpu, SpecialValuesEvenInTinyViews) {
  for (uint64_t seed = 0; seed < 10; ++seed) {
    SCOPED_TRACE(seed);
    at::Tensor t = Make(TensorDesc::Contiguous(DType::kFloat16, {4}), InputKind::kSpecial, seed).cpu().to(at::kFloat);
    EXPECT_TRUE(t.isnan().any().item<bool>());
    EXPECT_TRUE(t.isposinf().any().item<bool>());
    EXPECT_TRUE(t.isneginf().any().item<bool>());
    EXPECT_TRUE(t.eq(0).logical_and(t.signbit()).any().item<bool>());
  }
}

}  // namespace
}  // namespace kjit::eval
