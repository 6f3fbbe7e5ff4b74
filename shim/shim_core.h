// The shim's torch-free core: its settings, and the per-process table of the
// keys it has seen, with each key's state.
//
// Kept apart from the PyTorch adapter (adapter.cc) so that the decision logic
// is unit-tested without LibTorch or a GPU. Nothing here allocates on the hot
// path except the first sight of a key.
//
// Entry states (one per OpKey hash, for the life of the process):
//
//   kUnknown  --first call resolved, no record-->  kNegative  --announcement-->  kLoaded
//       |                                                                          ^  |
//       +--------------- first call resolved, record loaded ----------------------+  |
//       |                                                                             v
//       +--- outputs unusable, load/launch failed ---------------------------->  kFailed (terminal)
//
// kUnknown: the key's first call is running PyTorch's kernel and recording its
//   outputs' layouts; other threads meanwhile run PyTorch's kernel too.
// kNegative: no usable record: PyTorch's kernel, calls counted and reported.
// kLoaded: a kernel is ready; a hot-swap replaces it with a newer one.
// kFailed: blacklisted for the process (a load or launch failed, or the op's
//   outputs cannot be served): PyTorch's kernel from then on.
#pragma once

#include <array>
#include <atomic>
#include <climits>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kjit/cache/kernel_cache.h"
#include "kjit/runtime/gpu.h"
#include "kjit/runtime/hash.h"
#include "kjit/runtime/op_key.h"
#include "kjit/runtime/status.h"

