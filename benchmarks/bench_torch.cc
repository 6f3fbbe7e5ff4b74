// The per-call cost of keying a real PyTorch call: what the shim pays on every
// intercepted launch before its cache lookup. CPU tensors: the key reads
// metadata only, so the figure is the same for CUDA tensors.
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "call_path.h"
#include "kjit/torch/call_key.h"
#include "shim_core.h"

namespace {

// Keys and hashes one boxed call per iteration, as the shim will.
void KeyAndHashLoop(benchmark::State& state, const char* name, const char* overload,
                    const std::vector<c10::IValue>& args) {
  const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
  const c10::FunctionSchema& schema = op.schema();
  std::string buffer;
  buffer.reserve(256);
  for (auto _ : state) {
    if (!kjit::torch::WriteCallKey(schema, args, 90, 0, &buffer).ok()) state.SkipWithError("key failed");
    benchmark::DoNotOptimize(kjit::HashBytes(buffer));
  }
}

void BM_TorchLayerNormCallKeyAndHash(benchmark::State& state) {
  at::Tensor x = at::empty({65536, 1024}, at::kBFloat16);
  at::Tensor w = at::empty({1024}, at::kBFloat16);
  KeyAndHashLoop(state, "aten::native_layer_norm", "", {x, c10::IValue(std::vector<int64_t>{1024}), w, w, 1e-5});
}
BENCHMARK(BM_TorchLayerNormCallKeyAndHash);

void BM_TorchSoftmaxCallKeyAndHash(benchmark::State& state) {
  KeyAndHashLoop(state, "aten::_softmax", "", {at::empty({64, 1048576}), int64_t{-1}, false});
}
BENCHMARK(BM_TorchSoftmaxCallKeyAndHash);

void BM_TorchCurrentNumerics(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(kjit::torch::CurrentNumerics());
}
BENCHMARK(BM_TorchCurrentNumerics);

// The shim's small-tensor case (benchmarks/shim_overhead.py): f32[8,64] softmax, keyed and hashed.
void BM_TorchSmallSoftmaxCallKeyAndHash(benchmark::State& state) {
  KeyAndHashLoop(state, "aten::_softmax", "", {at::empty({8, 64}), int64_t{-1}, false});
}
BENCHMARK(BM_TorchSmallSoftmaxCallKeyAndHash);

// Keying alone (no hash), the same call.
void BM_TorchSmallSoftmaxCallKey(benchmark::State& state) {
  const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::_softmax", "");
  const std::vector<c10::IValue> args{at::empty({8, 64}), int64_t{-1}, false};
  std::string buffer;
  for (auto _ : state) {
    if (!kjit::torch::WriteCallKey(op.schema(), args, 90, 0, &buffer).ok()) state.SkipWithError("key failed");
    benchmark::DoNotOptimize(buffer.data());
  }
}
BENCHMARK(BM_TorchSmallSoftmaxCallKey);

// A reduction with an int[] and an optional dtype (sum.dim_IntList): the list and ScalarType paths.
void BM_TorchSmallSumCallKeyAndHash(benchmark::State& state) {
  KeyAndHashLoop(state, "aten::sum", "dim_IntList",
                 {at::empty({8, 64}), c10::IValue(std::vector<int64_t>{1}), false, c10::IValue()});
}
BENCHMARK(BM_TorchSmallSumCallKeyAndHash);

// The shim's table lookup of a key it has seen (the hit and miss paths' FindOrCreate).
void BM_ShimTableFindExisting(benchmark::State& state) {
  kjit::shim::EntryTable table;
  std::vector<kjit::Hash128> hashes;
  for (int i = 0; i < static_cast<int>(state.range(0)); ++i) {
    const std::string key = "key " + std::to_string(i);
    hashes.push_back(kjit::HashBytes(key));
    bool created = false;
    table.FindOrCreate(hashes.back(), 0, key, &created);
  }
  size_t i = 0;
  for (auto _ : state) {
    bool created = false;
    benchmark::DoNotOptimize(table.FindOrCreate(hashes[i], 0, "", &created));
    if (++i == hashes.size()) i = 0;
  }
}
BENCHMARK(BM_ShimTableFindExisting)->Arg(1)->Arg(64)->Arg(1024);

// A miss's accounting (Entry::CountMiss) with its two clock reads around PyTorch's kernel.
void BM_ShimCountMissWithClocks(benchmark::State& state) {
  kjit::shim::Entry entry("key", 0);
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    const auto end = std::chrono::steady_clock::now();
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count();
    benchmark::DoNotOptimize(entry.CountMiss(static_cast<uint64_t>(ns), end.time_since_epoch().count()));
  }
}
BENCHMARK(BM_ShimCountMissWithClocks);

