#include "kjit/evaluator/compare.h"

#include "kjit/evaluator/inputs.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace kjit::eval {
namespace {

// Relaxed atomics: one evaluation at a time sets them (ChoosePatterns) before its buffers are poisoned.
std::atomic<uint8_t> g_finite_byte{0x5A};
std::atomic<uint8_t> g_guard_byte{0xA5};

Status FromTorchError(const c10::Error& e, std::string_view what) {
  std::string message = std::string(what) + ": " + e.what_without_backtrace();
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) return {StatusCode::kUnavailable, message};
  if (dynamic_cast<const c10::AcceleratorError*>(&e) != nullptr) return {StatusCode::kCudaError, message};
  return Internal(std::move(message));
}

// Shortest text that reads back as the same double ("1e-05", "0.1", "-inf", "nan").
std::string FormatDouble(double v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

std::string FormatSizes(at::IntArrayRef sizes) {
  std::string out = "[";
  for (size_t i = 0; i < sizes.size(); ++i) out += (i ? ", " : "") + std::to_string(sizes[i]);
  return out + "]";
}

// The multi-index of a row-major flat index: "[3, 17]".
std::string FormatIndex(int64_t flat, at::IntArrayRef sizes) {
  std::vector<int64_t> index(sizes.size());
  for (size_t i = sizes.size(); i-- > 0;) {
    index[i] = flat % sizes[i];
    flat /= sizes[i];
  }
  return FormatSizes(index);
}

// One row of bytes per element, in row-major order: [numel, itemsize].
at::Tensor ByteRows(const at::Tensor& t) {
  return t.contiguous().reshape({-1}).view(at::kByte).reshape({t.numel(), static_cast<int64_t>(t.element_size())});
}

// The bytes of one element as a little-endian number: "0x8000" for float16 -0.0.
std::string FormatBits(const at::Tensor& rows, int64_t index) {
  at::Tensor row = rows[index].cpu();
  const uint8_t* bytes = row.data_ptr<uint8_t>();
  std::string out = "0x";
  for (int64_t i = row.numel(); i-- > 0;) {
    char hex[3];
    std::snprintf(hex, sizeof(hex), "%02x", bytes[i]);
    out += hex;
  }
  return out;
}

// Flat (row-major) float64 values; complex tensors as [numel, 2] (real, imaginary).
at::Tensor Float64Values(const at::Tensor& t) {
  if (t.is_complex()) return at::view_as_real(t.to(at::kComplexDouble).reshape({-1}));
  return t.reshape({-1}).to(at::kDouble);
}

std::string FormatValue(const at::Tensor& values, int64_t index) {
  at::Tensor v = values[index].cpu();
  if (v.dim() == 0) return FormatDouble(v.item<double>());
  return "(" + FormatDouble(v[0].item<double>()) + ", " + FormatDouble(v[1].item<double>()) + ")";
}

// ForEachPiece, for the pieces of `tensors` whose first element has flat index `first`.
bool ForEachPieceFrom(const std::vector<at::Tensor>& tensors, int64_t piece_elements,
                      const std::function<bool(const std::vector<at::Tensor>&, int64_t)>& fn, int64_t first) {
  const at::Tensor& t = tensors.front();
  const int64_t n = t.numel();
  if (n <= piece_elements || t.dim() == 0) return fn(tensors, first);
  // n > 0 here, so no size is 0.
  const int64_t rows = t.size(0);
  const int64_t per_row = n / rows;
  auto each = [&](auto&& view) {
    std::vector<at::Tensor> out;
    out.reserve(tensors.size());
    for (const at::Tensor& x : tensors) out.push_back(view(x));
    return out;
  };
  if (per_row <= piece_elements) {
    // Whole rows of the first dim, as many as fit in a piece.
    const int64_t step = piece_elements / per_row;
    for (int64_t r = 0; r < rows; r += step) {
      const int64_t count = std::min(step, rows - r);
      if (!fn(each([&](const at::Tensor& x) { return x.narrow(0, r, count); }), first + r * per_row)) return false;
    }
    return true;
  }
  // A row of the first dim is itself too large: split each row along the next dim.
  for (int64_t r = 0; r < rows; ++r) {
    if (!ForEachPieceFrom(each([&](const at::Tensor& x) { return x.select(0, r); }), piece_elements, fn,
                          first + r * per_row)) {
      return false;
    }
  }
  return true;
}

bool IsExact(const at::Tensor& t, const Tolerance& tol) {
  return tol.atol == 0 && tol.rtol == 0 && at::isIntegralType(t.scalar_type(), /*includeBool=*/true);
}

Comparison CompareImpl(const at::Tensor& actual, const at::Tensor& expected_in, const Tolerance& tol,
                       int64_t piece_elements) {
  Comparison c;
  if (!actual.defined() || !expected_in.defined()) {
    c.ok = actual.defined() == expected_in.defined();
    if (!c.ok) c.reason = actual.defined() ? "expected is an undefined tensor" : "actual is an undefined tensor";
    return c;
  }
  if (actual.scalar_type() != expected_in.scalar_type()) {
    c.reason = std::string("dtypes differ: actual ") + c10::toString(actual.scalar_type()) + ", expected " +
               c10::toString(expected_in.scalar_type());
    return c;
  }
  if (actual.sizes() != expected_in.sizes()) {
    c.reason = "sizes differ: actual " + FormatSizes(actual.sizes()) + ", expected " + FormatSizes(expected_in.sizes());
    return c;
  }
  const int64_t n = actual.numel();
  if (n == 0) {
    c.ok = true;
    return c;
  }

  std::string first_values;  // "actual vs expected" at the first mismatch, from its piece
  ForEachPiece({actual, expected_in}, piece_elements, [&](const std::vector<at::Tensor>& pieces, int64_t first) {
    const at::Tensor& act = pieces[0];
    const at::Tensor expected = pieces[1].device() == act.device() ? pieces[1] : pieces[1].to(act.device());
    // Error statistics in float64 for every dtype; the verdict below uses exact integers or bytes where it must.
    const at::Tensor a = Float64Values(act);
    const at::Tensor e = Float64Values(expected);
    const at::Tensor diff = (a - e).abs();
    const at::Tensor finite = a.isfinite().logical_and_(e.isfinite());
    const at::Tensor abs_err = at::where(finite, diff, 0.0);
    const at::Tensor rel_err = at::where(finite.logical_and(e.ne(0)), diff / e.abs(), 0.0);

    at::Tensor mismatch;  // bool, one per element, row-major
    at::Tensor actual_rows, expected_rows;
    if (tol.bitwise) {
      actual_rows = ByteRows(act);
      expected_rows = ByteRows(expected);
      mismatch = actual_rows.ne(expected_rows).any(1);
    } else if (IsExact(act, tol)) {
      mismatch = act.reshape({-1}).to(at::kLong).ne(expected.reshape({-1}).to(at::kLong));
    } else {
      // `a == e` is what lets equal infinities (and -0.0 against 0.0) pass; the
      // finiteness test is what stops inf <= atol + rtol * inf passing.
      const at::Tensor close = a.eq(e).logical_or_(finite.logical_and(diff.le(e.abs().mul(tol.rtol).add(tol.atol))));
      mismatch = close.logical_or_(a.isnan().logical_and_(e.isnan())).logical_not_();
      if (mismatch.dim() == 2) mismatch = mismatch.any(1);
    }

    // One transfer per piece for the counts on a GPU.
    const at::Tensor summary = at::stack({mismatch.sum().to(at::kDouble), abs_err.max(), rel_err.max()}).cpu();
    const double* s = summary.data_ptr<double>();
    const auto piece_mismatches = static_cast<int64_t>(s[0]);
    c.mismatches += piece_mismatches;
    c.max_abs_error = std::max(c.max_abs_error, s[1]);
    c.max_rel_error = std::max(c.max_rel_error, s[2]);
    if (piece_mismatches == 0 || c.first_mismatch >= 0) return true;

    // argmax returns the first of equal maxima: the first mismatch.
    const int64_t local = mismatch.to(at::kByte).argmax().item<int64_t>();
    c.first_mismatch = first + local;
    const at::Tensor a_first = a[local].cpu();
    const at::Tensor e_first = e[local].cpu();
    c.actual_at_first = (a_first.dim() == 0 ? a_first : a_first[0]).item<double>();
    c.expected_at_first = (e_first.dim() == 0 ? e_first : e_first[0]).item<double>();
    if (tol.bitwise) {
      first_values = FormatValue(a, local) + " (" + FormatBits(actual_rows, local) + ") vs " + FormatValue(e, local) +
                     " (" + FormatBits(expected_rows, local) + ")";
    } else {
      first_values = FormatValue(a, local) + " vs " + FormatValue(e, local);
    }
    return true;
  });
  c.ok = c.mismatches == 0;
  if (c.ok) return c;

  std::string reason = std::to_string(c.mismatches) + " of " + std::to_string(n) + " elements differ" +
                       (tol.bitwise ? " bitwise" : "") + "; first at " + FormatIndex(c.first_mismatch, actual.sizes()) +
                       ": " + first_values;
  if (!tol.bitwise) {
    if (IsExact(actual, tol)) {
      reason += " (exact)";
    } else {
      reason += " (atol " + FormatDouble(tol.atol) + ", rtol " + FormatDouble(tol.rtol) + ")";
    }
  }
  reason += "; max abs error " + FormatDouble(c.max_abs_error) + ", max rel error " + FormatDouble(c.max_rel_error);
  c.reason = std::move(reason);
  return c;
}

uint8_t PoisonByte(Poison poison) { return poison == Poison::kNaN ? 0xFF : FinitePoisonByte(); }

}  // namespace

