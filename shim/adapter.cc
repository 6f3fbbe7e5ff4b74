// libkjit_torch_adapter.so: kjit inside a PyTorch process.
//
// Loaded by libkjit_preload.so once PyTorch's CUDA library is present (never
// linked by anything). Its constructor captures PyTorch's CUDA kernel of each
// intercepted op and registers a wrapper in its place; PyTorch prints
// one "Overriding a previously registered kernel" warning per op for that.
// The wrapper is unboxed (Unboxed<I>) where PyTorch's unboxed kernel is found
// (unboxed_kernels.h): known misses and declined calls go from it to that kernel
// without a Stack; first sights and hits box the arguments and take the boxed
// path below. Otherwise it is the boxed Wrapper<I> alone.
//
// Per call (Wrapper<I>; Unboxed<I> decides the same from the C++ arguments):
//   the op's pre-filter declines it (PreFilterFor: a dtype or shape its family never
//     serves, a cuDNN convolution that is not depthwise, a matmul of large K)
//                                                             -> PyTorch's kernel, unkeyed
//   autograd would record (grad mode on, an input requires grad) and the op's family has not
//     declared that its kernels serve recorded calls (ServesRecordedCalls) -> PyTorch's kernel
//   key the call (WriteCallKey), hash it, find its Entry (shim_core.h) for this device
//     first sight   -> PyTorch's kernel; record its outputs' layouts; look the key up
//                      in the disk cache once: a record -> load it (kLoaded), none -> kNegative
//     kNegative     -> PyTorch's kernel, one call in 16 timed on the host; the miss is counted
//                      and reported (the first at once, then at most once a second per key)
//     kLoaded       -> allocate outputs as the first call's, launch on PyTorch's
//                      current stream (kernel ABI v2, daemon/worker_protocol.h; a
//                      kernel with a workspace gets the stream's, workspace.h)
//     kFailed       -> PyTorch's kernel
// KJIT_PROFILE=1 (or a file path): the time of each stage above per call (StageProfile,
// shim_core.h), printed at exit. KJIT_PASSTHROUGH=1 (a benchmark aid): the wrapper only
// forwards to PyTorch's kernel (also switched at run time by kjit_adapter_set_passthrough, for
// in-process A/B timing). Both off, the wrapper pays one predictable branch for them.
//
// Any failure of kjit's own falls back to PyTorch's kernel; a load or launch
// failure also blacklists the entry for the process and is reported to kjitd
// (ipc::ReportFailure, once per key and process). No exception of kjit's
// reaches the dispatcher: only PyTorch's own kernel may throw through us.
//
// Process-lifetime objects (the adapter, its table, loaded modules, the
// client) are deliberately never destroyed: a module may still have work
// queued at exit, and the CUDA driver may be gone before static destructors run.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/PyInterpreter.h>
#include <c10/core/impl/PyObjectSlot.h>
#include <c10/util/SmallVector.h>
#include <dlfcn.h>
#include <unistd.h>
#include <torch/library.h>
#include <torch/version.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "activity.h"
#include "announcements.h"
#include "call_path.h"
#include "chain_recorder.h"
#include "chain_server.h"
#include "kjit/cache/kernel_cache.h"
#include "kjit/cache/launch_journal.h"
#include "kjit/ipc/client.h"
#include "kjit/runtime/gpu.h"
#include "kjit/torch/call_key.h"
#include "shim_adapter.h"
#include "shim_core.h"
#include "unboxed_kernels.h"
#include "workspace.h"

namespace kjit::shim {
namespace {

constexpr size_t kOpCount = std::size(kInterceptedOps);
constexpr int kMaxDevices = 64;

// at::detail::empty_strided_cuda(IntArrayRef, IntArrayRef, ScalarType, std::optional<Device>):
// how PyTorch's own (structured) CUDA kernels allocate their outputs, without the dispatcher
// (PyTorch's caching allocator, or the allocator a program plugged in). It lives in
// libtorch_cuda, which the adapter does not link (link.adapter_no_torch_cuda): looked up once
// in the loaded library by its mangled name, which encodes the parameter types, so a PyTorch
// whose function differs has no such symbol and the hits allocate through at::empty_strided.
using EmptyStridedCuda = at::TensorBase (*)(c10::IntArrayRef, c10::IntArrayRef, c10::ScalarType,
                                            std::optional<c10::Device>);
constexpr const char* kEmptyStridedCudaSymbol =
    "_ZN2at6detail18empty_strided_cudaEN3c108ArrayRefIlEES3_NS1_10ScalarTypeESt8optionalINS1_6DeviceEE";

// The loaded libtorch_cuda's symbols, by mangled name: the library is PyTorch's, loaded before
// the adapter, and never linked by it. Find gives null for a name it does not define (or for every
// name, if the library is not loaded).
class TorchCudaSymbols {
 public:
  TorchCudaSymbols() : handle_(dlopen("libtorch_cuda.so", RTLD_LAZY | RTLD_NOLOAD)) {}
  // RTLD_NOLOAD took a reference; the library stays loaded (PyTorch's).
  ~TorchCudaSymbols() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  TorchCudaSymbols(const TorchCudaSymbols&) = delete;
  TorchCudaSymbols& operator=(const TorchCudaSymbols&) = delete;

  void* Find(const char* symbol) const { return handle_ == nullptr ? nullptr : dlsym(handle_, symbol); }

 private:
  void* handle_;
};

EmptyStridedCuda FindEmptyStridedCuda(const TorchCudaSymbols& torch_cuda) {
  void* symbol = torch_cuda.Find(kEmptyStridedCudaSymbol);
  EmptyStridedCuda f = nullptr;
  static_assert(sizeof f == sizeof symbol);
  std::memcpy(&f, &symbol, sizeof f);
  return f;
}

// What kjit knows about one CUDA device, set up on first use.
// ready and arch first: what every keyed call reads, in one line.
struct DeviceSlot {
  std::atomic<int> ready{0};  // 0: not tried, 1: usable, 2: unusable
  int arch = 0;
  std::string model;  // DeviceInfo::name, e.g. "NVIDIA H200"
  std::string uuid;   // DeviceInfo::uuid, "GPU-...": how kjitd's workers name the GPU
  std::mutex mutex;
  std::optional<PrimaryContext> context;
};

struct InterceptedOp {
  std::optional<c10::SafeKernelFunction> pytorch;  // set when the op is overridden
  std::optional<kjit::torch::CallKeyPlan> key_plan;  // set with pytorch
  // PyTorch's kernel unboxed (at::cuda::<op>, unboxed_kernels.h), of type
  // OpType<I>::ptr_schema; null: the op has the boxed wrapper only.
  void* unboxed = nullptr;
  std::optional<c10::OperatorHandle> handle;  // set with pytorch: the boxed path's, from the unboxed wrapper
  // A kChainMember op's out= overload (mul.out, pow.Tensor_Scalar_out): a deferred call of a chain that is not
  // run fused is run with it, by PyTorch's kernel, into the output already returned. Unset: never deferred.
  std::optional<c10::OperatorHandle> out_variant;
};

// A chain the process may serve (KJIT_FUSION=serve): its plan, and its key's entry on one device, whose kernel
// the announcements hot-swap like any key's. Never destroyed.
struct ServedChain {
  ChainPlan plan;
  Entry* entry = nullptr;
  int device = 0;
  std::vector<std::vector<int64_t>> out_sizes;  // per member: its output's sizes, as PyTorch broadcasts or reduces
  std::vector<c10::ScalarType> out_dtype;   // per member: its output's dtype, as PyTorch promotes it
  mutable std::atomic<int> replays_logged{0};  // why a window was replayed, logged for the first few only
};

// The served chains by the kInterceptedOps index of their first call's op: a thread's fusible call looks here
// before it is keyed. Replaced whole when a chain is added; old tables are kept (a reader may hold one).
struct StartTable {
  std::vector<std::vector<const ServedChain*>> by_first_op;
};

// The fields a call reads come first (diagnostics, the table's handle, the ops), so that they
// share a few lines rather than one each among the adapter's cold state: between two calls
// of a Python program its interpreter evicts most of them.
class Adapter final : public KernelSource, public ActivitySink {
 public:
  // KJIT_PROFILE or passthrough: the wrapper's one branch. Atomic (relaxed: a plain load) for
  // kjit_adapter_set_passthrough, which may flip passthrough while other threads call ops.
  std::atomic<bool> diagnostics{false};
  std::atomic<bool> passthrough{false};  // KJIT_PASSTHROUGH, or kjit_adapter_set_passthrough
  EntryTable table;
  std::array<InterceptedOp, kOpCount> ops;
  Settings settings;
  std::array<DeviceSlot, kMaxDevices> devices;
  const c10::impl::DeviceGuardImplInterface* cuda_guard = nullptr;
  EmptyStridedCuda empty_strided_cuda = nullptr;  // null: hits allocate through at::empty_strided
  std::atomic<uint64_t> hits{0};         // calls served by kjit's kernels
  std::atomic<uint64_t> first_sights{0};  // keys resolved (PyTorch's kernel ran)
  std::atomic<uint64_t> failures{0};     // entries blacklisted with a record (each reported once)
  std::atomic<uint64_t> chain_records{0};    // fusible calls recorded into chains (KJIT_FUSION=record)
  std::atomic<uint64_t> chains_reported{0};  // repeated chains reported to kjitd (once per chain and thread)
  std::atomic<uint64_t> chains_fused{0};     // served chains run as their fused kernel (KJIT_FUSION=serve)
  std::atomic<uint64_t> chains_replayed{0};  // deferred chains run call by call with PyTorch's kernels instead
  std::atomic<const StartTable*> start_table{nullptr};  // null: no chain is served
  std::mutex chains_mutex;  // guards the two below (never taken on a call's path)
  std::vector<std::unique_ptr<ServedChain>> served_chains;
  std::vector<std::unique_ptr<StartTable>> start_tables;
  std::unique_ptr<::torch::Library> chain_fallback;  // the catch-all's registration (KJIT_FUSION=serve)
  StageProfile profile;                  // KJIT_PROFILE (settings.profile)
  // The overrides' registrations: destroying the Library deregisters them, and the dispatcher
  // calls PyTorch's kernels directly again (kjit_adapter_set_registered, a benchmark aid).
  std::mutex registration_mutex;
  std::unique_ptr<::torch::Library> library;
  // Workspaces of kernels that take one: from PyTorch's caching allocator on the
  // launch stream (the current stream), zeroed once with a memset on that stream.
  WorkspacePool workspaces{[this](int device, CUstream stream, uint64_t bytes) {
    return AllocateWorkspace(device, stream, bytes);
  }};

