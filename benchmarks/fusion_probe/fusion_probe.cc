// libkjit_fusion_probe.so: what seeing chains of ops would cost the shim per op (issue 44, step 1).
//
// Loaded into a Python process after `import torch` (benchmarks/fusion_probe/fusion_probe.py) and switched
// between modes through its C functions; nothing is registered at load. The modes are the interception
// mechanisms of shim/FUSION.md, without the fused kernels: every op still runs PyTorch's kernel at once, so
// what a mode adds to the eager time is its interception and bookkeeping alone.
//
//   0 eager      nothing of the probe in the dispatcher.
//   1 catch-all  a boxed backend fallback on a mode key (TESTING_ONLY_GenericMode, put in this thread's
//                included dispatch keys), so that every dispatcher call, nested ones too, passes it; it only
//                redispatches. Design (a)'s "anything else" detector, always on.
//   2 window     1 plus design (a)'s deferral-window bookkeeping: each op classified (fusible, composite,
//                other), a fusible op's call described and hashed and its tensors held (refcounts) with their
//                storages, any other op's tensor arguments checked against the window's storages (flush on a
//                hit: the window is dropped), the window flushed at 16 calls.
//   3 wrappers   design (b) with no known chain: unboxed wrappers on the CUDA key of 16 elementwise and
//                reduction ops (PyTorch's at::cuda::<op> called directly, as the shim's unboxed wrappers do),
//                each a pre-filter, a chain-start key (op, dtypes, sizes, strides, scalars) hashed and probed
//                in a start table, and a record appended to a ring (what the recording needs). No catch-all.
//   4 chains     3 with the start table filled by kjit_fp_learn() from the ring: at a known chain's first op
//                the wrapper opens a window and turns the catch-all on for this thread until the chain
//                completes or diverges; in the window each top-level op is checked against the chain's
//                expected op (learned on the chain's first window), its dataflow (a tensor argument that is
//                a window value) and the current stream. Ops still run at once.
//   5 observer   a global RecordFunction callback that counts ops (the profiler's hook; a recording route
//                that needs no registration).
//
// The wrappers exist only where libtorch_cuda is loaded (kjit_fp_init reports it).
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/_log_softmax_ops.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/clamp_min_ops.h>
#include <ATen/ops/cumsum_ops.h>
#include <ATen/ops/div_ops.h>
#include <ATen/ops/exp_ops.h>
#include <ATen/ops/linalg_vector_norm_ops.h>
#include <ATen/ops/mean_ops.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/nll_loss_forward_ops.h>
#include <ATen/ops/pow_ops.h>
#include <ATen/ops/relu_ops.h>
#include <ATen/ops/rsqrt_ops.h>
#include <ATen/ops/sub_ops.h>
#include <ATen/ops/sum_ops.h>
#include <ATen/ops/tanh_ops.h>
#include <ATen/record_function.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>
#include <dlfcn.h>
#include <torch/library.h>

#include "fusion_probe.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace {

constexpr c10::DispatchKey kModeKey = c10::DispatchKey::TESTING_ONLY_GenericMode;
enum Mode : int { kEager = 0, kCatchAll = 1, kWindow = 2, kWrappers = 3, kChains = 4, kObserver = 5, kModes = 6 };

struct Counters {
  uint64_t caught = 0;         // calls through the catch-all
  uint64_t fusible = 0;        // fusible calls put in a design-(a) window
  uint64_t flushes = 0;        // design-(a) windows flushed (a read of a window value, or full)
  uint64_t flushed_calls = 0;  // calls in those windows
  uint64_t wrapper_calls = 0;  // CUDA-key wrapper calls
  uint64_t start_probes = 0;   // chain-start table probes (calls past the pre-filter, outside a window)
  uint64_t windows = 0;        // design-(b) windows opened
  uint64_t completed = 0;      // ... that saw their whole chain
  uint64_t diverged = 0;       // ... closed at an op other than the chain's next
  uint64_t observed = 0;       // RecordFunction callbacks
};
Counters g_count;
int g_mode = kEager;