namespace kjit::shim {

// The ops kjit has design spaces for: the adapter overrides the CUDA kernels of exactly these
// overloads. Each family lists its own in policy/<family>/intercept.inc (the op registry,
// kjit/intercepted_ops.inc), in the registry's order. Written "name" (the default overload) or
// "name.overload", "aten::" omitted, as the op's schema names them and as OpKeys do (OpCall::op
// "aten::name", OpCall::overload "overload"): tests/shim/shim_key_test.cc keys calls of each through
// the shim's key writer and checks that its family matches them. Only the functional overloads the
// families serve are listed: out= and in-place variants are other overloads and keep PyTorch's
// kernels, untouched. A call of an op with a pre-filter (PreFilter below) is keyed only if it passes:
// mm and bmm run most products of a model, cudnn_convolution every cuDNN convolution.
inline constexpr std::string_view kInterceptedOps[] = {
#define KJIT_INTERCEPT(FAMILY, OP, NAME, FILTER, ALL_NUMERICS, FN, SYMBOL, SIGNATURE) NAME,
#include "kjit/intercepted_ops.inc"
#undef KJIT_INTERCEPT
};

// An entry of kInterceptedOps split at its first '.': {"sum", "dim_IntList"}, {"amax", ""}.
struct OpName {
  std::string_view name;
  std::string_view overload;
};
constexpr OpName SplitOpName(std::string_view op) {
  const size_t dot = op.find('.');
  if (dot == std::string_view::npos) return {op, {}};
  return {op.substr(0, dot), op.substr(dot + 1)};
}

// What the adapter checks of a call before keying it. A call that fails its op's pre-filter
// goes straight to PyTorch's kernel: no key is computed, no entry made, no miss reported. Each
// check is a few reads of tensor metadata, and declines only calls that the op's family
// declines whatever the rest of the key (its Match): widen a check when its family widens.
enum class PreFilter : uint8_t {
  kNone,           // every call is keyed (softmax and the norms: their families key what they decline)
  kServedFloat,    // the first argument is a float32/float16/bfloat16 tensor of at least one dim and
                   // no empty one (scan, pool, reduce and depthwise_conv serve those dtypes only, and
                   // neither 0-d nor empty inputs)
  kDepthwiseConv,  // kServedFloat, and a depthwise convolution (CudnnConvMayBeDepthwise)
  kDepthwiseConvBackward,  // kServedFloat (grad_output), and a depthwise convolution's backward
                           // (ConvBackwardMayBeDepthwise): every other convolution's stays PyTorch's, unkeyed
  kSmallMatmul,         // aten::mm of a small inner dimension (SmallMatmulMayBeServed, 2-D)
  kSmallBatchedMatmul,  // aten::bmm of a small inner dimension (SmallMatmulMayBeServed, 3-D)
  kChainMember,  // a fusible elementwise op (policy/elementwise_chain): never keyed or served alone; with
                 // KJIT_FUSION=record, some of its calls are recorded into chains (chain_recorder.h). Not
                 // intercepted at all otherwise.
};

// Each intercepted op's pre-filter and numerics, from the registry; an op not in it: kNone, false.
struct InterceptedOpFacts {
  std::string_view name;
  PreFilter filter;
  bool keys_all_numerics;
};
inline constexpr InterceptedOpFacts kInterceptedOpFacts[] = {
#define KJIT_INTERCEPT(FAMILY, OP, NAME, FILTER, ALL_NUMERICS, FN, SYMBOL, SIGNATURE) \
  {NAME, PreFilter::FILTER, ALL_NUMERICS},
#include "kjit/intercepted_ops.inc"
#undef KJIT_INTERCEPT
};

constexpr PreFilter PreFilterFor(std::string_view op) {
  for (const InterceptedOpFacts& facts : kInterceptedOpFacts) {
    if (facts.name == op) return facts.filter;
  }
  return PreFilter::kNone;
}

// Whether the keys of op's calls carry every numerics setting in force (CurrentNumerics,
// kjit/torch/call_key.h): the products and convolutions, whose results TF32 and reduced-precision
// settings change (matmul's kernels refuse TF32-off keys they cannot honour). The other ops'
// keys carry CurrentDeterminismNumerics: PyTorch's defaults and the determinism bit, the same
// bytes under default settings, without reading the float32 precision table per call.
constexpr bool KeysAllNumerics(std::string_view op) {
  for (const InterceptedOpFacts& facts : kInterceptedOpFacts) {
    if (facts.name == op) return facts.keys_all_numerics;
  }
  return false;
}

// The intercepted ops whose calls autograd records (grad mode on, a tensor argument that requires
// grad) kjit may serve, from the registry's KJIT_SERVES_RECORDED lines: ops whose kernels write
// every output the op returns (the evaluator verifies each as strictly as the first), so that the
// backward finds what PyTorch's kernel would have saved for it. The other ops' recorded calls keep
// PyTorch's kernel. The overrides sit below autograd (the CUDA dispatch key): autograd records the
// call and saves its outputs whichever kernel made them.
inline constexpr std::string_view kServesRecordedOps[] = {
#define KJIT_SERVES_RECORDED(FAMILY, NAME) NAME,
#include "kjit/intercepted_ops.inc"
#undef KJIT_SERVES_RECORDED
    "",  // so that the list is never empty
};

constexpr bool ServesRecordedCalls(std::string_view op) {
  for (std::string_view name : kServesRecordedOps) {
    if (!name.empty() && name == op) return true;
  }
  return false;
}

// The intercepted ops served alone that a chain family also fuses, from the registry's KJIT_JOINS_CHAINS lines
// (row_chain's sum and mean over the last dim), with the overload of their out= form. Under KJIT_FUSION their
// calls join the thread's chains as the kChainMember ops' do: recorded beside them, and deferred inside a served
// chain's window (run with the out= form, PyTorch's kernel, where the window is not run fused).
struct ChainJoiner {
  std::string_view name;
  std::string_view out_overload;
};
inline constexpr ChainJoiner kChainJoiners[] = {
#define KJIT_JOINS_CHAINS(FAMILY, NAME, OUT) {NAME, OUT},
#include "kjit/intercepted_ops.inc"
#undef KJIT_JOINS_CHAINS
    {"", ""},  // so that the list is never empty
};

constexpr bool JoinsChains(std::string_view op) {
  for (const ChainJoiner& j : kChainJoiners) {
    if (!j.name.empty() && j.name == op) return true;
  }
  return false;
}

// aten::cudnn_convolution(self, weight, padding, stride, dilation, groups, ...): whether the call
// can be the depthwise convolution policy/depthwise_conv serves: a 4-D input [N, C, H, W] with
// C >= 2 and no empty dim, a 4-D weight [C, 1, kH, kW], groups == C (groups == in_channels ==
// out_channels, channel multiplier 1). Necessary, not sufficient: the family also checks
// dtypes, layouts, strides, padding and the output size on the key.
bool CudnnConvMayBeDepthwise(std::span<const int64_t> input_sizes, std::span<const int64_t> weight_sizes,
                             int64_t groups);

// aten::convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
// output_padding, groups, output_mask): whether the call can be the backward of a depthwise convolution
// policy/depthwise_conv_backward serves: not transposed, a 3-D or 4-D input [N, C, (H,) W] with C >= 2 and no
// empty dim, a weight of its rank [C, 1, (kH,) kW], groups == C. Necessary, not sufficient: the family also
// checks dtypes, layouts, strides, padding and grad_output's shape on the key.
bool ConvBackwardMayBeDepthwise(std::span<const int64_t> input_sizes, std::span<const int64_t> weight_sizes,
                                int64_t groups, bool transposed);

// aten::mm(self, mat2) (batched false) or aten::bmm(self, mat2) (true) of two tensors of `dtype`
// (the adapter has checked that both are strided and of the same dtype): whether the call can be
// a product policy/matmul serves: 2-D (mm) or 3-D (bmm) operands, no empty dim, no negative
// stride, agreeing batch and inner dimensions, a dtype the family serves and the inner dimension K
// (self's last) within MatmulMaxK (policy/matmul/limits.h, the limits the family's Match
// uses). K is checked first: large products, the common case in real models, fail there.
// Necessary, not sufficient: the family also checks on the key that the operands are aligned to
// their element (as PyTorch allocates them) and that the output has at most 2^40 elements (more
// than any GPU holds).
struct MatmulOperand {
  std::span<const int64_t> sizes;
  std::span<const int64_t> strides;
};
bool SmallMatmulMayBeServed(bool batched, DType dtype, MatmulOperand self, MatmulOperand mat2);

// The settings, read once from the environment.
struct Settings {
  bool disabled = false;           // KJIT_DISABLE=1
  bool log = false;                // KJIT_LOG set and not "0"
  // KJIT_PROFILE: unset or "0": off. "1": the stage profile (StageProfile) is printed on
  // stderr at exit; any other value is a file the table is appended to at exit.
  bool profile = false;
  std::string profile_path;        // empty: stderr
  // KJIT_PASSTHROUGH=1, a benchmark aid: the intercepted ops' wrappers only forward to PyTorch's
  // kernels (no key, no table, no report), which measures what the boxed override itself costs.
  bool passthrough = false;
  std::vector<std::string> ops;    // KJIT_OPS, else every op of kInterceptedOps; kChainMember ops only with fusion_record
  // KJIT_FUSION=record (or 1): the fusible ops' calls are sampled into chains and the chains a thread repeats
  // are reported to kjitd as misses (shim/FUSION.md, design (b)'s recording; chains are not served yet).
  // Unset, 0 or off: the fusible ops are not intercepted.
  bool fusion_record = false;
  // KJIT_FUSION=serve: record, and serve the recorded chains that have a verified fused kernel (chain_server.h):
  // a chain's calls are deferred and run as one kernel. Experimental: a reader of a deferred output that does not
  // pass through the dispatcher (a DLPack consumer, a custom extension reading data_ptr) can see it unwritten.
  bool fusion_serve = false;
  std::string unknown_fusion;      // a KJIT_FUSION value that is none of the above (ignored, logged)
  std::vector<std::string> unknown_ops;  // KJIT_OPS entries that are not in kInterceptedOps (ignored)
};

// `getenv` is a parameter so tests can give their own environment.
Settings ReadSettings(const std::function<const char*(const char*)>& getenv);

// KJIT_OPS's value: comma-separated op names, with or without "aten::",
// blanks around names ignored, duplicates dropped, in kInterceptedOps order.
// "name.overload" selects that overload ("name.default": the default one, as
// torch.ops spells it); a bare "name" selects every intercepted overload of the
// op ("sum": sum.dim_IntList; "prod": prod and prod.dim_int). Names that select
// nothing kjit intercepts go to *unknown.
std::vector<std::string> ParseOpList(std::string_view value, std::vector<std::string>* unknown);

// One output of a call as PyTorch's kernel laid it out; the adapter allocates
// a hit's outputs exactly like this (the cache stores no output layouts).
struct OutputLayout {
  bool defined = true;      // false: PyTorch returned an undefined tensor here
  int8_t scalar_type = 0;   // c10::ScalarType, as its integer value
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  friend bool operator==(const OutputLayout&, const OutputLayout&) = default;
};

// A cached kernel, loaded and ready to launch. Never unloaded while the process
// runs: a launch of it may still be queued on a stream when a newer one replaces it.
struct LoadedKernel {
  int64_t record_id = 0;
  std::optional<Module> module;  // empty only in tests, which never launch
  std::optional<Function> function;
  LaunchConfig launch;
  uint64_t workspace_bytes = 0;  // kernel ABI v2: > 0, one more parameter (shim/workspace.h)
  // Set by the launch that guards this kernel's first run in the process (cache/launch_journal.h): later
  // launches read it and nothing more.
  mutable std::atomic<bool> first_launch_taken{false};
};

enum class EntryState : uint8_t { kUnknown, kNegative, kLoaded, kFailed };
std::string_view EntryStateName(EntryState state);

// Aligned to a cache line, its per-call fields (state, misses, kernel) first: a known miss or a
// hit reads and writes one line of it, which a Python program's interpreter has usually evicted
// since the key's last call.
class alignas(64) Entry {
 public:
  Entry(std::string key_bytes, int device) : device_(device), key_bytes_(std::move(key_bytes)) {}
  Entry(const Entry&) = delete;
  Entry& operator=(const Entry&) = delete;