  Result<WorkspacePool::Buffer> AllocateWorkspace(int device, CUstream stream, uint64_t bytes) {
    DeviceSlot* slot = Device(device);
    if (slot == nullptr) return Status(StatusCode::kNoDevice, "device " + std::to_string(device) + " is not usable");
    // Throws c10::Error when out of memory: TryServe then runs PyTorch's kernel (not the kernel's fault).
    auto owner = std::make_shared<at::Tensor>(at::empty(
        {static_cast<int64_t>(bytes)},
        at::TensorOptions().dtype(at::kByte).device(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device)))));
    WorkspacePool::Buffer b;
    b.ptr = reinterpret_cast<CUdeviceptr>(owner->data_ptr());
    b.bytes = bytes;
    const Driver& driver = slot->context->driver();
    KJIT_RETURN_IF_ERROR(driver.Check(driver.api().cuMemsetD8Async(b.ptr, 0, bytes, stream), "cuMemsetD8Async (workspace)"));
    b.owner = std::move(owner);
    return b;
  }

  template <typename... Parts>
  void Log(const Parts&... parts) const {
    if (!settings.log) return;
    std::string line = "kjit: ";
    (line.append(parts), ...);
    line += '\n';
    std::fputs(line.c_str(), stderr);
  }

  // The device's slot if kjit can use it (primary context retained, arch known), else null.
  DeviceSlot* Device(int index) {
    if (index < 0 || index >= kMaxDevices) return nullptr;
    DeviceSlot& slot = devices[static_cast<size_t>(index)];
    int ready = slot.ready.load(std::memory_order_acquire);
    if (ready == 0) {
      std::lock_guard lock(slot.mutex);
      ready = slot.ready.load(std::memory_order_acquire);
      if (ready == 0) {
        auto context = PrimaryContext::Retain(index);
        if (context.ok()) {
          slot.arch = context->info().arch();
          slot.model = context->info().name;
          slot.uuid = context->info().uuid;
          slot.context.emplace(std::move(*context));
          ready = 1;
        } else {
          Log("device ", std::to_string(index), " not used: ", context.status().ToString());
          ready = 2;
        }
        slot.ready.store(ready, std::memory_order_release);
      }
    }
    return ready == 1 ? &slot : nullptr;
  }

  // ---- KernelSource (also used by the announcement thread)
  Result<cache::ServedKernel> LookupRecord(const Hash128& hash, int device, int arch) override {
    const DeviceSlot* slot = Device(device);
    std::lock_guard lock(cache_mutex_);
    if (cache_ == nullptr) {
      cache::OpenOptions options;
      options.create = false;  // no cache file yet: every key is a miss until kjitd makes one
      KJIT_ASSIGN_OR_RETURN(cache_, cache::KernelCache::Open(options));
    }
    if (journal_ == nullptr) journal_ = std::make_unique<cache::LaunchJournal>(cache::LaunchJournalDir(cache_->path()));
    KJIT_ASSIGN_OR_RETURN(cache::ServedKernel served, cache_->Lookup(hash, ReaderFor(arch, slot != nullptr ? slot->model : "", TORCH_VERSION)));
    if (journal_->KilledAProcess(served.id)) {
      Log("record ", std::to_string(served.id), " is not served: a process died during its first launch (",
          journal_->dir(), "); kjitd re-verifies it");
      return NotFound("record " + std::to_string(served.id) + " was launching when a process died");
    }
    return served;
  }

  // The launch journal beside the cache file; null until the cache is opened (which any served record was).
  const cache::LaunchJournal* Journal() {
    std::lock_guard lock(cache_mutex_);
    return journal_.get();
  }

  Result<std::unique_ptr<LoadedKernel>> Load(int device, const cache::ServedKernel& served) override {
    DeviceSlot* slot = Device(device);
    if (slot == nullptr) return Status(StatusCode::kNoDevice, "device " + std::to_string(device) + " is not usable");
    auto k = std::make_unique<LoadedKernel>();
    k->record_id = served.id;
    // Module::Load makes the device's primary context (PyTorch's) current around the load.
    KJIT_ASSIGN_OR_RETURN(Module module, Module::Load(*slot->context, served.cubin));
    k->module.emplace(std::move(module));
    KJIT_ASSIGN_OR_RETURN(Function function, k->module->GetFunction(served.entry_point));
    k->function.emplace(std::move(function));
    const auto& l = served.launch;
    k->launch.grid = {l.grid[0], l.grid[1], l.grid[2]};
    k->launch.block = {l.block[0], l.block[1], l.block[2]};
    k->launch.dynamic_shared_bytes = l.dynamic_shared_bytes;
    k->workspace_bytes = l.workspace_bytes;
    if (k->workspace_bytes > cache::kMaxWorkspaceBytes) {
      return Status(StatusCode::kLaunchConfig, "a workspace of " + std::to_string(k->workspace_bytes) + " bytes is over " +
                                                   std::to_string(cache::kMaxWorkspaceBytes));
    }
    // Checked once here so that a record whose shape this device cannot run fails now, not per call.
    KJIT_RETURN_IF_ERROR(CheckLaunchConfig(k->launch, k->function->limits()));
    return k;
  }

  EntryTable& Table() override { return table; }
  std::vector<std::pair<int, int>> DevicesInUse() override {
    std::vector<std::pair<int, int>> in_use;
    for (int i = 0; i < kMaxDevices; ++i) {
      if (devices[static_cast<size_t>(i)].ready.load(std::memory_order_acquire) == 1) {
        in_use.emplace_back(i, devices[static_cast<size_t>(i)].arch);
      }
    }
    return in_use;
  }
  void LogLine(const std::string& line) override { Log(line); }

  // The time sent is host time per call (Entry::MissReport): what PyTorch's
  // kernel call cost this thread, launch and allocation included. For an
  // asynchronous kernel that is not its device time, which would need CUDA
  // events and a synchronisation per call; kjitd's evaluator measures that.
  void ReportMiss(const Entry& entry, const Entry::MissReport& report) {
    if (report.calls == 0) return;
    Client().ReportMiss(entry.key_bytes(), report.calls, report.mean_host_us);
  }

  void ReportFailure(const Entry& entry, int64_t record_id, std::string_view stage,
                     const std::string& reason) override {
    failures.fetch_add(1, std::memory_order_relaxed);
    Log("reporting record ", std::to_string(record_id), " to kjitd (", std::string(stage), "): ", reason);
    Client().ReportFailure(ipc::ReportFailure{entry.key_bytes(), record_id, std::string(stage), reason});
  }

  void RequestRetime(const Entry& entry, int device, const std::string& timed_on) override {
    const DeviceSlot* slot = Device(device);
    if (slot == nullptr || slot->model.empty()) return;
    Log("record timed on ", timed_on, ", not on this ", slot->model, ": asking kjitd to time the key here");
    Client().SubmitAsync(ipc::SubmitTask{entry.key_bytes(), 0, RetimeDetail(slot->model, timed_on)});
  }

  ipc::Client& Client() {
    std::call_once(client_once_, [&] {
      ipc::ClientOptions options;
      options.name = "kjit-shim/0.1";
      client_ = new ipc::Client(options);  // never destroyed: see the file comment
    });
    return *client_;
  }

  void StartAnnouncements() {
    std::call_once(announcements_once_, [&] {
      announcements_ = new AnnouncementListener(this);  // never destroyed; stopped at exit
      if (Status s = announcements_->Start(); !s.ok()) Log("no hot-swaps: ", s.ToString());
      const auto pid = static_cast<uint32_t>(getpid());
      activity_ = new ActivityReporter(table, this, pid, ActivityReporter::kDefaultInterval,  // never destroyed
                                       ActivityReporter::kDefaultUsesEvery, CurrentProgramRun(pid));
      activity_->Start();
      std::atexit(FlushUsesAtExit);
    });
  }

  // The calls since the reporter's last report_uses, sent before the process ends. The wait is short: a
  // program's exit must not hang on a kjitd that is away (its calls of the last seconds are then lost).
  static void FlushUsesAtExit();

  // ---- ActivitySink (the activity reporter's thread)
  bool SendActivity(ipc::ReportActivity report) override {
    if (Client().ReportActivity(std::move(report))) return true;
    Log("kjitd does not take activity reports (an older kjitd?): its idle gate relies on NVML alone");
    return false;
  }
  void SendUses(ipc::ReportUses report) override { Client().ReportUses(std::move(report)); }
  std::string DeviceUuid(int device) override {
    const DeviceSlot* slot = Device(device);
    return slot != nullptr ? slot->uuid : std::string();
  }

 private:
  std::mutex cache_mutex_;
  std::unique_ptr<cache::KernelCache> cache_;
  std::unique_ptr<cache::LaunchJournal> journal_;  // never replaced once made: Launch keeps its pointer
  std::once_flag client_once_;
  ipc::Client* client_ = nullptr;
  std::once_flag announcements_once_;
  AnnouncementListener* announcements_ = nullptr;
  ActivityReporter* activity_ = nullptr;
};

Adapter* g_adapter = nullptr;

// What to do with a call once TryServe has looked at it.
struct Decision {
  bool served = false;         // kjit's kernel ran; the stack holds its outputs
  Entry* first_sight = nullptr;  // this call created the entry: resolve it after PyTorch's kernel
  Entry* negative = nullptr;     // a known miss: time PyTorch's kernel and count it
  int device = -1;
  int arch = 0;
  Hash128 hash;
};

// A record's first launch in this process: its journal entry is written on construction and removed on
// destruction, unless KeepEntry() (the launch faulted). Without a journal (it cannot be written) the launch is
// still synchronized, so a fault is still reported, but nothing outlives the process.
class FirstLaunch {
 public:
  FirstLaunch(Adapter& a, int64_t record_id) : record_id_(record_id), journal_(a.Journal()) {
    if (journal_ == nullptr) return;
    if (Status s = journal_->Begin(record_id); !s.ok()) {
      a.Log("first launch of record ", std::to_string(record_id), " without a journal entry: ", s.ToString());
      journal_ = nullptr;
    }
  }
  ~FirstLaunch() {
    if (journal_ != nullptr && !keep_) journal_->End(record_id_);
  }
  FirstLaunch(const FirstLaunch&) = delete;
  FirstLaunch& operator=(const FirstLaunch&) = delete;
  void KeepEntry() { keep_ = true; }

 private:
  const int64_t record_id_;
  const cache::LaunchJournal* journal_;
  bool keep_ = false;
};

