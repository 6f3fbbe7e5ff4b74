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
#include <c10/core/ScalarType.h>
#include <c10/util/SmallVector.h>

#include <span>
#include <string>
#include <string_view>

#include "kjit/runtime/op_key.h"
#include "kjit/runtime/status.h"

namespace kjit::torch {

// kjit's dtype for a PyTorch scalar type; kInvalidArgument for types kjit does not key (quantized, ...).
Result<DType> DTypeOf(c10::ScalarType type);
// DTypeOf without a Result, for hot paths: false (and *out untouched) where DTypeOf would fail. Its
// Status (a string) was built and destroyed per keyed tensor.
bool ToDType(c10::ScalarType type, DType* out);

// A tensor's layout. Needs no device synchronisation: reads metadata and the data pointer only.
// The tensor must be defined and strided (dense); others are kInvalidArgument.
Result<TensorDesc> DescribeTensor(const at::Tensor& tensor);

// The numerics settings in force (TF32, reduced-precision reductions, determinism).
uint32_t CurrentNumerics();

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

// The same key as an OpKey, for inspection and tests.
Result<OpKey> CallKey(const c10::FunctionSchema& schema, std::span<const c10::IValue> args, uint16_t arch,
                      uint32_t numerics);

}  // namespace kjit::torch
