// The PyTorch bridge on CPU tensors: keys depend on tensor metadata only, so
// this runs without a GPU and checks what the shim will compute per call.
#include "kjit/torch/call_key.h"

#include <ATen/Context.h>
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/COW.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

namespace kjit::torch {
namespace {

const c10::FunctionSchema& Schema(const char* name, const char* overload) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload).schema();
}

TEST(TorchBridge, DTypesMap) {
  EXPECT_EQ(*DTypeOf(c10::ScalarType::Float), DType::kFloat32);
  EXPECT_EQ(*DTypeOf(c10::ScalarType::BFloat16), DType::kBFloat16);
  EXPECT_EQ(*DTypeOf(c10::ScalarType::Half), DType::kFloat16);
  EXPECT_EQ(*DTypeOf(c10::ScalarType::Long), DType::kInt64);
  EXPECT_EQ(*DTypeOf(c10::ScalarType::Bool), DType::kBool);
  auto q = DTypeOf(c10::ScalarType::QInt8);
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().code(), StatusCode::kInvalidArgument);
}

TEST(TorchBridge, DescribesLayouts) {
  at::Tensor t = at::randn({4, 6});
  auto d = DescribeTensor(t);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->dtype, DType::kFloat32);
  EXPECT_EQ(d->sizes, (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(d->strides, (std::vector<int64_t>{6, 1}));
  EXPECT_EQ(d->alignment, 16);
  EXPECT_TRUE(d->is_contiguous());

  auto tr = DescribeTensor(t.t());
  ASSERT_TRUE(tr.ok());
  EXPECT_EQ(tr->strides, (std::vector<int64_t>{1, 6}));
  EXPECT_FALSE(tr->is_contiguous());

  auto sliced = DescribeTensor(t.narrow(1, 1, 3));  // starts one float in: 4-byte aligned
  ASSERT_TRUE(sliced.ok());
  EXPECT_EQ(sliced->storage_offset, 1);
  EXPECT_EQ(sliced->alignment, 4);

  auto half = DescribeTensor(at::zeros({3, 5}, at::kHalf).narrow(1, 2, 2));
  ASSERT_TRUE(half.ok());
  EXPECT_EQ(half->alignment, 4);

  auto empty = DescribeTensor(at::empty({0, 3}));
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->numel(), 0);
  EXPECT_FALSE(DescribeTensor(at::Tensor()).ok());
}

// The key reads a tensor's first address its own way (call_key.cc, FirstElement): every tensor it
// keys must come out as DescribeTensor (data_ptr()) describes it, alignment above all.
TEST(TorchBridge, KeyedTensorsAreDescribeTensors) {
  std::vector<at::Tensor> tensors;
  for (at::ScalarType type : {at::kFloat, at::kHalf, at::kBFloat16, at::kDouble, at::kChar, at::kLong,
                              at::kFloat8_e4m3fn, at::kUInt16}) {
    const at::Tensor base = at::zeros({40}, at::TensorOptions().dtype(type));
    for (int64_t offset = 0; offset < 17; ++offset) tensors.push_back(base.narrow(0, offset, 20));
    tensors.push_back(base.narrow(0, 5, 0));  // empty, with an offset
    tensors.push_back(base.view({8, 5}).t());
  }
  tensors.push_back(at::empty({0, 3}));
  tensors.push_back(at::randn({4, 6}).as_strided({2, 2}, {1, 7}, 3));
  const c10::FunctionSchema& schema = Schema("aten::_softmax", "");
  for (const at::Tensor& t : tensors) {
    SCOPED_TRACE(t.toString() + " offset " + std::to_string(t.storage_offset()));
    auto described = DescribeTensor(t);
    ASSERT_TRUE(described.ok());
    EXPECT_EQ(described->alignment, TensorDesc::AlignmentOf(reinterpret_cast<uintptr_t>(t.const_data_ptr())));
    std::vector<c10::IValue> args{t, int64_t{-1}, false};
    auto key = CallKey(schema, args, 90, kNumericsDefault);
    ASSERT_TRUE(key.ok()) << key.status().ToString();
    ASSERT_EQ(key->calls.size(), 1u);
    const auto* keyed = std::get_if<TensorDesc>(&key->calls[0].args[0]);
    ASSERT_NE(keyed, nullptr);
    EXPECT_EQ(*keyed, *described);
  }
}

