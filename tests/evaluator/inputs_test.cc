// Input generation on CPU tensors: exact layouts, determinism, the value
// distributions, and boxed calls of real aten ops through the dispatcher with
// the arguments MakeArguments builds (the worker does the same on CUDA tensors).
#include "kjit/evaluator/inputs.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "kjit/evaluator/compare.h"
#include "kjit/torch/call_key.h"

namespace kjit::eval {
namespace {

const c10::Device kCpu(c10::kCPU);

TensorDesc Desc(DType dtype, std::vector<int64_t> sizes, std::vector<int64_t> strides, int64_t offset = 0,
                uint8_t alignment = 16) {
  TensorDesc d;
  d.dtype = dtype;
  d.sizes = std::move(sizes);
  d.strides = std::move(strides);
  d.storage_offset = offset;
  d.alignment = alignment;
  return d;
}

at::Tensor Make(const TensorDesc& desc, InputKind kind = InputKind::kNormal, uint64_t seed = 1,
                const IntDomain* domain = nullptr) {
  auto t = MakeTensor(desc, kCpu, kind, seed, domain);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : at::Tensor();
}

// Every byte of a tensor's storage, in the CPU.
std::vector<uint8_t> StorageBytes(const at::Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.storage().data());
  return std::vector<uint8_t>(p, p + t.storage().nbytes());
}

void ExpectLayout(const TensorDesc& desc) {
  SCOPED_TRACE(OpKey::Single("x", "", {desc}, 0).ToString() + " alignment " + std::to_string(desc.alignment));
  at::Tensor t = Make(desc);
  ASSERT_TRUE(t.defined());
  auto got = kjit::torch::DescribeTensor(t);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, desc);
  EXPECT_EQ(t.device(), kCpu);
  int64_t extent = desc.storage_offset;
  if (desc.numel() > 0) {
    extent += 1;
    for (size_t i = 0; i < desc.sizes.size(); ++i) extent += (desc.sizes[i] - 1) * desc.strides[i];
  }
  EXPECT_EQ(static_cast<int64_t>(t.storage().nbytes()), extent * static_cast<int64_t>(DTypeSize(desc.dtype)));
}

TEST(MakeTensor, ExactLayouts) {
  ExpectLayout(TensorDesc::Contiguous(DType::kFloat32, {4, 6}));
  ExpectLayout(Desc(DType::kFloat32, {6, 4}, {1, 6}));             // transposed
  ExpectLayout(Desc(DType::kFloat16, {4, 6}, {0, 1}));             // expanded rows
  ExpectLayout(Desc(DType::kFloat32, {3, 1, 5}, {0, 7, 0}));       // expanded scalar-ish
  ExpectLayout(Desc(DType::kFloat32, {4, 3}, {6, 1}, 3, 4));       // a slice: offset and holes
  ExpectLayout(Desc(DType::kBFloat16, {2, 3, 4}, {1, 8, 2}, 5, 2));  // permuted with gaps
  ExpectLayout(Desc(DType::kFloat64, {}, {}, 7, 8));               // 0-dim with an offset
  ExpectLayout(Desc(DType::kInt64, {5}, {3}, 1, 8));
  ExpectLayout(Desc(DType::kBool, {7, 3}, {1, 7}, 3, 1));
  ExpectLayout(Desc(DType::kUInt8, {9}, {1}, 0, 1));
  ExpectLayout(Desc(DType::kInt32, {2, 2}, {1, 1}));  // overlapping
  // Empty tensors: no data pointer, so alignment reads as 16.
  ExpectLayout(TensorDesc::Contiguous(DType::kFloat32, {0, 3}));
  ExpectLayout(Desc(DType::kFloat16, {4, 0}, {1, 4}, 9));
}

TEST(MakeTensor, EveryAlignment) {
  for (DType dtype : {DType::kFloat16, DType::kFloat32, DType::kBFloat16, DType::kFloat64, DType::kInt8}) {
    for (uint8_t alignment : {1, 2, 4, 8, 16}) {
      for (int64_t offset : {0, 1, 3}) {
        ExpectLayout(Desc(dtype, {3, 5}, {5, 1}, offset, alignment));
        ExpectLayout(Desc(dtype, {5, 3}, {1, 5}, offset, alignment));
      }
    }
  }
}

TEST(MakeTensor, RejectsBadDescriptors) {
  const auto bad = [](const TensorDesc& d) {
    auto t = MakeTensor(d, kCpu, InputKind::kNormal, 1);
    return !t.ok() && t.status().code() == StatusCode::kInvalidArgument;
  };
  EXPECT_TRUE(bad(Desc(DType::kFloat32, {2, 3}, {3})));
  EXPECT_TRUE(bad(Desc(DType::kFloat32, {2, -3}, {3, 1})));
  EXPECT_TRUE(bad(Desc(DType::kFloat32, {2, 3}, {-3, 1})));
  EXPECT_TRUE(bad(Desc(DType::kFloat32, {2, 3}, {3, 1}, -1)));
  EXPECT_TRUE(bad(Desc(DType::kFloat32, {2, 3}, {3, 1}, 0, 3)));
  EXPECT_TRUE(bad(Desc(DType::kFloat32, {2, 3}, {3, 1}, 0, 32)));
  EXPECT_TRUE(bad(Desc(DType::kFloat32, {int64_t{1} << 40, int64_t{1} << 40}, {int64_t{1} << 40, 1})));
  EXPECT_TRUE(bad(TensorDesc::Contiguous(DType::kComplex64, {4})));
  EXPECT_TRUE(bad(TensorDesc::Contiguous(DType::kFloat8E4M3FN, {4})));
}