// The adapter's miss path as it is now: one miss in Entry::kMissTimingStride timed (the two
// clock reads and CountMiss), the others counted by CountUntimedMiss.
void BM_ShimCountMissSampled(benchmark::State& state) {
  kjit::shim::Entry entry("key", 0);
  for (auto _ : state) {
    if (entry.TimeThisMiss()) {
      const auto start = std::chrono::steady_clock::now();
      const auto end = std::chrono::steady_clock::now();
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count();
      benchmark::DoNotOptimize(entry.CountMiss(static_cast<uint64_t>(ns), end.time_since_epoch().count()));
    } else {
      entry.CountUntimedMiss();
    }
  }
}
BENCHMARK(BM_ShimCountMissSampled);

// The key's first call, resolved negative as the adapter resolves a key without a record, so that the
// loops after it time a known miss. False (and the benchmark skipped) where the call is not keyed.
bool KeyAsKnownMiss(benchmark::State& state, kjit::shim::EntryTable& table, kjit::shim::PreFilter filter,
                    const kjit::torch::CallKeyPlan& plan, const std::vector<c10::IValue>& args, int device_index,
                    int arch) {
  using namespace kjit::shim;
  Stopwatch<false> clock(nullptr);
  int device = -1;
  kjit::Hash128 hash;
  bool created = false;
  Entry* entry = CheckCall<c10::DeviceType::CPU>(filter, args, &device)
                     ? FindEntry<false, false>(table, plan, args, device_index, arch, clock, &hash, &created)
                     : nullptr;
  if (entry == nullptr || !created) {
    state.SkipWithError("the call was not keyed");
    return false;
  }
  entry->ResolveNegative({});
  entry->CountMiss(1000, NowNs());
  return true;
}

// A known miss as the adapter's wrapper (shim/adapter.cc, ServeOrForward) handles it, all
// but PyTorch's kernel (not called): the call's checks, key, hash, lookup and miss accounting,
// through the same functions (call_path.h), on CPU tensors (the adapter's are CUDA ones). One key,
// found again each call. Caches and branch predictors stay warm here, where in a program the
// kernel's launch between two calls cools them: the in-process figures (KJIT_PROFILE) are higher.
// With kProfile, the stage clock is on, and its per-stage means (clock reads included, as in
// KJIT_PROFILE's table) are counters of the run.
template <bool kProfile>
void MissLoop(benchmark::State& state, const char* name, const char* overload, const char* intercepted,
              const std::vector<c10::IValue>& args) {
  using namespace kjit::shim;
  const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
  const PreFilter filter = PreFilterFor(intercepted);
  const kjit::torch::CallKeyPlan plan(op.schema());
  EntryTable table;
  StageProfile profile;
  constexpr int kDevice = 0;  // CPU tensors have no device index; the table's device of the call
  constexpr int kArch = 90;
  if (!KeyAsKnownMiss(state, table, filter, plan, args, kDevice, kArch)) return;
  for (auto _ : state) {
    Stopwatch<kProfile> clock(&profile);
    int device = -1;
    if (!CheckCall<c10::DeviceType::CPU>(filter, args, &device)) {
      state.SkipWithError("declined");
      break;
    }
    clock.Lap(Stage::kPreFilter);
    kjit::Hash128 hash;
    bool created = false;
    Entry* entry = FindEntry<kProfile, false>(table, plan, args, kDevice, kArch, clock, &hash, &created);
    if (entry == nullptr || entry->state() != EntryState::kNegative) {
      state.SkipWithError("not a known miss");
      break;
    }
    if (!entry->TimeThisMiss()) {
      clock.Lap(Stage::kPyTorchMiss);
      entry->CountUntimedMiss();
      clock.Lap(Stage::kMissAccounting);
    } else {
      const auto start = std::chrono::steady_clock::now();
      const auto end = std::chrono::steady_clock::now();
      clock.Lap(Stage::kPyTorchMiss);
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count();
      benchmark::DoNotOptimize(entry->CountMiss(static_cast<uint64_t>(ns), end.time_since_epoch().count()));
      clock.Lap(Stage::kMissAccounting);
    }
    clock.Total();
  }
  if (kProfile) {
    for (Stage s : {Stage::kPreFilter, Stage::kKey, Stage::kHash, Stage::kLookup, Stage::kMissAccounting}) {
      const uint64_t n = profile.calls(s);
      if (n == 0) continue;
      state.counters[std::string(StageName(s))] =
          benchmark::Counter(static_cast<double>(profile.ns(s)) / static_cast<double>(n));
    }
  }
}