void ChoosePatterns(uint64_t seed) {
  std::mt19937_64 rng(seed);
  // Finite and nonzero in every float type when repeated (see compare.h).
  // Never the defaults either: they are written in this file for anyone to read.
  auto finite = [](unsigned b) { return b != 0x00 && (b & 0x7C) != 0x7C && b != 0x5A && b != 0xA5; };
  unsigned b = 0;
  do {
    b = static_cast<unsigned>(rng() & 0xFF);
  } while (!finite(b));
  g_finite_byte.store(static_cast<uint8_t>(b), std::memory_order_relaxed);
  unsigned guard = 0;
  do {
    guard = static_cast<unsigned>(1 + rng() % 254);  // 0x01-0xFE
  } while (guard == 0x5A || guard == 0xA5);
  g_guard_byte.store(static_cast<uint8_t>(guard), std::memory_order_relaxed);
}

uint8_t FinitePoisonByte() { return g_finite_byte.load(std::memory_order_relaxed); }
uint8_t GuardByte() { return g_guard_byte.load(std::memory_order_relaxed); }

Tolerance DefaultTolerance(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return {1e-5, 1e-3, false};
    case DType::kBFloat16: return {1e-5, 1.6e-2, false};
    case DType::kFloat32:
    case DType::kComplex64: return {1e-5, 1.3e-6, false};
    case DType::kFloat64:
    case DType::kComplex128: return {1e-7, 1e-7, false};
    default: return {};  // integers, bool, and float8 (which assert_close also compares exactly)
  }
}