uint64_t Mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h;
}
uint64_t MixTensor(uint64_t h, const at::Tensor& t) {
  if (!t.defined()) return Mix(h, 0xdead);
  h = Mix(h, static_cast<uint64_t>(t.scalar_type()));
  h = Mix(h, static_cast<uint64_t>(t.dim()));
  for (int64_t s : t.sizes()) h = Mix(h, static_cast<uint64_t>(s));
  for (int64_t s : t.strides()) h = Mix(h, static_cast<uint64_t>(s));
  return Mix(h, static_cast<uint64_t>(t.storage_offset()));
}
uint64_t MixScalar(uint64_t h, const c10::Scalar& s) {
  if (s.isFloatingPoint()) return Mix(h, std::bit_cast<uint64_t>(s.toDouble()));
  if (s.isIntegral(true)) return Mix(h, static_cast<uint64_t>(s.toLong()));
  return Mix(h, 0x5ca1);
}

// ---------------------------------------------------------------------------------------------------------
// Design (a): the window bookkeeping in the catch-all.

enum class OpClass : uint8_t { kFusible, kComposite, kOther };
struct OpInfo {
  OpClass cls;
  uint16_t id;
};
const std::unordered_set<std::string>& FusibleNames() {
  static const std::unordered_set<std::string> names = {
      "aten::add.Tensor", "aten::sub.Tensor", "aten::mul.Tensor", "aten::div.Tensor", "aten::pow.Tensor_Scalar",
      "aten::rsqrt", "aten::tanh", "aten::exp", "aten::relu", "aten::clamp_min", "aten::mean.dim",
      "aten::sum.dim_IntList", "aten::linalg_vector_norm", "aten::cumsum", "aten::_log_softmax",
      "aten::nll_loss_forward", "aten::_to_copy", "aten::copy_", "aten::masked_fill.Scalar", "aten::where.self",
      "aten::neg", "aten::sigmoid", "aten::gelu", "aten::amax", "aten::log"};
  return names;
}
std::unordered_map<const c10::FunctionSchema*, OpInfo> g_classes;

const OpInfo& Classify(const c10::OperatorHandle& op) {
  const c10::FunctionSchema* key = &op.schema();
  auto it = g_classes.find(key);
  if (it != g_classes.end()) return it->second;
  const auto& s = op.schema();
  const std::string name = s.overload_name().empty() ? s.name() : s.name() + "." + s.overload_name();
  OpInfo info{OpClass::kOther, static_cast<uint16_t>(g_classes.size())};
  if (FusibleNames().count(name)) {
    info.cls = OpClass::kFusible;
  } else if (op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) {
    info.cls = OpClass::kComposite;  // transparent: its decomposition's calls are judged one by one
  }
  return g_classes.emplace(key, info).first->second;
}

struct WindowA {
  std::vector<c10::IValue> held;                       // tensors held so that their memory is not reused
  std::vector<const c10::StorageImpl*> storages;       // storages the deferred calls read or write
  std::vector<std::pair<uint16_t, uint64_t>> calls;    // (op id, call hash): the chain key's calls
  int depth = 0;                                       // > 0 inside a fusible call's own redispatch
};
WindowA g_wa;

template <class F>
void ForEachTensor(const c10::IValue* args, size_t n, F&& f) {
  for (size_t i = 0; i < n; ++i) {
    const c10::IValue& v = args[i];
    if (v.isTensor()) {
      f(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList().vec()) f(t);
    } else if (v.isList()) {
      for (const c10::IValue& e : v.toListRef()) {
        if (e.isTensor()) f(e.toTensor());
      }
    }
  }
}

const c10::StorageImpl* StorageOf(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage()) return nullptr;
  return t.storage().unsafeGetStorageImpl();
}

void FlushA() {
  if (g_wa.calls.empty()) return;
  ++g_count.flushes;
  g_count.flushed_calls += g_wa.calls.size();
  g_wa.held.clear();
  g_wa.storages.clear();
  g_wa.calls.clear();
}

bool TouchesWindowA(const c10::IValue* args, size_t n) {
  bool hit = false;
  ForEachTensor(args, n, [&](const at::Tensor& t) {
    const c10::StorageImpl* s = StorageOf(t);
    if (s == nullptr || hit) return;
    for (const c10::StorageImpl* w : g_wa.storages) {
      if (w == s) {
        hit = true;
        return;
      }
    }
  });
  return hit;
}