// The same miss path with cold caches, as between two calls of a Python program, whose
// interpreter runs through a few MB of its own data meanwhile: before each call, a 4 MiB buffer
// (this CPU's L2 or more) is read and written, which leaves the call's data in L3 at best.
// Manual time: only the call is timed, between two clock reads; BM_ShimColdBaseline times
// nothing between the same two reads after the same eviction, and is to be subtracted.
// A fixed count: the eviction takes ~100x the call, and the benchmark library would size the run
// by the manual time alone.
constexpr size_t kEvictBytes = size_t{4} << 20;
constexpr int kColdIterations = 20000;

void Evict(std::vector<char>& buffer) {
  for (size_t i = 0; i < buffer.size(); i += 64) buffer[i] = static_cast<char>(buffer[i] + 1);
  benchmark::ClobberMemory();
}

// The counter median_ns is the median call: on this shared machine the mean takes in the calls
// that another process's time slice interrupted.
template <typename Call>
void ColdLoop(benchmark::State& state, Call&& call) {
  std::vector<char> buffer(kEvictBytes, 1);
  std::vector<int64_t> ns;
  ns.reserve(kColdIterations);
  for (auto _ : state) {
    Evict(buffer);
    const auto start = std::chrono::steady_clock::now();
    call();
    const auto end = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(end - start).count());
    ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count());
  }
  if (ns.empty()) return;
  std::nth_element(ns.begin(), ns.begin() + static_cast<ptrdiff_t>(ns.size() / 2), ns.end());
  state.counters["median_ns"] = benchmark::Counter(static_cast<double>(ns[ns.size() / 2]));
}

void BM_ShimColdBaseline(benchmark::State& state) {
  ColdLoop(state, [] {});
}
BENCHMARK(BM_ShimColdBaseline)->UseManualTime()->Iterations(kColdIterations);

