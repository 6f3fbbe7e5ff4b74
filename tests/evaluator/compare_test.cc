// The comparison rules, poisoning and guarded outputs, on CPU tensors.
#include "kjit/evaluator/compare.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <set>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace kjit::eval {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

at::Tensor Values(std::vector<double> v, at::ScalarType type = at::kFloat) {
  return at::tensor(v, at::kDouble).to(type);
}

Comparison Close(const at::Tensor& actual, const at::Tensor& expected, DType dtype = DType::kFloat32) {
  return Compare(actual, expected, DefaultTolerance(dtype));
}

TEST(Tolerance, Defaults) {
  const auto check = [](DType d, double atol, double rtol) {
    const Tolerance t = DefaultTolerance(d);
    EXPECT_EQ(t.atol, atol) << DTypeName(d);
    EXPECT_EQ(t.rtol, rtol) << DTypeName(d);
    EXPECT_FALSE(t.bitwise);
  };
  check(DType::kFloat16, 1e-5, 1e-3);
  check(DType::kBFloat16, 1e-5, 1.6e-2);
  check(DType::kFloat32, 1e-5, 1.3e-6);
  check(DType::kFloat64, 1e-7, 1e-7);
  check(DType::kComplex64, 1e-5, 1.3e-6);
  check(DType::kInt64, 0, 0);
  check(DType::kBool, 0, 0);
  check(DType::kUInt8, 0, 0);
}

TEST(Tolerance, ForTraits) {
  OpTraits traits;
  traits.atol = 1e-3;
  traits.rtol = 1e-4;
  Tolerance t = ToleranceFor(DType::kFloat32, traits);
  EXPECT_EQ(t.atol, 1e-3);
  EXPECT_EQ(t.rtol, 1e-4);
  traits.atol.reset();
  EXPECT_EQ(ToleranceFor(DType::kFloat16, traits).atol, 1e-5);
  EXPECT_EQ(ToleranceFor(DType::kFloat16, traits).rtol, 1e-4);
  // Integer outputs stay exact whatever the float overrides.
  EXPECT_EQ(ToleranceFor(DType::kInt64, traits).rtol, 0);
  EXPECT_EQ(ToleranceFor(DType::kBool, traits).rtol, 0);
  // float8 is exact by default (as in assert_close) but a float: overrides apply.
  EXPECT_EQ(DefaultTolerance(DType::kFloat8E4M3FN).rtol, 0);
  EXPECT_EQ(ToleranceFor(DType::kFloat8E4M3FN, traits).rtol, 1e-4);
  traits.compare = ComparePolicy::kBitwise;
  EXPECT_TRUE(ToleranceFor(DType::kFloat32, traits).bitwise);
  EXPECT_TRUE(ToleranceFor(DType::kInt32, traits).bitwise);
  EXPECT_FALSE(ToleranceFor(DType::kFloat32, DefaultOpTraits()).bitwise);
}

TEST(Compare, Identical) {
  at::Tensor x = at::randn({16, 33});
  for (const Tolerance& t : {DefaultTolerance(DType::kFloat32), Tolerance{0, 0, true}}) {
    Comparison c = Compare(x, x.clone(), t);
    EXPECT_TRUE(c.ok) << c.reason;
    EXPECT_EQ(c.mismatches, 0);
    EXPECT_EQ(c.first_mismatch, -1);
    EXPECT_EQ(c.max_abs_error, 0);
    EXPECT_TRUE(c.reason.empty());
  }
}

// One element at `expected` against one at `actual`, in `type`, with that dtype's defaults.
bool Within(double actual, double expected, at::ScalarType type, DType dtype) {
  return Close(Values({actual}, type), Values({expected}, type), dtype).ok;
}