// Launches a loaded kernel with its pointer parameters (kernel ABI v2: inputs, outputs; the workspace added here
// if it takes one) on PyTorch's current stream of the device, its first launch in the process guarded.
Status LaunchOnCurrentStream(Adapter& a, const LoadedKernel& kernel, DeviceSlot& slot, int device_index,
                             c10::SmallVectorImpl<CUdeviceptr>& values) {
  const c10::Device device(c10::kCUDA, static_cast<c10::DeviceIndex>(device_index));
  const auto stream = static_cast<CUstream>(a.cuda_guard->getStream(device).native_handle());
  // PyTorch's threads have the device's primary context current; a thread that has never
  // touched CUDA through the runtime may have none, and then kjit makes it current.
  CUcontext current = nullptr;
  const auto& api = slot.context->driver().api();
  std::optional<ContextGuard> guard;
  if (api.cuCtxGetCurrent(&current) != CUDA_SUCCESS || current != slot.context->get()) {
    KJIT_ASSIGN_OR_RETURN(ContextGuard g, ContextGuard::Push(*slot.context));
    guard.emplace(std::move(g));
  }
  c10::SmallVector<void*, 17> params(values.size() + 1);  // + the workspace, if any
  for (size_t i = 0; i < values.size(); ++i) params[i] = &values[i];
  // The record's first launch in this process is guarded (cache/launch_journal.h): a journal entry, the
  // launch, a wait for the stream, the entry removed. Not while the stream is captured into a CUDA graph
  // (nothing runs then, and waiting would end the capture): a later launch outside a capture guards it.
  std::optional<FirstLaunch> first;
  if (!kernel.first_launch_taken.load(std::memory_order_acquire)) {
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    if (api.cuStreamIsCapturing(stream, &capture) == CUDA_SUCCESS && capture == CU_STREAM_CAPTURE_STATUS_NONE &&
        !kernel.first_launch_taken.exchange(true, std::memory_order_acq_rel)) {
      // An error already on the stream (PyTorch's earlier kernels) is not this kernel's: not blamed on it.
      if (CUresult r = api.cuStreamSynchronize(stream); r != CUDA_SUCCESS) {
        kernel.first_launch_taken.store(false, std::memory_order_release);
        return InvalidArgument("the stream had failed before the kernel's first launch: " +
                               DescribeCuResult(&slot.context->driver(), r));
      }
      first.emplace(a, kernel.record_id);
    }
  }
  if (kernel.workspace_bytes == 0) {
    KJIT_RETURN_IF_ERROR(kernel.function->Launch(kernel.launch, stream, params.data()));
  } else {
    // Kernel ABI v2: the workspace pointer after the outputs.
    CUdeviceptr workspace = 0;
    params[values.size()] = &workspace;
    auto launch = [&](CUdeviceptr ptr) {
      workspace = ptr;
      return kernel.function->Launch(kernel.launch, stream, params.data());
    };
    // A stream whose capture state cannot be read (the legacy stream while another is captured
    // in global mode) is treated as captured: the per-launch path, which fails as PyTorch's would.
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    if (api.cuStreamIsCapturing(stream, &capture) != CUDA_SUCCESS) capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if (capture == CU_STREAM_CAPTURE_STATUS_NONE) {
      KJIT_RETURN_IF_ERROR(a.workspaces.Run(device_index, stream, kernel.workspace_bytes, launch));
    } else {
      // Being captured into a CUDA graph: nothing runs now, so no buffer can be zeroed
      // for later launches. A fresh one from the graph's pool, zeroed by a memset that
      // the graph replays before the kernel each time (worker_protocol.h).
      KJIT_ASSIGN_OR_RETURN(WorkspacePool::Buffer b, a.AllocateWorkspace(device_index, stream, kernel.workspace_bytes));
      KJIT_RETURN_IF_ERROR(launch(b.ptr));
    }
  }
  if (first) {
    if (CUresult r = api.cuStreamSynchronize(stream); r != CUDA_SUCCESS) {
      // A fault: the context is likely lost, and the process with it. The entry stays, so that whoever
      // looks next (kjitd, this program's next run) knows which record did it.
      first->KeepEntry();
      return Status(StatusCode::kCudaError, "record " + std::to_string(kernel.record_id) +
                                                "'s first launch in this process failed: " +
                                                DescribeCuResult(&slot.context->driver(), r));
    }
  }
  return Status::Ok();
}

// Runs a loaded kernel for the call: allocates outputs like the first call's,
// launches on PyTorch's current stream, and on success replaces the arguments
// on the stack by the outputs. On failure the stack is untouched.
template <bool kProfile>
Status Launch(Adapter& a, const Entry& entry, const LoadedKernel& kernel, DeviceSlot& slot,
              const c10::FunctionSchema& schema, ::torch::jit::Stack* stack, Stopwatch<kProfile>& clock) {
  const size_t n_args = schema.arguments().size();
  const c10::Device device(c10::kCUDA, static_cast<c10::DeviceIndex>(entry.device()));
  auto args = ::torch::jit::last(*stack, n_args);
  // Kernel ABI v2: input pointers in argument order (null for an absent optional tensor), then outputs,
  // then the workspace if the kernel has one (below).
  // Inline capacity for every intercepted op's arguments and outputs: no heap allocation per hit.
  c10::SmallVector<CUdeviceptr, 16> values;
  for (size_t i = 0; i < n_args; ++i) {
    const c10::IValue& v = args[i];
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (!t.defined()) {
        values.push_back(0);
        continue;
      }
      if (t.device() != device) return InvalidArgument("argument " + std::to_string(i) + " is on another device");
      values.push_back(reinterpret_cast<CUdeviceptr>(t.data_ptr()));
    } else if (v.isNone()) {
      const auto& type = schema.arguments()[i].type();
      if (type->kind() == c10::TypeKind::OptionalType &&
          type->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::TensorType) {
        values.push_back(0);
      }
    } else if (v.isTensorList()) {
      return InvalidArgument("tensor-list arguments are not served yet");
    }
  }
  c10::SmallVector<at::Tensor, 4> outputs;
  // Allocated as PyTorch's own kernels allocate theirs (at::detail::empty_strided_cuda: no trip
  // through the dispatcher), unless the deterministic mode asks empty tensors to be filled, which
  // only at::empty_strided does.
  const auto& ctx = at::globalContext();
  const bool direct = a.empty_strided_cuda != nullptr &&
                      !(ctx.deterministicAlgorithms() && ctx.deterministicFillUninitializedMemory());
  for (const OutputLayout& o : entry.outputs()) {
    if (!o.defined) {
      outputs.emplace_back();
      values.push_back(0);
      continue;
    }
    const auto dtype = static_cast<c10::ScalarType>(o.scalar_type);
    if (direct) {
      outputs.emplace_back(a.empty_strided_cuda(o.sizes, o.strides, dtype, device));
    } else {
      outputs.push_back(at::empty_strided(o.sizes, o.strides, at::TensorOptions().dtype(dtype).device(device)));
    }
    values.push_back(reinterpret_cast<CUdeviceptr>(outputs.back().data_ptr()));
  }
  clock.Lap(Stage::kAllocate);
  KJIT_RETURN_IF_ERROR(LaunchOnCurrentStream(a, kernel, slot, entry.device(), values));
  ::torch::jit::drop(*stack, n_args);
  for (at::Tensor& t : outputs) stack->emplace_back(std::move(t));
  return Status::Ok();
}

// An entry the unboxed wrapper found for the call (its checks passed, its key hashed): the
// boxed path takes it as found rather than keying the call again.
struct FoundEntry {
  Entry* entry = nullptr;
  Hash128 hash;
};

template <bool kProfile, bool kAllNumerics>
Decision TryServe(Adapter& a, const c10::OperatorHandle& op, const kjit::torch::CallKeyPlan& plan, PreFilter filter,
                  bool serves_recorded, ::torch::jit::Stack* stack, Stopwatch<kProfile>& clock,
                  const FoundEntry* found) noexcept {
  Decision d;
  try {
    auto args = ::torch::jit::last(*stack, plan.arg_count());
    if (found != nullptr) {
      d.device = found->entry->device();
    } else if (!CheckCall(filter, args, &d.device, serves_recorded)) {
      return d;
    }
    DeviceSlot* slot = a.Device(d.device);
    if (slot == nullptr) return d;
    d.arch = slot->arch;
    clock.Lap(Stage::kPreFilter);
    bool created = false;
    Entry* entry = nullptr;
    if (found != nullptr) {
      entry = found->entry;
      d.hash = found->hash;
    } else {
      entry = FindEntry<kProfile, kAllNumerics>(a.table, plan, args, d.device, d.arch, clock, &d.hash, &created);
    }
    if (entry == nullptr) return d;  // a call kjit cannot key (e.g. an argument type it does not encode)
    if (created) {
      d.first_sight = entry;
      return d;
    }
    switch (entry->state()) {
      case EntryState::kUnknown:
      case EntryState::kFailed:
        return d;
      case EntryState::kNegative:
        d.negative = entry;
        return d;
      case EntryState::kLoaded: {
        const LoadedKernel* kernel = entry->kernel();
        if (kernel == nullptr) return d;
        const c10::FunctionSchema& schema = op.schema();
        Status s;
        try {
          s = Launch(a, *entry, *kernel, *slot, schema, stack, clock);
        } catch (const std::exception& e) {
          // Allocation failures are PyTorch's to report: its own kernel will meet the same.
          a.Log("launch skipped for ", schema.name(), ": ", e.what());
          return d;
        }
        if (!s.ok()) {
          if (entry->Fail("record " + std::to_string(kernel->record_id) + ": " + s.ToString())) {
            a.Log("blacklisted ", d.hash.ToHex(), " (", schema.name(), "): ", s.ToString());
            a.ReportFailure(*entry, kernel->record_id, LaunchFailureStage(s), s.ToString());
          }
          return d;
        }
        entry->CountHit();
        a.hits.fetch_add(1, std::memory_order_relaxed);
        clock.Lap(Stage::kLaunch);
        d.served = true;
        return d;
      }
    }
  } catch (...) {
    // Nothing of kjit's may reach the dispatcher; PyTorch's kernel runs instead.
  }
  return d;
}