// ---------------------------------------------------------------------------------------------------------
// Design (b): the chain table, the ring the wrappers record into, and the window of a known chain.

struct Chain {
  uint64_t start = 0;                                   // the first call's key hash
  int length = 0;                                       // CUDA-level fusible calls in the chain
  bool learned = false;                                 // top-level ops known (after its first window)
  std::vector<const c10::FunctionSchema*> top_ops;      // the top-level ops after the first, in order
};
struct Record {
  uint16_t op;
  uint64_t key;
  const void* in[3];
  const void* out;
};
constexpr size_t kRing = 8192;
std::array<Record, kRing> g_ring;
uint64_t g_ring_n = 0;

constexpr size_t kTable = 1024;  // open addressing, power of two
struct Slot {
  uint64_t key = 0;
  Chain* chain = nullptr;
};
std::array<Slot, kTable> g_table;
std::vector<std::unique_ptr<Chain>> g_chains;

Chain* FindStart(uint64_t key) {
  for (size_t i = key & (kTable - 1), n = 0; n < kTable; i = (i + 1) & (kTable - 1), ++n) {
    if (g_table[i].chain == nullptr) return nullptr;
    if (g_table[i].key == key) return g_table[i].chain;
  }
  return nullptr;
}
void InsertStart(uint64_t key, Chain* chain) {
  for (size_t i = key & (kTable - 1), n = 0; n < kTable; i = (i + 1) & (kTable - 1), ++n) {
    if (g_table[i].chain == nullptr || g_table[i].key == key) {
      g_table[i] = {key, chain};
      return;
    }
  }
}

struct WindowB {
  Chain* chain = nullptr;
  int fusible_seen = 0;
  size_t cursor = 0;
  int depth = 0;
  int64_t stream = 0;
  std::vector<at::Tensor> values;                      // the chain's outputs so far (held)
  std::vector<const c10::FunctionSchema*> learning;    // top-level ops seen in a chain's first window
};
WindowB g_wb;

int64_t CurrentStreamId(const at::Tensor& t) {
  if (!t.defined() || !t.is_cuda() || !c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA)) return 0;
  return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(t.device()).id();
}

void CloseB(bool completed) {
  if (g_wb.chain == nullptr) return;
  if (completed) {
    ++g_count.completed;
    if (!g_wb.chain->learned) {
      g_wb.chain->top_ops = g_wb.learning;
      g_wb.chain->learned = true;
    }
  } else {
    ++g_count.diverged;
  }
  g_wb.chain = nullptr;
  g_wb.values.clear();
  g_wb.learning.clear();
  c10::impl::tls_set_dispatch_key_included(kModeKey, false);
}

void OpenB(Chain* chain, const at::Tensor& first_input) {
  ++g_count.windows;
  g_wb.chain = chain;
  g_wb.fusible_seen = 0;
  g_wb.cursor = 0;
  g_wb.depth = 0;
  g_wb.stream = CurrentStreamId(first_input);
  c10::impl::tls_set_dispatch_key_included(kModeKey, true);
}