TEST(Compare, DefaultTolerancePerDType) {
  // float16 at 1: tolerance 1e-5 + 1e-3 = 1.01e-3; one ulp is 2^-10 = 9.8e-4.
  EXPECT_TRUE(Within(1 + std::ldexp(1.0, -10), 1, at::kHalf, DType::kFloat16));
  EXPECT_FALSE(Within(1 + std::ldexp(1.0, -9), 1, at::kHalf, DType::kFloat16));
  // bfloat16 at 1: 1.601e-2; one ulp is 2^-7 = 7.8e-3.
  EXPECT_TRUE(Within(1 + std::ldexp(1.0, -6), 1, at::kBFloat16, DType::kBFloat16));
  EXPECT_FALSE(Within(1 + 3 * std::ldexp(1.0, -7), 1, at::kBFloat16, DType::kBFloat16));
  // float32 at 1: 1.13e-5.
  EXPECT_TRUE(Within(1 + 1e-5, 1, at::kFloat, DType::kFloat32));
  EXPECT_FALSE(Within(1 + 1.3e-5, 1, at::kFloat, DType::kFloat32));
  // float32 near 0: atol decides.
  EXPECT_TRUE(Within(9e-6, 0, at::kFloat, DType::kFloat32));
  EXPECT_FALSE(Within(1.1e-5, 0, at::kFloat, DType::kFloat32));
  // float32 at 1e6: rtol decides (1.3 + 1e-5).
  EXPECT_TRUE(Within(1e6 + 1.25, 1e6, at::kFloat, DType::kFloat32));
  EXPECT_FALSE(Within(1e6 + 1.5, 1e6, at::kFloat, DType::kFloat32));
  // float64 at 1: 2e-7.
  EXPECT_TRUE(Within(1 + 1.9e-7, 1, at::kDouble, DType::kFloat64));
  EXPECT_FALSE(Within(1 + 2.1e-7, 1, at::kDouble, DType::kFloat64));
  // The rule is relative to the expected value, not the actual one.
  const Tolerance loose{0, 0.5, false};
  EXPECT_TRUE(Compare(Values({1.5}), Values({1}), loose).ok);
  EXPECT_FALSE(Compare(Values({1}), Values({0.6}), loose).ok);
}

// A candidate no less accurate than PyTorch against float64 passes even when
// the two float32 results are further apart than assert_close allows.
TEST(CompareAccuracy, WithinASmallFactorOfPyTorchsError) {
  const Tolerance tol = DefaultTolerance(DType::kFloat32);  // atol 1e-5, rtol 1.3e-6
  const at::Tensor exact = Values({100.0, -3.0, 0.0, 1e6}, at::kDouble);
  // PyTorch's worst error: 1e-3 at 100 (about 8 units of 1.3e-4).
  const at::Tensor pytorch = Values({100.001, -3.0, 0.0, 1e6});
  const at::Tensor within = Values({99.997, -3.0, 0.0, 1e6});  // 3e-3 off: three times PyTorch's error
  EXPECT_FALSE(Compare(within, pytorch, tol).ok);
  const Comparison ok = CompareAccuracy(within, pytorch, exact, tol);
  EXPECT_TRUE(ok.ok) << ok.reason;
  const at::Tensor bad = Values({100.0, -3.01, 0.0, 1e6});  // 1e-2 off: 10x PyTorch's RMS error
  const Comparison no = CompareAccuracy(bad, pytorch, exact, tol);
  EXPECT_FALSE(no.ok);
  EXPECT_NE(no.reason.find("float64"), std::string::npos) << no.reason;
}

// Where PyTorch's result is an infinity but the float64 result is finite and within the dtype's range, PyTorch
// overflowed in an intermediate (a float16 batch norm backward on an H100: -Inf everywhere, truly -120): a finite
// candidate within the tolerance of the truth passes; one that is not, or an infinity the truth also has, or a
// candidate infinity where PyTorch is finite, does not.
TEST(CompareAccuracy, AFiniteResultWherePyTorchOverflowedAndTheTruthDidNot) {
  const Tolerance tol = DefaultTolerance(DType::kFloat16);
  const double inf = std::numeric_limits<double>::infinity();
  const at::Tensor exact = Values({-120.0, 2.0, 1e6}, at::kDouble);
  const at::Tensor pytorch = Values({-inf, 2.0, inf}).to(at::kHalf);
  const Comparison ok = CompareAccuracy(Values({-120.0, 2.0, inf}).to(at::kHalf), pytorch, exact, tol);
  EXPECT_TRUE(ok.ok) << ok.reason;
  // Far from the truth where PyTorch overflowed.
  EXPECT_FALSE(CompareAccuracy(Values({-100.0, 2.0, inf}).to(at::kHalf), pytorch, exact, tol).ok);
  // 1e6 is beyond float16's range: PyTorch's infinity is the right rounding there, and a finite value is not.
  EXPECT_FALSE(CompareAccuracy(Values({-120.0, 2.0, 60000.0}).to(at::kHalf), pytorch, exact, tol).ok);
  // An infinity of the candidate's where PyTorch's is finite.
  EXPECT_FALSE(CompareAccuracy(Values({-120.0, inf, inf}).to(at::kHalf), pytorch, exact, tol).ok);
}

