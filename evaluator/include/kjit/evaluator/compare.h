// How a candidate's outputs are judged against PyTorch's.
//
// kClose follows torch.testing.assert_close: |actual - expected| <= atol +
// rtol * |expected| elementwise, with the default tolerances per dtype (float16
// 1e-3/1e-5, bfloat16 1.6e-2/1e-5, float32 1.3e-6/1e-5, float64 1e-7/1e-7,
// integers and bool exact); NaN must appear where, and only where, the
// reference has NaN; infinities must match exactly; -0.0 equals 0.0. kBitwise
// requires every byte of every element to be equal.
//
// Memory: outputs of several GB are compared piece by piece (row-major runs of
// at most kComparePieceElements elements), so the float64 temporaries of a
// comparison take a bounded amount of device memory (about
// kCompareBytesPerElement x kComparePieceElements) whatever the output's size,
// instead of several float64 copies of the whole output. The verdict and its
// statistics are those of one pass over the whole tensor.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kjit/policy/op_traits.h"
#include "kjit/runtime/op_key.h"
#include "kjit/runtime/status.h"

namespace kjit::eval {

// Op traits are declared by op families in policy/.
using policy::ComparePolicy;
using policy::DeclareOpTraits;
using policy::DefaultOpTraits;
using policy::IntDomain;
using policy::OpTraits;
using policy::TraitsFor;

// Elements per piece of a comparison or scan.
inline constexpr int64_t kComparePieceElements = int64_t{1} << 22;
// Device bytes a comparison's temporaries take per element of a piece, at most
// (float64 copies, differences, masks; complex values count twice).
inline constexpr int64_t kCompareBytesPerElement = 160;

struct Tolerance {
  double atol = 0;
  double rtol = 0;
  bool bitwise = false;
};

// assert_close's defaults for a dtype; exact for integer and bool types.
Tolerance DefaultTolerance(DType dtype);
// The tolerance for an output of an op with `traits`: overrides, bitwise policy, or the default.
// The atol/rtol overrides apply to float outputs only; integer and bool outputs stay exact.
Tolerance ToleranceFor(DType dtype, const OpTraits& traits);

struct Comparison {
  bool ok = false;
  int64_t mismatches = 0;      // elements outside tolerance
  int64_t first_mismatch = -1;  // flat (row-major) index of the first, -1 if none
  double actual_at_first = 0;
  double expected_at_first = 0;
  double max_abs_error = 0;  // over finite pairs
  double max_rel_error = 0;  // over finite pairs whose expected value is not 0
  std::string reason;  // empty when ok, else e.g. "12 of 4096 elements differ; first at [3, 17]: 0.5 vs 0.25 (atol 1e-05, rtol 1.3e-06)"
};

// Compares two tensors of the same dtype and sizes (strides may differ). Works
// on any device (expected is moved to actual's if they differ); sizes or dtype
// that differ are a failed comparison, not an error. Complex values are compared
// part by part. Float values are compared in float64, integers as int64.
// `piece_elements` is for tests; see kComparePieceElements.
Comparison Compare(const at::Tensor& actual, const at::Tensor& expected, const Tolerance& tolerance,
                   int64_t piece_elements = kComparePieceElements);

// The second chance of a floating-point output that fails Compare against
// PyTorch's result: no less accurate than PyTorch. Where an op's result is
// ill-conditioned (a mean of values around 1e6 that nearly cancel, a layer
// norm of such rows), two correct float32 kernels that sum in different orders
// differ by far more than assert_close allows, and neither is the truth.
// `exact` is the op computed in float64 on the same inputs. The candidate
// passes if NaN and infinities appear exactly where PyTorch's result has them
// (as in Compare; but where PyTorch's is an infinity and `exact` is finite and
// within the output dtype's range, PyTorch overflowed in an intermediate: a
// finite candidate within the tolerance of `exact` passes there) and, against
// `exact`:
//   - its root-mean-square error is at most 4x PyTorch's (or within the
//     tolerance's own RMS): a different reduction order or tree shape changes
//     float32 error by a small factor, a wrong formula (one-pass variance) or
//     a wrong element by orders of magnitude;
//   - its worst error in units of the tolerance (|x - exact| / (atol + rtol *
//     |exact|)) is at most 16x PyTorch's worst (or 1): single-element bugs.
// On the H200, norm kernels reducing in other orders than PyTorch's were seen
// 2-9x PyTorch's worst elementwise error on inputs of magnitude 1e4..1e6.
//
// `summation`, for ops whose outputs are sums of K products (OpTraits::
// sum_of_products): `magnitude` is the op in float64 on the inputs' absolute
// values (sum |a||b| per output) and `terms` is K. Each element's tolerance
// then also holds gamma_K * magnitude (gamma_K = K u / (1 - K u), u = 2^-24:
// Higham's bound on a float32 dot product's error in any order). Near
// cancellation PyTorch's order may land far closer to the truth than another
// correct float32 order; an order that drops or doubles a term still errs by
// that term, far more than the bound wherever the terms do not cancel.
struct SummationBound {
  at::Tensor magnitude;  // undefined: no bound (the other ops)
  int64_t terms = 0;
};
double Float32SummationGamma(int64_t terms);
Comparison CompareAccuracy(const at::Tensor& actual, const at::Tensor& pytorch, const at::Tensor& exact,
                           const Tolerance& tolerance, const SummationBound& summation = {},
                           int64_t piece_elements = kComparePieceElements);

// True if every element's bytes are equal (same dtype and sizes required).
bool BitwiseEqual(const at::Tensor& a, const at::Tensor& b, int64_t piece_elements = kComparePieceElements);

// A summary of a tensor's element bytes in row-major order, to tell whether two
// tensors of the same dtype and sizes differ without keeping both resident
// (the evaluator asks whether the reference changed from one input set to the
// next). Equal tensors have equal digests; different ones almost always differ.
struct Digest {
  uint64_t byte_sum = 0;       // sum of the bytes
  uint64_t weighted_sum = 0;   // sum of byte x (1 + its position mod 65521)
  bool operator==(const Digest&) const = default;
};
// Of a defined tensor; an empty tensor's is zero. Throws c10::Error as ATen does.
Digest DigestOf(const at::Tensor& t, int64_t piece_elements = kComparePieceElements);

// Calls `fn(pieces, first)` for consecutive row-major pieces of `tensors` (all of
// one shape), each of at most `piece_elements` elements (or one element where
// the shape allows no less), `first` being the flat index of the piece's first
// element; views, no copies. Stops when fn returns false, and returns false then.
bool ForEachPiece(const std::vector<at::Tensor>& tensors, int64_t piece_elements,
                  const std::function<bool(const std::vector<at::Tensor>& pieces, int64_t first)>& fn);

// Poison patterns written over the whole storage of an output before a
// candidate runs, so elements it does not write show up.
enum class Poison {
  kNaN,     // all bytes 0xFF: a NaN in every float type, -1 in signed integers
  kFinite,  // all bytes FinitePoisonByte(): a finite value in every float type (a
            // NaN-free pattern for the places where the reference itself is NaN)
};

// The finite poison's byte and the guard bytes' (MakeGuarded) are drawn anew for
// each evaluation (ChoosePatterns), so that a kernel cannot recognise the
// evaluator's buffers by a fixed pattern. The finite byte is one whose repetition
// is finite and not zero in float16, bfloat16, float32 and float64: not 0x00,
// 0x7C-0x7F or 0xFC-0xFF. Before any ChoosePatterns: 0x5A and 0xA5, which ChoosePatterns never picks.
void ChoosePatterns(uint64_t seed);
uint8_t FinitePoisonByte();
uint8_t GuardByte();
// Fills every byte of `tensor`'s storage (not just the view) with the pattern.
// Asynchronous on a GPU (stream-ordered like any ATen op). If the device is
// broken (a sticky CUDA error) it does nothing: the launch that follows fails too.
void PoisonStorage(const at::Tensor& tensor, Poison poison);

// The elements a kernel did not write, from two runs on the same inputs: one
// after PoisonStorage(kNaN), one after PoisonStorage(kFinite). An element is
// unwritten if it still holds its run's poison and the two runs disagree on it
// (a computed value is the same in both).
struct Unwritten {
  int64_t count = 0;
  int64_t first = -1;       // flat (row-major) index of the first, -1 if none
  std::string first_index;  // its multi-index, e.g. "[3, 17]"
};
Unwritten FindUnwritten(const at::Tensor& after_nan, const at::Tensor& after_finite,
                        int64_t piece_elements = kComparePieceElements);

// An output tensor laid out like `like` (sizes, strides, dtype, device; storage
// offset 0 and 16-byte aligned, as PyTorch allocates outputs) inside a storage
// with guard bytes on both sides, so writes just outside it can be seen. The
// tensor has a storage of its own (PoisonStorage on it leaves the guards alone)
// and starts poisoned with Poison::kNaN. GuardsIntact is false if any guard
// byte changed since MakeGuarded or the last ResetGuarded.
struct GuardedTensor {
  at::Tensor tensor;   // the view handed to the candidate
  at::Tensor storage;  // uint8 bytes: guard | tensor storage | guard
  int64_t guard_bytes = 0;          // after the tensor; before it, tensor_offset_bytes
  int64_t tensor_offset_bytes = 0;  // guard_bytes rounded up to a multiple of 16
};
// `on`: the device to allocate on, where `like` is elsewhere (a meta tensor that only describes the layout).
inline constexpr int64_t kDefaultGuardBytes = 4096;
Result<GuardedTensor> MakeGuarded(const at::Tensor& like, int64_t guard_bytes = kDefaultGuardBytes,
                                  std::optional<c10::Device> on = std::nullopt);
// Re-fills the guards (GuardByte()) and poisons the tensor's own bytes.
void ResetGuarded(const GuardedTensor& guarded, Poison poison);
bool GuardsIntact(const GuardedTensor& guarded);

}  // namespace kjit::eval