TEST(MakeTensor, DeterministicPerSeed) {
  // Holes and an offset: the bytes outside the view must be reproducible too.
  const TensorDesc desc = Desc(DType::kFloat32, {8, 5}, {1, 9}, 2, 8);
  for (InputKind kind : {InputKind::kNormal, InputKind::kUniform, InputKind::kLarge, InputKind::kSmall,
                         InputKind::kSpecial, InputKind::kStructured, InputKind::kConstant, InputKind::kNaN,
                         InputKind::kTies}) {
    SCOPED_TRACE(std::string(InputKindName(kind)));
    EXPECT_EQ(StorageBytes(Make(desc, kind, 42)), StorageBytes(Make(desc, kind, 42)));
    EXPECT_NE(StorageBytes(Make(desc, kind, 42)), StorageBytes(Make(desc, kind, 43)));
  }
  const TensorDesc ints = TensorDesc::Contiguous(DType::kInt64, {64});
  EXPECT_EQ(StorageBytes(Make(ints, InputKind::kNormal, 7)), StorageBytes(Make(ints, InputKind::kNormal, 7)));
  EXPECT_NE(StorageBytes(Make(ints, InputKind::kNormal, 7)), StorageBytes(Make(ints, InputKind::kNormal, 8)));
  // The layout changes where values land, not which values the storage holds.
  at::Tensor a = Make(TensorDesc::Contiguous(DType::kFloat32, {40}), InputKind::kNormal, 5);
  at::Tensor b = Make(Desc(DType::kFloat32, {8, 5}, {1, 8}, 0, 4), InputKind::kNormal, 5);
  EXPECT_EQ(StorageBytes(a), StorageBytes(b));
}

TEST(MakeTensor, KindNames) {
  EXPECT_EQ(InputKindName(InputKind::kNormal), "normal");
  EXPECT_EQ(InputKindName(InputKind::kUniform), "uniform");
  EXPECT_EQ(InputKindName(InputKind::kLarge), "large");
  EXPECT_EQ(InputKindName(InputKind::kSmall), "small");
  EXPECT_EQ(InputKindName(InputKind::kSpecial), "special");
  EXPECT_EQ(InputKindName(InputKind::kStructured), "structured");
  EXPECT_EQ(InputKindName(InputKind::kConstant), "constant");
  EXPECT_EQ(InputKindName(InputKind::kNaN), "nan");
  EXPECT_EQ(InputKindName(InputKind::kTies), "ties");
}

TEST(MakeTensor, NormalAndUniform) {
  at::Tensor n = Make(TensorDesc::Contiguous(DType::kFloat32, {100, 100}), InputKind::kNormal);
  EXPECT_NEAR(n.mean().item<double>(), 0.0, 0.05);
  EXPECT_NEAR(n.std().item<double>(), 1.0, 0.05);
  at::Tensor u = Make(TensorDesc::Contiguous(DType::kFloat64, {10000}), InputKind::kUniform);
  EXPECT_GE(u.min().item<double>(), -1.0);
  EXPECT_LT(u.max().item<double>(), 1.0);
  EXPECT_LT(u.min().item<double>(), -0.99);
  EXPECT_GT(u.max().item<double>(), 0.99);
}

TEST(MakeTensor, LargeIsLargeAndFinite) {
  struct Case {
    DType dtype;
    double low, high;
  };
  for (Case c : {Case{DType::kFloat16, 1024, 16384}, Case{DType::kBFloat16, 8192, 1048576},
                 Case{DType::kFloat32, 8192, 1048576}, Case{DType::kFloat64, 1048576, 1099511627776.0}}) {
    SCOPED_TRACE(std::string(DTypeName(c.dtype)));
    at::Tensor t = Make(TensorDesc::Contiguous(c.dtype, {4096}), InputKind::kLarge).to(at::kDouble);
    EXPECT_TRUE(t.isfinite().all().item<bool>());
    EXPECT_GE(t.abs().min().item<double>(), c.low);
    EXPECT_LE(t.abs().max().item<double>(), c.high);
    EXPECT_GT(t.abs().max().item<double>(), c.high / 2);
    EXPECT_TRUE(t.lt(0).any().item<bool>());
    EXPECT_TRUE(t.gt(0).any().item<bool>());
  }
  // The float16 range keeps any sum of two elements finite.
  at::Tensor h = Make(TensorDesc::Contiguous(DType::kFloat16, {4096}), InputKind::kLarge);
  EXPECT_TRUE((h.abs() + h.abs().max()).isfinite().all().item<bool>());
}

TEST(MakeTensor, SmallIncludesSubnormals) {
  at::Tensor f = Make(TensorDesc::Contiguous(DType::kFloat32, {4096}), InputKind::kSmall);
  at::Tensor mag = f.abs();
  EXPECT_TRUE(mag.gt(0).logical_and(mag.lt(FLT_MIN)).any().item<bool>());  // subnormal
  EXPECT_TRUE(mag.ge(FLT_MIN).any().item<bool>());                         // and normal
  EXPECT_LT(mag.max().item<double>(), 1e-30);
  EXPECT_TRUE(f.lt(0).any().item<bool>());

  at::Tensor d = Make(TensorDesc::Contiguous(DType::kFloat64, {4096}), InputKind::kSmall);
  at::Tensor dm = d.abs();
  EXPECT_TRUE(dm.gt(0).logical_and(dm.lt(DBL_MIN)).any().item<bool>());
  EXPECT_LT(dm.max().item<double>(), 1e-290);

  at::Tensor h = Make(TensorDesc::Contiguous(DType::kFloat16, {4096}), InputKind::kSmall).to(at::kFloat).abs();
  EXPECT_TRUE(h.gt(0).logical_and(h.lt(6.103515625e-05)).any().item<bool>());  // below float16's least normal
  EXPECT_LT(h.max().item<double>(), 0.01);

  at::Tensor b = Make(TensorDesc::Contiguous(DType::kBFloat16, {4096}), InputKind::kSmall).to(at::kFloat).abs();
  EXPECT_TRUE(b.gt(0).logical_and(b.lt(FLT_MIN)).any().item<bool>());
}

bool HasNegativeZero(const at::Tensor& t) {
  return t.eq(0).logical_and(t.signbit()).any().item<bool>();
}

void ExpectSpecials(const at::Tensor& t) {
  EXPECT_TRUE(t.isnan().any().item<bool>());
  EXPECT_TRUE(t.isposinf().any().item<bool>());
  EXPECT_TRUE(t.isneginf().any().item<bool>());
  EXPECT_TRUE(HasNegativeZero(t));
}