// Near cancellation a float32 sum of products in another order than PyTorch's may be off by thousands of
// tolerance units while PyTorch's happens to be close: with the op's magnitudes (sum |a||b|) the rule allows
// the error any float32 order may make, and still rejects a dropped term.
TEST(CompareAccuracy, SumsOfProductsMayErrAsAnyFloat32Order) {
  const Tolerance tol = DefaultTolerance(DType::kBFloat16);  // atol 1e-5, rtol 1.6e-2
  // Four outputs of 64 products each of magnitude up to 2^40 (bf16 inputs of 2^13..2^20), sums cancelling
  // to near zero in the first two.
  const at::Tensor exact = Values({3.0, -1024.0, 5.0e11, -2.0e12}, at::kDouble);
  const at::Tensor magnitude = Values({3.0e13, 4.0e13, 6.0e12, 9.0e12}, at::kDouble);
  const at::Tensor pytorch = Values({3.0, -1024.0, 5.0e11, -2.0e12});
  // 2^16 off where the sums cancel: within gamma_64 x magnitude (64 * 2^-24 * 3e13, about 1.1e8), but
  // thousands of tolerance units without it.
  const at::Tensor reordered = Values({65539.0, -1024.0 - 65536.0, 5.0e11, -2.0e12});
  EXPECT_FALSE(CompareAccuracy(reordered, pytorch, exact, tol).ok);
  SummationBound bound{magnitude, 64};
  const Comparison ok = CompareAccuracy(reordered, pytorch, exact, tol, bound);
  EXPECT_TRUE(ok.ok) << ok.reason;
  EXPECT_NE(ok.reason.find("over 64 terms"), std::string::npos) << ok.reason;
  // A term of 2^40 dropped from the first output: far outside any order's error.
  const at::Tensor dropped = Values({3.0 - 1099511627776.0, -1024.0, 5.0e11, -2.0e12});
  EXPECT_FALSE(CompareAccuracy(dropped, pytorch, exact, tol, bound).ok);
  // The bound grows with the terms: one term allows about 64 times less.
  const at::Tensor off = Values({3.0 + 4.0e7, -1024.0, 5.0e11, -2.0e12});
  EXPECT_TRUE(CompareAccuracy(off, pytorch, exact, tol, bound).ok);
  EXPECT_FALSE(CompareAccuracy(off, pytorch, exact, tol, SummationBound{magnitude, 1}).ok);
  // Magnitudes of the wrong sizes are refused, not broadcast.
  EXPECT_FALSE(CompareAccuracy(reordered, pytorch, exact, tol, SummationBound{Values({1.0}, at::kDouble), 64}).ok);
}

TEST(CompareAccuracy, Float32SummationGamma) {
  EXPECT_EQ(Float32SummationGamma(0), 0);
  EXPECT_NEAR(Float32SummationGamma(64), 64 * 0x1p-24, 1e-10);
  EXPECT_GT(Float32SummationGamma(64), 64 * 0x1p-24);
  EXPECT_TRUE(std::isinf(Float32SummationGamma(int64_t{1} << 24)));
}

TEST(CompareAccuracy, NonFiniteValuesMustMatchPyTorchs) {
  const Tolerance tol = DefaultTolerance(DType::kFloat32);
  const at::Tensor exact = Values({1.0, kNaN, kInf}, at::kDouble);
  const at::Tensor pytorch = Values({1.0, kNaN, kInf});
  EXPECT_TRUE(CompareAccuracy(Values({1.0, kNaN, kInf}), pytorch, exact, tol).ok);
  EXPECT_FALSE(CompareAccuracy(Values({1.0, 0.0, kInf}), pytorch, exact, tol).ok);
  EXPECT_FALSE(CompareAccuracy(Values({1.0, kNaN, -kInf}), pytorch, exact, tol).ok);
  EXPECT_FALSE(CompareAccuracy(Values({kNaN, kNaN, kInf}), pytorch, exact, tol).ok);
}

TEST(CompareAccuracy, IntegerAndBitwiseOutputsGetNoSecondChance) {
  const at::Tensor i = at::tensor({1, 2}, at::kLong);
  EXPECT_FALSE(CompareAccuracy(i, i, i.to(at::kDouble), DefaultTolerance(DType::kInt64)).ok);
  const at::Tensor f = Values({1.0});
  EXPECT_FALSE(CompareAccuracy(f, f, f.to(at::kDouble), Tolerance{0, 0, true}).ok);
}

TEST(Compare, NaNPositions) {
  const at::Tensor expected = Values({1, kNaN, 3});
  EXPECT_TRUE(Close(Values({1, kNaN, 3}), expected).ok);
  // NaN where the reference has a number.
  Comparison c = Close(Values({kNaN, kNaN, 3}), expected);
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.mismatches, 1);
  EXPECT_EQ(c.first_mismatch, 0);
  EXPECT_TRUE(std::isnan(c.actual_at_first));
  EXPECT_NE(c.reason.find("nan vs 1"), std::string::npos) << c.reason;
  // A number where the reference has NaN.
  c = Close(Values({1, 2, 3}), expected);
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.first_mismatch, 1);
  EXPECT_TRUE(std::isnan(c.expected_at_first));
  // Errors are over finite pairs only.
  EXPECT_EQ(c.max_abs_error, 0);
}