int64_t SteadyNs(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

void CountMiss(Adapter& a, Entry& entry, std::chrono::steady_clock::time_point start,
               std::chrono::steady_clock::time_point end, bool timed = true) noexcept {
  const auto host_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count();
  const Entry::MissReport report =
      entry.CountMiss(static_cast<uint64_t>(std::max<int64_t>(host_ns, 0)), SteadyNs(end), timed);
  try {
    a.ReportMiss(entry, report);
  } catch (...) {
    // The report is a hint: losing one (out of memory) costs a task its call count, nothing more.
  }
}

// After PyTorch's kernel ran a key's first call: record its outputs and resolve the entry.
void ResolveFirstSight(Adapter& a, const c10::OperatorHandle& op, const Decision& d,
                       const ::torch::jit::Stack& stack, std::chrono::steady_clock::time_point start,
                       std::chrono::steady_clock::time_point end) noexcept {
  Entry& entry = *d.first_sight;
  a.first_sights.fetch_add(1, std::memory_order_relaxed);
  try {
    const c10::FunctionSchema& schema = op.schema();
    const size_t n_returns = schema.returns().size();
    std::vector<OutputLayout> outputs;
    if (stack.size() < n_returns) {
      entry.Fail("stack holds fewer values than the op returns");
      return;
    }
    for (size_t i = stack.size() - n_returns; i < stack.size(); ++i) {
      const c10::IValue& v = stack[i];
      if (!v.isTensor()) {
        entry.Fail("returns a " + v.tagKind() + "; only tensor returns are served");
        return;
      }
      const at::Tensor& t = v.toTensor();
      OutputLayout o;
      if (t.defined()) {
        if (t.layout() != c10::kStrided || t.storage_offset() != 0 || !t.is_cuda() || t.get_device() != d.device) {
          entry.Fail("output " + std::to_string(outputs.size()) + " is not a fresh dense tensor on the call's device");
          return;
        }
        o.scalar_type = static_cast<int8_t>(t.scalar_type());
        o.sizes.assign(t.sizes().begin(), t.sizes().end());
        o.strides.assign(t.strides().begin(), t.strides().end());
      } else {
        o.defined = false;
      }
      outputs.push_back(std::move(o));
    }
    a.StartAnnouncements();
    auto served = a.LookupRecord(d.hash, d.device, d.arch);
    if (!served.ok()) {
      if (served.status().code() != StatusCode::kNotFound) a.Log("cache: ", served.status().ToString());
      entry.ResolveNegative(std::move(outputs));
      a.Log("miss ", schema.name(), " ", d.hash.ToHex());
      // Counted, not timed: the first call's time is mostly PyTorch's own first-use work (module loading,
      // cuDNN's and cuBLAS's set-up), which would rank the key in kjitd's queue.
      CountMiss(a, entry, start, end, /*timed=*/false);
      return;
    }
    if (const std::string differs = OutputsMismatch(outputs, served->outputs); !differs.empty()) {
      // Served as verified or not at all: PyTorch's kernel runs, and the key is reported as a miss.
      a.Log("record ", std::to_string(served->id), " not served for ", schema.name(), ": ", differs);
      entry.ResolveNegative(std::move(outputs));
      CountMiss(a, entry, start, end, /*timed=*/false);
      return;
    }
    auto loaded = a.Load(d.device, *served);
    if (!loaded.ok()) {
      if (entry.Fail("record " + std::to_string(served->id) + ": " + loaded.status().ToString())) {
        a.Log("blacklisted ", d.hash.ToHex(), " (", schema.name(), "): ", loaded.status().ToString());
        a.ReportFailure(entry, served->id, "load", loaded.status().ToString());
      }
      return;
    }
    entry.ResolveLoaded(std::move(outputs), std::move(*loaded));
    a.Log("loaded record ", std::to_string(served->id), " for ", schema.name(), " ", d.hash.ToHex());
    if (!served->timed_on_other_model.empty() && entry.FirstRetimeRequest()) {
      a.RequestRetime(entry, d.device, served->timed_on_other_model);
    }
  } catch (const std::exception& e) {
    entry.Fail(std::string("resolving the entry: ") + e.what());
  } catch (...) {
    entry.Fail("resolving the entry: unknown exception");
  }
}

// ---- Chains (KJIT_FUSION=record; shim/FUSION.md, design (b)'s recording). A fusible op's call (PreFilter
// kChainMember) always runs PyTorch's kernel; the thread's gate picks the calls to record (RecordingGate: a key per
// recorded call, about a miss's cost, on a sample of the calls), and the chains a thread repeats are reported to
// kjitd as misses of their chain keys, which kjitd tunes like any key. Chains are not served yet.

void AddServedChain(Adapter& a, const OpKey& key, int device, int arch);
std::optional<at::Tensor> TryDefer(Adapter& a, size_t op_index, std::span<const c10::IValue> args) noexcept;

// Per argument, its TensorId (0 for what is no tensor): the ids the chain recorder and ChainMatch compare.
std::vector<uint64_t> ArgumentIds(std::span<const c10::IValue> args) {
  std::vector<uint64_t> ids;
  ids.reserve(args.size());
  for (const c10::IValue& v : args) ids.push_back(v.isTensor() ? kjit::torch::TensorId(v.toTensor()) : 0);
  return ids;
}

ThreadChains& ThisThreadsChains() {
  static thread_local ThreadChains chains;
  return chains;
}

// Records one call of a fusible op, after PyTorch's kernel made `out`. Never throws: a call that cannot be recorded
// (an argument no chain holds, a device kjit cannot use) is left out.
void RecordChainCall(Adapter& a, const c10::FunctionSchema& schema, std::span<const c10::IValue> args,
                     const at::Tensor& out) noexcept {
  try {
    if (!out.defined() || !out.is_cuda()) return;
    const DeviceSlot* slot = a.Device(out.get_device());
    if (slot == nullptr) return;
    auto call = kjit::torch::ChainMemberCall(schema, args);
    if (!call.ok()) return;
    CallRecord record;
    record.call = std::move(*call);
    record.input_ids = ArgumentIds(args);
    record.output_id = kjit::torch::TensorId(out);
    record.pins = kjit::torch::PinTensorIds(args, out);
    record.arch = static_cast<uint16_t>(slot->arch);
    record.numerics = kjit::torch::CurrentDeterminismNumerics();
    a.chain_records.fetch_add(1, std::memory_order_relaxed);
    for (const RecordedChain& chain : ThisThreadsChains().Add(std::move(record))) {
      a.chains_reported.fetch_add(1, std::memory_order_relaxed);
      a.Log("chain seen ", std::to_string(chain.count), " times: ", chain.key.OpName(), " ", chain.key.Hash().ToHex());
      // Its calls as the recorder counted them (a sample of the program's); no host time: the evaluator times the
      // unfused chain itself.
      a.Client().ReportMiss(chain.key.Encode(), chain.count, 0.0);
      if (a.settings.fusion_serve) AddServedChain(a, chain.key, out.get_device(), slot->arch);
    }
  } catch (...) {
    // A hint lost (out of memory): the program is not affected.
  }
}

// The boxed form of a call that takes part in chains (a kChainMember op, or one that joins chains): the arguments
// are on the stack. Deferred into a served chain (KJIT_FUSION=serve); otherwise `run` runs it (PyTorch's kernel, or
// the op's own serving), leaving the output on the stack, and on the thread's sample it is recorded.
template <size_t I, class Run>
void ChainCallBoxed(Adapter& a, const c10::OperatorHandle& op, ::torch::jit::Stack* stack, Run&& run) {
  const size_t n = op.schema().arguments().size();
  if (a.settings.fusion_serve && stack->size() >= n) {
    std::span<const c10::IValue> args(stack->data() + (stack->size() - n), n);
    if (std::optional<at::Tensor> deferred = TryDefer(a, I, args)) {
      ::torch::jit::drop(*stack, n);
      stack->emplace_back(std::move(*deferred));
      return;
    }
  }
  if (!ThisThreadsChains().ShouldRecord() || stack->size() < n) {
    run();
    return;
  }
  std::vector<c10::IValue> args(stack->end() - static_cast<std::ptrdiff_t>(n), stack->end());
  run();
  if (!stack->empty() && stack->back().isTensor()) RecordChainCall(a, op.schema(), args, stack->back().toTensor());
}

// ---- Serving chains (KJIT_FUSION=serve; shim/FUSION.md, design (b), "Serving"). A thread's fusible call that
// is the first call of a served chain (one whose key has a verified kernel) opens a window: the call is not run,
// its output is allocated and returned unwritten, and a catch-all (a boxed fallback on kChainModeKey, put in the
// thread's included dispatch keys) sees every later dispatcher call of the thread. The chain's next calls, checked
// by ChainMatch, are deferred the same way. Anything else closes the window first: once the chain is complete, the
// fused kernel runs if it writes every output something still holds (FusedKernelCovers), and otherwise, or on any
// divergence, the deferred calls run in order with PyTorch's own out= kernels into the outputs already returned
// (eager's values, bit for bit). Not deferred: calls autograd records (their backward may run on another thread,
// which no catch-all of this one sees), calls on a stream being captured into a CUDA graph.

constexpr c10::DispatchKey kChainModeKey = c10::DispatchKey::TESTING_ONLY_GenericMode;

// The kInterceptedOps index of a call's op, or kOpCount.
size_t OpIndexOf(const OpCall& call) {
  for (size_t i = 0; i < kOpCount; ++i) {
    const OpName parts = SplitOpName(kInterceptedOps[i]);
    if (call.op.size() == 6 + parts.name.size() && call.op.compare(6, std::string::npos, parts.name) == 0 &&
        call.op.compare(0, 6, "aten::") == 0 && call.overload == parts.overload) {
      return i;
    }
  }
  return kOpCount;
}

// Adds a chain the process reported to the served chains of `device`, with its cache record if it has one (a
// later one arrives by announcement). A chain that cannot be deferred (an op without its out= overload here,
// tensors that do not broadcast, a reduction with a dtype) is left out.
void AddServedChain(Adapter& a, const OpKey& key, int device, int arch) {
  auto plan = ChainPlan::Of(key);
  if (!plan.ok()) return;
  auto chain = std::make_unique<ServedChain>();
  chain->device = device;
  for (size_t m = 0; m < plan->members().size(); ++m) {
    const OpCall& call = plan->member(m);
    const size_t op = OpIndexOf(call);
    if (op == kOpCount || !a.ops[op].out_variant.has_value()) return;
    // The output's dtype (the tensor operands' promoted one) and sizes (theirs broadcast), as PyTorch's
    // TensorIterator makes them; wrapped numbers take part in neither.
    std::optional<c10::ScalarType> dtype;
    std::optional<std::vector<int64_t>> sizes;
    for (const Arg& arg : call.args) {
      const TensorDesc* desc = std::get_if<TensorDesc>(&arg);
      std::optional<c10::ScalarType> t;
      std::vector<int64_t> s;
      if (const auto* r = std::get_if<ValueRef>(&arg)) {
        const int source = plan->MemberOf(r->call);
        if (source < 0) {
          desc = &std::get<TensorDesc>(key.calls[r->call].args[0]);  // a kjit::input
        } else {
          t = chain->out_dtype[static_cast<size_t>(source)];
          s = chain->out_sizes[static_cast<size_t>(source)];
        }
      }
      if (desc != nullptr) {
        auto st = kjit::torch::ScalarTypeOf(desc->dtype);
        if (!st.ok()) return;
        t = *st;
        s = desc->sizes;
      }
      if (!t) continue;
      dtype = dtype ? c10::promoteTypes(*dtype, *t) : *t;
      sizes = sizes ? at::infer_size(*sizes, s) : s;  // throws where they do not broadcast: the chain is left out
    }
    if (!dtype || !c10::isFloatingType(*dtype) || !sizes) return;
    if (JoinsChains(kInterceptedOps[op]) && call.args.size() == 3) {
      // A scan (self, dim, dtype): its input's sizes; no dtype of its own.
      if (!std::holds_alternative<int64_t>(call.args[1]) || !std::holds_alternative<NoneArg>(call.args[2])) return;
    } else if (JoinsChains(kInterceptedOps[op])) {
      // A reduction (self, dims, keepdim, dtype): the dims reduced to 1 (keepdim) or dropped; no dtype of its own.
      const auto* dims = call.args.size() == 4 ? std::get_if<IntList>(&call.args[1]) : nullptr;
      const auto* keep = call.args.size() == 4 ? std::get_if<bool>(&call.args[2]) : nullptr;
      if (dims == nullptr || dims->empty() || keep == nullptr || !std::holds_alternative<NoneArg>(call.args[3])) return;
      const auto rank = static_cast<int64_t>(sizes->size());
      std::vector<bool> reduced(sizes->size(), false);
      for (int64_t d : *dims) {
        const int64_t at = d < 0 ? d + rank : d;
        if (at < 0 || at >= rank) return;
        reduced[static_cast<size_t>(at)] = true;
      }
      std::vector<int64_t> out;
      for (size_t d = 0; d < sizes->size(); ++d) {
        if (!reduced[d]) out.push_back((*sizes)[d]);
        else if (*keep) out.push_back(1);
      }
      sizes = std::move(out);
    }
    chain->out_dtype.push_back(*dtype);
    chain->out_sizes.push_back(std::move(*sizes));
  }
  // The outputs the fused kernel writes, as the window allocates them (contiguous, at::empty): a record verified
  // with other layouts is not served, here or when an announcement brings it (AnnouncementListener::Handle
  // compares them; an entry with none listed was refused every chain record, so a chain tuned while its program
  // ran was never swapped in: the GELU program on an H100, 2026-12-07).
  std::vector<OutputLayout> outputs;
  for (uint32_t m : plan->written()) {
    OutputLayout layout;
    layout.scalar_type = static_cast<int8_t>(chain->out_dtype[m]);
    layout.sizes = chain->out_sizes[m];
    layout.strides.assign(layout.sizes.size(), 1);
    for (size_t d = layout.sizes.size(); d-- > 1;) {
      layout.strides[d - 1] = layout.strides[d] * std::max<int64_t>(layout.sizes[d], 1);
    }
    outputs.push_back(std::move(layout));
  }
  const std::string bytes = key.Encode();
  const Hash128 hash = HashBytes(bytes);
  a.StartAnnouncements();  // so that a kernel kjitd stores later is swapped in
  bool created = false;
  chain->entry = a.table.FindOrCreate(hash, device, bytes, &created);
  if (created) {
    auto served = a.LookupRecord(hash, device, arch);
    std::unique_ptr<LoadedKernel> kernel;
    if (served.ok()) {
      if (const std::string differs = OutputsMismatch(outputs, served->outputs); !differs.empty()) {
        a.Log("chain ", hash.ToHex(), ": record ", std::to_string(served->id), " not served: ", differs);
      } else if (auto loaded = a.Load(device, *served); loaded.ok()) {
        kernel = std::move(*loaded);
      }
    }
    if (kernel) {
      chain->entry->ResolveLoaded(std::move(outputs), std::move(kernel));
      a.Log("serving chain ", key.OpName(), " ", hash.ToHex(), " (record ", std::to_string(served->id), ")");
    } else {
      chain->entry->ResolveNegative(std::move(outputs));
    }
  }
  const size_t first = OpIndexOf(plan->member(0));
  chain->plan = std::move(*plan);
  std::lock_guard<std::mutex> lock(a.chains_mutex);
  for (const auto& served : a.served_chains) {
    if (served->entry == chain->entry) return;  // another thread's report added it
  }
  auto table = std::make_unique<StartTable>();
  if (const StartTable* old = a.start_table.load(std::memory_order_acquire)) *table = *old;
  table->by_first_op.resize(kOpCount);
  table->by_first_op[first].push_back(chain.get());
  a.served_chains.push_back(std::move(chain));
  a.start_table.store(table.get(), std::memory_order_release);
  a.start_tables.push_back(std::move(table));
}

struct PendingCall {
  size_t op = 0;
  std::vector<c10::IValue> args;
  at::Tensor out;
};

// A thread's open window: the chain it follows, the calls deferred so far.
struct ChainWindow {
  const ServedChain* chain = nullptr;
  std::optional<ChainMatch> match;
  std::vector<PendingCall> pending;
  c10::Stream stream = c10::Stream(c10::Stream::DEFAULT, c10::Device(c10::kCUDA, 0));
};

std::optional<ChainWindow>& ThisThreadsWindow() {
  static thread_local std::optional<ChainWindow> window;
  return window;
}

// The tensor a kjit::input of the window's key stands for: the argument of its first use.
const at::Tensor* InputTensor(const ChainWindow& w, uint32_t input_call) {
  const ChainPlan& plan = w.chain->plan;
  for (size_t m = 0; m < w.pending.size(); ++m) {
    const OpCall& call = plan.member(m);
    for (size_t j = 0; j < call.args.size(); ++j) {
      const auto* r = std::get_if<ValueRef>(&call.args[j]);
      if (r != nullptr && r->call == input_call && w.pending[m].args[j].isTensor()) {
        return &w.pending[m].args[j].toTensor();
      }
    }
  }
  return nullptr;
}

// The fused kernel for a complete window: its external tensors in the key's order, then the outputs it writes.
Status LaunchChain(Adapter& a, const ChainWindow& w) {
  const LoadedKernel* kernel = w.chain->entry->kernel();
  if (kernel == nullptr) return NotFound("the chain's kernel is gone");
  DeviceSlot* slot = a.Device(w.chain->device);
  if (slot == nullptr) return Status(StatusCode::kNoDevice, "the chain's device is not usable");
  const ChainPlan& plan = w.chain->plan;
  const OpKey& key = plan.key();
  c10::SmallVector<CUdeviceptr, 16> values;
  const size_t calls = key.calls.back().op == kChainLiveOp ? key.calls.size() - 1 : key.calls.size();
  for (uint32_t c = 0; c < calls; ++c) {
    const OpCall& call = key.calls[c];
    const int member = plan.MemberOf(c);
    for (size_t j = 0; j < call.args.size(); ++j) {
      if (!std::holds_alternative<TensorDesc>(call.args[j])) continue;  // ValueRefs and scalars are no parameters
      const at::Tensor* t =
          member < 0 ? InputTensor(w, c) : &w.pending[static_cast<size_t>(member)].args[j].toTensor();
      if (t == nullptr || !t->defined()) return InvalidArgument("a chain input is missing");
      values.push_back(reinterpret_cast<CUdeviceptr>(t->data_ptr()));
    }
  }
  for (uint32_t m : plan.written()) values.push_back(reinterpret_cast<CUdeviceptr>(w.pending[m].out.data_ptr()));
  return LaunchOnCurrentStream(a, *kernel, *slot, w.chain->device, values);
}

// Closes the thread's window: the fused kernel if the chain is complete and its kernel writes every output still
// held, else the deferred calls one by one (PyTorch's out= kernels). On the window's stream. Never throws.
// Whether anything but the window holds `t`, of which the window holds `window_refs` references. A tensor that
// was returned to Python has a PyObject; since PyTorch 2.10 that PyObject holds one C++ reference while it lives,
// and while the C++ count is 2 or more the TensorImpl holds a reference to the PyObject, which so outlives the
// program's last Python reference (intrusive_ptr.h, has_pyobject): count neither as the program's. (Py_REFCNT is
// read without the GIL, which PyTorch releases around an op: another thread's reference may be seen late, as
// any other thread's use of a window's tensors may be: shim/FUSION.md, "Known gaps".)
bool HeldOutsideWindow(const at::Tensor& t, long window_refs) {
  long cpp = static_cast<long>(t.use_count());
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 10)
  const c10::impl::PyObjectSlot* slot = t.unsafeGetTensorImpl()->pyobj_slot();
  PyObject* object = slot->load_pyobj();
  c10::impl::PyInterpreter* interpreter = slot->pyobj_interpreter();
  if (object != nullptr && interpreter != nullptr) {
    const size_t tensor_side = cpp >= 2 ? 1 : 0;  // the TensorImpl's own reference to its PyObject
    if ((*interpreter)->refcnt(object) > tensor_side) return true;
    cpp -= 1;  // the PyObject's reference to the tensor
  }
#endif
  return cpp > window_refs;
}