Tolerance ToleranceFor(DType dtype, const OpTraits& traits) {
  if (traits.compare == ComparePolicy::kBitwise) return {0, 0, true};
  Tolerance t = DefaultTolerance(dtype);
  // Overrides loosen float results; an op's integer outputs (indices, counts) stay exact.
  if (IsIntegral(dtype)) return t;
  if (auto it = traits.tolerance_by_dtype.find(dtype); it != traits.tolerance_by_dtype.end()) {
    t.atol = it->second.atol;
    t.rtol = it->second.rtol;
    return t;
  }
  if (traits.atol) t.atol = *traits.atol;
  if (traits.rtol) t.rtol = *traits.rtol;
  return t;
}

Comparison Compare(const at::Tensor& actual, const at::Tensor& expected, const Tolerance& tolerance,
                   int64_t piece_elements) {
  try {
    return CompareImpl(actual, expected, tolerance, piece_elements);
  } catch (const c10::Error& e) {
    Comparison c;
    c.reason = FromTorchError(e, "comparison failed").message();
    return c;
  }
}

double Float32SummationGamma(int64_t terms) {
  const double ku = static_cast<double>(std::max<int64_t>(terms, 0)) * 0x1p-24;
  return ku < 1 ? ku / (1 - ku) : std::numeric_limits<double>::infinity();
}