bool IsWindowValue(const at::Tensor& t) {
  for (const at::Tensor& v : g_wb.values) {
    if (v.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return true;
  }
  return false;
}

// ---------------------------------------------------------------------------------------------------------
// The catch-all: a boxed fallback on kModeKey.

void CatchAll(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  ++g_count.caught;
  const c10::DispatchKeySet below = ks & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, kModeKey);
  const size_t n = op.schema().arguments().size();
  const c10::IValue* args = stack->data() + (stack->size() - n);
  if (g_mode == kWindow) {
    if (g_wa.depth > 0) {  // inside a fusible call: its own decomposition
      op.redispatchBoxed(below, stack);
      return;
    }
    const OpInfo& info = Classify(op);
    if (info.cls == OpClass::kFusible) {
      ++g_count.fusible;
      uint64_t h = info.id;
      for (size_t i = 0; i < n; ++i) {
        const c10::IValue& v = args[i];
        if (v.isTensor()) {
          h = MixTensor(h, v.toTensor());
          const c10::StorageImpl* s = StorageOf(v.toTensor());
          if (s != nullptr) g_wa.storages.push_back(s);
          g_wa.held.push_back(v);
        } else if (v.isScalar()) {
          h = MixScalar(h, v.toScalar());
        } else if (v.isInt()) {
          h = Mix(h, static_cast<uint64_t>(v.toInt()));
        } else if (v.isBool()) {
          h = Mix(h, v.toBool() ? 1 : 2);
        } else if (v.isIntList()) {
          for (int64_t x : v.toIntVector()) h = Mix(h, static_cast<uint64_t>(x));
        } else if (v.isNone()) {
          h = Mix(h, 0x11);
        }
      }
      g_wa.calls.emplace_back(info.id, h);
      ++g_wa.depth;
      op.redispatchBoxed(below, stack);
      --g_wa.depth;
      const size_t r = op.schema().returns().size();
      ForEachTensor(stack->data() + (stack->size() - r), r, [](const at::Tensor& t) {
        const c10::StorageImpl* s = StorageOf(t);
        if (s != nullptr) g_wa.storages.push_back(s);
        g_wa.held.emplace_back(t);
      });
      if (g_wa.calls.size() >= 16) FlushA();
      return;
    }
    if (info.cls == OpClass::kOther && !g_wa.calls.empty() && TouchesWindowA(args, n)) FlushA();
    op.redispatchBoxed(below, stack);
    return;
  }
  if (g_mode == kChains && g_wb.chain != nullptr && g_wb.depth == 0) {
    Chain* chain = g_wb.chain;
    bool ok = true;
    if (chain->learned) {
      ok = g_wb.cursor < chain->top_ops.size() && chain->top_ops[g_wb.cursor] == &op.schema();
    } else {
      g_wb.learning.push_back(&op.schema());
    }
    if (ok) {  // dataflow: some tensor argument is a window value; the same stream
      bool flows = false;
      at::Tensor first;
      ForEachTensor(args, n, [&](const at::Tensor& t) {
        if (!first.defined()) first = t;
        flows = flows || IsWindowValue(t);
      });
      ok = flows && CurrentStreamId(first) == g_wb.stream;
    }
    if (!ok) {
      CloseB(false);  // a real window would flush here: run the pending calls unfused, then this op
      op.redispatchBoxed(below, stack);
      return;
    }
    ++g_wb.cursor;
    ++g_wb.depth;
    op.redispatchBoxed(below, stack);
    --g_wb.depth;
    if (g_wb.chain != nullptr) {  // what a window op returns is a window value too (views: expand_as)
      const size_t r = op.schema().returns().size();
      ForEachTensor(stack->data() + (stack->size() - r), r, [](const at::Tensor& t) { g_wb.values.push_back(t); });
    }
    if (g_wb.chain != nullptr && g_wb.fusible_seen >= chain->length) CloseB(true);
    return;
  }
  op.redispatchBoxed(below, stack);
}

// ---------------------------------------------------------------------------------------------------------
// Design (b)'s wrappers on the CUDA key: at::cuda::<op> found by its mangled name in libtorch_cuda.

struct KeyOf {
  uint64_t h;
  void operator()(const at::Tensor& t) { h = MixTensor(h, t); }
  void operator()(const std::optional<at::Tensor>& t) { h = t ? MixTensor(h, *t) : Mix(h, 0x11); }
  void operator()(const c10::Scalar& s) { h = MixScalar(h, s); }
  void operator()(int64_t v) { h = Mix(h, static_cast<uint64_t>(v)); }
  void operator()(bool v) { h = Mix(h, v ? 1 : 2); }
  void operator()(const c10::SymInt& v) {
    h = Mix(h, v.is_heap_allocated() ? 0x5e : static_cast<uint64_t>(v.as_int_unchecked()));
  }
  void operator()(at::OptionalIntArrayRef v) {
    if (!v.has_value()) {
      h = Mix(h, 0x11);
      return;
    }
    for (int64_t x : *v) h = Mix(h, static_cast<uint64_t>(x));
  }
  void operator()(const std::optional<c10::ScalarType>& v) {
    h = Mix(h, v ? static_cast<uint64_t>(*v) + 1 : 0x11);
  }
};

bool PassesPreFilter(const at::Tensor& self) {
  if (!self.defined()) return false;
  const c10::ScalarType t = self.scalar_type();
  return (t == c10::kFloat || t == c10::kHalf || t == c10::kBFloat16) && self.numel() > 0;
}

