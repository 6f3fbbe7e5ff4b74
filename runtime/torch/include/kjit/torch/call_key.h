// The bridge from PyTorch's boxed calls to kjit's OpKey.
//
// This is the only part of runtime/ that includes LibTorch, and it is its own
// target (kjit_torch): kjit_runtime and anything preloaded into arbitrary
// processes must not pull libtorch in. The shim's PyTorch adapter and the
// evaluator use it to key a call exactly as the cache keys it.
//
// A call is keyed from its schema (name, overload, argument types) and the
// IValues on the stack. Argument values map as follows:
//   Tensor                 -> TensorDesc (dtype, sizes, strides, offset, alignment)
//   undefined Tensor, None -> None
//   bool / int / float     -> Bool / Int / Double (a Scalar keeps its C++ type)
//   int that the schema types as ScalarType -> ScalarType
//   str                    -> String
//   int[] / float[]        -> IntList / DoubleList
//   Tensor[]               -> TensorList
// Anything else (complex scalars, devices, generators, lists of optional
// tensors, ...) yields kInvalidArgument: such a call is not keyed, and the
// caller runs PyTorch's own kernel.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Scalar.h>
#include <c10/core/ScalarType.h>
#include <c10/core/SymInt.h>
#include <c10/util/OptionalArrayRef.h>
#include <c10/util/SmallVector.h>

#include <array>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "kjit/runtime/hash.h"
#include "kjit/runtime/op_key.h"
#include "kjit/runtime/status.h"

namespace kjit::torch {

// kjit's dtype for a PyTorch scalar type; kInvalidArgument for types kjit does not key (quantized, ...).
Result<DType> DTypeOf(c10::ScalarType type);
// The inverse: PyTorch's scalar type of a kjit dtype (every DType has one).
Result<c10::ScalarType> ScalarTypeOf(DType type);
// DTypeOf without a Result, for hot paths: false (and *out untouched) where DTypeOf would fail. Its
// Status (a string) was built and destroyed per keyed tensor. Inline: called per keyed tensor.
inline bool ToDType(c10::ScalarType type, DType* out) {
  switch (type) {
    case c10::ScalarType::Bool: *out = DType::kBool; return true;
    case c10::ScalarType::Byte: *out = DType::kUInt8; return true;
    case c10::ScalarType::Char: *out = DType::kInt8; return true;
    case c10::ScalarType::Short: *out = DType::kInt16; return true;
    case c10::ScalarType::Int: *out = DType::kInt32; return true;
    case c10::ScalarType::Long: *out = DType::kInt64; return true;
    case c10::ScalarType::Half: *out = DType::kFloat16; return true;
    case c10::ScalarType::BFloat16: *out = DType::kBFloat16; return true;
    case c10::ScalarType::Float: *out = DType::kFloat32; return true;
    case c10::ScalarType::Double: *out = DType::kFloat64; return true;
    case c10::ScalarType::ComplexFloat: *out = DType::kComplex64; return true;
    case c10::ScalarType::ComplexDouble: *out = DType::kComplex128; return true;
    case c10::ScalarType::Float8_e4m3fn: *out = DType::kFloat8E4M3FN; return true;
    case c10::ScalarType::Float8_e5m2: *out = DType::kFloat8E5M2; return true;
    case c10::ScalarType::UInt16: *out = DType::kUInt16; return true;
    case c10::ScalarType::UInt32: *out = DType::kUInt32; return true;
    case c10::ScalarType::UInt64: *out = DType::kUInt64; return true;
    default: break;
  }
  return false;
}

// A tensor's layout. Needs no device synchronisation: reads metadata and the data pointer only.
// The tensor must be defined and strided (dense); others are kInvalidArgument.
Result<TensorDesc> DescribeTensor(const at::Tensor& tensor);

// The numerics settings in force (TF32, reduced-precision reductions, determinism).
uint32_t CurrentNumerics();

// CurrentNumerics under PyTorch's default settings: TF32 allowed for cuDNN convolutions only,
// reduced-precision cuBLAS reductions allowed, not deterministic
// (TorchBridge.DefaultNumericsAreTorchDefaults checks it against this PyTorch).
inline constexpr uint32_t kTorchDefaultNumerics =
    kAllowTF32Cudnn | kAllowFP16ReducedReduction | kAllowBF16ReducedReduction;

// The numerics of a key whose kernels no TF32 or cuBLAS setting can change (every family but
// the products and convolutions): kTorchDefaultNumerics, with the determinism bit in force (a
// kernel may be nondeterministic, which torch.use_deterministic_algorithms must be able to
// refuse). Under PyTorch's defaults it equals CurrentNumerics(), so such keys are the same bytes
// either way; it reads one flag where CurrentNumerics reads the float32 precision table (hash
// lookups, a fifth of the shim's cost per call when a Python program has evicted them).
uint32_t CurrentDeterminismNumerics();

// What keying a call reads of its op's schema, read once: the call's encoded name, overload and
// argument count, and which int arguments are ScalarTypes. The shim keys every call of an op
// with its plan: the schema's strings, its arguments and their types are each an object of
// their own, a chain of dependent cache misses per call where a Python program's interpreter
// has evicted them since the op's last call. The schema must outlive the plan (the
// dispatcher's schemas live as long as the process).
class CallKeyPlan {
 public:
  explicit CallKeyPlan(const c10::FunctionSchema& schema);