// Ties and outliers: every value a multiple of 1/4, at most 2 in magnitude except the first of each run of the
// innermost dim (64 times a nonzero one); rows hold repeated maxima; exactly representable in every float type.
TEST(MakeTensor, StructuredHasTiesAndOutliers) {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    at::Tensor t = Make(TensorDesc::Contiguous(dtype, {16, 100}), InputKind::kStructured).to(at::kDouble);
    EXPECT_TRUE(t.mul(4).eq(t.mul(4).round()).all().item<bool>()) << "multiples of 1/4";
    at::Tensor first = t.select(1, 0), rest = t.narrow(1, 1, 99);
    EXPECT_TRUE(rest.abs().le(2).all().item<bool>());
    EXPECT_TRUE(first.abs().ge(16).all().item<bool>()) << "an outlier heads every row";
    EXPECT_TRUE(first.abs().le(128).all().item<bool>());
    // Ties: each row's largest ordinary value appears more than once in most rows.
    const at::Tensor row_max = std::get<0>(rest.max(1, true));
    EXPECT_GT(rest.eq(row_max).sum(1).gt(1).sum().item<int64_t>(), 8);
  }
  // The run follows the dim of stride 1: a transposed view's rows are its storage columns.
  at::Tensor tr = Make(Desc(DType::kFloat32, {100, 16}, {1, 100}), InputKind::kStructured).to(at::kDouble);
  EXPECT_TRUE(tr.select(0, 0).abs().ge(16).all().item<bool>());
  EXPECT_TRUE(tr.narrow(0, 1, 99).abs().le(2).all().item<bool>());
}

// kStructured's ties without its outliers (for keys that take no large values): multiples of 1/4 within [-2, 2]
// everywhere, repeated maxima kept.
TEST(MakeTensor, TiesHaveNoOutliers) {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16, DType::kFloat32}) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    at::Tensor t = Make(TensorDesc::Contiguous(dtype, {16, 100}), InputKind::kTies).to(at::kDouble);
    EXPECT_TRUE(t.mul(4).eq(t.mul(4).round()).all().item<bool>()) << "multiples of 1/4";
    EXPECT_TRUE(t.abs().le(2).all().item<bool>()) << "no outlier";
    const at::Tensor row_max = std::get<0>(t.max(1, true));
    EXPECT_GT(t.eq(row_max).sum(1).gt(1).sum().item<int64_t>(), 8);
  }
}

TEST(MakeTensor, SpecialValues) {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    at::Tensor t = Make(TensorDesc::Contiguous(dtype, {64, 64}), InputKind::kSpecial).to(at::kDouble);
    ExpectSpecials(t);
    // Mostly ordinary values.
    EXPECT_GT(t.isfinite().logical_and(t.ne(0)).sum().item<int64_t>(), 64 * 64 * 3 / 4);
  }
  // Every special value even in four-element views, wherever their elements lie.
  for (uint64_t seed = 0; seed < 20; ++seed) {
    ExpectSpecials(Make(TensorDesc::Contiguous(DType::kFloat32, {4}), InputKind::kSpecial, seed));
    ExpectSpecials(Make(Desc(DType::kFloat32, {2, 2}, {1, 50}, 7, 4), InputKind::kSpecial, seed));
    ExpectSpecials(Make(Desc(DType::kFloat16, {3, 4, 2}, {0, 1, 100}), InputKind::kSpecial, seed));
  }
}

// One row of the special set is -Inf throughout (a softmax row with nothing but -Inf), wherever the storage
// has six rows or more; the scattered specials stay, even in the smallest views.
TEST(MakeTensor, SpecialValuesHoldARowOfNegativeInfinity) {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    for (uint64_t seed = 0; seed < 10; ++seed) {
      at::Tensor t = Make(TensorDesc::Contiguous(dtype, {8, 33}), InputKind::kSpecial, seed).to(at::kDouble);
      ExpectSpecials(t);
      EXPECT_EQ(t.isneginf().all(1).sum().item<int64_t>(), 1) << "seed " << seed;
    }
  }
  // Rows follow the dim of stride 1, and a piece boundary inside the row leaves it whole.
  const TensorDesc transposed = Desc(DType::kFloat32, {40, 8}, {1, 40});
  auto whole = MakeTensor(transposed, kCpu, InputKind::kSpecial, 3);
  auto pieces = MakeTensor(transposed, kCpu, InputKind::kSpecial, 3, nullptr, 7);
  ASSERT_TRUE(whole.ok() && pieces.ok());
  EXPECT_EQ(whole->isneginf().all(0).sum().item<int64_t>(), 1);
  EXPECT_EQ(pieces->isneginf().all(0).sum().item<int64_t>(), 1);
  // Fewer than six rows: none.
  at::Tensor small = Make(TensorDesc::Contiguous(DType::kFloat32, {5, 64}), InputKind::kSpecial).to(at::kDouble);
  EXPECT_EQ(small.isneginf().all(1).sum().item<int64_t>(), 0);
}

// The constant set: one value per tensor, in every element (outside the view too), of the documented form.
TEST(MakeTensor, ConstantHoldsOneValuePerTensor) {
  std::set<double> seen;
  for (DType dtype : {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    for (uint64_t seed = 0; seed < 20; ++seed) {
      auto t = MakeTensor(Desc(dtype, {6, 7}, {1, 9}, 3, 4), kCpu, InputKind::kConstant, seed, nullptr, 5);
      ASSERT_TRUE(t.ok());
      const at::Tensor v = t->to(at::kDouble);
      const double c = v.flatten()[0].item<double>();
      EXPECT_TRUE(v.eq(c).all().item<bool>());
      EXPECT_GE(std::abs(c), 1.0);
      EXPECT_LE(std::abs(c), 4.75);
      EXPECT_EQ(c * 4, std::round(c * 4)) << "a multiple of 1/4";
      seen.insert(c);
    }
  }
  EXPECT_GT(seen.size(), 8u) << "drawn per tensor, both signs";
  EXPECT_TRUE(std::any_of(seen.begin(), seen.end(), [](double c) { return c < 0; }));
}

// The NaN set: NaN and -0.0 even in two-element views, and never an Inf.
TEST(MakeTensor, NaNSetHasNaNAndNegativeZeroButNoInf) {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    at::Tensor t = Make(TensorDesc::Contiguous(dtype, {64, 64}), InputKind::kNaN).to(at::kDouble);
    EXPECT_TRUE(t.isnan().any().item<bool>());
    EXPECT_TRUE(HasNegativeZero(t));
    EXPECT_FALSE(t.isinf().any().item<bool>());
    EXPECT_GT(t.isfinite().logical_and(t.ne(0)).sum().item<int64_t>(), 64 * 64 * 7 / 8);
  }
  for (uint64_t seed = 0; seed < 20; ++seed) {
    at::Tensor t = Make(Desc(DType::kFloat32, {2}, {50}, 7, 4), InputKind::kNaN, seed);
    EXPECT_TRUE(t.isnan().any().item<bool>()) << "seed " << seed;
    EXPECT_TRUE(HasNegativeZero(t)) << "seed " << seed;
  }
}