Comparison CompareAccuracy(const at::Tensor& actual, const at::Tensor& pytorch, const at::Tensor& exact,
                           const Tolerance& tol, const SummationBound& summation, int64_t piece_elements) {
  Comparison c;
  try {
    if (tol.bitwise || !actual.defined() || !at::isFloatingType(actual.scalar_type()) ||
        actual.sizes() != pytorch.sizes() || actual.sizes() != exact.sizes()) {
      c.reason = "no float64 accuracy comparison for this output";
      return c;
    }
    const bool bounded = summation.magnitude.defined() && summation.terms > 0;
    if (bounded && summation.magnitude.sizes() != exact.sizes()) {
      c.reason = "the summation bound's magnitudes do not have the output's sizes";
      return c;
    }
    // The largest finite value of the output's dtype: a float64 result beyond it rounds to an infinity.
    double max_finite = std::numeric_limits<double>::max();
    switch (actual.scalar_type()) {
      case at::kHalf: max_finite = static_cast<double>(std::numeric_limits<c10::Half>::max()); break;
      case at::kBFloat16: max_finite = static_cast<double>(std::numeric_limits<c10::BFloat16>::max()); break;
      case at::kFloat: max_finite = static_cast<double>(std::numeric_limits<float>::max()); break;
      default: break;
    }
    // The error a float32 order may make, carried through the output's own rounding (rtol).
    const double gamma = bounded ? Float32SummationGamma(summation.terms) * (1 + tol.rtol) : 0;
    std::vector<at::Tensor> judged{actual, pytorch, exact};
    if (bounded) judged.push_back(summation.magnitude);
    // Sums and maxima over every piece: [special_bad, counted, sum of squares of the candidate's error, of
    // PyTorch's error and of the tolerance's scale, worst candidate and PyTorch error in tolerance units,
    // worst |candidate - PyTorch|].
    double totals[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    ForEachPiece(judged, piece_elements, [&](const std::vector<at::Tensor>& pieces, int64_t) {
      const at::Tensor a = Float64Values(pieces[0]);
      const at::Tensor t = Float64Values(pieces[1].to(pieces[0].device()));
      const at::Tensor x = Float64Values(pieces[2].to(pieces[0].device()));
      // Non-finite values: exactly PyTorch's (NaN where it has NaN, equal infinities), except where PyTorch
      // overflowed and the truth did not: an infinity of PyTorch's where the float64 result is finite and within
      // the output dtype's range is an intermediate of PyTorch's own that overflowed (a float16 batch norm
      // backward on an H100, every element -Inf against a true -120); a finite candidate within the tolerance of
      // the float64 result is the more accurate one there.
      const at::Tensor t_finite = t.isfinite();
      at::Tensor scale = x.abs().mul(tol.rtol).add(tol.atol);
      if (bounded) scale = scale.add(Float64Values(pieces[3].to(pieces[0].device())).abs().mul(gamma));
      const at::Tensor overflowed = t.isinf().logical_and_(x.abs().le(max_finite)).logical_and_(a.isfinite());
      const at::Tensor overflow_ok = overflowed.logical_and((a - x).abs().le(scale));
      const at::Tensor special_ok = at::where(
          t_finite, a.isfinite(), a.eq(t).logical_or_(a.isnan().logical_and_(t.isnan())).logical_or_(overflow_ok));
      const at::Tensor measured = t_finite.logical_and(x.isfinite());
      const at::Tensor abs_actual = at::where(measured, (a - x).abs(), 0.0);
      const at::Tensor abs_pytorch = at::where(measured, (t - x).abs(), 0.0);
      const at::Tensor stats =
          at::stack({special_ok.logical_not().sum().to(at::kDouble), measured.sum().to(at::kDouble),
                     abs_actual.square().sum(), abs_pytorch.square().sum(), at::where(measured, scale, 0.0).square().sum(),
                     (abs_actual / scale).where(measured, 0.0).max(), (abs_pytorch / scale).where(measured, 0.0).max(),
                     (a - t).abs().where(measured, 0.0).max()})
              .cpu();
      const double* s = stats.data_ptr<double>();
      for (int i = 0; i < 5; ++i) totals[i] += s[i];
      for (int i = 5; i < 8; ++i) totals[i] = std::max(totals[i], s[i]);
      return true;
    });
    const auto special_bad = static_cast<int64_t>(totals[0]);
    if (special_bad > 0) {
      c.reason = std::to_string(special_bad) + " elements differ from PyTorch's in NaN or infinity";
      return c;
    }
    const double counted = std::max(totals[1], 1.0);
    const double rms_actual = std::sqrt(totals[2] / counted);
    const double rms_pytorch = std::sqrt(totals[3] / counted);
    const double rms_scale = std::sqrt(totals[4] / counted);
    const double rms_limit = std::max(rms_scale, 4 * rms_pytorch);
    const double worst_limit = std::max(1.0, 16 * totals[6]);
    c.ok = rms_actual <= rms_limit && totals[5] <= worst_limit;
    c.max_abs_error = totals[7];
    c.reason = "against a float64 computation: RMS error " + FormatDouble(rms_actual) + " (PyTorch's " +
               FormatDouble(rms_pytorch) + ", limit " + FormatDouble(rms_limit) + "), worst " + FormatDouble(totals[5]) +
               " tolerance units (PyTorch's " + FormatDouble(totals[6]) + ", limit " + FormatDouble(worst_limit) + ")" +
               (bounded ? ", each allowing float32 summation's error over " + std::to_string(summation.terms) + " terms"
                        : std::string());
  } catch (const c10::Error& e) {
    c.ok = false;
    c.reason = FromTorchError(e, "float64 accuracy comparison failed").message();
  }
  return c;
}

bool BitwiseEqual(const at::Tensor& a, const at::Tensor& b, int64_t piece_elements) {
  try {
    if (!a.defined() || !b.defined()) return a.defined() == b.defined();
    if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
    if (a.numel() == 0) return true;
    return ForEachPiece({a, b}, piece_elements, [](const std::vector<at::Tensor>& pieces, int64_t) {
      const at::Tensor other = pieces[1].device() == pieces[0].device() ? pieces[1] : pieces[1].to(pieces[0].device());
      return at::equal(ByteRows(pieces[0]), ByteRows(other));
    });
  } catch (const c10::Error&) {
    return false;
  }
}

Digest DigestOf(const at::Tensor& t, int64_t piece_elements) {
  Digest d;
  if (!t.defined() || t.numel() == 0) return d;
  constexpr int64_t kModulus = 65521;  // the largest prime below 2^16: weights stay small, sums far from int64's limit
  const int64_t itemsize = static_cast<int64_t>(t.element_size());
  ForEachPiece({t}, piece_elements, [&](const std::vector<at::Tensor>& pieces, int64_t first) {
    const at::Tensor bytes = ByteRows(pieces[0]).reshape({-1}).to(at::kLong);
    const at::Tensor weights =
        at::arange(first * itemsize, first * itemsize + bytes.numel(), bytes.options()).remainder_(kModulus).add_(1);
    const at::Tensor sums = at::stack({bytes.sum(), bytes.mul(weights).sum()}).cpu();
    d.byte_sum += static_cast<uint64_t>(sums[0].item<int64_t>());
    d.weighted_sum += static_cast<uint64_t>(sums[1].item<int64_t>());
    return true;
  });
  return d;
}

bool ForEachPiece(const std::vector<at::Tensor>& tensors, int64_t piece_elements,
                  const std::function<bool(const std::vector<at::Tensor>& pieces, int64_t first)>& fn) {
  return ForEachPieceFrom(tensors, std::max<int64_t>(piece_elements, 1), fn, 0);
}

Unwritten FindUnwritten(const at::Tensor& after_nan, const at::Tensor& after_finite, int64_t piece_elements) {
  Unwritten u;
  if (after_nan.numel() == 0) return u;
  ForEachPiece({after_nan, after_finite}, piece_elements, [&](const std::vector<at::Tensor>& pieces, int64_t first) {
    const at::Tensor a = ByteRows(pieces[0]);
    const at::Tensor b = ByteRows(pieces[1]);
    // Still the run's poison, and not what the other run computed there.
    const at::Tensor unwritten = a.eq(PoisonByte(Poison::kNaN))
                                     .all(1)
                                     .logical_or(b.eq(PoisonByte(Poison::kFinite)).all(1))
                                     .logical_and(a.eq(b).all(1).logical_not());
    const int64_t count = unwritten.sum().item<int64_t>();
    if (count > 0 && u.first < 0) u.first = first + unwritten.to(at::kByte).argmax().item<int64_t>();
    u.count += count;
    return true;
  });
  if (u.count > 0) u.first_index = FormatIndex(u.first, after_nan.sizes());
  return u;
}

void PoisonStorage(const at::Tensor& tensor, Poison poison) {
  if (!tensor.defined() || !tensor.has_storage() || tensor.storage().nbytes() == 0) return;
  try {
    StorageBytes(tensor).fill_(PoisonByte(poison));
  } catch (const c10::Error&) {
    // Only a broken device (a sticky CUDA error) gets here; the candidate's
    // launch that follows fails on it too and reports it.
  }
}

Result<GuardedTensor> MakeGuarded(const at::Tensor& like, int64_t guard_bytes, std::optional<c10::Device> on) {
  if (!like.defined()) return InvalidArgument("MakeGuarded needs a defined tensor");
  if (guard_bytes < 0) return InvalidArgument("negative guard size");
  const c10::Device device = on.value_or(like.device());
  try {
    const int64_t itemsize = static_cast<int64_t>(like.element_size());
    int64_t extent = 0;
    if (like.numel() > 0) {
      extent = 1;
      for (int64_t d = 0; d < like.dim(); ++d) extent += (like.size(d) - 1) * like.stride(d);
    }
    GuardedTensor g;
    g.guard_bytes = guard_bytes;
    // Rounded up so that the tensor is as aligned as the allocation (PyTorch's are).
    g.tensor_offset_bytes = (guard_bytes + 15) / 16 * 16;
    const int64_t nbytes = extent * itemsize;
    g.storage = at::empty({g.tensor_offset_bytes + nbytes + guard_bytes},
                          at::TensorOptions().dtype(at::kByte).device(device));
    at::Tensor keep = g.storage;
    // A storage of its own (not a view of g.storage), so that PoisonStorage on
    // it stays inside it.
    at::Tensor base = at::for_blob(static_cast<uint8_t*>(g.storage.data_ptr()) + g.tensor_offset_bytes, {extent})
                          .options(at::TensorOptions().dtype(like.scalar_type()).device(device))
                          .target_device(device)
                          .deleter([keep](void*) {})
                          .make_tensor();
    g.tensor = base.as_strided(like.sizes(), like.strides(), 0);
    ResetGuarded(g, Poison::kNaN);
    return g;
  } catch (const c10::Error& e) {
    return FromTorchError(e, "making a guarded output");
  }
}

void ResetGuarded(const GuardedTensor& guarded, Poison poison) {
  if (!guarded.storage.defined()) return;
  try {
    guarded.storage.fill_(GuardByte());
  } catch (const c10::Error&) {
    return;  // as in PoisonStorage
  }
  PoisonStorage(guarded.tensor, poison);
}

bool GuardsIntact(const GuardedTensor& guarded) {
  if (!guarded.storage.defined()) return false;
  try {
    const int64_t total = guarded.storage.numel();
    const int64_t tensor_end = guarded.tensor_offset_bytes + static_cast<int64_t>(guarded.tensor.storage().nbytes());
    const at::Tensor front = guarded.storage.narrow(0, 0, guarded.tensor_offset_bytes);
    const at::Tensor back = guarded.storage.narrow(0, tensor_end, total - tensor_end);
    return at::cat({front, back}).eq(GuardByte()).all().item<bool>();
  } catch (const c10::Error&) {
    return false;
  }
}

}  // namespace kjit::eval