TEST(Compare, Infinities) {
  EXPECT_TRUE(Close(Values({kInf, -kInf, 1}), Values({kInf, -kInf, 1})).ok);
  EXPECT_FALSE(Close(Values({-kInf}), Values({kInf})).ok);
  EXPECT_FALSE(Close(Values({kInf}), Values({-kInf})).ok);
  // atol + rtol * inf is inf: a finite value must still not pass for an infinite one.
  EXPECT_FALSE(Close(Values({1e30}), Values({kInf})).ok);
  EXPECT_FALSE(Close(Values({kInf}), Values({1e30})).ok);
  EXPECT_FALSE(Close(Values({kNaN}), Values({kInf})).ok);
  Comparison c = Compare(Values({1, 2}, at::kHalf), Values({1, kInf}, at::kHalf), DefaultTolerance(DType::kFloat16));
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.first_mismatch, 1);
  EXPECT_EQ(c.expected_at_first, kInf);
}

TEST(Compare, NegativeZero) {
  for (at::ScalarType type : {at::kHalf, at::kBFloat16, at::kFloat, at::kDouble}) {
    const at::Tensor pos = Values({0.0, 1}, type);
    const at::Tensor neg = Values({-0.0, 1}, type);
    EXPECT_TRUE(Compare(neg, pos, Tolerance{}).ok) << type;  // even with no tolerance at all
    Comparison c = Compare(neg, pos, Tolerance{0, 0, true});
    EXPECT_FALSE(c.ok) << type;
    EXPECT_EQ(c.first_mismatch, 0);
    EXPECT_NE(c.reason.find("bitwise"), std::string::npos) << c.reason;
    EXPECT_FALSE(BitwiseEqual(neg, pos));
    EXPECT_TRUE(BitwiseEqual(neg, neg.clone()));
  }
  Comparison c = Compare(Values({-0.0}, at::kHalf), Values({0.0}, at::kHalf), Tolerance{0, 0, true});
  EXPECT_NE(c.reason.find("-0 (0x8000) vs 0 (0x0000)"), std::string::npos) << c.reason;
}

TEST(Compare, BitwiseNaNPayloads) {
  // Two NaNs with different bits are close, not bitwise equal.
  at::Tensor a = at::tensor({0x7fc00000}, at::kInt).view(at::kFloat);
  at::Tensor b = at::tensor({0x7fc00001}, at::kInt).view(at::kFloat);
  EXPECT_TRUE(Close(a, b).ok);
  EXPECT_FALSE(Compare(a, b, Tolerance{0, 0, true}).ok);
}

TEST(Compare, IntegersExact) {
  const at::Tensor e = at::tensor({1, 2, 3}, at::kLong);
  EXPECT_TRUE(Compare(e.clone(), e, DefaultTolerance(DType::kInt64)).ok);
  Comparison c = Compare(at::tensor({1, 2, 4}, at::kLong), e, DefaultTolerance(DType::kInt64));
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.first_mismatch, 2);
  EXPECT_EQ(c.actual_at_first, 4);
  EXPECT_EQ(c.expected_at_first, 3);
  EXPECT_EQ(c.max_abs_error, 1);
  EXPECT_NE(c.reason.find("(exact)"), std::string::npos) << c.reason;
  // Beyond float64's integers: 2^53 + 1 against 2^53.
  const int64_t big = int64_t{1} << 53;
  EXPECT_FALSE(Compare(at::tensor({big + 1}, at::kLong), at::tensor({big}, at::kLong), Tolerance{}).ok);
  const at::Tensor flags = at::tensor({1, 0, 1}, at::kInt).to(at::kBool);
  EXPECT_TRUE(Compare(flags.clone(), flags, DefaultTolerance(DType::kBool)).ok);
  EXPECT_FALSE(Compare(flags.logical_not(), flags, DefaultTolerance(DType::kBool)).ok);
  const at::Tensor bytes = at::tensor({200, 3}, at::kInt).to(at::kByte);
  EXPECT_FALSE(Compare(bytes, bytes.flip(0), DefaultTolerance(DType::kUInt8)).ok);
  // Unsigned types beyond uint8 have few ATen kernels; conversions are enough.
  for (at::ScalarType type : {at::kUInt16, at::kUInt32, at::kUInt64}) {
    const at::Tensor u = at::tensor({1, 2}, at::kLong).to(type);
    EXPECT_TRUE(Compare(at::tensor({1, 2}, at::kLong).to(type), u, Tolerance{}).ok) << type;
    Comparison cu = Compare(at::tensor({1, 5}, at::kLong).to(type), u, Tolerance{});
    EXPECT_EQ(cu.first_mismatch, 1) << cu.reason;
    EXPECT_TRUE(BitwiseEqual(u, at::tensor({1, 2}, at::kLong).to(type))) << type;
  }
}