// A known miss counted as the adapter counts it (ServeOrForward, Unboxed<I>::Call), PyTorch's kernel
// left out: one in Entry::kMissTimingStride timed (two clock reads) and reported, the others counted.
void AccountMiss(kjit::shim::Entry& entry) {
  if (!entry.TimeThisMiss()) {
    entry.CountUntimedMiss();
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  const auto end = std::chrono::steady_clock::now();
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count();
  benchmark::DoNotOptimize(entry.CountMiss(static_cast<uint64_t>(ns), end.time_since_epoch().count()));
}

// One known miss of `args`, as MissLoop's loop body (unprofiled), with caches cold before each.
void ColdMissLoop(benchmark::State& state, const char* name, const char* overload, const char* intercepted,
                  const std::vector<c10::IValue>& args) {
  using namespace kjit::shim;
  const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
  const PreFilter filter = PreFilterFor(intercepted);
  const kjit::torch::CallKeyPlan plan(op.schema());
  EntryTable table;
  constexpr int kDevice = 0;
  constexpr int kArch = 90;
  if (!KeyAsKnownMiss(state, table, filter, plan, args, kDevice, kArch)) return;
  Stopwatch<false> clock(nullptr);
  bool ok = true;
  ColdLoop(state, [&] {
    int device = -1;
    if (!CheckCall<c10::DeviceType::CPU>(filter, args, &device)) {
      ok = false;
      return;
    }
    kjit::Hash128 hash;
    bool created = false;
    Entry* entry = FindEntry<false, false>(table, plan, args, kDevice, kArch, clock, &hash, &created);
    if (entry == nullptr || entry->state() != EntryState::kNegative) {
      ok = false;
      return;
    }
    AccountMiss(*entry);
  });
  if (!ok) state.SkipWithError("not a known miss");
}

void BM_ShimMissColdSmallSoftmax(benchmark::State& state) {
  ColdMissLoop(state, "aten::_softmax", "", "_softmax", {at::empty({8, 64}), int64_t{-1}, false});
}
BENCHMARK(BM_ShimMissColdSmallSoftmax)->UseManualTime()->Iterations(kColdIterations);

void BM_ShimMissColdSmallSum(benchmark::State& state) {
  ColdMissLoop(state, "aten::sum", "dim_IntList", "sum.dim_IntList",
               {at::empty({8, 64}), c10::IValue(std::vector<int64_t>{1}), false, c10::IValue()});
}
BENCHMARK(BM_ShimMissColdSmallSum)->UseManualTime()->Iterations(kColdIterations);

void BM_ShimMissColdSmallLayerNorm(benchmark::State& state) {
  at::Tensor x = at::empty({8, 64}, at::kBFloat16);
  at::Tensor w = at::empty({64}, at::kBFloat16);
  ColdMissLoop(state, "aten::native_layer_norm", "", "native_layer_norm",
               {x, c10::IValue(std::vector<int64_t>{64}), w, w, 1e-5});
}
BENCHMARK(BM_ShimMissColdSmallLayerNorm)->UseManualTime()->Iterations(kColdIterations);

// The unboxed wrapper's known miss (adapter.cc, Unboxed<I>::Look, then the miss counted): the
// checks, key, hash and lookup from the call's C++ arguments (`args`, boxed for the key's first
// call in `boxed`). Warm (kCold false) or with caches cold before each call (as ColdMissLoop);
// with or without the prefetches of the tensors' metadata (kPrefetch).
template <bool kCold, bool kPrefetch, class... Args>
void TypedMissLoop(benchmark::State& state, const char* name, const char* overload, const char* intercepted,
                   const std::vector<c10::IValue>& boxed, const Args&... args) {
  using namespace kjit::shim;
  const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
  const PreFilter filter = PreFilterFor(intercepted);
  if (filter != PreFilter::kNone) {
    state.SkipWithError("TypedMissLoop times ops without a pre-filter");
    return;
  }
  const kjit::torch::CallKeyPlan plan(op.schema());
  EntryTable table;
  constexpr int kDevice = 0;
  constexpr int kArch = 90;
  if (!KeyAsKnownMiss(state, table, filter, plan, boxed, kDevice, kArch)) return;
  bool ok = true;
  auto call = [&] {
    if constexpr (kPrefetch) PrefetchTensorImpls(args...);
    int device = -1;
    if (!CheckTypedCall<PreFilter::kNone, c10::DeviceType::CPU>(&device, args...)) {
      ok = false;
      return;
    }
    if constexpr (kPrefetch) PrefetchStorages(args...);
    kjit::Hash128 hash;
    bool keyed = false;
    Entry* entry = FindTypedEntry<false>(table, plan, kDevice, kArch, &hash, &keyed, args...);
    if (entry == nullptr || entry->state() != EntryState::kNegative) {
      ok = false;
      return;
    }
    AccountMiss(*entry);
  };
  if constexpr (kCold) {
    ColdLoop(state, call);
  } else {
    for (auto _ : state) call();
  }
  if (!ok) state.SkipWithError("not a known miss");
}

template <bool kCold, bool kPrefetch>
void BM_ShimMissTypedSmallSoftmax(benchmark::State& state) {
  const at::Tensor x = at::empty({8, 64});
  const int64_t dim = -1;
  const bool half_to_float = false;
  TypedMissLoop<kCold, kPrefetch>(state, "aten::_softmax", "", "_softmax", {x, dim, half_to_float}, x, dim,
                                  half_to_float);
}
BENCHMARK(BM_ShimMissTypedSmallSoftmax<false, true>);
BENCHMARK(BM_ShimMissTypedSmallSoftmax<true, false>)->UseManualTime()->Iterations(kColdIterations);
BENCHMARK(BM_ShimMissTypedSmallSoftmax<true, true>)->UseManualTime()->Iterations(kColdIterations);

// layer_norm bf16[8,64] with a weight and a bias: three tensors, each a chain of misses when cold.
template <bool kCold, bool kPrefetch>
void BM_ShimMissTypedSmallLayerNorm(benchmark::State& state) {
  const at::Tensor x = at::empty({8, 64}, at::kBFloat16);
  const std::optional<at::Tensor> w = at::empty({64}, at::kBFloat16);
  const std::optional<at::Tensor> b = at::empty({64}, at::kBFloat16);
  const std::vector<c10::SymInt> shape{c10::SymInt(64)};
  const double eps = 1e-5;
  TypedMissLoop<kCold, kPrefetch>(state, "aten::native_layer_norm", "", "native_layer_norm",
                                  {x, c10::IValue(std::vector<int64_t>{64}), *w, *b, eps}, x,
                                  c10::SymIntArrayRef(shape), w, b, eps);
}
BENCHMARK(BM_ShimMissTypedSmallLayerNorm<false, true>);
BENCHMARK(BM_ShimMissTypedSmallLayerNorm<true, false>)->UseManualTime()->Iterations(kColdIterations);
BENCHMARK(BM_ShimMissTypedSmallLayerNorm<true, true>)->UseManualTime()->Iterations(kColdIterations);

template <bool kProfile>
void BM_ShimMissSmallSoftmax(benchmark::State& state) {
  MissLoop<kProfile>(state, "aten::_softmax", "", "_softmax", {at::empty({8, 64}), int64_t{-1}, false});
}
BENCHMARK(BM_ShimMissSmallSoftmax<false>);
BENCHMARK(BM_ShimMissSmallSoftmax<true>);

template <bool kProfile>
void BM_ShimMissSmallSum(benchmark::State& state) {
  MissLoop<kProfile>(state, "aten::sum", "dim_IntList", "sum.dim_IntList",
                     {at::empty({8, 64}), c10::IValue(std::vector<int64_t>{1}), false, c10::IValue()});
}
BENCHMARK(BM_ShimMissSmallSum<false>);
BENCHMARK(BM_ShimMissSmallSum<true>);

template <bool kProfile>
void BM_ShimMissSmallLayerNorm(benchmark::State& state) {
  at::Tensor x = at::empty({8, 64}, at::kBFloat16);
  at::Tensor w = at::empty({64}, at::kBFloat16);
  MissLoop<kProfile>(state, "aten::native_layer_norm", "", "native_layer_norm",
                     {x, c10::IValue(std::vector<int64_t>{64}), w, w, 1e-5});
}
BENCHMARK(BM_ShimMissSmallLayerNorm<false>);
BENCHMARK(BM_ShimMissSmallLayerNorm<true>);

void BM_SteadyClockNow(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(std::chrono::steady_clock::now());
}
BENCHMARK(BM_SteadyClockNow);

// What a boxed-only kernel costs a caller that holds unboxed arguments (at::_softmax from
// at::softmax): the dispatcher boxes them into a Stack, the boxed kernel (here PyTorch's CPU
// kernel, called boxed) unboxes them again. Against the same op called unboxed through the
// dispatcher (BM_TorchSmallSoftmaxUnboxedCall); the difference is the boxing round trip.
// One intra-op thread: the figure is dispatch, not parallel_for start-up.
void BM_TorchSmallSoftmaxBoxedCall(benchmark::State& state) {
  at::set_num_threads(1);
  const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::_softmax", "");
  const at::Tensor x = at::randn({8, 64});
  torch::jit::Stack stack;
  for (auto _ : state) {
    stack.clear();
    stack.emplace_back(x);
    stack.emplace_back(int64_t{-1});
    stack.emplace_back(false);
    op.callBoxed(&stack);
    benchmark::DoNotOptimize(stack.back());
  }
}
BENCHMARK(BM_TorchSmallSoftmaxBoxedCall);

void BM_TorchSmallSoftmaxUnboxedCall(benchmark::State& state) {
  at::set_num_threads(1);
  const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::_softmax", "")
                      .typed<at::Tensor(const at::Tensor&, int64_t, bool)>();
  const at::Tensor x = at::randn({8, 64});
  for (auto _ : state) benchmark::DoNotOptimize(op.call(x, -1, false));
}
BENCHMARK(BM_TorchSmallSoftmaxUnboxedCall);

// A hit's output allocation: at::empty_strided goes through the dispatcher (TensorOptions to a
// dispatch key, BackendSelect, then the backend's kernel), where PyTorch's own kernels allocate
// their outputs directly (structured kernels: at::detail::empty_strided_<backend>). The
// difference is what the shim pays per hit output for allocating through the dispatcher (on
// CPU here; the CUDA path adds the same dispatch to the caching allocator's cost).
void BM_TorchSmallEmptyStridedDispatched(benchmark::State& state) {
  const std::vector<int64_t> sizes{8, 64}, strides{64, 1};
  const auto options = at::TensorOptions().dtype(at::kFloat);
  for (auto _ : state) benchmark::DoNotOptimize(at::empty_strided(sizes, strides, options));
}
BENCHMARK(BM_TorchSmallEmptyStridedDispatched);

void BM_TorchSmallEmptyStridedDirect(benchmark::State& state) {
  const std::vector<int64_t> sizes{8, 64}, strides{64, 1};
  for (auto _ : state) benchmark::DoNotOptimize(at::detail::empty_strided_cpu(sizes, strides, at::kFloat));
}
BENCHMARK(BM_TorchSmallEmptyStridedDirect);

}  // namespace

BENCHMARK_MAIN();
