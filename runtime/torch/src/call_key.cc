#include "kjit/torch/call_key.h"

#include <ATen/Context.h>

namespace kjit::torch {
namespace {

bool IsScalarTypeArg(const c10::Argument& arg) {
  const c10::TypePtr& t = arg.real_type();
  if (t->kind() == c10::TypeKind::ScalarTypeType) return true;
  // castRaw: no shared_ptr copy (an atomic increment and decrement) per keyed int argument.
  if (const auto* opt = t->castRaw<c10::OptionalType>()) {
    return opt->getElementType()->kind() == c10::TypeKind::ScalarTypeType;
  }
  return false;
}

Status WriteTensor(KeyWriter& w, const at::Tensor& t) {
  KJIT_ASSIGN_OR_RETURN(DType dtype, DTypeOf(t.scalar_type()));
  if (t.layout() != c10::kStrided) return InvalidArgument("only strided tensors are keyed");
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  w.Tensor(dtype, std::span<const int64_t>(sizes.data(), sizes.size()),
           std::span<const int64_t>(strides.data(), strides.size()), t.storage_offset(),
           TensorDesc::AlignmentOf(reinterpret_cast<uintptr_t>(t.data_ptr())));
  return Status::Ok();
}

Status WriteArg(KeyWriter& w, const c10::Argument& schema_arg, const c10::IValue& v) {
  if (v.isNone()) {
    w.None();
  } else if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) {
      w.None();
    } else {
      KJIT_RETURN_IF_ERROR(WriteTensor(w, t));
    }
  } else if (v.isBool()) {
    w.Bool(v.toBool());
  } else if (v.isInt()) {
    if (IsScalarTypeArg(schema_arg)) {
      KJIT_ASSIGN_OR_RETURN(DType dtype, DTypeOf(static_cast<c10::ScalarType>(v.toInt())));
      w.ScalarType(dtype);
    } else {
      w.Int(v.toInt());
    }
  } else if (v.isDouble()) {
    w.Double(v.toDouble());
  } else if (v.isString()) {
    w.String(v.toStringRef());
  } else if (v.isIntList()) {
    // c10::List keeps IValues, not int64s: copy into a reused buffer, not a new vector per call.
    thread_local std::vector<int64_t> values;
    const auto list = v.toIntList();
    values.assign(list.begin(), list.end());
    w.IntList(values);
  } else if (v.isDoubleList()) {
    thread_local std::vector<double> values;
    const auto list = v.toDoubleList();
    values.assign(list.begin(), list.end());
    w.DoubleList(values);
  } else if (v.isTensorList()) {
    const auto list = v.toTensorList();
    w.BeginTensorList(static_cast<uint32_t>(list.size()));
    for (at::Tensor t : list) {  // elements are proxies: take each as a (refcounted) value
      if (!t.defined()) return InvalidArgument("undefined tensor inside a tensor list");
      KJIT_RETURN_IF_ERROR(WriteTensor(w, t));
    }
  } else {
    return InvalidArgument("argument '" + schema_arg.name() + "' has kind " + v.tagKind() +
                           ", which kjit does not key");
  }
  return Status::Ok();
}

}  // namespace

Result<DType> DTypeOf(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Bool: return DType::kBool;
    case c10::ScalarType::Byte: return DType::kUInt8;
    case c10::ScalarType::Char: return DType::kInt8;
    case c10::ScalarType::Short: return DType::kInt16;
    case c10::ScalarType::Int: return DType::kInt32;
    case c10::ScalarType::Long: return DType::kInt64;
    case c10::ScalarType::Half: return DType::kFloat16;
    case c10::ScalarType::BFloat16: return DType::kBFloat16;
    case c10::ScalarType::Float: return DType::kFloat32;
    case c10::ScalarType::Double: return DType::kFloat64;
    case c10::ScalarType::ComplexFloat: return DType::kComplex64;
    case c10::ScalarType::ComplexDouble: return DType::kComplex128;
    case c10::ScalarType::Float8_e4m3fn: return DType::kFloat8E4M3FN;
    case c10::ScalarType::Float8_e5m2: return DType::kFloat8E5M2;
    case c10::ScalarType::UInt16: return DType::kUInt16;
    case c10::ScalarType::UInt32: return DType::kUInt32;
    case c10::ScalarType::UInt64: return DType::kUInt64;
    default: break;
  }
  return InvalidArgument(std::string("kjit does not key tensors of dtype ") + c10::toString(type));
}

Result<TensorDesc> DescribeTensor(const at::Tensor& t) {
  if (!t.defined()) return InvalidArgument("undefined tensor");
  if (t.layout() != c10::kStrided) return InvalidArgument("only strided tensors are keyed");
  TensorDesc d;
  KJIT_ASSIGN_OR_RETURN(d.dtype, DTypeOf(t.scalar_type()));
  d.sizes.assign(t.sizes().begin(), t.sizes().end());
  d.strides.assign(t.strides().begin(), t.strides().end());
  d.storage_offset = t.storage_offset();
  d.alignment = TensorDesc::AlignmentOf(reinterpret_cast<uintptr_t>(t.data_ptr()));
  return d;
}

uint32_t CurrentNumerics() {
  const auto& ctx = at::globalContext();
  uint32_t n = kNumericsDefault;
  if (ctx.allowTF32CuBLAS()) n |= kAllowTF32Matmul;
  if (ctx.allowTF32CuDNN()) n |= kAllowTF32Cudnn;
  if (ctx.allowFP16ReductionCuBLAS() == at::CuBLASReductionOption::AllowReducedPrecisionWithSplitK) {
    n |= kAllowFP16ReducedReduction;
  }
  if (ctx.allowBF16ReductionCuBLAS() == at::CuBLASReductionOption::AllowReducedPrecisionWithSplitK) {
    n |= kAllowBF16ReducedReduction;
  }
  if (ctx.deterministicAlgorithms()) n |= kDeterministic;
  if (ctx.float32Precision(at::Float32Backend::CUDA, at::Float32Op::MATMUL) == at::Float32Precision::BF16) {
    n |= kAllowBF16Matmul;
  }
  return n;
}

Status WriteCallKey(const c10::FunctionSchema& schema, std::span<const c10::IValue> args, uint16_t arch,
                    uint32_t numerics, std::string* out) {
  const auto& formals = schema.arguments();
  if (args.size() != formals.size()) {
    return InvalidArgument(schema.name() + " takes " + std::to_string(formals.size()) + " arguments, got " +
                           std::to_string(args.size()));
  }
  KeyWriter w(out);
  w.BeginKey(arch, numerics, 1);
  w.BeginCall(schema.name(), schema.overload_name(), static_cast<uint32_t>(args.size()));
  for (size_t i = 0; i < args.size(); ++i) {
    // The context only on failure: WithContext copies the status, once per argument otherwise.
    if (Status s = WriteArg(w, formals[i], args[i]); !s.ok()) return s.WithContext(schema.name());
  }
  return w.Finish();
}

Result<OpKey> CallKey(const c10::FunctionSchema& schema, std::span<const c10::IValue> args, uint16_t arch,
                      uint32_t numerics) {
  std::string bytes;
  KJIT_RETURN_IF_ERROR(WriteCallKey(schema, args, arch, numerics, &bytes));
  return OpKey::Decode(bytes);
}

}  // namespace kjit::torch