TEST(Compare, SizesAndDTypesMustMatch) {
  Comparison c = Close(at::zeros({2, 3}), at::zeros({3, 2}));
  EXPECT_FALSE(c.ok);
  EXPECT_NE(c.reason.find("sizes differ"), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("[2, 3]"), std::string::npos) << c.reason;
  c = Close(at::zeros({4}), at::zeros({4}, at::kDouble));
  EXPECT_FALSE(c.ok);
  EXPECT_NE(c.reason.find("dtypes differ"), std::string::npos) << c.reason;
  EXPECT_FALSE(BitwiseEqual(at::zeros({2, 3}), at::zeros({6})));
  EXPECT_FALSE(Close(at::Tensor(), at::zeros({1})).ok);
  EXPECT_TRUE(Close(at::zeros({0, 5}), at::ones({0, 5})).ok);
  EXPECT_TRUE(Close(at::Tensor(), at::Tensor()).ok);
}

TEST(Compare, StridesAndMultiIndex) {
  const at::Tensor expected = at::randn({8, 20});
  const at::Tensor actual = expected.t().contiguous().t();  // same values, column-major
  ASSERT_FALSE(actual.is_contiguous());
  EXPECT_TRUE(Close(actual, expected).ok);
  EXPECT_TRUE(BitwiseEqual(actual, expected));

  actual[3][17] = 100;
  actual[5][2] = 100;  // later in row-major order, earlier in memory
  Comparison c = Close(actual, expected);
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.mismatches, 2);
  EXPECT_EQ(c.first_mismatch, 3 * 20 + 17);
  EXPECT_EQ(c.actual_at_first, 100);
  EXPECT_EQ(c.expected_at_first, expected[3][17].item<float>());
  EXPECT_NE(c.reason.find("2 of 160 elements differ; first at [3, 17]: 100 vs "), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("(atol 1e-05, rtol 1.3e-06)"), std::string::npos) << c.reason;
  c = Compare(actual, expected, Tolerance{0, 0, true});
  EXPECT_EQ(c.first_mismatch, 3 * 20 + 17);
  EXPECT_NE(c.reason.find("first at [3, 17]"), std::string::npos) << c.reason;

  // A 0-dim tensor, and an expanded expected one.
  EXPECT_FALSE(Close(at::scalar_tensor(1.0), at::scalar_tensor(2.0)).ok);
  EXPECT_TRUE(Close(at::ones({4, 3}), at::ones({3}).expand({4, 3})).ok);
}

TEST(Compare, ErrorStatistics) {
  Comparison c = Close(Values({1, 2.5, 0.001, kInf}), Values({1, 2, 0, kInf}));
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.mismatches, 2);
  EXPECT_DOUBLE_EQ(c.max_abs_error, 0.5);
  EXPECT_DOUBLE_EQ(c.max_rel_error, 0.25);  // over pairs with a nonzero expected value
  EXPECT_NE(c.reason.find("max abs error 0.5, max rel error 0.25"), std::string::npos) << c.reason;
}

TEST(Compare, Complex) {
  const at::Tensor e = at::randn({5}, at::kComplexFloat);
  EXPECT_TRUE(Compare(e.clone(), e, DefaultTolerance(DType::kComplex64)).ok);
  at::Tensor a = e.clone();
  a[3] = c10::complex<float>(7, 7);
  Comparison c = Compare(a, e, DefaultTolerance(DType::kComplex64));
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.mismatches, 1);
  EXPECT_EQ(c.first_mismatch, 3);
  EXPECT_NE(c.reason.find("(7, 7) vs"), std::string::npos) << c.reason;
}

// --- Poison and guards.

at::Tensor BytesOf(const at::Tensor& t) {
  const auto nbytes = static_cast<int64_t>(t.storage().nbytes());
  return at::empty({0}, at::kByte).set_(t.storage(), 0, {nbytes}, {1});
}

TEST(Poison, NaNEverywhere) {
  at::Tensor base = at::randn({6, 10});
  at::Tensor view = base.narrow(1, 2, 3);  // the poison covers the whole storage, not just the view
  PoisonStorage(view, Poison::kNaN);
  EXPECT_TRUE(base.isnan().all().item<bool>());
  for (at::ScalarType type : {at::kHalf, at::kBFloat16, at::kDouble}) {
    at::Tensor t = at::zeros({7, 3}, type);
    PoisonStorage(t.t(), Poison::kNaN);
    EXPECT_TRUE(t.isnan().all().item<bool>()) << type;
  }
  at::Tensor ints = at::zeros({5}, at::kInt);
  PoisonStorage(ints, Poison::kNaN);
  EXPECT_TRUE(ints.eq(-1).all().item<bool>());
  PoisonStorage(at::Tensor(), Poison::kNaN);  // nothing to do
  PoisonStorage(at::empty({0}), Poison::kNaN);
}