  const std::string& key_bytes() const { return key_bytes_; }
  int device() const { return device_; }
  EntryState state() const { return state_.load(std::memory_order_acquire); }

  // Valid once state() is not kUnknown (published by the state's release store).
  const std::vector<OutputLayout>& outputs() const { return outputs_; }

  // The kernel to launch; non-null only in kLoaded.
  const LoadedKernel* kernel() const {
    return state() == EntryState::kLoaded ? kernel_.load(std::memory_order_acquire) : nullptr;
  }

  // kUnknown -> kNegative with the first call's outputs. False if not kUnknown.
  bool ResolveNegative(std::vector<OutputLayout> outputs);
  // kUnknown -> kLoaded with the first call's outputs and a kernel.
  bool ResolveLoaded(std::vector<OutputLayout> outputs, std::unique_ptr<LoadedKernel> kernel);
  // kNegative or kLoaded -> kLoaded with a newer kernel (hot-swap). False in kUnknown and kFailed.
  bool Swap(std::unique_ptr<LoadedKernel> kernel);
  // Any state -> kFailed (also from kUnknown, for outputs that cannot be served). The first
  // reason given is kept. Returns true only for the call that made the entry fail, so that
  // a failure is reported to kjitd once per key and process however many threads meet it.
  bool Fail(std::string reason);
  std::string failure() const;