// Describing or keying a copy-on-write tensor (a lazy clone) reads its address only: it stays
// copy-on-write, sharing its source's data, as the user's program left it.
TEST(TorchBridge, DescribingACopyOnWriteTensorLeavesItShared) {
  const at::Tensor source = at::randn({64, 128});
  const at::Tensor lazy = at::_lazy_clone(source);
  ASSERT_TRUE(c10::impl::cow::is_cow_data_ptr(lazy.storage().data_ptr()));
  auto described = DescribeTensor(lazy);
  ASSERT_TRUE(described.ok()) << described.status().ToString();
  std::vector<c10::IValue> args{lazy, int64_t{-1}, false};
  ASSERT_TRUE(CallKey(Schema("aten::_softmax", ""), args, 90, kNumericsDefault).ok());
  EXPECT_TRUE(c10::impl::cow::is_cow_data_ptr(lazy.storage().data_ptr()));
  EXPECT_EQ(lazy.const_data_ptr(), source.const_data_ptr());
}

TEST(TorchBridge, SoftmaxCallKey) {
  at::Tensor x = at::randn({64, 128});
  std::vector<c10::IValue> args{x, int64_t{-1}, false};
  auto key = CallKey(Schema("aten::_softmax", ""), args, 90, kNumericsDefault);
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  EXPECT_EQ(key->ToString(), "aten::_softmax(f32[64,128], -1, False) sm_90");
  const OpKey expected =
      OpKey::Single("aten::_softmax", "", {TensorDesc::Contiguous(DType::kFloat32, {64, 128}), int64_t{-1}, false}, 90);
  EXPECT_EQ(*key, expected);
  EXPECT_EQ(key->Hash(), expected.Hash());

  // The same call on other data of the same layout has the same key.
  std::vector<c10::IValue> again{at::randn({64, 128}), int64_t{-1}, false};
  EXPECT_EQ(CallKey(Schema("aten::_softmax", ""), again, 90, 0)->Hash(), expected.Hash());
  // A transposed input does not.
  std::vector<c10::IValue> transposed{at::randn({128, 64}).t(), int64_t{-1}, false};
  EXPECT_NE(CallKey(Schema("aten::_softmax", ""), transposed, 90, 0)->Hash(), expected.Hash());
}

TEST(TorchBridge, ScalarTypesScalarsStringsAndLists) {
  at::Tensor x = at::randn({8, 16}, at::kBFloat16);
  std::vector<c10::IValue> sum_args{x, c10::IValue(std::vector<int64_t>{1}), true,
                                    c10::IValue(static_cast<int64_t>(c10::ScalarType::Float))};
  auto sum = CallKey(Schema("aten::sum", "dim_IntList"), sum_args, 90, 0);
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();
  EXPECT_EQ(sum->ToString(), "aten::sum.dim_IntList(bf16[8,16], [1], True, dtype=f32) sm_90");

  std::vector<c10::IValue> add_args{x, x, c10::IValue(c10::Scalar(2.5))};
  auto add = CallKey(Schema("aten::add", "Tensor"), add_args, 90, 0);
  ASSERT_TRUE(add.ok()) << add.status().ToString();
  EXPECT_EQ(add->ToString(), "aten::add.Tensor(bf16[8,16], bf16[8,16], 2.5) sm_90");
  add_args[2] = c10::IValue(c10::Scalar(int64_t{2}));
  EXPECT_EQ(CallKey(Schema("aten::add", "Tensor"), add_args, 90, 0)->ToString(),
            "aten::add.Tensor(bf16[8,16], bf16[8,16], 2) sm_90");

  std::vector<c10::IValue> gelu_args{x, c10::IValue(std::string("tanh"))};
  EXPECT_EQ(CallKey(Schema("aten::gelu", ""), gelu_args, 90, 0)->ToString(), "aten::gelu(bf16[8,16], 'tanh') sm_90");

  std::vector<c10::IValue> cat_args{c10::IValue(std::vector<at::Tensor>{at::randn({2, 3}), at::randn({4, 3})}),
                                    int64_t{0}};
  EXPECT_EQ(CallKey(Schema("aten::cat", ""), cat_args, 90, 0)->ToString(), "aten::cat([f32[2,3], f32[4,3]], 0) sm_90");

  std::vector<c10::IValue> ln_args{x, c10::IValue(std::vector<int64_t>{16}), c10::IValue(), c10::IValue(), 1e-5};
  EXPECT_EQ(CallKey(Schema("aten::native_layer_norm", ""), ln_args, 90, 0)->ToString(),
            "aten::native_layer_norm(bf16[8,16], [16], None, None, 1e-05) sm_90");
}