template <class R>
const at::Tensor& FirstOutput(const R& r) {
  if constexpr (std::is_same_v<R, at::Tensor>) {
    return r;
  } else {
    return std::get<0>(r);
  }
}

template <size_t I, class Op, class Fn = typename Op::schema>
struct Wrapper;
template <size_t I, class Op, class R, class... A>
struct Wrapper<I, Op, R(A...)> {
  static inline R (*pytorch)(A...) = nullptr;

  static R Call(A... a) {
    ++g_count.wrapper_calls;
    const at::Tensor& self = std::get<0>(std::forward_as_tuple(a...));
    if (!PassesPreFilter(self)) return pytorch(std::forward<A>(a)...);
    KeyOf key{I + 1};
    (key(a), ...);
    Record rec{static_cast<uint16_t>(I), key.h, {nullptr, nullptr, nullptr}, nullptr};
    size_t k = 0;
    auto note_input = [&](const auto& x) {
      if constexpr (std::is_same_v<std::decay_t<decltype(x)>, at::Tensor>) {
        if (k < 3) rec.in[k++] = x.unsafeGetTensorImpl();
      }
    };
    (note_input(a), ...);
    const bool in_window = g_mode == kChains && g_wb.chain != nullptr;
    if (g_mode == kChains && !in_window) {
      ++g_count.start_probes;
      if (Chain* chain = FindStart(key.h)) OpenB(chain, self);
    } else if (g_mode == kWrappers) {
      ++g_count.start_probes;
      (void)FindStart(key.h);  // empty until learned: the no-known-chain cost
    }
    R out = pytorch(std::forward<A>(a)...);
    const at::Tensor& first = FirstOutput(out);
    rec.out = first.unsafeGetTensorImpl();
    g_ring[g_ring_n++ % kRing] = rec;
    if (g_mode == kChains && g_wb.chain != nullptr) {
      ++g_wb.fusible_seen;
      g_wb.values.push_back(first);
      // Depth 0 here: inside the top-level op that opened the window (the catch-all was off when it was
      // dispatched); a chain that ends there never reaches the catch-all.
      if (g_wb.depth == 0 && g_wb.fusible_seen >= g_wb.chain->length) CloseB(true);
    }
    return out;
  }
};

#define KJIT_FP_OPS(X)                                                                                         \
  X(0, add_Tensor, "add.Tensor", "_ZN2at4cuda3addERKNS_6TensorES3_RKN3c106ScalarE")                            \
  X(1, sub_Tensor, "sub.Tensor", "_ZN2at4cuda3subERKNS_6TensorES3_RKN3c106ScalarE")                            \
  X(2, mul_Tensor, "mul.Tensor", "_ZN2at4cuda3mulERKNS_6TensorES3_")                                           \
  X(3, div_Tensor, "div.Tensor", "_ZN2at4cuda3divERKNS_6TensorES3_")                                           \
  X(4, pow_Tensor_Scalar, "pow.Tensor_Scalar", "_ZN2at4cuda3powERKNS_6TensorERKN3c106ScalarE")                 \
  X(5, rsqrt, "rsqrt", "_ZN2at4cuda5rsqrtERKNS_6TensorE")                                                      \
  X(6, tanh, "tanh", "_ZN2at4cuda4tanhERKNS_6TensorE")                                                         \
  X(7, exp, "exp", "_ZN2at4cuda3expERKNS_6TensorE")                                                            \
  X(8, relu, "relu", "_ZN2at4cuda4reluERKNS_6TensorE")                                                         \
  X(9, clamp_min, "clamp_min", "_ZN2at4cuda9clamp_minERKNS_6TensorERKN3c106ScalarE")                           \
  X(10, mean_dim, "mean.dim",                                                                                  \
    "_ZN2at4cuda4meanERKNS_6TensorEN3c1016OptionalArrayRefIlEEbSt8optionalINS4_10ScalarTypeEE")                \
  X(11, sum_dim_IntList, "sum.dim_IntList",                                                                    \
    "_ZN2at4cuda3sumERKNS_6TensorEN3c1016OptionalArrayRefIlEEbSt8optionalINS4_10ScalarTypeEE")                 \
  X(12, linalg_vector_norm, "linalg_vector_norm",                                                              \
    "_ZN2at4cuda18linalg_vector_normERKNS_6TensorERKN3c106ScalarENS4_16OptionalArrayRefIlEEbSt8optionalINS4_"  \
    "10ScalarTypeEE")                                                                                          \
  X(13, cumsum, "cumsum", "_ZN2at4cuda6cumsumERKNS_6TensorElSt8optionalIN3c1010ScalarTypeEE")                  \
  X(14, _log_softmax, "_log_softmax", "_ZN2at4cuda12_log_softmaxERKNS_6TensorElb")                             \
  X(15, nll_loss_forward, "nll_loss_forward",                                                                  \
    "_ZN2at4cuda23nll_loss_forward_symintERKNS_6TensorES3_RKSt8optionalIS1_ElN3c106SymIntE")