  // The kernel served to this entry was timed on another GPU model (cache::ServedKernel::
  // timed_on_other_model): true only the first time for the entry, when its caller asks kjitd to time
  // the key on this process's model, so that the ask goes out once per key and process.
  bool FirstRetimeRequest() { return !retime_requested_.exchange(true, std::memory_order_relaxed); }

  // A miss whose PyTorch kernel call took `host_ns` on the host, counted at
  // `now_ns` (steady clock). Returns the report due now; calls == 0 when none is.
  // The first miss is reported at once, later ones at most once per
  // kMissReportInterval per key, each report holding every call since the last:
  // a hot loop costs a few atomic adds per call and one message a second per key.
  // Calls that race with a report may land in that report or the next one.
  //
  // Only one miss in kMissTimingStride is timed (TimeThisMiss; the key's first always is):
  // the others are counted by CountUntimedMiss, without the two clock reads, and are
  // reported with the next timed one that is due. A report's mean host time is its timed
  // calls' mean.
  struct MissReport {
    uint64_t calls = 0;
    double mean_host_us = 0;  // host time per call: launch and allocation, not the kernel's device time
  };
  static constexpr int64_t kMissReportIntervalNs = 1'000'000'000;
  static constexpr uint64_t kMissTimingStride = 16;
  bool TimeThisMiss() const { return misses_.load(std::memory_order_relaxed) % kMissTimingStride == 0; }
  // `timed` false: the call is counted but its time is not one of the report's (a key's first call, whose time is
  // mostly PyTorch's own first-use work: cuDNN's and cuBLAS's set-up took 0.1-1 s there on an H100, and as the
  // mean of a short program's few reports it ranked those keys first in kjitd's queue).
  MissReport CountMiss(uint64_t host_ns, int64_t now_ns, bool timed = true);
  // The misses counted since the last report, as a report, whether or not one is due (the process is ending).
  MissReport TakeMissReport(int64_t now_ns);
  // One atomic add: a report's calls are the misses counted since the last report's.
  void CountUntimedMiss() { misses_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t misses() const { return misses_.load(std::memory_order_relaxed); }
  uint64_t hits() const { return hits_.load(std::memory_order_relaxed); }
  void CountHit() { hits_.fetch_add(1, std::memory_order_relaxed); }

 private:
  bool Transition(EntryState from, EntryState to);
  // The first line: what every call reads or writes.
  std::atomic<EntryState> state_{EntryState::kUnknown};
  const int device_;
  std::atomic<const LoadedKernel*> kernel_{nullptr};
  std::atomic<uint64_t> misses_{0};
  std::atomic<uint64_t> hits_{0};
  std::vector<OutputLayout> outputs_;  // a hit's
  // A timed miss's and a report's (one call in kMissTimingStride or fewer).
  std::atomic<uint64_t> reported_misses_{0};  // misses_ as of the last report
  std::atomic<uint64_t> pending_timed_{0};  // those of them timed
  std::atomic<uint64_t> pending_ns_{0};     // their host time
  static constexpr int64_t kNeverReported = INT64_MIN;
  std::atomic<int64_t> last_report_ns_{kNeverReported};
  const std::string key_bytes_;
  mutable std::mutex mutex_;  // guards kernels_ and failure_ (never taken on the hot path)
  std::vector<std::unique_ptr<LoadedKernel>> kernels_;  // every kernel ever loaded for this key
  std::string failure_;
  std::atomic<bool> retime_requested_{false};
};

// (Hash of an OpKey, CUDA device) -> its Entry: the key holds the arch, not the
// device, and a module loaded in one device's context cannot run on another.
// Entries are never removed, so a pointer to one stays valid for the life of the table.
class EntryTable {
 public:
  EntryTable();
  ~EntryTable();
  EntryTable(const EntryTable&) = delete;
  EntryTable& operator=(const EntryTable&) = delete;