TEST(TorchBridge, DeclinesWhatItCannotKey) {
  std::vector<c10::IValue> empty_args{c10::IValue(std::vector<int64_t>{2, 2}), c10::IValue(), c10::IValue(),
                                      c10::IValue(c10::Device(c10::kCPU)), c10::IValue(), c10::IValue()};
  auto k = CallKey(Schema("aten::empty", "memory_format"), empty_args, 90, 0);
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(k.status().message().find("device"), std::string::npos) << k.status().message();

  std::vector<c10::IValue> too_few{at::randn({2})};
  EXPECT_FALSE(CallKey(Schema("aten::_softmax", ""), too_few, 90, 0).ok());

  std::vector<c10::IValue> quantized{at::quantize_per_tensor(at::randn({4}), 0.1, 0, at::kQInt8), int64_t{0}, false};
  EXPECT_FALSE(CallKey(Schema("aten::_softmax", ""), quantized, 90, 0).ok());
}

TEST(TorchBridge, NumericsFollowTorchSettings) {
  auto& ctx = at::globalContext();
  const bool tf32 = ctx.allowTF32CuBLAS();
  ctx.setAllowTF32CuBLAS(false);
  const uint32_t off = CurrentNumerics();
  EXPECT_EQ(off & kAllowTF32Matmul, 0u);
  ctx.setAllowTF32CuBLAS(true);
  EXPECT_NE(CurrentNumerics() & kAllowTF32Matmul, 0u);
  ctx.setAllowTF32CuBLAS(tf32);
}

// A test process runs under PyTorch's default settings (the tests that flip one restore it).
TEST(TorchBridge, DefaultNumericsAreTorchDefaults) {
  EXPECT_EQ(CurrentNumerics(), kTorchDefaultNumerics);
  EXPECT_EQ(CurrentDeterminismNumerics(), kTorchDefaultNumerics);
}

TEST(TorchBridge, DeterminismNumericsFollowOnlyDeterminism) {
  auto& ctx = at::globalContext();
  const bool tf32 = ctx.allowTF32CuBLAS();
  const bool deterministic = ctx.deterministicAlgorithms();
  const bool warn_only = ctx.deterministicAlgorithmsWarnOnly();
  ctx.setAllowTF32CuBLAS(!tf32);
  EXPECT_EQ(CurrentDeterminismNumerics(), kTorchDefaultNumerics);
  EXPECT_NE(CurrentNumerics(), kTorchDefaultNumerics);
  ctx.setAllowTF32CuBLAS(tf32);
  ctx.setDeterministicAlgorithms(true, false);
  EXPECT_EQ(CurrentDeterminismNumerics(), kTorchDefaultNumerics | kDeterministic);
  ctx.setDeterministicAlgorithms(deterministic, warn_only);
  EXPECT_EQ(CurrentDeterminismNumerics(), kTorchDefaultNumerics);
}