constexpr int kWrapped = 16;
const char* const kWrappedNames[kWrapped] = {
#define X(I, OP, NAME, SYMBOL) NAME,
    KJIT_FP_OPS(X)
#undef X
};

bool g_wrappers_found = false;
std::unique_ptr<torch::Library> g_cuda_lib;
std::unique_ptr<torch::Library> g_fallback_lib;
std::optional<at::CallbackHandle> g_observer;
std::string g_error;

struct QuietWarnings : c10::WarningHandler {
  void process(const c10::Warning&) override {}
};

bool FindWrappers() {
  void* lib = dlopen("libtorch_cuda.so", RTLD_NOLOAD | RTLD_LAZY);
  if (lib == nullptr) {
    g_error = "libtorch_cuda.so is not loaded: the CUDA-key wrappers (modes 3, 4) are unavailable";
    return false;
  }
  bool all = true;
#define X(I, OP, NAME, SYMBOL)                                                                   \
  Wrapper<I, at::_ops::OP>::pytorch =                                                           \
      reinterpret_cast<at::_ops::OP::ptr_schema>(dlsym(lib, SYMBOL));                           \
  if (Wrapper<I, at::_ops::OP>::pytorch == nullptr) {                                          \
    all = false;                                                                                 \
    g_error = std::string("no ") + SYMBOL + " in libtorch_cuda.so";                              \
  }
  KJIT_FP_OPS(X)
#undef X
  return all;
}

void SetWrappers(bool on) {
  if (on == (g_cuda_lib != nullptr) || !g_wrappers_found) return;
  QuietWarnings quiet;  // "Overriding a previously registered kernel", once per op and switch
  c10::WarningUtils::WarningHandlerGuard guard(&quiet);
  if (!on) {
    g_cuda_lib.reset();  // deregisters: the dispatcher calls PyTorch's kernel again
    return;
  }
  g_cuda_lib = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::CUDA, __FILE__,
                                                __LINE__);
#define X(I, OP, NAME, SYMBOL)                          \
  {                                                     \
    using W = Wrapper<I, at::_ops::OP>;                 \
    g_cuda_lib->impl(NAME, TORCH_FN(W::Call));          \
  }
  KJIT_FP_OPS(X)
#undef X
}

std::unique_ptr<at::ObserverContext> ObserveStart(const at::RecordFunction&) {
  ++g_count.observed;
  return nullptr;
}

}  // namespace

// Registers the catch-all fallback and finds PyTorch's CUDA kernels. Returns 0 with everything, 1 without
// the CUDA-key wrappers (kjit_fp_error says why), -1 on failure.
KJIT_FP_API int kjit_fp_init() {
  if (g_fallback_lib) return g_wrappers_found ? 0 : 1;
  try {
    g_fallback_lib = std::make_unique<torch::Library>(torch::Library::IMPL, "_", kModeKey, __FILE__, __LINE__);
    g_fallback_lib->fallback(torch::CppFunction::makeFromBoxedFunction<&CatchAll>());
  } catch (const std::exception& e) {
    g_error = std::string("registering the catch-all fallback failed: ") + e.what();
    g_fallback_lib.reset();
    return -1;
  }
  g_wrappers_found = FindWrappers();
  return g_wrappers_found ? 0 : 1;
}

KJIT_FP_API const char* kjit_fp_error() { return g_error.c_str(); }

