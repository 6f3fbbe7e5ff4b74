// The adapter's per-call steps up to a call's entry: its checks (pre-filter, autograd,
// device), its key, hash and table lookup, and the stage clock of KJIT_PROFILE. In a header so
// that benchmarks/bench_torch.cc times on CPU tensors the code the adapter (adapter.cc) runs on
// CUDA ones: the device type is the one parameter between them.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>
#include <c10/core/GradMode.h>
#include <c10/util/ArrayRef.h>

#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>

#include "kjit/runtime/hash.h"
#include "kjit/torch/call_key.h"
#include "shim_core.h"

namespace kjit::shim {

inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The stage clock of one call (KJIT_PROFILE): Lap(stage) charges the time since the last lap to
// `stage`. The profiled and unprofiled wrappers are the same template; the unprofiled one's
// laps compile to nothing.
template <bool kOn>
struct Stopwatch {
  explicit Stopwatch(StageProfile*) {}
  void Lap(Stage) {}
  void Total() {}
};
template <>
struct Stopwatch<true> {
  explicit Stopwatch(StageProfile* p) : profile(p), start(NowNs()), last(start) {}
  void Lap(Stage stage) {
    const int64_t now = NowNs();
    profile->Add(stage, now - last);
    last = now;
  }
  void Total() { profile->Add(Stage::kWrapper, NowNs() - start); }
  StageProfile* profile;
  int64_t start;
  int64_t last;
};

// PreFilter::kSmallMatmul / kSmallBatchedMatmul: mm(self, mat2) or bmm(self, mat2), self a
// defined strided tensor.
inline bool SmallMatmulArgsPass(bool batched, const at::Tensor& self, const at::Tensor& mat2) {
  if (!mat2.defined() || mat2.layout() != c10::kStrided || mat2.scalar_type() != self.scalar_type()) return false;
  // A dtype the family does not serve has MatmulMaxK 0 (policy/matmul/limits.h): declined there.
  DType dtype;
  if (!kjit::torch::ToDType(self.scalar_type(), &dtype)) return false;
  const auto a_sizes = self.sizes(), a_strides = self.strides(), b_sizes = mat2.sizes(), b_strides = mat2.strides();
  return SmallMatmulMayBeServed(batched, dtype,
                                {{a_sizes.data(), a_sizes.size()}, {a_strides.data(), a_strides.size()}},
                                {{b_sizes.data(), b_sizes.size()}, {b_strides.data(), b_strides.size()}});
}

// What a pre-filter reads of a call, however it was passed (boxed or as C++ arguments): the first
// argument if it is a tensor; the second if it is one (mm, bmm, cudnn_convolution's weight,
// convolution_backward's input); the third if it is one (convolution_backward's weight); the groups
// (cudnn_convolution's argument 5, convolution_backward's 9) if an int, convolution_backward's transposed
// (argument 7) if a bool. Null where the call has none.
struct PreFilterArgs {
  const at::Tensor* first = nullptr;
  const at::Tensor* second = nullptr;
  const at::Tensor* third = nullptr;
  const int64_t* groups = nullptr;
  const bool* transposed = nullptr;
};

// The position of the groups argument a pre-filter reads (cudnn_convolution's 5, convolution_backward's 9);
// -1: none.
constexpr int PreFilterGroupsArg(PreFilter filter) {
  return filter == PreFilter::kDepthwiseConv ? 5 : filter == PreFilter::kDepthwiseConvBackward ? 9 : -1;
}

// The op's pre-filter (shim_core.h): true if the call may be one its family serves and is to be
// keyed. Reads tensor metadata only; no allocation, no exception for any arguments.
inline bool PassesPreFilter(PreFilter filter, const PreFilterArgs& args) {
  if (filter == PreFilter::kNone) return true;
  if (filter == PreFilter::kChainMember) return false;  // recorded into chains, never keyed alone
  if (args.first == nullptr) return false;
  const at::Tensor& x = *args.first;
  if (!x.defined() || x.layout() != c10::kStrided) return false;
  const c10::ScalarType type = x.scalar_type();
  if (type != c10::ScalarType::Float && type != c10::ScalarType::Half && type != c10::ScalarType::BFloat16) {
    return false;
  }
  if (filter == PreFilter::kSmallMatmul || filter == PreFilter::kSmallBatchedMatmul) {
    return args.second != nullptr && SmallMatmulArgsPass(filter == PreFilter::kSmallBatchedMatmul, x, *args.second);
  }
  const auto sizes = x.sizes();
  if (filter == PreFilter::kDepthwiseConv) {
    // cudnn_convolution(self, weight, padding, stride, dilation, groups, benchmark, deterministic, allow_tf32)
    if (args.second == nullptr || args.groups == nullptr) return false;
    const at::Tensor& w = *args.second;
    if (!w.defined()) return false;
    const auto w_sizes = w.sizes();
    return CudnnConvMayBeDepthwise(std::span<const int64_t>(sizes.data(), sizes.size()),
                                   std::span<const int64_t>(w_sizes.data(), w_sizes.size()), *args.groups);
  }
  if (filter == PreFilter::kDepthwiseConvBackward) {
    // convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
    // output_padding, groups, output_mask): grad_output's dtype checked above, the input's shape here.
    if (args.second == nullptr || args.third == nullptr || args.groups == nullptr || args.transposed == nullptr) {
      return false;
    }
    const at::Tensor& input = *args.second;
    const at::Tensor& w = *args.third;
    if (!input.defined() || !w.defined()) return false;
    const auto in_sizes = input.sizes(), w_sizes = w.sizes();
    return ConvBackwardMayBeDepthwise(std::span<const int64_t>(in_sizes.data(), in_sizes.size()),
                                      std::span<const int64_t>(w_sizes.data(), w_sizes.size()), *args.groups,
                                      *args.transposed);
  }
  // 0-d and empty inputs: every family of a filtered op leaves them to PyTorch.
  if (sizes.empty()) return false;
  for (int64_t n : sizes) {
    if (n == 0) return false;
  }
  return true;
}

// The argument count of the op a pre-filter reads by position: mm(self, mat2), bmm(self, mat2),
// cudnn_convolution(self, weight, padding, stride, dilation, groups, benchmark, deterministic,
// allow_tf32), convolution_backward's 11; 0: any. A call of another count is declined.
constexpr size_t PreFilterArgCount(PreFilter filter) {
  switch (filter) {
    case PreFilter::kSmallMatmul:
    case PreFilter::kSmallBatchedMatmul:
      return 2;
    case PreFilter::kDepthwiseConv:
      return 9;
    case PreFilter::kDepthwiseConvBackward:
      return 11;
    default:
      return 0;
  }
}

// The same on a boxed call.
inline bool PassesPreFilter(PreFilter filter, c10::ArrayRef<c10::IValue> args) {
  if (filter == PreFilter::kNone) return true;
  if (filter == PreFilter::kChainMember) return false;
  PreFilterArgs p;
  if (!args.empty() && args[0].isTensor()) p.first = &args[0].toTensor();
  if (const size_t count = PreFilterArgCount(filter); count != 0 && args.size() != count) return false;
  if (args.size() > 1 && args[1].isTensor()) p.second = &args[1].toTensor();
  if (args.size() > 2 && args[2].isTensor()) p.third = &args[2].toTensor();
  int64_t groups = 0;
  if (const int g = PreFilterGroupsArg(filter); g >= 0 && args[g].isInt()) {
    groups = args[g].toInt();
    p.groups = &groups;
  }
  bool transposed = false;
  if (filter == PreFilter::kDepthwiseConvBackward && args[7].isBool()) {
    transposed = args[7].toBool();
    p.transposed = &transposed;
  }
  return PassesPreFilter(filter, p);
}

// The same on a call given by its C++ arguments (the unboxed wrapper's, in schema order).
template <PreFilter kFilter, class... Args>
bool PassesPreFilterTyped(const Args&... args) {
  constexpr size_t n = sizeof...(Args);
  constexpr size_t count = PreFilterArgCount(kFilter);
  if constexpr (kFilter == PreFilter::kNone) {
    return true;
  } else if constexpr (kFilter == PreFilter::kChainMember || (count != 0 && n != count) || n == 0) {
    return false;
  } else {
    using Types = std::tuple<std::decay_t<Args>...>;
    const auto refs = std::forward_as_tuple(args...);
    PreFilterArgs p;
    if constexpr (std::is_same_v<std::tuple_element_t<0, Types>, at::Tensor>) p.first = &std::get<0>(refs);
    if constexpr (n > 1) {
      if constexpr (std::is_same_v<std::tuple_element_t<1, Types>, at::Tensor>) p.second = &std::get<1>(refs);
    }
    if constexpr (n > 2) {
      if constexpr (std::is_same_v<std::tuple_element_t<2, Types>, at::Tensor>) p.third = &std::get<2>(refs);
    }
    int64_t groups = 0;
    constexpr int kGroups = PreFilterGroupsArg(kFilter);
    if constexpr (kGroups >= 0) {
      using Groups = std::tuple_element_t<kGroups, Types>;
      if constexpr (std::is_same_v<Groups, int64_t>) {
        groups = std::get<kGroups>(refs);
        p.groups = &groups;
      } else if constexpr (std::is_same_v<Groups, c10::SymInt>) {
        // A symbolic groups boxes as a SymInt, not an int: the boxed pre-filter declines it too.
        if (const std::optional<int64_t> g = std::get<kGroups>(refs).maybe_as_int()) {
          groups = *g;
          p.groups = &groups;
        }
      }
    }
    bool transposed = false;
    if constexpr (kFilter == PreFilter::kDepthwiseConvBackward) {
      if constexpr (std::is_same_v<std::tuple_element_t<7, Types>, bool>) {
        transposed = std::get<7>(refs);
        p.transposed = &transposed;
      }
    }
    return PassesPreFilter(kFilter, p);
  }
}

// The device of a call's tensor arguments, fed one argument at a time (Visit), and whether
// autograd would record the call (unless the op serves recorded calls: ServesRecordedCalls, whose
// check is then skipped). Shared by the boxed and the unboxed paths.
template <c10::DeviceType kDevice>
struct DeviceScan {
  explicit DeviceScan(bool serves_recorded) : grad_mode(!serves_recorded && c10::GradMode::is_enabled()) {}
  bool grad_mode;
  int found = -2;  // no tensor seen yet
  // False if autograd would record the call (stop there).
  bool Visit(const at::Tensor& t) {
    if (!t.defined()) return true;
    if (grad_mode && t.requires_grad()) return false;
    if (found == -1) return true;  // only autograd is left to check
    const c10::Device d = t.device();
    if (d.type() != kDevice || (found != -2 && d.index() != found)) {
      found = -1;
    } else {
      found = d.index();
    }
    return true;
  }
  bool Visit(const std::optional<at::Tensor>& t) { return !t.has_value() || Visit(*t); }
  template <class T>
  bool Visit(const T&) {
    return true;  // not a tensor
  }
  int device() const { return found == -2 ? -1 : found; }
};

// The device of the call's tensor arguments, all of type kDevice (CUDA in the adapter), in
// *device; -1 if the first is not such a tensor, or if they are on more than one device. Such a
// call is left to PyTorch's kernel, which rejects it (or handles it) as it would without kjit:
// served, it would fail the launch and blacklist the key on this device for the process, though
// the kernel is sound. False if autograd would record the call (grad mode on and a tensor
// argument requires grad) and the op does not serve recorded calls: PyTorch's kernel too. One
// pass over the arguments for both.
template <c10::DeviceType kDevice = c10::DeviceType::CUDA>
bool DeviceWithoutAutograd(c10::ArrayRef<c10::IValue> args, int* device, bool serves_recorded = false) {
  DeviceScan<kDevice> scan(serves_recorded);
  for (const c10::IValue& v : args) {
    if (v.isTensor() && !scan.Visit(v.toTensor())) return false;
  }
  *device = scan.device();
  return true;
}

// The checks of a call before it is keyed: its op's pre-filter, autograd (unless the op serves
// recorded calls), its device. False: PyTorch's kernel, unkeyed; true: *device is the call's.
template <c10::DeviceType kDevice = c10::DeviceType::CUDA>
bool CheckCall(PreFilter filter, c10::ArrayRef<c10::IValue> args, int* device, bool serves_recorded = false) {
  return PassesPreFilter(filter, args) && DeviceWithoutAutograd<kDevice>(args, device, serves_recorded);
}

// The numerics a call is keyed with: KeysAllNumerics(op) (shim_core.h) as kAllNumerics.
template <bool kAllNumerics>
uint32_t KeyNumerics() {
  if constexpr (kAllNumerics) {
    return kjit::torch::CurrentNumerics();
  } else {
    return kjit::torch::CurrentDeterminismNumerics();
  }
}

// Prefetches of what the checks and the key read of a call's tensor arguments, for the unboxed
// path. Between two calls of a Python program its interpreter evicts them, and each tensor is a
// chain of dependent cache misses (the Tensor's TensorImpl: device, dtype, sizes and strides over
// three lines; then its StorageImpl: the data pointer, for the alignment). Read argument by
// argument, each chain waits for the last; prefetched together first, the misses overlap.
// PrefetchTensorImpls first; PrefetchStorages once the TensorImpls have been read (the checks
// read them), since it reads each TensorImpl's storage pointer. A prefetch never faults.
inline void PrefetchTensorImpl(const at::Tensor& t) {
  const char* impl = reinterpret_cast<const char*>(t.unsafeGetTensorImpl());
  __builtin_prefetch(impl);
  __builtin_prefetch(impl + 64);
  __builtin_prefetch(impl + 128);
}
inline void PrefetchTensorImpl(const std::optional<at::Tensor>& t) {
  if (t.has_value()) PrefetchTensorImpl(*t);
}
template <class T>
void PrefetchTensorImpl(const T&) {}

inline void PrefetchStorage(const at::Tensor& t) {
  __builtin_prefetch(t.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl());
}
inline void PrefetchStorage(const std::optional<at::Tensor>& t) {
  if (t.has_value()) PrefetchStorage(*t);
}
template <class T>
void PrefetchStorage(const T&) {}

template <class... Args>
void PrefetchTensorImpls(const Args&... args) {
  (PrefetchTensorImpl(args), ...);
}
template <class... Args>
void PrefetchStorages(const Args&... args) {
  (PrefetchStorage(args), ...);
}

// CheckCall on a call given by its C++ arguments: the same checks, the same answer.
template <PreFilter kFilter, c10::DeviceType kDevice = c10::DeviceType::CUDA, bool kServesRecorded = false,
          class... Args>
bool CheckTypedCall(int* device, const Args&... args) {
  if (!PassesPreFilterTyped<kFilter>(args...)) return false;
  DeviceScan<kDevice> scan(kServesRecorded);
  if (!(scan.Visit(args) && ...)) return false;
  *device = scan.device();
  return true;
}

// A checked call's key from its C++ arguments (the bytes FindEntry keys), hashed where it was
// written (HashTypedCallKey), and its entry on `device` if there is one: never created here, so
// that the boxed path, which makes and resolves entries, sees a key's first call. Null if there
// is none or the call cannot be keyed (*keyed false).
template <bool kAllNumerics, class... Args>
Entry* FindTypedEntry(const EntryTable& table, const kjit::torch::CallKeyPlan& plan, int device, int arch,
                      Hash128* hash, bool* keyed, const Args&... args) {
  // Written only by a key longer than the key writer's buffer; a local, not a thread_local (whose
  // access from a shared library is a call to __tls_get_addr and an initialisation check).
  std::string scratch;
  *keyed = kjit::torch::HashTypedCallKey(plan, static_cast<uint16_t>(arch), KeyNumerics<kAllNumerics>(), &scratch,
                                         hash, args...)
               .ok();
  if (!*keyed) return nullptr;
  return table.Find(*hash, device);
}

// A checked call's key, its hash and its entry on `device` (created in kUnknown if absent:
// *created says whether this call made it). Null if the call cannot be keyed (e.g. an argument
// type the key does not encode).
// `plan` is the op's (kjit::torch::CallKeyPlan): made once, so that no call reads the schema.
template <bool kProfile, bool kAllNumerics>
Entry* FindEntry(EntryTable& table, const kjit::torch::CallKeyPlan& plan, c10::ArrayRef<c10::IValue> args, int device,
                 int arch, Stopwatch<kProfile>& clock, Hash128* hash, bool* created) {
  thread_local std::string key;
  if (!kjit::torch::WriteCallKey(plan, std::span<const c10::IValue>(args.data(), args.size()),
                                 static_cast<uint16_t>(arch), KeyNumerics<kAllNumerics>(), &key)
           .ok()) {
    return nullptr;
  }
  clock.Lap(Stage::kKey);
  *hash = HashBytes(key);
  clock.Lap(Stage::kHash);
  Entry* entry = table.FindOrCreate(*hash, device, key, created);
  clock.Lap(Stage::kLookup);
  return entry;
}

}  // namespace kjit::shim