// Every setting CurrentNumerics reads, flipped between two calls, through each API a user has:
// each flip changes the numerics and the call's key, and restoring the setting restores both.
TEST(TorchBridge, NumericsFollowEverySettingFlippedBetweenCalls) {
  auto& ctx = at::globalContext();
  const std::vector<c10::IValue> args{at::empty({8, 64}), int64_t{-1}, false};
  const c10::FunctionSchema& schema = Schema("aten::_softmax", "");
  auto key_now = [&] {
    std::string key;
    EXPECT_TRUE(WriteCallKey(schema, args, 90, CurrentNumerics(), &key).ok());
    return key;
  };
  const uint32_t base = CurrentNumerics();
  const std::string base_key = key_now();
  const bool tf32_cublas = ctx.allowTF32CuBLAS();
  const bool tf32_cudnn = ctx.allowTF32CuDNN();
  const auto fp16 = ctx.allowFP16ReductionCuBLAS();
  const auto bf16 = ctx.allowBF16ReductionCuBLAS();
  const bool det = ctx.deterministicAlgorithms();
  const bool det_warn = ctx.deterministicAlgorithmsWarnOnly();
  auto set_reduction = [](at::CuBLASReductionOption o, auto setter) {
    setter(o == at::CuBLASReductionOption::AllowReducedPrecisionWithSplitK,
           o != at::CuBLASReductionOption::DisallowReducedPrecisionDisallowSplitK);
  };
  struct Flip {
    const char* name;
    uint32_t bit;  // 0: any change
    std::function<void()> set;
    std::function<void()> restore;
  };
  const std::vector<Flip> flips = {
      {"setAllowTF32CuBLAS", kAllowTF32Matmul, [&] { ctx.setAllowTF32CuBLAS(!tf32_cublas); },
       [&] { ctx.setAllowTF32CuBLAS(tf32_cublas); }},
      {"setFloat32MatmulPrecision", 0u, [&] { ctx.setFloat32MatmulPrecision(tf32_cublas ? "highest" : "medium"); },
       [&] { ctx.setFloat32MatmulPrecision(tf32_cublas ? "high" : "highest"); }},
      {"setAllowTF32CuDNN", kAllowTF32Cudnn, [&] { ctx.setAllowTF32CuDNN(!tf32_cudnn); },
       [&] { ctx.setAllowTF32CuDNN(tf32_cudnn); }},
      {"setAllowFP16ReductionCuBLAS", kAllowFP16ReducedReduction,
       [&] {
         ctx.setAllowFP16ReductionCuBLAS(fp16 != at::CuBLASReductionOption::AllowReducedPrecisionWithSplitK);
       },
       [&] { set_reduction(fp16, [&](bool r, bool k) { ctx.setAllowFP16ReductionCuBLAS(r, k); }); }},
      {"setAllowBF16ReductionCuBLAS", kAllowBF16ReducedReduction,
       [&] {
         ctx.setAllowBF16ReductionCuBLAS(bf16 != at::CuBLASReductionOption::AllowReducedPrecisionWithSplitK);
       },
       [&] { set_reduction(bf16, [&](bool r, bool k) { ctx.setAllowBF16ReductionCuBLAS(r, k); }); }},
      {"setDeterministicAlgorithms", kDeterministic, [&] { ctx.setDeterministicAlgorithms(!det, false); },
       [&] { ctx.setDeterministicAlgorithms(det, det_warn); }},
  };
  for (const Flip& f : flips) {
    SCOPED_TRACE(f.name);
    f.set();
    const uint32_t flipped = CurrentNumerics();
    if (f.bit != 0) {
      EXPECT_EQ(flipped ^ base, f.bit);
    } else {
      EXPECT_NE(flipped, base);
    }
    EXPECT_NE(key_now(), base_key);
    f.restore();
    EXPECT_EQ(CurrentNumerics(), base);
    EXPECT_EQ(key_now(), base_key);
  }
}

// CurrentNumerics does not ask for kAllowBF16Matmul (call_key.cc): this PyTorch's
// float32Precision(CUDA, MATMUL) must never answer BF16, whatever the fp32 precision table holds.
// Every state the setters accept, for the entries that lookup falls back through.
TEST(TorchBridge, NumericsNeverAllowBF16Matmul) {
  using at::Float32Backend;
  using at::Float32Op;
  using at::Float32Precision;
  auto& ctx = at::globalContext();
  const auto generic = ctx.float32Precision(Float32Backend::GENERIC, Float32Op::ALL);
  // The CUDA entries as stored: float32Precision would resolve their fallbacks. Restored below by
  // the legacy setter, which sets both the entry and the legacy flag the getters compare it with.
  const bool tf32_cublas = ctx.allowTF32CuBLAS();
  EXPECT_THROW(ctx.setFloat32Precision(Float32Backend::CUDA, Float32Op::MATMUL, Float32Precision::BF16), c10::Error);
  EXPECT_THROW(ctx.setFloat32Precision(Float32Backend::CUDA, Float32Op::ALL, Float32Precision::BF16), c10::Error);
  const Float32Precision all[] = {Float32Precision::NONE, Float32Precision::IEEE, Float32Precision::TF32,
                                  Float32Precision::BF16};
  for (Float32Precision g : all) {
    ctx.setFloat32Precision(Float32Backend::GENERIC, Float32Op::ALL, g);
    for (Float32Precision cuda_all : all) {
      if (cuda_all == Float32Precision::BF16) continue;  // refused (above)
      ctx.setFloat32Precision(Float32Backend::CUDA, Float32Op::ALL, cuda_all);
      for (Float32Precision cuda_matmul : all) {
        if (cuda_matmul == Float32Precision::BF16) continue;
        ctx.setFloat32Precision(Float32Backend::CUDA, Float32Op::MATMUL, cuda_matmul);
        EXPECT_NE(ctx.float32Precision(Float32Backend::CUDA, Float32Op::MATMUL), Float32Precision::BF16)
            << static_cast<int>(g) << " " << static_cast<int>(cuda_all) << " " << static_cast<int>(cuda_matmul);
      }
    }
  }
  ctx.setFloat32Precision(Float32Backend::GENERIC, Float32Op::ALL, generic);
  ctx.setFloat32Precision(Float32Backend::CUDA, Float32Op::ALL, Float32Precision::NONE);
  ctx.setAllowTF32CuBLAS(tf32_cublas);
  EXPECT_EQ(ctx.allowTF32CuBLAS(), tf32_cublas);
}

}  // namespace
}  // namespace kjit::torch