void FinishWindow(Adapter& a) noexcept {
  std::optional<ChainWindow>& slot = ThisThreadsWindow();
  if (!slot) return;
  c10::impl::tls_set_dispatch_key_included(kChainModeKey, false);
  ChainWindow w = std::move(*slot);
  slot.reset();
  try {
    // The window's stream is current while its work is launched, and the caller's again after, also on an error.
    struct StreamGuard {
      const c10::impl::DeviceGuardImplInterface* guard;
      c10::Stream previous;
      ~StreamGuard() { guard->exchangeStream(previous); }
    } stream_guard{a.cuda_guard, a.cuda_guard->exchangeStream(w.stream)};
    bool fused = false;
    if (w.match && w.match->complete()) {
      const size_t n = w.pending.size();
      std::vector<long> holders(n), window_refs(n, 1);
      for (size_t m = 0; m < n; ++m) {
        for (size_t later = m + 1; later < n; ++later) {
          for (const c10::IValue& v : w.pending[later].args) {
            if (v.isTensor() && v.toTensor().unsafeGetTensorImpl() == w.pending[m].out.unsafeGetTensorImpl()) {
              ++window_refs[m];
            }
          }
        }
        holders[m] = HeldOutsideWindow(w.pending[m].out, window_refs[m]) ? window_refs[m] + 1 : window_refs[m];
      }
      const bool covers = FusedKernelCovers(w.chain->plan, holders, window_refs);
      if (!covers && w.chain->replays_logged.fetch_add(1, std::memory_order_relaxed) < 3) {
        std::string held;
        for (size_t m = 0; m < n; ++m) {
          if (holders[m] > window_refs[m]) held += (held.empty() ? "" : ", ") + std::to_string(m);
        }
        a.Log("chain ", w.chain->plan.key().OpName(), ": the program still holds the outputs of members ", held,
              ", which the fused kernel does not write: its calls run one by one");
      }
      if (covers) {
        const Status launched = LaunchChain(a, w);
        fused = launched.ok();
        if (fused) {
          w.chain->entry->CountHit();
          a.chains_fused.fetch_add(1, std::memory_order_relaxed);
        } else {
          a.Log("chain ", w.chain->plan.key().OpName(), ": the fused kernel did not launch (", launched.ToString(),
                "): its calls run one by one");
        }
      }
    }
    if (!fused) {
      for (PendingCall& p : w.pending) {
        ::torch::jit::Stack stack(p.args.begin(), p.args.end());
        stack.emplace_back(p.out);
        a.ops[p.op].out_variant->callBoxed(&stack);
      }
      a.chains_replayed.fetch_add(1, std::memory_order_relaxed);
    }
  } catch (const std::exception& e) {
    a.Log("chain ", w.chain->plan.key().OpName(), ": closing its window failed: ", e.what());
  } catch (...) {
    a.Log("chain ", w.chain->plan.key().OpName(), ": closing its window failed");
  }
}