TEST(Poison, FiniteIsFinite) {
  for (at::ScalarType type : {at::kHalf, at::kBFloat16, at::kFloat, at::kDouble}) {
    at::Tensor t = at::full({4, 4}, kNaN, type);
    PoisonStorage(t, Poison::kFinite);
    EXPECT_TRUE(t.isfinite().all().item<bool>()) << type;
    EXPECT_TRUE(BytesOf(t).eq(FinitePoisonByte()).all().item<bool>()) << type;
  }
}

// Each evaluation draws its finite poison and guard bytes: many different ones over evaluations, every
// finite byte finite and nonzero in every float type, every guard byte neither 0x00 nor 0xFF.
TEST(Poison, PatternsAreDrawnPerEvaluationAndStayFinite) {
  std::set<int> finite_bytes, guard_bytes;
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    ChoosePatterns(seed);
    finite_bytes.insert(FinitePoisonByte());
    guard_bytes.insert(GuardByte());
    EXPECT_NE(GuardByte(), 0x00);
    EXPECT_NE(GuardByte(), 0xFF);
  }
  // The patterns before any ChoosePatterns are public (compare.h): a kernel that looks for them finds none.
  EXPECT_EQ(finite_bytes.count(0x5A) + finite_bytes.count(0xA5) + guard_bytes.count(0x5A) + guard_bytes.count(0xA5),
            0u);
  EXPECT_GT(finite_bytes.size(), 100u);
  EXPECT_GT(guard_bytes.size(), 100u);
  for (int b : finite_bytes) {
    for (at::ScalarType type : {at::kHalf, at::kBFloat16, at::kFloat, at::kDouble}) {
      at::Tensor t = at::empty({8}, type);
      BytesOf(t).fill_(b);
      EXPECT_TRUE(t.isfinite().all().item<bool>()) << "byte " << b << " in " << type;
      EXPECT_TRUE(t.ne(0).all().item<bool>()) << "byte " << b << " in " << type;
    }
  }
  // The guards and the unwritten-element check follow the drawn patterns.
  ChoosePatterns(12345);
  auto g = MakeGuarded(at::randn({3, 5}), 64);
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->storage.narrow(0, 0, g->tensor_offset_bytes).eq(GuardByte()).all().item<bool>());
  EXPECT_TRUE(GuardsIntact(*g));
  g->storage[0] = static_cast<uint8_t>(GuardByte() ^ 1);
  EXPECT_FALSE(GuardsIntact(*g));
  at::Tensor a = at::arange(6, at::kFloat), b = a.clone();
  PoisonStorage(a, Poison::kNaN);
  PoisonStorage(b, Poison::kFinite);
  EXPECT_EQ(FindUnwritten(a, b).count, 6);
  ChoosePatterns(0);
}

// The evaluator keeps only the layouts of PyTorch's outputs between sets (meta tensors) and makes the
// candidate's outputs from them on its device.
TEST(Guarded, FromALayoutOnTheMetaDevice) {
  const at::Tensor layout = at::empty_strided({5, 7}, {1, 5}, at::TensorOptions().dtype(at::kHalf).device(c10::kMeta));
  auto g = MakeGuarded(layout, 64, c10::Device(c10::kCPU));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(g->tensor.device().is_cpu());
  EXPECT_TRUE(g->storage.device().is_cpu());
  EXPECT_EQ(g->tensor.sizes(), layout.sizes());
  EXPECT_EQ(g->tensor.strides(), layout.strides());
  EXPECT_EQ(g->tensor.scalar_type(), at::kHalf);
  EXPECT_TRUE(g->tensor.isnan().all().item<bool>());
  EXPECT_TRUE(GuardsIntact(*g));
}

TEST(Guarded, LayoutAndGuards) {
  const at::Tensor like = at::randn({5, 7}).t();  // strides {1, 7}
  auto g = MakeGuarded(like, 100);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->tensor.sizes(), like.sizes());
  EXPECT_EQ(g->tensor.strides(), like.strides());
  EXPECT_EQ(g->tensor.scalar_type(), like.scalar_type());
  EXPECT_EQ(g->tensor.storage_offset(), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(g->tensor.data_ptr()) % 16, 0u);
  EXPECT_GE(g->tensor_offset_bytes, g->guard_bytes);
  EXPECT_EQ(g->storage.numel(), g->tensor_offset_bytes + 35 * 4 + g->guard_bytes);
  EXPECT_TRUE(g->tensor.isnan().all().item<bool>());  // poisoned from the start
  EXPECT_TRUE(GuardsIntact(*g));

  // Writing every element of the view is fine.
  g->tensor.fill_(1);
  EXPECT_TRUE(GuardsIntact(*g));

  // One element past the end is not.
  at::Tensor past = at::from_blob(g->tensor.data_ptr(), {36}, at::kFloat);
  past[35] = 2.0f;
  EXPECT_FALSE(GuardsIntact(*g));

  ResetGuarded(*g, Poison::kFinite);
  EXPECT_TRUE(GuardsIntact(*g));
  EXPECT_TRUE(g->tensor.isfinite().all().item<bool>());
  EXPECT_FALSE(g->tensor.eq(1).any().item<bool>());

  // One byte before the start is not either.
  g->storage[g->tensor_offset_bytes - 1] = 0;
  EXPECT_FALSE(GuardsIntact(*g));
  ResetGuarded(*g, Poison::kNaN);
  EXPECT_TRUE(GuardsIntact(*g));
  EXPECT_TRUE(g->tensor.isnan().all().item<bool>());

  // PoisonStorage on the handed-out tensor stays inside it.
  PoisonStorage(g->tensor, Poison::kFinite);
  EXPECT_TRUE(GuardsIntact(*g));
}

