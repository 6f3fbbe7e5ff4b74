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
#include <span>
#include <string>

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
inline bool SmallMatmulArgsPass(bool batched, const at::Tensor& self, c10::ArrayRef<c10::IValue> args) {
  if (args.size() != 2 || !args[1].isTensor()) return false;
  const at::Tensor& mat2 = args[1].toTensor();
  if (!mat2.defined() || mat2.layout() != c10::kStrided || mat2.scalar_type() != self.scalar_type()) return false;
  // A dtype the family does not serve has MatmulMaxK 0 (kjit/runtime/matmul_limits.h): declined there.
  DType dtype;
  if (!kjit::torch::ToDType(self.scalar_type(), &dtype)) return false;
  const auto a_sizes = self.sizes(), a_strides = self.strides(), b_sizes = mat2.sizes(), b_strides = mat2.strides();
  return SmallMatmulMayBeServed(batched, dtype,
                                {{a_sizes.data(), a_sizes.size()}, {a_strides.data(), a_strides.size()}},
                                {{b_sizes.data(), b_sizes.size()}, {b_strides.data(), b_strides.size()}});
}

// The op's pre-filter (shim_core.h): true if the call may be one its family serves and is to be
// keyed. Reads tensor metadata only; no allocation, no exception for any stack contents.
inline bool PassesPreFilter(PreFilter filter, c10::ArrayRef<c10::IValue> args) {
  if (filter == PreFilter::kNone) return true;
  if (args.empty() || !args[0].isTensor()) return false;
  const at::Tensor& x = args[0].toTensor();
  if (!x.defined() || x.layout() != c10::kStrided) return false;
  const c10::ScalarType type = x.scalar_type();
  if (type != c10::ScalarType::Float && type != c10::ScalarType::Half && type != c10::ScalarType::BFloat16) {
    return false;
  }
  if (filter == PreFilter::kSmallMatmul || filter == PreFilter::kSmallBatchedMatmul) {
    return SmallMatmulArgsPass(filter == PreFilter::kSmallBatchedMatmul, x, args);
  }
  const auto sizes = x.sizes();
  if (filter == PreFilter::kDepthwiseConv) {
    // cudnn_convolution(self, weight, padding, stride, dilation, groups, benchmark, deterministic, allow_tf32)
    if (args.size() != 9 || !args[1].isTensor() || !args[5].isInt()) return false;
    const at::Tensor& w = args[1].toTensor();
    if (!w.defined()) return false;
    const auto w_sizes = w.sizes();
    return CudnnConvMayBeDepthwise(std::span<const int64_t>(sizes.data(), sizes.size()),
                                   std::span<const int64_t>(w_sizes.data(), w_sizes.size()), args[5].toInt());
  }
  // 0-d and empty inputs: every family of a filtered op leaves them to PyTorch.
  if (sizes.empty()) return false;
  for (int64_t n : sizes) {
    if (n == 0) return false;
  }
  return true;
}

// The device of the call's tensor arguments, all of type kDevice (CUDA in the adapter), in
// *device; -1 if the first is not such a tensor, or if they are on more than one device. Such a
// call is left to PyTorch's kernel, which rejects it (or handles it) as it would without kjit:
// served, it would fail the launch and blacklist the key on this device for the process, though
// the kernel is sound. False if autograd would record the call (grad mode on and a tensor
// argument requires grad): PyTorch's kernel too. One pass over the arguments for both.
template <c10::DeviceType kDevice = c10::DeviceType::CUDA>
bool DeviceWithoutAutograd(c10::ArrayRef<c10::IValue> args, int* device) {
  const bool grad_mode = c10::GradMode::is_enabled();
  int found = -2;  // no tensor seen yet
  for (const c10::IValue& v : args) {
    if (!v.isTensor()) continue;
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) continue;
    if (grad_mode && t.requires_grad()) return false;
    if (found == -1) continue;  // only autograd is left to check
    const c10::Device d = t.device();
    if (d.type() != kDevice || (found != -2 && d.index() != found)) {
      found = -1;
    } else {
      found = d.index();
    }
  }
  *device = found == -2 ? -1 : found;
  return true;
}

// The checks of a call before it is keyed: its op's pre-filter, autograd, its device. False:
// PyTorch's kernel, unkeyed; true: *device is the call's.
template <c10::DeviceType kDevice = c10::DeviceType::CUDA>
bool CheckCall(PreFilter filter, c10::ArrayRef<c10::IValue> args, int* device) {
  return PassesPreFilter(filter, args) && DeviceWithoutAutograd<kDevice>(args, device);
}

// A checked call's key, its hash and its entry on `device` (created in kUnknown if absent:
// *created says whether this call made it). Null if the call cannot be keyed (e.g. an argument
// type the key does not encode).
// `plan` is the op's (kjit::torch::CallKeyPlan): made once, so that no call reads the schema.
template <bool kProfile>
Entry* FindEntry(EntryTable& table, const kjit::torch::CallKeyPlan& plan, c10::ArrayRef<c10::IValue> args, int device,
                 int arch, Stopwatch<kProfile>& clock, Hash128* hash, bool* created) {
  thread_local std::string key;
  if (!kjit::torch::WriteCallKey(plan, std::span<const c10::IValue>(args.data(), args.size()),
                                 static_cast<uint16_t>(arch), kjit::torch::CurrentNumerics(), &key)
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