// Values are drawn a piece at a time, so that drawing a tensor of billions of
// elements takes bounded temporary memory: a tensor of one piece gets exactly
// the values of one drawn whole; one of several is as reproducible, and of the
// kind asked for, with each special value somewhere.
TEST(MakeTensor, DrawnInPieces) {
  const TensorDesc desc = Desc(DType::kFloat32, {8, 5}, {1, 9}, 2, 8);  // 2 + 7 + 36 + 1 = 46 storage elements
  for (InputKind kind : {InputKind::kNormal, InputKind::kUniform, InputKind::kLarge, InputKind::kSmall,
                         InputKind::kSpecial, InputKind::kConstant, InputKind::kNaN}) {
    SCOPED_TRACE(std::string(InputKindName(kind)));
    auto whole = MakeTensor(desc, kCpu, kind, 42, nullptr, 46);
    auto default_pieces = MakeTensor(desc, kCpu, kind, 42);
    auto pieces = MakeTensor(desc, kCpu, kind, 42, nullptr, 5);
    auto again = MakeTensor(desc, kCpu, kind, 42, nullptr, 5);
    ASSERT_TRUE(whole.ok() && default_pieces.ok() && pieces.ok() && again.ok());
    EXPECT_EQ(StorageBytes(*whole), StorageBytes(*default_pieces));
    EXPECT_EQ(StorageBytes(*pieces), StorageBytes(*again));
    EXPECT_EQ(kjit::torch::DescribeTensor(*pieces).value(), desc);
    const at::Tensor v = pieces->to(at::kDouble);
    if (kind == InputKind::kLarge) {
      EXPECT_GE(v.abs().min().item<double>(), std::ldexp(1.0, 13));
      EXPECT_TRUE(v.isfinite().all().item<bool>());
    }
    if (kind == InputKind::kUniform) {
      EXPECT_LE(v.abs().max().item<double>(), 1.0);
    }
  }
  for (uint64_t seed = 0; seed < 20; ++seed) {
    auto special = MakeTensor(Desc(DType::kFloat32, {2, 2}, {1, 50}, 7, 4), kCpu, InputKind::kSpecial, seed, nullptr, 3);
    ASSERT_TRUE(special.ok());
    ExpectSpecials(*special);
  }
  const IntDomain domain{0, 3};
  auto ints = MakeTensor(TensorDesc::Contiguous(DType::kInt32, {100}), kCpu, InputKind::kNormal, 1, &domain, 7);
  ASSERT_TRUE(ints.ok());
  EXPECT_EQ(ints->min().item<int64_t>(), 0);
  EXPECT_EQ(ints->max().item<int64_t>(), 2);
  // A domain that does not fit the dtype is refused even where the tensor is empty.
  const IntDomain too_wide{0, 1000};
  EXPECT_FALSE(MakeTensor(TensorDesc::Contiguous(DType::kInt8, {0}), kCpu, InputKind::kNormal, 1, &too_wide).ok());
}

// On the meta device: the key's layout, no values and no memory (for learning outputs' sizes).
TEST(MakeTensor, MetaHasTheLayoutOnly) {
  const TensorDesc desc = Desc(DType::kBFloat16, {1 << 20, 1 << 14}, {1 << 14, 1}, 3, 16);  // 32 GiB
  auto t = MakeTensor(desc, c10::Device(c10::kMeta), InputKind::kLarge, 1);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(t->is_meta());
  EXPECT_EQ(t->sizes(), at::IntArrayRef(desc.sizes));
  EXPECT_EQ(t->strides(), at::IntArrayRef(desc.strides));
  EXPECT_EQ(t->storage_offset(), 3);
  EXPECT_EQ(t->scalar_type(), at::kBFloat16);
  EXPECT_EQ(static_cast<int64_t>(t->storage().nbytes()), ((int64_t{1} << 34) + 3) * 2);
}

TEST(MakeTensor, IntegerDomains) {
  at::Tensor i = Make(TensorDesc::Contiguous(DType::kInt64, {4096}));
  EXPECT_EQ(i.min().item<int64_t>(), -8);
  EXPECT_EQ(i.max().item<int64_t>(), 7);
  at::Tensor u = Make(TensorDesc::Contiguous(DType::kUInt8, {4096}), InputKind::kSpecial);
  EXPECT_EQ(u.min().item<int64_t>(), 0);
  EXPECT_EQ(u.max().item<int64_t>(), 15);
  at::Tensor b = Make(TensorDesc::Contiguous(DType::kBool, {4096}));
  EXPECT_TRUE(b.any().item<bool>());
  EXPECT_FALSE(b.all().item<bool>());
  for (DType dtype : {DType::kInt8, DType::kInt16, DType::kInt32, DType::kUInt16, DType::kUInt32, DType::kUInt64}) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    const IntDomain domain{3, 7};
    at::Tensor t = Make(TensorDesc::Contiguous(dtype, {1000}), InputKind::kNormal, 3, &domain);
    ASSERT_TRUE(t.defined());
    auto wide = t.to(at::kLong);
    EXPECT_EQ(wide.min().item<int64_t>(), 3);
    EXPECT_EQ(wide.max().item<int64_t>(), 6);
  }
  const IntDomain negative{-1, 4};
  EXPECT_FALSE(MakeTensor(TensorDesc::Contiguous(DType::kUInt8, {4}), kCpu, InputKind::kNormal, 1, &negative).ok());
  const IntDomain empty{4, 4};
  EXPECT_FALSE(MakeTensor(TensorDesc::Contiguous(DType::kInt32, {4}), kCpu, InputKind::kNormal, 1, &empty).ok());
  // An empty domain is fine for a tensor with no elements (indices into an empty dim).
  EXPECT_TRUE(MakeTensor(TensorDesc::Contiguous(DType::kInt64, {0, 4}), kCpu, InputKind::kNormal, 1, &empty).ok());
  const IntDomain wide{0, 300};
  EXPECT_FALSE(MakeTensor(TensorDesc::Contiguous(DType::kInt8, {4}), kCpu, InputKind::kNormal, 1, &wide).ok());
}

// --- MakeArguments with real schemas, called boxed through the dispatcher.