  const c10::FunctionSchema& schema() const { return *schema_; }
  size_t arg_count() const { return arg_count_; }
  std::string_view encoded_call() const { return {encoded_call_.data(), encoded_call_.size()}; }
  bool IsScalarTypeArg(size_t i) const;

 private:
  const c10::FunctionSchema* schema_;
  size_t arg_count_;
  uint64_t scalar_type_args_ = 0;  // bit i: argument i; arguments past 64 are looked up in the schema
  c10::SmallVector<char, 48> encoded_call_;  // KeyWriter::EncodeCall's bytes; every intercepted op's fit inline
};

// Writes the canonical key of one call into *out (reusing its capacity) without
// building an OpKey. `args` are the call's arguments, in schema order.
Status WriteCallKey(const c10::FunctionSchema& schema, std::span<const c10::IValue> args, uint16_t arch,
                    uint32_t numerics, std::string* out);
// The same with the op's plan: the same bytes.
Status WriteCallKey(const CallKeyPlan& plan, std::span<const c10::IValue> args, uint16_t arch, uint32_t numerics,
                    std::string* out);

// ---- Typed calls: the key of a call from its C++ arguments (the parameters of an unboxed
// kernel, at::_ops::<op>::schema), without boxing them into IValues. The bytes are exactly those
// WriteCallKey writes for the same call boxed as the dispatcher boxes it (c10::impl::boxArgs):
// tests/shim/shim_unboxed_test.cc checks this for every op the shim intercepts. Each parameter type
// maps as its IValue does: an undefined tensor or an empty optional is None, a concrete SymInt
// (or SymInt[]) is an Int (IntList), a symbolic one is not keyed, a bool[N] is an IntList of 0s and
// 1s; a parameter type without an overload below does not compile.
namespace typed {
// The IValue path's tensor: dtype, sizes, strides, offset, alignment; undefined -> None.
bool WriteTensorOrNone(KeyWriter& w, const at::Tensor& t, Status* error);
bool WriteScalarType(KeyWriter& w, c10::ScalarType type, Status* error);
bool WriteSymInt(KeyWriter& w, const c10::SymInt& v, Status* error);
bool WriteSymIntList(KeyWriter& w, c10::SymIntArrayRef v, Status* error);

inline bool Write(KeyWriter& w, const at::Tensor& t, Status* error) { return WriteTensorOrNone(w, t, error); }
inline bool Write(KeyWriter& w, bool v, Status*) {
  w.Bool(v);
  return true;
}
inline bool Write(KeyWriter& w, int64_t v, Status*) {
  w.Int(v);
  return true;
}
inline bool Write(KeyWriter& w, double v, Status*) {
  w.Double(v);
  return true;
}
inline bool Write(KeyWriter& w, const c10::SymInt& v, Status* error) { return WriteSymInt(w, v, error); }
// A Scalar boxes to a Bool, Int or Double IValue (a complex or symbolic one to kinds that are not keyed).
inline bool Write(KeyWriter& w, const c10::Scalar& v, Status* error) {
  if (v.isSymbolic() || v.isComplex()) {
    *error = InvalidArgument("a complex or symbolic scalar, which kjit does not key");
    return false;
  }
  if (v.isBoolean()) {
    w.Bool(v.toBool());
  } else if (v.isIntegral(false)) {
    w.Int(v.toLong());
  } else {
    w.Double(v.toDouble());
  }
  return true;
}
inline bool Write(KeyWriter& w, c10::ScalarType v, Status* error) { return WriteScalarType(w, v, error); }
inline bool Write(KeyWriter& w, c10::IntArrayRef v, Status*) {
  w.IntList(std::span<const int64_t>(v.data(), v.size()));
  return true;
}
inline bool Write(KeyWriter& w, c10::SymIntArrayRef v, Status* error) { return WriteSymIntList(w, v, error); }
inline bool Write(KeyWriter& w, const c10::OptionalArrayRef<int64_t>& v, Status* error) {
  if (!v.has_value()) {
    w.None();
    return true;
  }
  return Write(w, *v, error);
}
inline bool Write(KeyWriter& w, const c10::OptionalArrayRef<c10::SymInt>& v, Status* error) {
  if (!v.has_value()) {
    w.None();
    return true;
  }
  return Write(w, *v, error);
}
// bool[N] (std::array<bool, N>): an int list of 0s and 1s, as WriteArg keys a boxed bool list.
template <size_t N>
bool Write(KeyWriter& w, const std::array<bool, N>& v, Status*) {
  int64_t values[N];
  for (size_t i = 0; i < N; ++i) values[i] = v[i] ? 1 : 0;
  w.IntList(std::span<const int64_t>(values, N));
  return true;
}
template <class T>
bool Write(KeyWriter& w, const std::optional<T>& v, Status* error) {
  if (!v.has_value()) {
    w.None();
    return true;
  }
  return Write(w, *v, error);
}

// A typed call's key into `w`, up to its Finish: the count check, the key's header, then each
// argument.
template <class... Args>
Status WriteCall(KeyWriter& w, const CallKeyPlan& plan, uint16_t arch, uint32_t numerics, const Args&... args) {
  if (sizeof...(Args) != plan.arg_count()) {
    return InvalidArgument(plan.schema().name() + " takes " + std::to_string(plan.arg_count()) + " arguments, got " +
                           std::to_string(sizeof...(Args)));
  }
  w.BeginKey(arch, numerics, 1);
  w.BeginEncodedCall(plan.encoded_call(), static_cast<uint32_t>(sizeof...(Args)));
  Status error;
  if (!(Write(w, args, &error) && ...)) return error.WithContext(plan.schema().name());
  return Status::Ok();
}
}  // namespace typed

// Writes the key of a call given by its C++ arguments, in schema order, into *out: the bytes
// WriteCallKey(plan, boxed arguments, ...) writes. `plan` is the op's.
template <class... Args>
Status WriteTypedCallKey(const CallKeyPlan& plan, uint16_t arch, uint32_t numerics, std::string* out,
                         const Args&... args) {
  KeyWriter w(out);
  KJIT_RETURN_IF_ERROR(typed::WriteCall(w, plan, arch, numerics, args...));
  return w.Finish();
}

// HashBytes of the key WriteTypedCallKey writes, for a caller that needs only the hash (the
// shim's lookup of a known key): the bytes are hashed in the key writer's buffer, not copied out
// first. `scratch` holds a key too long for that buffer.
template <class... Args>
Status HashTypedCallKey(const CallKeyPlan& plan, uint16_t arch, uint32_t numerics, std::string* scratch,
                        Hash128* hash, const Args&... args) {
  KeyWriter w(scratch);
  KJIT_RETURN_IF_ERROR(typed::WriteCall(w, plan, arch, numerics, args...));
  std::string_view bytes;
  KJIT_RETURN_IF_ERROR(w.FinishView(&bytes));
  *hash = HashBytes(bytes);
  return Status::Ok();
}

// The same key as an OpKey, for inspection and tests.
Result<OpKey> CallKey(const c10::FunctionSchema& schema, std::span<const c10::IValue> args, uint16_t arch,
                      uint32_t numerics);

// ---- Calls of a chain (shim/FUSION.md, "Chain keys"): what the shim's chain recorder holds of one call of a
// fusible elementwise op. As CallKey's call, except that a wrapped number (the 0-d CPU tensor PyTorch makes of
// a Python scalar: `0.5 * x`) is its value, a Double, Int or Bool, so that every constant of a chain is in its
// key; and only tensors, scalars, int lists (a reduction's dims) and None are taken (what the fusible ops and the
// reductions that join chains have): anything else is kInvalidArgument, and the call is not recorded.
Result<OpCall> ChainMemberCall(const c10::FunctionSchema& schema, std::span<const c10::IValue> args);
// A tensor's identity while it lives, for the recorder's dataflow: its TensorImpl's address mixed with its data's
// (a view shares the data but not the TensorImpl: it is another value to the recorder). 0 for an undefined tensor
// or a wrapped number (which is no dataflow).
uint64_t TensorId(const at::Tensor& t);
// Keeps the TensorIds of a call's tensors (`args`' and `out`'s) from being taken by other tensors while the result
// is held: weak references, and a TensorImpl that has one is not freed, so no new tensor is made at its address.
// Eager PyTorch frees a temporary as soon as Python drops it and reuses its memory for the next one: without
// this, a recorder holding ids across calls joins unrelated calls.
std::shared_ptr<const void> PinTensorIds(std::span<const c10::IValue> args, const at::Tensor& out);

}  // namespace kjit::torch