  // The entry of `hash` on `device`, or null. A key found once is found again by the same
  // thread without a lock: each thread keeps a small cache of the entries it found last
  // (entries are never removed, so a cached pointer stays valid for the table's life).
  Entry* Find(const Hash128& hash, int device) const;
  // The same, created in kUnknown if absent; *created says whether this call made it
  // (that caller then resolves it).
  Entry* FindOrCreate(const Hash128& hash, int device, std::string_view key_bytes, bool* created);
  size_t size() const;
  // Every entry's misses() summed: the process's misses, without a counter that every thread's
  // every miss would write (one cache line bouncing between the threads that run ops).
  uint64_t misses() const;
  // Per CUDA device, the calls of its entries so far (hits and misses): the process's work per GPU,
  // for the activity reporter (activity.h). Ordered by device.
  std::vector<std::pair<int, uint64_t>> CallsByDevice() const;
  // Calls `fn` with every entry, in creation order, holding the table's list lock (not the map's): `fn`
  // must not create entries.
  void ForEachEntry(const std::function<void(const Entry&)>& fn) const;
  void ForEachEntry(const std::function<void(Entry&)>& fn);

 private:
  Entry* FindLocked(const Hash128& hash, int device) const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  const uint32_t id_;  // unique per table for the process: tags its threads' cached entries
};

// Which stage of a failure report (ipc::ReportFailure::stage) a failed launch
// is: "argument" when the shim could not pass the call's arguments to the
// kernel (kInvalidArgument: not the kernel's fault), else "launch".
std::string_view LaunchFailureStage(const Status& status);

// KJIT_PROFILE's per-call stage profile of the adapter's hot path: how many calls
// passed through each stage and their host time there. Off (the default), the
// adapter pays one predictable branch per call for it; on, two clock reads per
// stage and two relaxed atomic adds (their cost, `clock_ns` per read, is in
// the figures: subtract it per stage for the stage's own time).
enum class Stage : uint8_t {
  kPreFilter,        // pre-filter, autograd check, the call's device
  kKey,              // WriteCallKey (numerics settings included)
  kHash,             // HashBytes of the key
  kLookup,           // EntryTable::FindOrCreate
  kAllocate,         // a hit: its arguments' pointers gathered, its outputs allocated (at::empty_strided)
  kLaunch,           // a hit: the stream, the context, cuLaunchKernel; the hit counted
  kPyTorchDeclined,  // a call kjit does not key (pre-filter, autograd, failed key...): the checks that
                     // declined it and PyTorch's kernel
  kPyTorchFirst,     // a key's first call: PyTorch's kernel, then the entry resolved (cache lookup, load)
  kPyTorchMiss,      // a known miss: PyTorch's kernel
  kMissAccounting,   // a known miss: counted (Entry::CountMiss) and, at most once a second, reported
  kWrapper,          // the whole boxed wrapper, every call (from entry to return)
  kCount,
};
std::string_view StageName(Stage stage);

class StageProfile {
 public:
  void Add(Stage stage, int64_t ns) {
    Slot& s = slots_[static_cast<size_t>(stage)];
    s.calls.fetch_add(1, std::memory_order_relaxed);
    s.ns.fetch_add(static_cast<uint64_t>(ns < 0 ? 0 : ns), std::memory_order_relaxed);
  }
  uint64_t calls(Stage stage) const { return slots_[static_cast<size_t>(stage)].calls.load(std::memory_order_relaxed); }
  uint64_t ns(Stage stage) const { return slots_[static_cast<size_t>(stage)].ns.load(std::memory_order_relaxed); }
  // Time of one clock read, measured when profiling starts.
  double clock_ns = 0;
  // A table for people: stage, calls, mean ns per call, total ms.
  std::string Table() const;
  // The same as one JSON object: {"clock_ns": x, "stages": [{"stage", "calls", "mean_ns", "total_ns"}...]}.
  std::string Json() const;

