#include "kjit/torch/call_key.h"

#include <ATen/Context.h>
#include <c10/core/SymIntArrayRef.h>
#include <c10/util/SmallVector.h>

namespace kjit::torch {
namespace {

bool ArgIsScalarType(const c10::Argument& arg) {
  const c10::TypePtr& t = arg.real_type();
  if (t->kind() == c10::TypeKind::ScalarTypeType) return true;
  // castRaw: no shared_ptr copy (an atomic increment and decrement) per keyed int argument.
  if (const auto* opt = t->castRaw<c10::OptionalType>()) {
    return opt->getElementType()->kind() == c10::TypeKind::ScalarTypeType;
  }
  return false;
}

// The address of a tensor's first element (null if it is empty), as TensorImpl::data() answers,
// for the key's alignment: read without data()'s virtual has_storage() call and its checks, a
// fifth of keying a tensor. A tensor without a storage goes through data(), which throws as
// before. TorchBridge.KeyedTensorsAreDescribeTensors checks it against const_data_ptr().
const void* FirstElement(const at::Tensor& t) {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  const c10::StorageImpl* storage = impl->unsafe_storage().unsafeGetStorageImpl();
  if (storage == nullptr) return t.const_data_ptr();
  if (impl->numel() == 0) return nullptr;
  return static_cast<const char*>(storage->data()) +
         static_cast<int64_t>(impl->dtype().itemsize()) * impl->storage_offset();
}

// The writers below return false with *error set on failure, and build no Status on success
// (one per argument was a string made and destroyed each time).
bool WriteTensor(KeyWriter& w, const at::Tensor& t, Status* error) {
  const c10::ScalarType type = t.scalar_type();
  DType dtype;
  if (!ToDType(type, &dtype)) {
    *error = DTypeOf(type).status();
    return false;
  }
  if (t.layout() != c10::kStrided) {
    *error = InvalidArgument("only strided tensors are keyed");
    return false;
  }
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  // The address only (data_ptr() would materialise a copy-on-write tensor).
  w.Tensor(dtype, std::span<const int64_t>(sizes.data(), sizes.size()),
           std::span<const int64_t>(strides.data(), strides.size()), t.storage_offset(),
           TensorDesc::AlignmentOf(reinterpret_cast<uintptr_t>(FirstElement(t))));
  return true;
}

// Lists are read through toListRef, the list's own IValues: toIntList() and toTensorList() each
// copied a reference-counted handle (two atomic operations), and iterating a tensor list by value
// two more per tensor. Up to 8 elements stay on the stack.
bool WriteArg(KeyWriter& w, const CallKeyPlan& plan, size_t i, const c10::IValue& v, Status* error) {
  if (v.isNone()) {
    w.None();
  } else if (v.isTensor()) {
    if (!typed::WriteTensorOrNone(w, v.toTensor(), error)) return false;
  } else if (v.isBool()) {
    w.Bool(v.toBool());
  } else if (v.isInt()) {
    if (plan.IsScalarTypeArg(i)) {
      if (!typed::WriteScalarType(w, static_cast<c10::ScalarType>(v.toInt()), error)) return false;
    } else {
      w.Int(v.toInt());
    }
  } else if (v.isDouble()) {
    w.Double(v.toDouble());
  } else if (v.isString()) {
    w.String(v.toStringRef());
  } else if (v.isIntList()) {
    c10::SmallVector<int64_t, 8> values;
    for (const c10::IValue& x : v.toListRef()) values.push_back(x.toInt());
    w.IntList(values);
  } else if (v.isBoolList()) {
    // bool[N] (a backward's output_mask) is keyed as an int list of 0s and 1s: the schema says which it is.
    c10::SmallVector<int64_t, 8> values;
    for (const c10::IValue& x : v.toListRef()) values.push_back(x.toBool() ? 1 : 0);
    w.IntList(values);
  } else if (v.isDoubleList()) {
    c10::SmallVector<double, 8> values;
    for (const c10::IValue& x : v.toListRef()) values.push_back(x.toDouble());
    w.DoubleList(values);
  } else if (v.isTensorList()) {
    const c10::ArrayRef<c10::IValue> list = v.toListRef();
    w.BeginTensorList(static_cast<uint32_t>(list.size()));
    for (const c10::IValue& x : list) {
      const at::Tensor& t = x.toTensor();
      if (!t.defined()) {
        *error = InvalidArgument("undefined tensor inside a tensor list");
        return false;
      }
      if (!WriteTensor(w, t, error)) return false;
    }
  } else {
    *error = InvalidArgument("argument '" + plan.schema().arguments()[i].name() + "' has kind " + v.tagKind() +
                             ", which kjit does not key");
    return false;
  }
  return true;
}

}  // namespace

namespace typed {

bool WriteTensorOrNone(KeyWriter& w, const at::Tensor& t, Status* error) {
  if (!t.defined()) {
    w.None();
    return true;
  }
  return WriteTensor(w, t, error);
}

bool WriteScalarType(KeyWriter& w, c10::ScalarType type, Status* error) {
  DType dtype;
  if (!ToDType(type, &dtype)) {
    *error = DTypeOf(type).status();
    return false;
  }
  w.ScalarType(dtype);
  return true;
}

// A symbolic SymInt boxes as a SymInt IValue, which WriteArg refuses: the same refusal here.
bool WriteSymInt(KeyWriter& w, const c10::SymInt& v, Status* error) {
  const std::optional<int64_t> concrete = v.maybe_as_int();
  if (!concrete.has_value()) {
    *error = InvalidArgument("a symbolic SymInt is not keyed");
    return false;
  }
  w.Int(*concrete);
  return true;
}

// The dispatcher boxes a SymInt[] as an int list only if no element is heap-allocated (a
// symbolic or large value; c10::asIntArrayRefSlowOpt), else as a SymInt list, which WriteArg
// refuses: the same test here, and the concrete list is read in place.
bool WriteSymIntList(KeyWriter& w, c10::SymIntArrayRef v, Status* error) {
  const std::optional<c10::IntArrayRef> concrete = c10::asIntArrayRefSlowOpt(v);
  if (!concrete.has_value()) {
    *error = InvalidArgument("a list with a symbolic SymInt is not keyed");
    return false;
  }
  w.IntList(std::span<const int64_t>(concrete->data(), concrete->size()));
  return true;
}

}  // namespace typed

CallKeyPlan::CallKeyPlan(const c10::FunctionSchema& schema)
    : schema_(&schema), arg_count_(schema.arguments().size()) {
  for (size_t i = 0; i < arg_count_ && i < 64; ++i) {
    if (ArgIsScalarType(schema.arguments()[i])) scalar_type_args_ |= uint64_t{1} << i;
  }
  const std::string encoded =
      KeyWriter::EncodeCall(schema.name(), schema.overload_name(), static_cast<uint32_t>(arg_count_));
  encoded_call_.assign(encoded.begin(), encoded.end());
}

bool CallKeyPlan::IsScalarTypeArg(size_t i) const {
  if (i < 64) return (scalar_type_args_ >> i) & 1;
  return ArgIsScalarType(schema_->arguments()[i]);
}

Result<DType> DTypeOf(c10::ScalarType type) {
  DType dtype;
  if (ToDType(type, &dtype)) return dtype;
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
  // The address only: data_ptr() would materialise a copy-on-write tensor.
  d.alignment = TensorDesc::AlignmentOf(reinterpret_cast<uintptr_t>(FirstElement(t)));
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
  // kAllowBF16Matmul is never set: this PyTorch's float32Precision(CUDA, op) never answers BF16
  // (setFloat32Precision refuses it for CUDA, and a BF16 inherited from the GENERIC entry reads as
  // NONE), and asking (up to three hash-map finds) was a third of this function's time on every
  // keyed call. The test NumericsNeverAllowBF16Matmul fails on a PyTorch where CUDA can answer BF16.
  return n;
}

uint32_t CurrentDeterminismNumerics() {
  return kTorchDefaultNumerics | (at::globalContext().deterministicAlgorithms() ? kDeterministic : 0u);
}

Status WriteCallKey(const CallKeyPlan& plan, std::span<const c10::IValue> args, uint16_t arch, uint32_t numerics,
                    std::string* out) {
  if (args.size() != plan.arg_count()) {
    return InvalidArgument(plan.schema().name() + " takes " + std::to_string(plan.arg_count()) + " arguments, got " +
                           std::to_string(args.size()));
  }
  KeyWriter w(out);
  w.BeginKey(arch, numerics, 1);
  w.BeginEncodedCall(plan.encoded_call(), static_cast<uint32_t>(args.size()));
  for (size_t i = 0; i < args.size(); ++i) {
    Status error;
    if (!WriteArg(w, plan, i, args[i], &error)) return error.WithContext(plan.schema().name());
  }
  return w.Finish();
}

Status WriteCallKey(const c10::FunctionSchema& schema, std::span<const c10::IValue> args, uint16_t arch,
                    uint32_t numerics, std::string* out) {
  return WriteCallKey(CallKeyPlan(schema), args, arch, numerics, out);
}

Result<OpKey> CallKey(const c10::FunctionSchema& schema, std::span<const c10::IValue> args, uint16_t arch,
                      uint32_t numerics) {
  std::string bytes;
  KJIT_RETURN_IF_ERROR(WriteCallKey(schema, args, arch, numerics, &bytes));
  return OpKey::Decode(bytes);
}

Result<c10::ScalarType> ScalarTypeOf(DType t) {
  switch (t) {
    case DType::kBool: return c10::ScalarType::Bool;
    case DType::kUInt8: return c10::ScalarType::Byte;
    case DType::kInt8: return c10::ScalarType::Char;
    case DType::kInt16: return c10::ScalarType::Short;
    case DType::kInt32: return c10::ScalarType::Int;
    case DType::kInt64: return c10::ScalarType::Long;
    case DType::kFloat16: return c10::ScalarType::Half;
    case DType::kBFloat16: return c10::ScalarType::BFloat16;
    case DType::kFloat32: return c10::ScalarType::Float;
    case DType::kFloat64: return c10::ScalarType::Double;
    case DType::kComplex64: return c10::ScalarType::ComplexFloat;
    case DType::kComplex128: return c10::ScalarType::ComplexDouble;
    case DType::kFloat8E4M3FN: return c10::ScalarType::Float8_e4m3fn;
    case DType::kFloat8E5M2: return c10::ScalarType::Float8_e5m2;
    case DType::kUInt16: return c10::ScalarType::UInt16;
    case DType::kUInt32: return c10::ScalarType::UInt32;
    case DType::kUInt64: return c10::ScalarType::UInt64;
  }
  return InvalidArgument("unknown dtype code " + std::to_string(static_cast<int>(t)));
}

Result<OpCall> ChainMemberCall(const c10::FunctionSchema& schema, std::span<const c10::IValue> args) {
  if (args.size() != schema.arguments().size()) {
    return InvalidArgument(schema.name() + ": " + std::to_string(args.size()) + " arguments for a schema of " +
                           std::to_string(schema.arguments().size()));
  }
  OpCall call;
  call.op = schema.name();
  call.overload = schema.overload_name();
  call.args.reserve(args.size());
  for (const c10::IValue& v : args) {
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (t.defined() && t.unsafeGetTensorImpl()->is_wrapped_number()) {
        const c10::Scalar s = t.item();
        if (s.isBoolean()) {
          call.args.emplace_back(s.toBool());
        } else if (s.isIntegral(false)) {
          call.args.emplace_back(s.toLong());
        } else if (s.isFloatingPoint()) {
          call.args.emplace_back(s.toDouble());
        } else {
          return InvalidArgument(call.op + ": a wrapped number of type " + std::string(c10::toString(t.scalar_type())));
        }
        continue;
      }
      if (!t.defined()) {
        call.args.emplace_back(NoneArg{});
        continue;
      }
      KJIT_ASSIGN_OR_RETURN(TensorDesc d, DescribeTensor(t));
      call.args.emplace_back(std::move(d));
    } else if (v.isDouble()) {
      call.args.emplace_back(v.toDouble());
    } else if (v.isInt()) {
      call.args.emplace_back(v.toInt());
    } else if (v.isBool()) {
      call.args.emplace_back(v.toBool());
    } else if (v.isNone()) {
      call.args.emplace_back(NoneArg{});
    } else if (v.isIntList()) {
      call.args.emplace_back(IntList(v.toIntVector()));  // a reduction's dims (mean.dim joins chains)
    } else {
      return InvalidArgument(call.op + ": an argument of kind " + v.tagKind() + " is no chain member's");
    }
  }
  return call;
}

uint64_t TensorId(const at::Tensor& t) {
  if (!t.defined() || t.unsafeGetTensorImpl()->is_wrapped_number()) return 0;
  const auto impl = reinterpret_cast<uintptr_t>(t.unsafeGetTensorImpl());
  const auto data = reinterpret_cast<uintptr_t>(FirstElement(t));
  return static_cast<uint64_t>(impl) ^ (static_cast<uint64_t>(data) * 0x9E3779B97F4A7C15ull);
}

std::shared_ptr<const void> PinTensorIds(std::span<const c10::IValue> args, const at::Tensor& out) {
  using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
  auto pins = std::make_shared<std::vector<WeakImpl>>();
  pins->reserve(args.size() + 1);
  for (const c10::IValue& v : args) {
    if (v.isTensor() && v.toTensor().defined()) pins->emplace_back(v.toTensor().getIntrusivePtr());
  }
  if (out.defined()) pins->emplace_back(out.getIntrusivePtr());
  return pins;
}

}  // namespace kjit::torch