// Whether a call may be deferred at all: not recorded by autograd, on the device's current stream, which is not
// being captured.
bool MayDefer(Adapter& a, std::span<const c10::IValue> args, const at::Tensor& first, c10::Stream* stream) {
  const bool grad = at::GradMode::is_enabled();
  for (const c10::IValue& v : args) {
    if (v.isTensor() && grad && v.toTensor().requires_grad()) return false;
  }
  *stream = a.cuda_guard->getStream(first.device());
  DeviceSlot* slot = a.Device(first.get_device());
  if (slot == nullptr) return false;
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  const auto& api = slot->context->driver().api();
  return api.cuStreamIsCapturing(static_cast<CUstream>(stream->native_handle()), &capture) == CUDA_SUCCESS &&
         capture == CU_STREAM_CAPTURE_STATUS_NONE;
}

// A fusible call under KJIT_FUSION=serve: deferred (its unwritten output returned) if it continues the thread's
// window or starts a served chain; otherwise nothing (the caller runs it), after closing a window it diverged
// from. Never throws.
std::optional<at::Tensor> TryDefer(Adapter& a, size_t op_index, std::span<const c10::IValue> args) noexcept {
  std::optional<ChainWindow>& window = ThisThreadsWindow();
  try {
    const at::Tensor* first = nullptr;
    for (const c10::IValue& v : args) {
      if (v.isTensor() && v.toTensor().defined() && !v.toTensor().unsafeGetTensorImpl()->is_wrapped_number()) {
        first = &v.toTensor();
        break;
      }
    }
    if (first == nullptr || !first->is_cuda()) {
      if (window) FinishWindow(a);
      return std::nullopt;
    }
    auto call = kjit::torch::ChainMemberCall(a.ops[op_index].handle->schema(), args);
    if (!call.ok()) {
      if (window) FinishWindow(a);
      return std::nullopt;
    }
    const std::vector<uint64_t> ids = ArgumentIds(args);
    c10::Stream stream = c10::Stream(c10::Stream::DEFAULT, first->device());
    const bool may = MayDefer(a, args, *first, &stream);
    auto defer = [&](ChainWindow& w) {
      const ServedChain& chain = *w.chain;
      const size_t m = w.match->matched();
      at::Tensor out = at::empty(chain.out_sizes[m], at::TensorOptions().dtype(chain.out_dtype[m]).device(first->device()));
      w.match->Bind(kjit::torch::TensorId(out));
      w.pending.push_back(PendingCall{op_index, std::vector<c10::IValue>(args.begin(), args.end()), out});
      return out;
    };
    if (window) {
      if (may && stream == window->stream && first->get_device() == window->chain->device &&
          window->match->Next(*call, ids)) {
        return defer(*window);
      }
      FinishWindow(a);  // diverged
    }
    if (!may) return std::nullopt;
    const StartTable* table = a.start_table.load(std::memory_order_acquire);
    if (table == nullptr || op_index >= table->by_first_op.size()) return std::nullopt;
    for (const ServedChain* chain : table->by_first_op[op_index]) {
      if (chain->device != first->get_device() || chain->entry->kernel() == nullptr) continue;
      ChainWindow w;
      w.chain = chain;
      w.match.emplace(chain->plan);
      w.stream = stream;
      if (!w.match->Next(*call, ids)) continue;
      at::Tensor out = defer(w);
      window = std::move(w);
      c10::impl::tls_set_dispatch_key_included(kChainModeKey, true);
      return out;
    }
  } catch (...) {
    if (window) FinishWindow(a);
  }
  return std::nullopt;
}

// Whether a call is aten::to.dtype returning its argument itself (the same dtype, copy=False, no memory format
// but preserve: PyTorch's to_will_alias): it reads nothing, and Hugging Face's RMS norm makes one inside its chain
// (`weight * hidden_states.to(input_dtype)` on a float32 tensor). One that would copy reads its argument.
bool IsAliasingTo(const c10::OperatorHandle& op, const ::torch::jit::Stack& stack) {
  const c10::FunctionSchema& schema = op.schema();
  if (schema.name() != "aten::to" || schema.overload_name() != "dtype" || schema.arguments().size() != 5 ||
      stack.size() < 5) {
    return false;
  }
  const c10::IValue* args = stack.data() + (stack.size() - 5);
  if (!args[0].isTensor() || !args[1].isInt() || !args[3].isBool() || args[3].toBool()) return false;
  if (args[0].toTensor().scalar_type() != args[1].toScalarType()) return false;
  return args[4].isNone() || args[4].toMemoryFormat() == c10::MemoryFormat::Preserve;
}

// The catch-all while a window is open: the chain's own ops pass on to their wrappers (which check them), and a
// cast to the dtype a tensor already has passes as the no-op it is; anything else closes the window before it runs.
void ChainCatchAll(const c10::OperatorHandle& op, c10::DispatchKeySet keys, ::torch::jit::Stack* stack) {
  const c10::DispatchKeySet below = keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, kChainModeKey);
  Adapter& a = *g_adapter;
  std::optional<ChainWindow>& window = ThisThreadsWindow();
  if (window && !window->match->complete()) {
    for (size_t i = 0; i < kOpCount; ++i) {
      if (a.ops[i].out_variant.has_value() && a.ops[i].handle.has_value() && *a.ops[i].handle == op) {
        // What it dispatches inside (allocations) is kjit's own: not caught.
        c10::impl::ExcludeDispatchKeyGuard guard(kChainModeKey);
        op.redispatchBoxed(below, stack);
        return;
      }
    }
    if (IsAliasingTo(op, *stack)) {
      c10::impl::ExcludeDispatchKeyGuard guard(kChainModeKey);
      op.redispatchBoxed(below, stack);
      return;
    }
  }
  FinishWindow(a);
  op.redispatchBoxed(below, stack);
}