TEST(Poison, UnwrittenElementsAreThoseThatKeepEitherRunsPoison) {
  // Two "runs" of a kernel over a 2x3 output, each after its own poison.
  at::Tensor a = at::arange(6, at::kFloat).reshape({2, 3});
  at::Tensor b = a.clone();
  PoisonStorage(a, Poison::kNaN);
  PoisonStorage(b, Poison::kFinite);
  EXPECT_EQ(FindUnwritten(a, b).count, 6);  // neither run wrote anything
  a.copy_(at::arange(6, at::kFloat).reshape({2, 3}));
  b.copy_(a);
  EXPECT_EQ(FindUnwritten(a, b).count, 0);  // both wrote everything
  // Element [1, 1] skipped in the second run only (a stale-output read).
  b.view(at::kInt)[1][1] = static_cast<int32_t>(0x01010101u * FinitePoisonByte());
  const Unwritten u = FindUnwritten(a, b);
  EXPECT_EQ(u.count, 1);
  EXPECT_EQ(u.first, 4);
  EXPECT_EQ(u.first_index, "[1, 1]");
  // A value equal to a poison but computed the same in both runs is written.
  a[0][0] = b[1][1];
  b[0][0] = b[1][1];
  EXPECT_EQ(FindUnwritten(a, b).count, 1);
  EXPECT_EQ(FindUnwritten(at::empty({0, 3}), at::empty({0, 3})).count, 0);
}

TEST(Guarded, EdgeCases) {
  auto empty = MakeGuarded(at::empty({0, 3}));
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->tensor.numel(), 0);
  EXPECT_TRUE(GuardsIntact(*empty));
  auto expanded = MakeGuarded(at::ones({3}, at::kHalf).expand({4, 3}), 16);
  ASSERT_TRUE(expanded.ok());
  EXPECT_EQ(expanded->tensor.strides(), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(expanded->storage.numel(), 16 + 3 * 2 + 16);
  EXPECT_TRUE(GuardsIntact(*expanded));
  EXPECT_FALSE(MakeGuarded(at::Tensor()).ok());
  EXPECT_FALSE(MakeGuarded(at::ones({2}), -1).ok());
  EXPECT_FALSE(GuardsIntact(GuardedTensor{}));
}

// Pieces cover every element once, in row-major order, whatever the shape and
// strides, so that a comparison made a piece at a time sees what a whole one does.
TEST(Pieces, CoverEveryElementInOrder) {
  const at::Tensor base = at::arange(2 * 3 * 5, at::kLong).reshape({2, 3, 5});
  for (const at::Tensor& t : {base, base.transpose(0, 2), base.narrow(2, 1, 3), base.select(1, 2), at::tensor(7)}) {
    for (int64_t piece : {1, 2, 4, 5, 7, 15, 16, 1000}) {
      std::vector<int64_t> seen;
      int64_t expected_first = 0;
      EXPECT_TRUE(ForEachPiece({t, t}, piece, [&](const std::vector<at::Tensor>& pieces, int64_t first) {
        EXPECT_EQ(first, expected_first);
        EXPECT_LE(pieces[0].numel(), piece);
        EXPECT_TRUE(pieces[0].equal(pieces[1]));
        const at::Tensor flat = pieces[0].contiguous().reshape({-1});
        for (int64_t i = 0; i < flat.numel(); ++i) seen.push_back(flat[i].item<int64_t>());
        expected_first += pieces[0].numel();
        return true;
      }));
      const at::Tensor whole = t.contiguous().reshape({-1});
      ASSERT_EQ(static_cast<int64_t>(seen.size()), whole.numel()) << "piece " << piece;
      for (int64_t i = 0; i < whole.numel(); ++i) EXPECT_EQ(seen[static_cast<size_t>(i)], whole[i].item<int64_t>());
    }
  }
  int calls = 0;
  EXPECT_FALSE(ForEachPiece({base}, 4, [&](const std::vector<at::Tensor>&, int64_t) { return ++calls < 2; }));
  EXPECT_EQ(calls, 2);  // stops when asked
}

