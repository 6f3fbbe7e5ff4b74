// Inputs for an OpKey: tensors whose dtype, sizes, strides, storage offset and
// data-pointer alignment are exactly the key's, filled from a chosen value
// distribution, and the boxed-call arguments (IValues) that carry them.
//
// The same seed always yields the same values on the same kind of device (the
// CPU, or one GPU model under one PyTorch version), so a failing case can be
// reproduced and reported by (kind, seed).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <string_view>
#include <vector>

#include "kjit/policy/op_traits.h"
#include "kjit/runtime/op_key.h"
#include "kjit/runtime/status.h"

namespace kjit::eval {

// Op traits are declared by op families in policy/.
using policy::ComparePolicy;
using policy::DeclareOpTraits;
using policy::DefaultOpTraits;
using policy::DerivedInput;
using policy::IntDomain;
using policy::OpTraits;
using policy::TraitsFor;

// Value distributions for floating-point tensors. Integer and bool tensors
// draw from their IntDomain (default: [-8, 8) for signed, [0, 16) for unsigned,
// {0, 1} for bool) whatever the kind.
enum class InputKind {
  kNormal,   // standard normal
  kUniform,  // uniform in [-1, 1) (rounding to float16/bfloat16 may reach 1)
  kLarge,    // large magnitudes for the dtype, both signs, finite: |x| in [2^10, 2^14] for
             // float16 (a sum of two stays finite), [2^13, 2^20] for bfloat16 and float32,
             // [2^20, 2^40] for float64
  kSmall,    // tiny magnitudes, subnormals of the dtype included: from the least subnormal up
             // to 2^-8 (float16), 2^-110 (bfloat16, float32), 2^-1000 (float64)
  kSpecial,  // normal values with NaN, +Inf, -Inf and -0.0 scattered in (1/32 of the elements
             // each), each present if the view covers at least 4 distinct elements; and where the
             // storage holds at least 6 runs of the innermost dim's length, one of runs 1-5 is -Inf
             // throughout (a softmax row whose every input is -Inf)
  kStructured,  // ties and outliers: multiples of 1/4 in [-2, 2] (17 values, clamped at 2 sigma, so most
                // rows hold their maximum more than once: argmax's and pooling's first-index rule), and
                // the first element of every run of the innermost dim's length in storage 64 times a
                // nonzero one (16 to 128: a softmax that skips its max subtraction overflows). Every value a multiple of 1/4 below 2^8: sums of
                // up to 2^16 of them are exact in float32 whatever their order, so a kernel that adds in
                // another order than PyTorch still matches it.
  kConstant,  // every element of a tensor one value, drawn per tensor from +-(1 + k/4), k in [0, 16):
              // every slice along any dim is constant (variance exactly 0, every element a tie), and
              // sums of up to 2^16 of them are exact in any order
  kNaN,       // normal values with NaN and -0.0 scattered in (as kSpecial, each present if the view
              // covers 2 distinct elements) but no Inf: for ops whose result on an Inf depends on
              // PyTorch's own order while a NaN propagates the same in any (OpTraits::nan_values)
  kTies,      // kStructured without its outliers: multiples of 1/4 in [-2, 2] only, for keys whose PyTorch
              // result on large values depends on its own order (OpTraits::no_large_inputs): a float16
              // channel sum of 128-valued outliers overflows in one order and not in another
};
// "normal", "uniform", "large", "small", "special", "structured", "constant", "nan", "ties"
std::string_view InputKindName(InputKind kind);

// Elements of a tensor's storage whose values are drawn at once (MakeTensor).
inline constexpr int64_t kValuePieceElements = int64_t{1} << 23;
// Device bytes the temporaries of drawing values take per element of a piece,
// at most (kLarge and kSmall build float64 signs, exponents and mantissas).
inline constexpr int64_t kValueBytesPerElement = 80;

// A tensor laid out exactly as `desc` on `device`: same dtype, sizes, strides,
// storage offset, and a data pointer whose alignment (TensorDesc::AlignmentOf)
// equals desc.alignment (an empty tensor's data pointer is null and reads as 16
// whatever desc says). The storage holds exactly the elements up to the view's
// last one and is filled whole (elements outside the view too). Values follow
// `kind` for float16/bfloat16/float32/float64 tensors; integer and bool tensors
// follow `domain` when given (it must fit the dtype), their default otherwise.
// Other dtypes (complex, float8) are kInvalidArgument. Values are drawn on
// `device` with its generator seeded by `seed` (a CUDA tensor's values come
// from PyTorch's CUDA generator, so they differ from a CPU tensor's).
//
// Values are drawn kValuePieceElements at a time (`piece_elements` is for
// tests), so the temporaries of drawing them take a bounded amount of device
// memory (at most about kValueBytesPerElement x a piece) beside the tensor
// itself, however large it is. A tensor of at most one piece gets the same
// values as one drawn whole.
//
// On the meta device the tensor has the layout and no values (nor memory),
// for learning an op's output sizes by running it there.
Result<at::Tensor> MakeTensor(const TensorDesc& desc, c10::Device device, InputKind kind, uint64_t seed,
                              const IntDomain* domain = nullptr, int64_t piece_elements = kValuePieceElements);

// The boxed-call arguments of `call`, in schema order, typed as `schema` wants
// them (a DType becomes a ScalarType int, an int list an int list, a Double a
// double, None None, ...). Tensors are made with MakeTensor, each with a seed
// derived from `seed` and its argument index; integer tensor domains come from
// `traits` (traits.special_values is the caller's to act on: `kind` is used as
// given). An integer where the schema wants a float becomes a float, and a
// tensor list for a Tensor?[] parameter a list of optional tensors. A Double,
// Int or Bool where the schema wants a Tensor (a Python scalar operand in a
// chain, chain.h) becomes the 0-d CPU wrapped-number tensor PyTorch makes of it.
// A call with a ValueRef argument (fusion graphs) is kInvalidArgument here: a
// chain's arguments come from its BoxedOp (chain.h).
Result<std::vector<c10::IValue>> MakeArguments(const c10::FunctionSchema& schema, const OpCall& call,
                                               const OpTraits& traits, c10::Device device, InputKind kind,
                                               uint64_t seed);

// The schema of a call's op: kNotFound if no such operator/overload is registered.
Result<c10::FunctionSchema> FindSchema(const OpCall& call);

// The bytes of a tensor's whole storage (not just its view), as a uint8 tensor
// on its device aliasing that storage.
at::Tensor StorageBytes(const at::Tensor& t);

// Every tensor in `args` (tensor lists flattened), in order.
std::vector<at::Tensor> TensorsIn(const std::vector<c10::IValue>& args);

// Deep copies of `args`: tensors cloned with identical layout (sizes, strides,
// storage offset and alignment) and storage bytes (outside the view too, up to
// the view's last element), everything else copied.
Result<std::vector<c10::IValue>> CloneArguments(const std::vector<c10::IValue>& args);

}  // namespace kjit::eval