struct Built {
  c10::FunctionSchema schema;
  std::vector<c10::IValue> args;
};

Built Build(const OpCall& call, const OpTraits& traits = DefaultOpTraits(), InputKind kind = InputKind::kNormal,
            uint64_t seed = 11) {
  auto schema = FindSchema(call);
  EXPECT_TRUE(schema.ok()) << schema.status().ToString();
  if (!schema.ok()) return {c10::FunctionSchema("", "", {}, {}), {}};
  auto args = MakeArguments(*schema, call, traits, kCpu, kind, seed);
  EXPECT_TRUE(args.ok()) << args.status().ToString();
  // MakeArguments inverts CallKey: the arguments key back to the call.
  if (args.ok()) {
    auto key = kjit::torch::CallKey(*schema, *args, 90, kNumericsDefault);
    EXPECT_TRUE(key.ok()) << key.status().ToString();
    if (key.ok()) {
      EXPECT_EQ(*key, OpKey::Single(call.op, call.overload, call.args, 90));
    }
  }
  return {*schema, args.ok() ? *args : std::vector<c10::IValue>{}};
}

std::vector<c10::IValue> CallBoxed(const OpCall& call, const std::vector<c10::IValue>& args) {
  auto op = c10::Dispatcher::singleton().findSchemaOrThrow(call.op.c_str(), call.overload.c_str());
  std::vector<c10::IValue> stack(args.begin(), args.end());
  op.callBoxed(&stack);
  return stack;
}

void ExpectSame(const c10::IValue& got, const at::Tensor& want) {
  ASSERT_TRUE(got.isTensor());
  EXPECT_TRUE(BitwiseEqual(got.toTensor(), want)) << Compare(got.toTensor(), want, {0, 0, true}).reason;
}

TEST(MakeArguments, Softmax) {
  const OpCall call{"aten::_softmax", "", {TensorDesc::Contiguous(DType::kFloat32, {8, 32}), int64_t{-1}, false}};
  Built b = Build(call);
  ASSERT_EQ(b.args.size(), 3u);
  auto out = CallBoxed(call, b.args);
  ASSERT_EQ(out.size(), 1u);
  ExpectSame(out[0], at::_softmax(b.args[0].toTensor(), -1, false));
}

TEST(MakeArguments, SumDimIntList) {
  const OpCall call{"aten::sum",
                    "dim_IntList",
                    {Desc(DType::kFloat32, {4, 5, 6}, {1, 4, 20}, 0, 16), IntList{1}, true, NoneArg{}}};
  Built b = Build(call);
  ASSERT_EQ(b.args.size(), 4u);
  EXPECT_TRUE(b.args[3].isNone());
  auto out = CallBoxed(call, b.args);
  ExpectSame(out[0], at::sum(b.args[0].toTensor(), {1}, true));
  EXPECT_EQ(out[0].toTensor().sizes(), (std::vector<int64_t>{4, 1, 6}));

  // With a dtype: a ScalarType argument.
  const OpCall typed{"aten::sum", "dim_IntList",
                     {TensorDesc::Contiguous(DType::kFloat16, {4, 6}), IntList{0, 1}, false, DType::kFloat32}};
  Built bt = Build(typed);
  auto out2 = CallBoxed(typed, bt.args);
  EXPECT_EQ(out2[0].toTensor().scalar_type(), at::kFloat);
  ExpectSame(out2[0], at::sum(bt.args[0].toTensor(), at::IntArrayRef{0, 1}, false, at::kFloat));
}

TEST(MakeArguments, LayerNorm) {
  const TensorDesc x = Desc(DType::kFloat32, {4, 16}, {16, 1}, 2, 8);
  const TensorDesc w = TensorDesc::Contiguous(DType::kFloat32, {16});
  const OpCall call{"aten::native_layer_norm", "", {x, IntList{16}, w, w, 1e-5}};
  Built b = Build(call);
  EXPECT_EQ(*kjit::torch::DescribeTensor(b.args[0].toTensor()), x);
  // Tensors get seeds of their own.
  EXPECT_FALSE(BitwiseEqual(b.args[2].toTensor(), b.args[3].toTensor()));
  auto out = CallBoxed(call, b.args);
  ASSERT_EQ(out.size(), 3u);
  auto want = at::native_layer_norm(b.args[0].toTensor(), {16}, b.args[2].toTensor(), b.args[3].toTensor(), 1e-5);
  ExpectSame(out[0], std::get<0>(want));
  ExpectSame(out[1], std::get<1>(want));
  ExpectSame(out[2], std::get<2>(want));

  const OpCall bare{"aten::native_layer_norm", "", {x, IntList{16}, NoneArg{}, NoneArg{}, 1e-5}};
  Built bb = Build(bare);
  auto out2 = CallBoxed(bare, bb.args);
  ExpectSame(out2[0], std::get<0>(at::native_layer_norm(bb.args[0].toTensor(), {16}, {}, {}, 1e-5)));

  // An integer written where the schema wants a float becomes one.
  const OpCall int_eps{"aten::native_layer_norm", "", {x, IntList{16}, NoneArg{}, NoneArg{}, int64_t{1}}};
  auto schema = FindSchema(int_eps);
  ASSERT_TRUE(schema.ok());
  auto args = MakeArguments(*schema, int_eps, DefaultOpTraits(), kCpu, InputKind::kNormal, 1);
  ASSERT_TRUE(args.ok()) << args.status().ToString();
  EXPECT_TRUE((*args)[4].isDouble());
  CallBoxed(int_eps, *args);
}