 private:
  struct Slot {
    std::atomic<uint64_t> calls{0};
    std::atomic<uint64_t> ns{0};
  };
  std::array<Slot, static_cast<size_t>(Stage::kCount)> slots_;
};

// Whether a process's first call laid its outputs out as the evaluator verified them (`verified` empty: the
// record does not say, and nothing is compared). Empty when they match, else what differs.
std::string OutputsMismatch(const std::vector<OutputLayout>& first_call, const std::vector<cache::VerifiedOutput>& verified);

// The version of the PyTorch loaded in this process, read beside its library (`torch_lib_dir`, the folder of
// libtorch_cpu.so): ../version.py (`__version__ = '2.11.0+cu130'`, a pip or conda install) or ../build-version
// (a LibTorch archive). The local part after '+' is dropped ("2.11.0"), as TORCH_VERSION has none. Empty when
// neither file says.
std::string LoadedTorchVersion(const std::string& torch_lib_dir);
// The adapter's check at attach: empty when the PyTorch it was built against (`built`, TORCH_VERSION) is the
// one loaded (or the loaded one is unknown), else the line that says why kjit stays off in the process.
std::string TorchVersionMismatch(const std::string& built, const std::string& loaded);

// A retiming task's detail (ipc submit_task): "retime on NVIDIA H200: served a kernel timed on NVIDIA H100 ...".
std::string RetimeDetail(const std::string& model, const std::string& timed_on);

// The toolchain a record must have been built with to be served here: the
// versions kjitd records when it stores a kernel (cache::RunningToolchain);
// `device_model` (DeviceInfo::name) picks among the key's records; `torch_version` (the adapter's
// TORCH_VERSION) admits only records verified under that PyTorch (empty: any).
cache::ReaderContext ReaderFor(int arch, std::string device_model, std::string torch_version = "");

}  // namespace kjit::shim
