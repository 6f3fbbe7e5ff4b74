#include "kjit/evaluator/compare.h"

#include "kjit/evaluator/inputs.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <charconv>
#include <cstdio>
#include <string>
#include <utility>

namespace kjit::eval {
namespace {

constexpr uint8_t kGuardByte = 0xA5;

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

bool IsExact(const at::Tensor& t, const Tolerance& tol) {
  return tol.atol == 0 && tol.rtol == 0 && at::isIntegralType(t.scalar_type(), /*includeBool=*/true);
}

Comparison CompareImpl(const at::Tensor& actual, const at::Tensor& expected_in, const Tolerance& tol) {
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
  const at::Tensor expected = expected_in.device() == actual.device() ? expected_in : expected_in.to(actual.device());

  // Error statistics in float64 for every dtype; the verdict below uses exact integers or bytes where it must.
  const at::Tensor a = Float64Values(actual);
  const at::Tensor e = Float64Values(expected);
  const at::Tensor diff = (a - e).abs();
  const at::Tensor finite = a.isfinite().logical_and_(e.isfinite());
  const at::Tensor abs_err = at::where(finite, diff, 0.0);
  const at::Tensor rel_err = at::where(finite.logical_and(e.ne(0)), diff / e.abs(), 0.0);

  at::Tensor mismatch;  // bool, one per element, row-major
  at::Tensor actual_rows, expected_rows;
  if (tol.bitwise) {
    actual_rows = ByteRows(actual);
    expected_rows = ByteRows(expected);
    mismatch = actual_rows.ne(expected_rows).any(1);
  } else if (IsExact(actual, tol)) {
    mismatch = actual.reshape({-1}).to(at::kLong).ne(expected.reshape({-1}).to(at::kLong));
  } else {
    // `a == e` is what lets equal infinities (and -0.0 against 0.0) pass; the
    // finiteness test is what stops inf <= atol + rtol * inf passing.
    const at::Tensor close = a.eq(e).logical_or_(finite.logical_and(diff.le(e.abs().mul(tol.rtol).add(tol.atol))));
    mismatch = close.logical_or_(a.isnan().logical_and_(e.isnan())).logical_not_();
    if (mismatch.dim() == 2) mismatch = mismatch.any(1);
  }

  // One transfer for the counts on a GPU.
  const at::Tensor summary = at::stack({mismatch.sum().to(at::kDouble), abs_err.max(), rel_err.max()}).cpu();
  const double* s = summary.data_ptr<double>();
  c.mismatches = static_cast<int64_t>(s[0]);
  c.max_abs_error = s[1];
  c.max_rel_error = s[2];
  c.ok = c.mismatches == 0;
  if (c.ok) return c;

  // argmax returns the first of equal maxima: the first mismatch.
  c.first_mismatch = mismatch.to(at::kByte).argmax().item<int64_t>();
  const at::Tensor a_first = a[c.first_mismatch].cpu();
  const at::Tensor e_first = e[c.first_mismatch].cpu();
  c.actual_at_first = (a_first.dim() == 0 ? a_first : a_first[0]).item<double>();
  c.expected_at_first = (e_first.dim() == 0 ? e_first : e_first[0]).item<double>();

  std::string reason = std::to_string(c.mismatches) + " of " + std::to_string(n) + " elements differ" +
                       (tol.bitwise ? " bitwise" : "") + "; first at " + FormatIndex(c.first_mismatch, actual.sizes()) +
                       ": ";
  if (tol.bitwise) {
    reason += FormatValue(a, c.first_mismatch) + " (" + FormatBits(actual_rows, c.first_mismatch) + ") vs " +
              FormatValue(e, c.first_mismatch) + " (" + FormatBits(expected_rows, c.first_mismatch) + ")";
  } else {
    reason += FormatValue(a, c.first_mismatch) + " vs " + FormatValue(e, c.first_mismatch);
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

uint8_t PoisonByte(Poison poison) { return poison == Poison::kNaN ? 0xFF : 0x5A; }

}  // namespace

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

Comparison Compare(const at::Tensor& actual, const at::Tensor& expected, const Tolerance& tolerance) {
  try {
    return CompareImpl(actual, expected, tolerance);
  } catch (const c10::Error& e) {
    Comparison c;
    c.reason = FromTorchError(e, "comparison failed").message();
    return c;
  }
}

Comparison CompareAccuracy(const at::Tensor& actual, const at::Tensor& pytorch, const at::Tensor& exact,
                           const Tolerance& tol) {
  Comparison c;
  try {
    if (tol.bitwise || !actual.defined() || !at::isFloatingType(actual.scalar_type()) ||
        actual.sizes() != pytorch.sizes() || actual.sizes() != exact.sizes()) {
      c.reason = "no float64 accuracy comparison for this output";
      return c;
    }
    const at::Tensor a = Float64Values(actual);
    const at::Tensor t = Float64Values(pytorch.to(actual.device()));
    const at::Tensor x = Float64Values(exact.to(actual.device()));
    // Non-finite values: exactly PyTorch's (NaN where it has NaN, equal infinities).
    const at::Tensor t_finite = t.isfinite();
    const at::Tensor special_ok =
        at::where(t_finite, a.isfinite(), a.eq(t).logical_or_(a.isnan().logical_and_(t.isnan())));
    const int64_t special_bad = special_ok.logical_not().sum().item<int64_t>();
    if (special_bad > 0) {
      c.reason = std::to_string(special_bad) + " elements differ from PyTorch's in NaN or infinity";
      return c;
    }
    const at::Tensor measured = t_finite.logical_and(x.isfinite());
    const at::Tensor scale = x.abs().mul(tol.rtol).add(tol.atol);
    const at::Tensor abs_actual = at::where(measured, (a - x).abs(), 0.0);
    const at::Tensor abs_pytorch = at::where(measured, (t - x).abs(), 0.0);
    const at::Tensor counted = measured.sum().to(at::kDouble).clamp_min(1);
    auto rms = [&](const at::Tensor& e) { return e.square().sum().div(counted).sqrt(); };
    const at::Tensor stats =
        at::stack({rms(abs_actual), rms(abs_pytorch), rms(at::where(measured, scale, 0.0)), (abs_actual / scale).where(measured, 0.0).max(),
                   (abs_pytorch / scale).where(measured, 0.0).max(), (a - t).abs().where(measured, 0.0).max()})
            .cpu();
    const double* s = stats.data_ptr<double>();
    const double rms_limit = std::max(s[2], 4 * s[1]);
    const double worst_limit = std::max(1.0, 16 * s[4]);
    c.ok = s[0] <= rms_limit && s[3] <= worst_limit;
    c.max_abs_error = s[5];
    c.reason = "against a float64 computation: RMS error " + FormatDouble(s[0]) + " (PyTorch's " +
               FormatDouble(s[1]) + ", limit " + FormatDouble(rms_limit) + "), worst " + FormatDouble(s[3]) +
               " tolerance units (PyTorch's " + FormatDouble(s[4]) + ", limit " + FormatDouble(worst_limit) + ")";
  } catch (const c10::Error& e) {
    c.ok = false;
    c.reason = FromTorchError(e, "float64 accuracy comparison failed").message();
  }
  return c;
}

bool BitwiseEqual(const at::Tensor& a, const at::Tensor& b) {
  try {
    if (!a.defined() || !b.defined()) return a.defined() == b.defined();
    if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
    if (a.numel() == 0) return true;
    const at::Tensor other = b.device() == a.device() ? b : b.to(a.device());
    return at::equal(ByteRows(a), ByteRows(other));
  } catch (const c10::Error&) {
    return false;
  }
}

Unwritten FindUnwritten(const at::Tensor& after_nan, const at::Tensor& after_finite) {
  Unwritten u;
  if (after_nan.numel() == 0) return u;
  const at::Tensor a = ByteRows(after_nan);
  const at::Tensor b = ByteRows(after_finite);
  // Still the run's poison, and not what the other run computed there.
  const at::Tensor unwritten = a.eq(PoisonByte(Poison::kNaN))
                                   .all(1)
                                   .logical_or(b.eq(PoisonByte(Poison::kFinite)).all(1))
                                   .logical_and(a.eq(b).all(1).logical_not());
  u.count = unwritten.sum().item<int64_t>();
  if (u.count > 0) {
    u.first = unwritten.to(at::kByte).argmax().item<int64_t>();
    u.first_index = FormatIndex(u.first, after_nan.sizes());
  }
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

Result<GuardedTensor> MakeGuarded(const at::Tensor& like, int64_t guard_bytes) {
  if (!like.defined()) return InvalidArgument("MakeGuarded needs a defined tensor");
  if (guard_bytes < 0) return InvalidArgument("negative guard size");
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
                          at::TensorOptions().dtype(at::kByte).device(like.device()));
    at::Tensor keep = g.storage;
    // A storage of its own (not a view of g.storage), so that PoisonStorage on
    // it stays inside it.
    at::Tensor base = at::for_blob(static_cast<uint8_t*>(g.storage.data_ptr()) + g.tensor_offset_bytes, {extent})
                          .options(at::TensorOptions().dtype(like.scalar_type()).device(like.device()))
                          .target_device(like.device())
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
    guarded.storage.fill_(kGuardByte);
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
    return at::cat({front, back}).eq(kGuardByte).all().item<bool>();
  } catch (const c10::Error&) {
    return false;
  }
}

}  // namespace kjit::eval