// Comparisons made a piece at a time give the verdict, counts, first mismatch and
// statistics of one made whole.
TEST(Pieces, ComparisonsMatchWholeOnes) {
  at::Tensor expected = at::randn({6, 7}, at::kFloat).mul_(100);
  at::Tensor actual = expected.clone();
  actual[2][3] = actual[2][3] + 1;
  actual[4][6] = kNaN;
  actual[5][0] = actual[5][0] * (1 + 1e-7);  // within tolerance
  const at::Tensor exact = expected.to(at::kDouble);
  for (const Tolerance& tol : {DefaultTolerance(DType::kFloat32), Tolerance{0, 0, true}}) {
    const Comparison whole = Compare(actual, expected, tol, 1 << 20);
    for (int64_t piece : {1, 3, 7, 10}) {
      const Comparison pieces = Compare(actual, expected, tol, piece);
      EXPECT_EQ(pieces.ok, whole.ok);
      EXPECT_EQ(pieces.mismatches, whole.mismatches);
      EXPECT_EQ(pieces.first_mismatch, whole.first_mismatch);
      EXPECT_DOUBLE_EQ(pieces.max_abs_error, whole.max_abs_error);
      EXPECT_DOUBLE_EQ(pieces.max_rel_error, whole.max_rel_error);
      EXPECT_EQ(pieces.reason, whole.reason) << "piece " << piece;
    }
  }
  // Transposed: the first mismatch is counted in the actual tensor's row-major order.
  const Comparison t = Compare(actual.t(), expected.t(), DefaultTolerance(DType::kFloat32), 5);
  EXPECT_EQ(t.first_mismatch, 3 * 6 + 2);
  EXPECT_EQ(t.mismatches, 2);

  const Tolerance tol = DefaultTolerance(DType::kFloat32);
  const at::Tensor near = expected + expected.abs().mul(2e-6);
  const Comparison accuracy_whole = CompareAccuracy(near, expected, exact, tol, {}, 1 << 20);
  const Comparison accuracy_pieces = CompareAccuracy(near, expected, exact, tol, {}, 4);
  EXPECT_EQ(accuracy_pieces.ok, accuracy_whole.ok);
  EXPECT_NEAR(accuracy_pieces.max_abs_error, accuracy_whole.max_abs_error, 1e-12);
  EXPECT_EQ(CompareAccuracy(actual, expected, exact, tol, {}, 4).reason,
            CompareAccuracy(actual, expected, exact, tol, {}, 1 << 20).reason);
  // The summation bound's magnitudes are cut into the same pieces.
  const SummationBound bound{exact.abs().mul(1e3), 16};
  EXPECT_EQ(CompareAccuracy(actual, expected, exact, tol, bound, 4).reason,
            CompareAccuracy(actual, expected, exact, tol, bound, 1 << 20).reason);

  EXPECT_TRUE(BitwiseEqual(expected, expected.clone(), 5));
  EXPECT_FALSE(BitwiseEqual(actual, expected, 5));

  at::Tensor nan_run = at::arange(42, at::kFloat).reshape({6, 7});
  at::Tensor finite_run = nan_run.clone();
  nan_run.view(at::kInt)[3][5] = -1;  // 0xFFFFFFFF: the NaN poison, left unwritten
  nan_run.view(at::kInt)[5][1] = -1;
  const Unwritten u = FindUnwritten(nan_run, finite_run, 4);
  EXPECT_EQ(u.count, 2);
  EXPECT_EQ(u.first, 3 * 7 + 5);
  EXPECT_EQ(u.first_index, "[3, 5]");
}

TEST(Digest, EqualForEqualBytesAndDifferentOtherwise) {
  const at::Tensor a = at::randn({5, 9}, at::kFloat);
  EXPECT_EQ(DigestOf(a), DigestOf(a.clone()));
  EXPECT_EQ(DigestOf(a, 4), DigestOf(a, 1 << 20));  // pieces change nothing
  EXPECT_EQ(DigestOf(a.t().contiguous().t()), DigestOf(a));  // strides do not count, row-major values do
  at::Tensor b = a.clone();
  b[4][8] = b[4][8] + 1;
  EXPECT_NE(DigestOf(b), DigestOf(a));
  // Two elements swapped: the same bytes in other places.
  at::Tensor swapped = a.clone();
  swapped[0][0] = a[0][1];
  swapped[0][1] = a[0][0];
  EXPECT_NE(DigestOf(swapped), DigestOf(a));
  EXPECT_EQ(DigestOf(at::empty({0, 3})), Digest{});
}

}  // namespace
}  // namespace kjit::eval