template <size_t I, bool kProfile>
void ServeOrForward(Adapter& a, const c10::OperatorHandle& op, c10::DispatchKeySet keys, ::torch::jit::Stack* stack,
                    const FoundEntry* found = nullptr) {
  static constexpr PreFilter kFilter = PreFilterFor(kInterceptedOps[I]);
  Stopwatch<kProfile> clock(&a.profile);
  const Decision d = TryServe<kProfile, KeysAllNumerics(kInterceptedOps[I])>(
      a, op, *a.ops[I].key_plan, kFilter, ServesRecordedCalls(kInterceptedOps[I]), stack, clock, found);
  if (d.served) {
    clock.Total();
    return;
  }
  if (d.negative == nullptr && d.first_sight == nullptr) {
    a.ops[I].pytorch->callBoxed(op, keys, stack);
    clock.Lap(Stage::kPyTorchDeclined);
    clock.Total();
    return;
  }
  // PyTorch's own kernel: its exceptions are the user's to see, as without kjit. Timed for
  // kjitd (the host time it reports) on a first sight and one miss in kMissTimingStride.
  if (d.negative != nullptr && !d.negative->TimeThisMiss()) {
    a.ops[I].pytorch->callBoxed(op, keys, stack);
    clock.Lap(Stage::kPyTorchMiss);
    d.negative->CountUntimedMiss();  // reported later, with a timed miss
    clock.Lap(Stage::kMissAccounting);
    clock.Total();
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  a.ops[I].pytorch->callBoxed(op, keys, stack);
  const auto end = std::chrono::steady_clock::now();
  if (d.first_sight != nullptr) {
    ResolveFirstSight(a, op, d, *stack, start, end);
    clock.Lap(Stage::kPyTorchFirst);
  } else {
    clock.Lap(Stage::kPyTorchMiss);
    CountMiss(a, *d.negative, start, end);
    clock.Lap(Stage::kMissAccounting);
  }
  clock.Total();
}

template <size_t I>
void WrapperAlone(Adapter& a, const c10::OperatorHandle& op, c10::DispatchKeySet keys, ::torch::jit::Stack* stack);

template <size_t I>
void Wrapper(const c10::OperatorHandle& op, c10::DispatchKeySet keys, ::torch::jit::Stack* stack) {
  Adapter& a = *g_adapter;
  if constexpr (PreFilterFor(kInterceptedOps[I]) == PreFilter::kChainMember) {
    ChainCallBoxed<I>(a, op, stack, [&] { a.ops[I].pytorch->callBoxed(op, keys, stack); });
    return;
  }
  if constexpr (JoinsChains(kInterceptedOps[I])) {
    // Inside a served chain's window every call arrives boxed (the catch-all redispatches it): an op that joins
    // chains is checked and deferred here, or served alone and, on the thread's sample, recorded.
    if (a.settings.fusion_record) {
      ChainCallBoxed<I>(a, op, stack, [&] { WrapperAlone<I>(a, op, keys, stack); });
      return;
    }
  }
  WrapperAlone<I>(a, op, keys, stack);
}

// The boxed wrapper of an op served alone: a hit, or PyTorch's kernel (timed where it is a miss to report).
template <size_t I>
void WrapperAlone(Adapter& a, const c10::OperatorHandle& op, c10::DispatchKeySet keys, ::torch::jit::Stack* stack) {
  if (__builtin_expect(a.diagnostics.load(std::memory_order_relaxed), false)) {
    if (a.passthrough.load(std::memory_order_relaxed)) {
      // Profiled too: PyTorch's kernel's host time as the wrapper sees it, to set against a hit's.
      if (a.settings.profile) {
        Stopwatch<true> clock(&a.profile);
        a.ops[I].pytorch->callBoxed(op, keys, stack);
        clock.Lap(Stage::kPyTorchDeclined);
        clock.Total();
      } else {
        a.ops[I].pytorch->callBoxed(op, keys, stack);
      }
      return;
    }
    ServeOrForward<I, true>(a, op, keys, stack);
  } else {
    ServeOrForward<I, false>(a, op, keys, stack);
  }
}

// The unboxed wrapper of op I: the dispatcher calls it with the op's C++ arguments (no Stack).
// A call kjit leaves to PyTorch without a decision to make (declined by the checks, a known miss,
// an entry another thread is resolving, a blacklisted one) calls PyTorch's unboxed kernel. A
// hit boxes its arguments (as the dispatcher boxed them for the boxed wrapper) and is launched
// by the boxed path with the entry found here; a key's first call takes the boxed path whole
// (Wrapper<I>), which makes and resolves its entry. KJIT_PROFILE profiles the boxed path only
// (every call takes it while profiling); passthrough forwards unboxed.
template <size_t I, class Fn = typename OpType<I>::schema>
struct Unboxed;
template <size_t I, class R, class... Args>
struct Unboxed<I, R(Args...)> {
  using Kernel = R (*)(Args...);

  static R Call(c10::DispatchKeySet keys, Args... args) {
    Adapter& a = *g_adapter;
    constexpr bool kMember = PreFilterFor(kInterceptedOps[I]) == PreFilter::kChainMember;
    if constexpr ((kMember || JoinsChains(kInterceptedOps[I])) && std::is_same_v<std::decay_t<R>, at::Tensor>) {
      // A call that takes part in chains (a fusible op, intercepted only under KJIT_FUSION; or one that joins
      // chains, such as a reduction, under KJIT_FUSION): deferred into a served chain (KJIT_FUSION=serve), else
      // run, and on the thread's sample of calls recorded (RecordChainCall).
      if (kMember || a.settings.fusion_record) {
        if (a.settings.fusion_serve) {
          const StartTable* table = a.start_table.load(std::memory_order_relaxed);
          if (ThisThreadsWindow() || (table != nullptr && !table->by_first_op[I].empty())) {
            ::torch::jit::Stack boxed = c10::impl::boxArgs<Args...>(args...);
            if (std::optional<at::Tensor> deferred = TryDefer(a, I, boxed)) return std::move(*deferred);
          }
        }
        if (ThisThreadsChains().ShouldRecord()) {
          ::torch::jit::Stack boxed = c10::impl::boxArgs<Args...>(args...);  // copies: the arguments stay the caller's
          R out = Run(a, keys, args...);
          RecordChainCall(a, a.ops[I].handle->schema(), boxed, out);
          return out;
        }
      }
    }
    return Run(a, keys, args...);
  }

 private:
  enum class Path { kPyTorch, kNegative, kLoaded, kFirstSight };

  // The call itself: a fusible op's is PyTorch's kernel (never keyed alone); any other op's is served alone (a
  // hit) or PyTorch's kernel.
  static R Run(Adapter& a, c10::DispatchKeySet keys, Args... args) {
    const Kernel pytorch = reinterpret_cast<Kernel>(a.ops[I].unboxed);
    if constexpr (PreFilterFor(kInterceptedOps[I]) == PreFilter::kChainMember) {
      (void)keys;
      return pytorch(args...);
    } else {
      if (__builtin_expect(a.diagnostics.load(std::memory_order_relaxed), false)) {
        if (a.passthrough.load(std::memory_order_relaxed) && !a.settings.profile) return pytorch(args...);
        return Boxed(a, keys, nullptr, args...);
      }
      FoundEntry found;
      switch (Look(a, &found, args...)) {
        case Path::kPyTorch:
          return pytorch(args...);
        case Path::kFirstSight:
          return Boxed(a, keys, nullptr, args...);
        case Path::kLoaded:
          return Boxed(a, keys, &found, args...);  // a hit: launched from the boxed arguments (Launch)
        case Path::kNegative:
          break;
      }
      Entry* negative = found.entry;
      // A known miss, as ServeOrForward counts one: PyTorch's exceptions are the user's to see.
      if (!negative->TimeThisMiss()) {
        R out = pytorch(args...);
        negative->CountUntimedMiss();  // reported later, with a timed miss
        return out;
      }
      const auto start = std::chrono::steady_clock::now();
      R out = pytorch(args...);
      CountMiss(a, *negative, start, std::chrono::steady_clock::now());
      return out;
    }
  }

  static Path Look(Adapter& a, FoundEntry* found, const Args&... args) noexcept {
    try {
      static constexpr PreFilter kFilter = PreFilterFor(kInterceptedOps[I]);
      PrefetchTensorImpls(args...);
      int device = -1;
      if (!CheckTypedCall<kFilter, c10::DeviceType::CUDA, ServesRecordedCalls(kInterceptedOps[I])>(&device, args...)) {
        return Path::kPyTorch;
      }
      PrefetchStorages(args...);
      DeviceSlot* slot = a.Device(device);
      if (slot == nullptr) return Path::kPyTorch;
      bool keyed = false;
      Entry* entry = FindTypedEntry<KeysAllNumerics(kInterceptedOps[I])>(a.table, *a.ops[I].key_plan, device,
                                                                          slot->arch, &found->hash, &keyed, args...);
      if (!keyed) return Path::kPyTorch;  // a call kjit cannot key
      if (entry == nullptr) return Path::kFirstSight;  // the boxed path makes the entry and resolves it
      found->entry = entry;
      switch (entry->state()) {
        case EntryState::kNegative:
          return Path::kNegative;
        case EntryState::kLoaded:
          return Path::kLoaded;
        case EntryState::kUnknown:  // another thread is resolving it
        case EntryState::kFailed:
          return Path::kPyTorch;
      }
    } catch (...) {
      // Nothing of kjit's may reach the dispatcher; PyTorch's kernel runs instead.
    }
    return Path::kPyTorch;
  }

  // The call through the boxed path: its arguments boxed as the dispatcher boxes them for a boxed
  // kernel. With the entry this wrapper found (a hit), that entry is served without keying the
  // call again; without, the boxed wrapper does it all (a first sight, or while profiling).
  static R Boxed(Adapter& a, c10::DispatchKeySet keys, const FoundEntry* found, Args... args) {
    ::torch::jit::Stack stack = c10::impl::boxArgs<Args...>(std::forward<Args>(args)...);
    if (found != nullptr) {
      ServeOrForward<I, false>(a, *a.ops[I].handle, keys, &stack, found);
    } else {
      // The op's boxed path without the chains' part (Call did that already for an op that joins chains).
      WrapperAlone<I>(a, *a.ops[I].handle, keys, &stack);
    }
    return c10::impl::PopResult<R>::call(stack);
  }
};

// Op I's override: the unboxed wrapper if PyTorch's unboxed kernel was found, else the boxed one.
template <size_t I>
::torch::CppFunction WrapperFunction(bool unboxed) {
  if (unboxed) return ::torch::CppFunction(TORCH_FN(Unboxed<I>::Call));
  return ::torch::CppFunction::makeFromBoxedFunction<&Wrapper<I>>();
}

template <size_t... I>
std::array<::torch::CppFunction (*)(bool), sizeof...(I)> MakeWrapperFactories(std::index_sequence<I...>) {
  return {&WrapperFunction<I>...};
}

template <size_t... I>
std::array<const char*, sizeof...(I)> MakeUnboxedSymbols(std::index_sequence<I...>) {
  return {CudaKernel<OpType<I>>::kSymbol...};
}
const std::array<const char*, kOpCount>& UnboxedSymbols() {
  static const auto symbols = MakeUnboxedSymbols(std::make_index_sequence<kOpCount>{});
  return symbols;
}

void Adapter::FlushUsesAtExit() {
  if (g_adapter == nullptr || g_adapter->activity_ == nullptr) return;
  // The misses since each key's last report (reports go out at most once a second a key: a program shorter
  // than that told kjitd of one call a key, and its queue ranked keys by their first calls alone).
  bool sent = false;
  try {
    const int64_t now = SteadyNs(std::chrono::steady_clock::now());
    g_adapter->table.ForEachEntry([&](Entry& e) {
      if (e.state() != EntryState::kNegative) return;
      const Entry::MissReport report = e.TakeMissReport(now);
      if (report.calls == 0) return;
      g_adapter->ReportMiss(e, report);
      sent = true;
    });
  } catch (...) {
    // Hints lost (out of memory): the program ends as it would.
  }
  if (g_adapter->activity_->FlushUses() || sent) (void)g_adapter->Client().Flush(std::chrono::milliseconds(200));
}

// Prints the stage profile: on stderr, or appended to KJIT_PROFILE's file.
void PrintProfileAtExit() {
  if (g_adapter == nullptr) return;
  const std::string table = g_adapter->profile.Table();
  const std::string& path = g_adapter->settings.profile_path;
  FILE* f = path.empty() ? stderr : std::fopen(path.c_str(), "a");
  if (f == nullptr) f = stderr;
  std::fputs(table.c_str(), f);
  if (f != stderr) std::fclose(f);
}

void StartProfile(Adapter& a) {
  // The cost of one clock read, the floor of every figure.
  constexpr int kReads = 2000;
  const int64_t begin = NowNs();
  int64_t last = begin;
  for (int i = 0; i < kReads; ++i) last = NowNs();
  a.profile.clock_ns = static_cast<double>(last - begin) / kReads;
  std::atexit(PrintProfileAtExit);
}

const std::array<::torch::CppFunction (*)(bool), kOpCount>& WrapperFactories() {
  static const auto factories = MakeWrapperFactories(std::make_index_sequence<kOpCount>{});
  return factories;
}

// Swallows the dispatcher's "Overriding a previously registered kernel" warning when the
// overrides are registered again (the first registration's warning is PyTorch's to print).
class SilentWarnings final : public c10::WarningHandler {
 public:
  void process(const c10::Warning&) override {}
};

// Registers op I's override in `library` (name.overload: that overload only): unboxed where
// PyTorch's unboxed kernel was found. If the dispatcher refuses the unboxed wrapper (its inferred
// schema does not match the op's in this PyTorch), the op keeps the boxed one.
void RegisterOverride(Adapter& a, ::torch::Library& library, size_t i) {
  const std::string name(kInterceptedOps[i]);
  if (a.ops[i].unboxed != nullptr) {
    try {
      library.impl(name.c_str(), WrapperFactories()[i](true));
      return;
    } catch (const std::exception& e) {
      a.Log("aten::", name, ": the unboxed wrapper was refused (", e.what(), "); the boxed one is used");
      a.ops[i].unboxed = nullptr;
    }
  }
  library.impl(name.c_str(), WrapperFactories()[i](false));
}

void Attach() noexcept {
  try {
    Settings settings = ReadSettings([](const char* name) { return std::getenv(name); });
    if (settings.disabled) return;
    // Built against another PyTorch, the adapter's keys, output layouts and records would be another
    // version's: it stays off, and says so whether or not KJIT_LOG is set.
    Dl_info where{};
    // at::globalContext is defined in libtorch_cpu.so (not inline, unlike Dispatcher::singleton): its address
    // names the library this process loaded.
    if (dladdr(reinterpret_cast<const void*>(&at::globalContext), &where) != 0 && where.dli_fname != nullptr) {
      const std::string library = where.dli_fname;
      const std::string dir = library.substr(0, library.rfind('/') == std::string::npos ? 0 : library.rfind('/'));
      const std::string mismatch = TorchVersionMismatch(TORCH_VERSION, LoadedTorchVersion(dir.empty() ? "." : dir));
      if (!mismatch.empty()) {
        std::fprintf(stderr, "%s\n", mismatch.c_str());
        return;
      }
    }
    auto* a = new Adapter();  // never destroyed: see the file comment
    a->settings = std::move(settings);
    for (const std::string& op : a->settings.unknown_ops) a->Log("KJIT_OPS: ", op, " is not an op kjit intercepts");
    if (!a->settings.unknown_fusion.empty()) {
      a->Log("KJIT_FUSION=", a->settings.unknown_fusion, " is not a setting (record, serve, 1, 0 or off): chains are not recorded");
    }
    if (a->settings.fusion_record) a->Log("KJIT_FUSION=record: the fusible ops' calls are sampled into chains");
    a->cuda_guard = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
    const TorchCudaSymbols torch_cuda;
    a->empty_strided_cuda = FindEmptyStridedCuda(torch_cuda);
    if (a->empty_strided_cuda == nullptr) a->Log("at::detail::empty_strided_cuda not found: hits allocate through at::empty_strided");
    if (a->settings.profile) StartProfile(*a);
    a->passthrough.store(a->settings.passthrough, std::memory_order_relaxed);
    a->diagnostics.store(a->settings.profile || a->settings.passthrough, std::memory_order_relaxed);
    if (a->settings.passthrough) a->Log("KJIT_PASSTHROUGH: the intercepted ops only forward to PyTorch's kernels");
    g_adapter = a;
    std::lock_guard<std::mutex> lock(a->registration_mutex);
    a->library = std::make_unique<::torch::Library>(::torch::Library::IMPL, "aten", c10::DispatchKey::CUDA, __FILE__,
                                                    __LINE__);
    for (size_t i = 0; i < kOpCount; ++i) {
      const std::string name(kInterceptedOps[i]);  // "name" or "name.overload"
      if (std::find(a->settings.ops.begin(), a->settings.ops.end(), name) == a->settings.ops.end()) continue;
      const OpName parts = SplitOpName(kInterceptedOps[i]);
      auto handle = c10::Dispatcher::singleton().findSchema(
          c10::OperatorName("aten::" + std::string(parts.name), std::string(parts.overload)));
      if (!handle.has_value() || !handle->hasKernelForDispatchKey(c10::DispatchKey::CUDA)) {
        a->Log("aten::", name, " has no CUDA kernel in this PyTorch: not intercepted");
        continue;
      }
      a->ops[i].key_plan.emplace(handle->schema());
      a->ops[i].pytorch.emplace(handle->getComputedKernelForDispatchKey(c10::DispatchKey::CUDA));
      a->ops[i].handle.emplace(*handle);
      a->ops[i].unboxed = torch_cuda.Find(UnboxedSymbols()[i]);  // PyTorch's unboxed kernel (unboxed_kernels.h)
      const bool joins = JoinsChains(kInterceptedOps[i]);
      if (a->settings.fusion_serve && (PreFilterFor(kInterceptedOps[i]) == PreFilter::kChainMember || joins)) {
        // mul.Tensor -> mul.out, pow.Tensor_Scalar -> pow.Tensor_Scalar_out, tanh -> tanh.out; an op that joins
        // chains names its own (mean.dim -> mean.out).
        std::string out =
            parts.overload.empty() || parts.overload == "Tensor" ? "out" : std::string(parts.overload) + "_out";
        for (const ChainJoiner& j : kChainJoiners) {
          if (joins && j.name == kInterceptedOps[i]) out = std::string(j.out_overload);
        }
        auto out_handle =
            c10::Dispatcher::singleton().findSchema(c10::OperatorName("aten::" + std::string(parts.name), out));
        if (out_handle.has_value()) {
          a->ops[i].out_variant.emplace(*out_handle);
        } else {
          a->Log("aten::", std::string(parts.name), ".", out, " not found: calls of aten::", name, " are not deferred");
        }
      }
      RegisterOverride(*a, *a->library, i);
      a->Log("intercepting aten::", name, a->ops[i].unboxed != nullptr ? " (unboxed)" : " (boxed: PyTorch's unboxed kernel not found)");
    }
    if (a->settings.fusion_serve) {
      try {
        a->chain_fallback =
            std::make_unique<::torch::Library>(::torch::Library::IMPL, "_", kChainModeKey, __FILE__, __LINE__);
        a->chain_fallback->fallback(::torch::CppFunction::makeFromBoxedFunction<&ChainCatchAll>());
        a->Log("KJIT_FUSION=serve: chains with a verified kernel are served (experimental)");
      } catch (const std::exception& e) {
        a->chain_fallback.reset();
        a->settings.fusion_serve = false;
        a->Log("KJIT_FUSION=serve: the catch-all could not be registered (", e.what(),
               "): chains are recorded, not served");
      }
    }
  } catch (const std::exception& e) {
    // A partial registration is still consistent: each overridden op has its captured kernel.
    if (const char* log = std::getenv("KJIT_LOG"); log != nullptr && *log != '\0' && std::string(log) != "0") {
      std::fprintf(stderr, "kjit: the PyTorch adapter could not attach: %s\n", e.what());
    }
  }
}

}  // namespace