// A bool[N] (a backward's output_mask) is keyed as an int list of 0s and 1s and made back into a bool list;
// the outputs it leaves out come back undefined.
TEST(MakeArguments, BoolListsAreKeyedAsZerosAndOnes) {
  const TensorDesc x = TensorDesc::Contiguous(DType::kFloat32, {4, 16});
  const TensorDesc stats = TensorDesc::Contiguous(DType::kFloat32, {4, 1});
  const TensorDesc w = TensorDesc::Contiguous(DType::kFloat32, {16});
  const OpCall call{"aten::native_layer_norm_backward", "", {x, x, IntList{16}, stats, stats, w, w, IntList{1, 0, 1}}};
  Built b = Build(call);
  ASSERT_EQ(b.args.size(), 8u);
  ASSERT_TRUE(b.args[7].isBoolList());
  EXPECT_EQ(b.args[7].toBoolList().vec(), (std::vector<bool>{true, false, true}));
  auto out = CallBoxed(call, b.args);
  ASSERT_EQ(out.size(), 3u);
  auto want = at::native_layer_norm_backward(b.args[0].toTensor(), b.args[1].toTensor(), {16}, b.args[3].toTensor(),
                                             b.args[4].toTensor(), b.args[5].toTensor(), b.args[6].toTensor(),
                                             {true, false, true});
  ExpectSame(out[0], std::get<0>(want));
  EXPECT_FALSE(out[1].toTensor().defined());
  ExpectSame(out[2], std::get<2>(want));
  // Only 0s and 1s stand for bools.
  const OpCall bad{"aten::native_layer_norm_backward", "", {x, x, IntList{16}, stats, stats, w, w, IntList{1, 2, 1}}};
  auto schema = FindSchema(bad);
  ASSERT_TRUE(schema.ok());
  auto args = MakeArguments(*schema, bad, DefaultOpTraits(), kCpu, InputKind::kNormal, 1);
  ASSERT_FALSE(args.ok());
  EXPECT_NE(args.status().message().find("bool list"), std::string::npos) << args.status().ToString();
}

TEST(MakeArguments, AddWithScalarAlpha) {
  const TensorDesc a = TensorDesc::Contiguous(DType::kBFloat16, {3, 7});
  const TensorDesc b = Desc(DType::kBFloat16, {3, 7}, {0, 1}, 1, 2);  // broadcast row
  for (const Arg& alpha : {Arg(2.5), Arg(int64_t{3})}) {
    const OpCall call{"aten::add", "Tensor", {a, b, alpha}};
    Built built = Build(call);
    EXPECT_EQ(built.args[2].isDouble(), std::holds_alternative<double>(alpha));
    auto out = CallBoxed(call, built.args);
    ExpectSame(out[0], at::add(built.args[0].toTensor(), built.args[1].toTensor(), built.args[2].toScalar()));
  }
}

TEST(MakeArguments, GatherIndexDomain) {
  OpTraits traits;
  traits.int_domains[2] = IntDomain{0, 0, 0, -1};  // [0, size of self's last dim)
  const OpCall call{"aten::gather",
                    "",
                    {TensorDesc::Contiguous(DType::kFloat32, {4, 10}), int64_t{1},
                     TensorDesc::Contiguous(DType::kInt64, {4, 300}), false}};
  Built b = Build(call, traits);
  const at::Tensor index = b.args[2].toTensor();
  EXPECT_EQ(index.min().item<int64_t>(), 0);
  EXPECT_EQ(index.max().item<int64_t>(), 9);
  auto out = CallBoxed(call, b.args);
  ExpectSame(out[0], at::gather(b.args[0].toTensor(), 1, index));

  OpTraits bad;
  bad.int_domains[2] = IntDomain{0, 0, 1, 0};  // argument 1 is not a tensor
  auto schema = FindSchema(call);
  ASSERT_TRUE(schema.ok());
  EXPECT_FALSE(MakeArguments(*schema, call, bad, kCpu, InputKind::kNormal, 1).ok());
  bad.int_domains[2] = IntDomain{0, 0, 0, 2};  // no dim 2
  EXPECT_FALSE(MakeArguments(*schema, call, bad, kCpu, InputKind::kNormal, 1).ok());
}

// Flat indices into a plane: max pooling's backward reads indices in [0, H x W) of self's last two dims.
TEST(MakeArguments, PlaneIndexDomain) {
  OpTraits traits;
  traits.int_domains[7] = IntDomain{0, 0, 1, -2, 2};  // [0, 5 x 7)
  const TensorDesc grad = TensorDesc::Contiguous(DType::kFloat32, {2, 3, 3, 4});
  const OpCall call{"aten::max_pool2d_with_indices_backward",
                    "",
                    {grad, TensorDesc::Contiguous(DType::kFloat32, {2, 3, 5, 7}), IntList{3, 3}, IntList{2, 2},
                     IntList{1, 1}, IntList{1, 1}, false, TensorDesc::Contiguous(DType::kInt64, {2, 3, 3, 4})}};
  Built b = Build(call, traits);
  const at::Tensor indices = b.args[7].toTensor();
  EXPECT_GE(indices.min().item<int64_t>(), 0);
  EXPECT_LT(indices.max().item<int64_t>(), 35);
  EXPECT_GE(indices.max().item<int64_t>(), 7);  // beyond one dim's size: the product
  auto out = CallBoxed(call, b.args);
  ExpectSame(out[0], at::max_pool2d_with_indices_backward(b.args[0].toTensor(), b.args[1].toTensor(), {3, 3}, {2, 2},
                                                          {1, 1}, {1, 1}, false, indices));

  auto schema = FindSchema(call);
  ASSERT_TRUE(schema.ok());
  // On the meta device (the working set's estimate) the derived input is its layout: max_pool3d_with_indices has
  // no meta kernel, and a key of this op was refused on an H100 before (2026-12-07).
  auto meta = MakeArguments(*schema, call, traits, c10::Device(c10::kMeta), InputKind::kNormal, 1);
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  EXPECT_TRUE((*meta)[7].toTensor().is_meta());
  EXPECT_EQ((*meta)[7].toTensor().sizes(), indices.sizes());
  OpTraits bad;
  bad.int_domains[7] = IntDomain{0, 0, 1, -2, 3};  // past the last dim
  EXPECT_FALSE(MakeArguments(*schema, call, bad, kCpu, InputKind::kNormal, 1).ok());
  bad.int_domains[7] = IntDomain{0, 0, 1, -2, 0};  // no dims
  EXPECT_FALSE(MakeArguments(*schema, call, bad, kCpu, InputKind::kNormal, 1).ok());
}