// Switches this thread to a mode (0-5, the file comment's); closes any window. Returns 0, or -1 for a mode
// this process cannot run.
KJIT_FP_API int kjit_fp_set_mode(int mode) {
  if (mode < 0 || mode >= kModes || !g_fallback_lib) return -1;
  if ((mode == kWrappers || mode == kChains) && !g_wrappers_found) return -1;
  FlushA();
  CloseB(false);
  g_mode = mode;
  c10::impl::tls_set_dispatch_key_included(kModeKey, mode == kCatchAll || mode == kWindow);
  SetWrappers(mode == kWrappers || mode == kChains);
  if (mode == kObserver && !g_observer) {
    g_observer = at::addGlobalCallback(at::RecordFunctionCallback(&ObserveStart).needsInputs(false).needsIds(false));
  } else if (mode != kObserver && g_observer) {
    at::removeCallback(*g_observer);
    g_observer.reset();
  }
  return 0;
}

// Counters, in Counters' order: caught, fusible, flushes, flushed_calls, wrapper_calls, start_probes,
// windows, completed, diverged, observed. Returns how many were written.
KJIT_FP_API int kjit_fp_counters(uint64_t* out, int n) {
  const uint64_t values[] = {g_count.caught,        g_count.fusible,      g_count.flushes, g_count.flushed_calls,
                             g_count.wrapper_calls, g_count.start_probes, g_count.windows, g_count.completed,
                             g_count.diverged,      g_count.observed};
  const int count = std::min<int>(n, static_cast<int>(std::size(values)));
  std::memcpy(out, values, sizeof(uint64_t) * static_cast<size_t>(count));
  return count;
}

// Clears the ring the wrappers record into (and forgets learned chains with `forget`).
KJIT_FP_API void kjit_fp_reset(int forget) {
  g_ring_n = 0;
  if (forget) {
    g_table.fill(Slot{});
    g_chains.clear();
  }
}

// Finds the chains in the ring: runs of wrapper calls in which each call reads an output of an earlier call
// of the run, of two calls or more, whose op-and-key sequence occurs at least twice. Each becomes a known
// chain, keyed by its first call. Returns the number of chains added; *calls gets the calls they cover per
// occurrence, summed over the chains.
KJIT_FP_API int kjit_fp_learn(int* calls) {
  const uint64_t n = std::min<uint64_t>(g_ring_n, kRing);
  const uint64_t first = g_ring_n - n;
  struct Seen {
    int count = 0;
    int length = 0;
    uint64_t start = 0;
  };
  std::unordered_map<uint64_t, Seen> runs;
  std::vector<const void*> outs;
  uint64_t run_hash = 0, run_start = 0;
  int run_len = 0;
  auto end_run = [&] {
    if (run_len >= 2) {
      Seen& s = runs[Mix(run_hash, static_cast<uint64_t>(run_len))];
      ++s.count;
      s.length = run_len;
      s.start = run_start;
    }
  };
  for (uint64_t i = first; i < g_ring_n; ++i) {
    const Record& r = g_ring[i % kRing];
    bool linked = false;
    for (const void* in : r.in) {
      for (const void* o : outs) linked = linked || (in != nullptr && in == o);
    }
    if (!linked) {
      end_run();
      outs.clear();
      run_hash = 0;
      run_len = 0;
      run_start = r.key;
    }
    outs.push_back(r.out);
    run_hash = Mix(run_hash, r.key);
    ++run_len;
  }
  end_run();
  int added = 0, covered = 0;
  for (const auto& [hash, s] : runs) {
    if (s.count < 2 || FindStart(s.start) != nullptr) continue;
    auto chain = std::make_unique<Chain>();
    chain->start = s.start;
    chain->length = s.length;
    InsertStart(s.start, chain.get());
    g_chains.push_back(std::move(chain));
    ++added;
    covered += s.length;
  }
  if (calls != nullptr) *calls = covered;
  return added;
}

// The ops the CUDA-key wrappers cover, comma-separated.
KJIT_FP_API const char* kjit_fp_wrapped_ops() {
  static const std::string list = [] {
    std::string s;
    for (const char* name : kWrappedNames) s += (s.empty() ? "" : ",") + std::string(name);
    return s;
  }();
  return list.c_str();
}