// For tests: the adapter's view of the process.
AdapterStats CurrentAdapterStats() {
  AdapterStats s;
  if (g_adapter == nullptr) return s;
  s.attached = true;
  for (size_t i = 0; i < kOpCount; ++i) {
    if (g_adapter->ops[i].pytorch.has_value()) s.intercepted_ops.emplace_back(kInterceptedOps[i]);
    if (g_adapter->ops[i].unboxed != nullptr) s.unboxed_ops.emplace_back(kInterceptedOps[i]);
  }
  s.entries = g_adapter->table.size();
  s.hits = g_adapter->hits.load();
  s.first_sights = g_adapter->first_sights.load();
  s.misses = g_adapter->table.misses();
  s.failures = g_adapter->failures.load();
  s.chain_records = g_adapter->chain_records.load();
  s.chains_reported = g_adapter->chains_reported.load();
  s.chains_fused = g_adapter->chains_fused.load();
  s.chains_replayed = g_adapter->chains_replayed.load();
  return s;
}

}  // namespace kjit::shim

extern "C" __attribute__((visibility("default"))) const void* kjit_adapter_stats();
extern "C" const void* kjit_adapter_stats() {
  static thread_local kjit::shim::AdapterStats stats;
  stats = kjit::shim::CurrentAdapterStats();
  return &stats;
}

// For programs in other languages (Python's ctypes, in tests and benchmarks/shim_overhead.py):
// the adapter's counters as plain integers. Writes min(n, 11) of: attached (0/1), hits,
// first sights, misses, failures, intercepted ops, of those unboxed, fusible calls recorded into
// chains, chains reported (KJIT_FUSION=record), chains run fused, deferred chains run call by
// call (KJIT_FUSION=serve); returns how many it wrote.
extern "C" __attribute__((visibility("default"))) int kjit_adapter_counters(uint64_t* out, int n);
extern "C" int kjit_adapter_counters(uint64_t* out, int n) {
  const kjit::shim::AdapterStats s = kjit::shim::CurrentAdapterStats();
  const uint64_t values[] = {s.attached ? 1u : 0u, s.hits,     s.first_sights,         s.misses,
                             s.failures,          s.intercepted_ops.size(), s.unboxed_ops.size(),
                             s.chain_records,     s.chains_reported,       s.chains_fused,
                             s.chains_replayed};
  int written = 0;
  for (; written < n && written < static_cast<int>(std::size(values)); ++written) out[written] = values[written];
  return written;
}

// The stage profile (KJIT_PROFILE) as JSON (StageProfile::Json) into out[0..size), NUL-terminated.
// Returns the JSON's length (without the NUL; more than size - 1: truncated), or -1 if the
// adapter is not attached or not profiling.
extern "C" __attribute__((visibility("default"))) int kjit_adapter_profile_json(char* out, int size);
extern "C" int kjit_adapter_profile_json(char* out, int size) {
  if (kjit::shim::g_adapter == nullptr || !kjit::shim::g_adapter->settings.profile) return -1;
  try {
    const std::string json = kjit::shim::g_adapter->profile.Json();
    if (size > 0) {
      const size_t n = std::min(json.size(), static_cast<size_t>(size - 1));
      std::memcpy(out, json.data(), n);
      out[n] = '\0';
    }
    return static_cast<int>(json.size());
  } catch (...) {
    return -1;
  }
}

// An in-process A/B switch for benchmarks/shim_overhead.py (--ab): on != 0, the intercepted ops'
// wrappers only forward to PyTorch's kernels from now on, as under KJIT_PASSTHROUGH=1; 0, they
// key, look up and serve calls again. Returns the previous setting (0/1), or -1 if the adapter
// is not attached. Calls on other threads see the change within a few calls (relaxed stores).
extern "C" __attribute__((visibility("default"))) int kjit_adapter_set_passthrough(int on);
extern "C" int kjit_adapter_set_passthrough(int on) {
  kjit::shim::Adapter* a = kjit::shim::g_adapter;
  if (a == nullptr) return -1;
  const bool was = a->passthrough.exchange(on != 0, std::memory_order_relaxed);
  a->diagnostics.store(a->settings.profile || on != 0, std::memory_order_relaxed);
  return was ? 1 : 0;
}

// An in-process A/B switch for benchmarks/shim_overhead.py (--ab): on == 0 deregisters the
// overrides, so that the dispatcher calls PyTorch's kernels itself, exactly as in a process
// without kjit (no boxing, no wrapper); on != 0 registers them again (the ops captured at
// attach, with the kernels captured then). Returns the previous setting (0/1), or -1 if the
// adapter is not attached or the registration failed (then the overrides are off). Not for
// programs: PyTorch does not support changing registrations while another thread dispatches
// one of these ops, so call it only between calls, from the one thread that makes them.
extern "C" __attribute__((visibility("default"))) int kjit_adapter_set_registered(int on);
extern "C" int kjit_adapter_set_registered(int on) {
  kjit::shim::Adapter* a = kjit::shim::g_adapter;
  if (a == nullptr) return -1;
  try {
    std::lock_guard<std::mutex> lock(a->registration_mutex);
    const bool was = a->library != nullptr;
    if (on == 0) {
      a->library.reset();
      return was ? 1 : 0;
    }
    if (was) return 1;
    kjit::shim::SilentWarnings silent;
    c10::WarningUtils::WarningHandlerGuard guard(&silent);
    auto library = std::make_unique<::torch::Library>(::torch::Library::IMPL, "aten", c10::DispatchKey::CUDA,
                                                      __FILE__, __LINE__);
    for (size_t i = 0; i < kjit::shim::kOpCount; ++i) {
      if (a->ops[i].pytorch.has_value()) kjit::shim::RegisterOverride(*a, *library, i);
    }
    a->library = std::move(library);
    return 0;
  } catch (const std::exception& e) {
    a->Log("kjit_adapter_set_registered(", on != 0 ? "1" : "0", ") failed: ", e.what());
    return -1;
  }
}

__attribute__((constructor)) static void KjitAdapterInit() { kjit::shim::Attach(); }