// An input made by another op (OpTraits::derived_inputs): 3-D max pooling's backward reads the indices its forward
// made, which PyTorch's kernel adds gradients at wherever they point: made by max_pool3d_with_indices on the
// generated self, copied into the key's tensor (its layout kept: here unaligned by 8 bytes).
TEST(MakeArguments, DerivedInputsAreMadeByTheirOp) {
  OpTraits traits;
  traits.derived_inputs[7] = DerivedInput{"aten::max_pool3d_with_indices", {1, 2, 3, 4, 5, 6}, 1};
  TensorDesc indices_desc = TensorDesc::Contiguous(DType::kInt64, {2, 3, 3, 4, 4});
  indices_desc.alignment = 8;
  const OpCall call{"aten::max_pool3d_with_indices_backward",
                    "",
                    {TensorDesc::Contiguous(DType::kFloat32, {2, 3, 3, 4, 4}),
                     TensorDesc::Contiguous(DType::kFloat32, {2, 3, 5, 7, 7}), IntList{3, 3, 3}, IntList{2, 2, 2},
                     IntList{1, 1, 1}, IntList{1, 1, 1}, false, indices_desc}};
  Built b = Build(call, traits);
  const at::Tensor indices = b.args[7].toTensor();
  const auto want = at::max_pool3d_with_indices(b.args[1].toTensor(), {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, false);
  EXPECT_TRUE(at::equal(indices, std::get<1>(want)));
  EXPECT_GE(indices.max().item<int64_t>(), 49);  // positions in the volume, past one depth slice
  auto out = CallBoxed(call, b.args);
  ExpectSame(out[0], at::max_pool3d_with_indices_backward(b.args[0].toTensor(), b.args[1].toTensor(), {3, 3, 3},
                                                          {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, false, indices));

  auto schema = FindSchema(call);
  ASSERT_TRUE(schema.ok());
  // On the meta device (the working set's estimate) the derived input is its layout: max_pool3d_with_indices has
  // no meta kernel, and a key of this op was refused on an H100 before (2026-12-07).
  auto meta = MakeArguments(*schema, call, traits, c10::Device(c10::kMeta), InputKind::kNormal, 1);
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  EXPECT_TRUE((*meta)[7].toTensor().is_meta());
  EXPECT_EQ((*meta)[7].toTensor().sizes(), indices.sizes());
  OpTraits bad;
  bad.derived_inputs[7] = DerivedInput{"aten::no_such_op", {1}, 1};
  EXPECT_EQ(MakeArguments(*schema, call, bad, kCpu, InputKind::kNormal, 1).status().code(), StatusCode::kNotFound);
  bad.derived_inputs[7] = DerivedInput{"aten::max_pool3d_with_indices", {1, 2, 3}, 1};  // too few arguments
  EXPECT_FALSE(MakeArguments(*schema, call, bad, kCpu, InputKind::kNormal, 1).ok());
  bad.derived_inputs[7] = DerivedInput{"aten::max_pool3d_with_indices", {1, 2, 3, 4, 5, 6}, 0};  // float, not int64
  EXPECT_FALSE(MakeArguments(*schema, call, bad, kCpu, InputKind::kNormal, 1).ok());
}

TEST(MakeArguments, NllLossClassIndices) {
  OpTraits traits;
  traits.int_domains[1] = IntDomain{0, 0, 0, 1};
  const OpCall call{"aten::nll_loss_forward",
                    "",
                    {TensorDesc::Contiguous(DType::kFloat32, {16, 5}), TensorDesc::Contiguous(DType::kInt64, {16}),
                     NoneArg{}, int64_t{1}, int64_t{-100}}};
  Built b = Build(call, traits, InputKind::kUniform);
  auto out = CallBoxed(call, b.args);
  ASSERT_EQ(out.size(), 2u);
  auto want = at::nll_loss_forward(b.args[0].toTensor(), b.args[1].toTensor(), {}, 1, -100);
  ExpectSame(out[0], std::get<0>(want));
}

TEST(MakeArguments, TensorListsAndScalarTypes) {
  const OpCall cat{"aten::cat",
                   "",
                   {TensorList{TensorDesc::Contiguous(DType::kFloat32, {2, 3}), Desc(DType::kFloat32, {4, 3}, {1, 4})},
                    int64_t{0}}};
  Built b = Build(cat);
  ASSERT_TRUE(b.args[0].isTensorList());
  const auto list = b.args[0].toTensorList();
  ASSERT_EQ(list.size(), 2u);
  auto out = CallBoxed(cat, b.args);
  ExpectSame(out[0], at::cat({list[0], list[1]}, 0));
  EXPECT_EQ(TensorsIn(b.args).size(), 2u);

  const OpCall to_copy{"aten::_to_copy",
                       "",
                       {TensorDesc::Contiguous(DType::kFloat32, {5}), DType::kFloat16, NoneArg{}, NoneArg{},
                        NoneArg{}, false, NoneArg{}}};
  Built bt = Build(to_copy);
  auto out2 = CallBoxed(to_copy, bt.args);
  EXPECT_EQ(out2[0].toTensor().scalar_type(), at::kHalf);

  // Strings and float lists.
  const OpCall gelu{"aten::gelu", "", {TensorDesc::Contiguous(DType::kFloat32, {9}), std::string("tanh")}};
  Built bg = Build(gelu);
  ExpectSame(CallBoxed(gelu, bg.args)[0], at::gelu(bg.args[0].toTensor(), "tanh"));
  const OpCall up{"aten::upsample_nearest2d", "vec",
                  {TensorDesc::Contiguous(DType::kFloat32, {1, 1, 2, 2}), NoneArg{}, DoubleList{2.0, 3.0}}};
  Built bu = Build(up);
  EXPECT_EQ(CallBoxed(up, bu.args)[0].toTensor().sizes(), (std::vector<int64_t>{1, 1, 4, 6}));
}

TEST(MakeArguments, OptionalTensorLists) {
  // index.Tensor takes Tensor?[]: a key never holds one (CallKey refuses it),
  // but a hand-written call may.
  OpTraits traits;
  traits.int_domains[1] = IntDomain{0, 6};
  const OpCall call{
      "aten::index",
      "Tensor",
      {TensorDesc::Contiguous(DType::kFloat32, {6, 4}), TensorList{TensorDesc::Contiguous(DType::kInt64, {5})}}};
  auto schema = FindSchema(call);
  ASSERT_TRUE(schema.ok());
  auto args = MakeArguments(*schema, call, traits, kCpu, InputKind::kNormal, 3);
  ASSERT_TRUE(args.ok()) << args.status().ToString();
  EXPECT_TRUE((*args)[1].isOptionalTensorList());
  EXPECT_EQ(TensorsIn(*args).size(), 2u);
  auto out = CallBoxed(call, *args);
  EXPECT_EQ(out[0].toTensor().sizes(), (std::vector<int64_t>{5, 4}));
  auto cloned = CloneArguments(*args);
  ASSERT_TRUE(cloned.ok());
  EXPECT_TRUE(BitwiseEqual(TensorsIn(*cloned)[1], TensorsIn(*args)[1]));
}

TEST(MakeArguments, SeedsAndKinds) {
  const OpCall call{"aten::add", "Tensor",
                    {TensorDesc::Contiguous(DType::kFloat32, {64}), TensorDesc::Contiguous(DType::kFloat32, {64}),
                     int64_t{1}}};
  Built a = Build(call, DefaultOpTraits(), InputKind::kNormal, 1);
  Built again = Build(call, DefaultOpTraits(), InputKind::kNormal, 1);
  Built other = Build(call, DefaultOpTraits(), InputKind::kNormal, 2);
  Built special = Build(call, DefaultOpTraits(), InputKind::kSpecial, 1);
  EXPECT_TRUE(BitwiseEqual(a.args[0].toTensor(), again.args[0].toTensor()));
  EXPECT_TRUE(BitwiseEqual(a.args[1].toTensor(), again.args[1].toTensor()));
  EXPECT_FALSE(BitwiseEqual(a.args[0].toTensor(), other.args[0].toTensor()));
  EXPECT_FALSE(BitwiseEqual(a.args[0].toTensor(), a.args[1].toTensor()));
  EXPECT_TRUE(special.args[0].toTensor().isnan().any().item<bool>());
}

TEST(MakeArguments, Rejections) {
  const OpCall call{"aten::_softmax", "", {TensorDesc::Contiguous(DType::kFloat32, {8}), int64_t{0}, false}};
  auto schema = FindSchema(call);
  ASSERT_TRUE(schema.ok());
  OpCall short_call = call;
  short_call.args.pop_back();
  auto r = MakeArguments(*schema, short_call, DefaultOpTraits(), kCpu, InputKind::kNormal, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);

  OpCall ref = call;
  ref.args[0] = ValueRef{0, 0};
  r = MakeArguments(*schema, ref, DefaultOpTraits(), kCpu, InputKind::kNormal, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("self"), std::string::npos) << r.status().message();

  OpCall bad_tensor = call;
  bad_tensor.args[0] = Desc(DType::kFloat32, {2}, {1}, 0, 5);
  EXPECT_EQ(MakeArguments(*schema, bad_tensor, DefaultOpTraits(), kCpu, InputKind::kNormal, 1).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(FindSchema, FoundAndNotFound) {
  auto s = FindSchema(OpCall{"aten::sum", "dim_IntList", {}});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->name(), "aten::sum");
  EXPECT_EQ(s->overload_name(), "dim_IntList");
  EXPECT_EQ(s->arguments().size(), 4u);

  auto missing = FindSchema(OpCall{"aten::no_such_op", "", {}});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("aten::no_such_op"), std::string::npos);

  auto overload = FindSchema(OpCall{"aten::sum", "no_such_overload", {}});
  ASSERT_FALSE(overload.ok());
  EXPECT_EQ(overload.status().code(), StatusCode::kNotFound);
  EXPECT_NE(overload.status().message().find("dim_IntList"), std::string::npos) << overload.status().message();
}

TEST(CloneArguments, SameLayoutNewStorage) {
  const OpCall call{"aten::native_layer_norm",
                    "",
                    {Desc(DType::kFloat16, {4, 16}, {1, 5}, 3, 2), IntList{16},
                     Desc(DType::kFloat16, {16}, {1}, 1, 2), NoneArg{}, 1e-5}};
  Built b = Build(call);
  auto cloned = CloneArguments(b.args);
  ASSERT_TRUE(cloned.ok()) << cloned.status().ToString();
  ASSERT_EQ(cloned->size(), b.args.size());
  const auto originals = TensorsIn(b.args);
  const auto copies = TensorsIn(*cloned);
  ASSERT_EQ(copies.size(), 2u);
  for (size_t i = 0; i < copies.size(); ++i) {
    EXPECT_EQ(*kjit::torch::DescribeTensor(copies[i]), *kjit::torch::DescribeTensor(originals[i]));
    EXPECT_NE(copies[i].data_ptr(), originals[i].data_ptr());
    EXPECT_TRUE(BitwiseEqual(copies[i], originals[i]));
  }
  // Bytes outside the view come along too.
  EXPECT_EQ(StorageBytes(copies[0]), StorageBytes(originals[0]));
  // Writes to the copy leave the original alone, lists included.
  copies[0].fill_(0);
  EXPECT_FALSE(BitwiseEqual(copies[0], originals[0]));
  (*cloned)[1].toIntList().set(0, 99);
  EXPECT_EQ(b.args[1].toIntList().get(0), 16);
  EXPECT_TRUE((*cloned)[3].isNone());
  EXPECT_EQ((*cloned)[4].toDouble(), 1e-5);

  // Empty and undefined tensors, tensor lists.
  std::vector<c10::IValue> odd{at::Tensor(), Make(TensorDesc::Contiguous(DType::kFloat32, {0, 4})),
                               c10::List<at::Tensor>({Make(Desc(DType::kInt32, {3}, {2}, 1, 4))})};
  auto odd_clone = CloneArguments(odd);
  ASSERT_TRUE(odd_clone.ok()) << odd_clone.status().ToString();
  EXPECT_FALSE((*odd_clone)[0].toTensor().defined());
  EXPECT_EQ((*odd_clone)[1].toTensor().sizes(), (std::vector<int64_t>{0, 4}));
  const at::Tensor listed = (*odd_clone)[2].toTensorList().get(0);
  EXPECT_EQ(*kjit::torch::DescribeTensor(listed), Desc(DType::kInt32, {3}, {2}, 1, 4));
  EXPECT_TRUE(BitwiseEqual(listed, odd[2].toTensorList().get(0)));
}

TEST(CloneArguments, KeepsTorchAllocatedLayouts) {
  // Tensors PyTorch made, with storage beyond what the view needs.
  at::Tensor big = at::randn({10, 10});
  at::Tensor view = big.narrow(1, 3, 4).t();
  auto cloned = CloneArguments({view});
  ASSERT_TRUE(cloned.ok());
  const at::Tensor c = (*cloned)[0].toTensor();
  EXPECT_EQ(*kjit::torch::DescribeTensor(c), *kjit::torch::DescribeTensor(view));
  EXPECT_TRUE(at::equal(c, view));
}

}  // namespace
}  // namespace kjit::eval
