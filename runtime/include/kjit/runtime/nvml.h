// NVML, loaded at run time: how busy a GPU is, and who is using it.
//
// kjitd evaluates candidate kernels only on idle GPU time (idle.h decides), and
// needs to know whether someone else's kernels are running and how much memory
// is free. Like the CUDA driver (driver.h), libnvidia-ml is never linked: it is
// dlopen'd, so kjit starts on machines without an NVIDIA driver and reports why
// it cannot sample instead of failing to load.
//
// Failure is a typed Status, never a crash:
//   kNoDriver      libnvidia-ml.so.1 is missing, or nvmlInit says the driver is not loaded
//   kDriverTooOld  the library lacks an entry point kjit uses
//   kNoDevice      NVML works but sees no GPU, or none with the index/UUID asked for
//   kUnavailable   a query failed in a way that may pass (timeout, GPU busy, ...)
//
// Thread-safety: an Nvml is immutable after Load and NVML itself is thread-safe,
// so Sample may be called from any number of threads at once.
#pragma once

#include <cuda.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kjit/runtime/status.h"

namespace kjit {

namespace nvml_abi {
struct Api;
}

// One reading of one GPU.
struct GpuSample {
  std::string uuid;  // of the device sampled, "GPU-..." (or "MIG-..." for a MIG instance)

  // Device-wide percentage of NVML's last sample period (1/6 s to 1 s,
  // device-dependent) during which any kernel ran, kjit's own included.
  // Negative if NVML cannot say (MIG instances, some virtual GPUs).
  double utilization_percent = -1;

  // SM utilization summed over every process except SampleOptions::exclude_pids,
  // over the last SampleOptions::window, capped at 100. This is the figure that
  // says whether *someone else* is using the GPU: kjit's evaluator worker, which
  // the caller excludes, does not count. 0 when no other process ran a kernel in
  // the window; negative if NVML cannot say (no per-process accounting on this
  // device, or the query failed).
  //
  // PIDs are NVML's, i.e. the host's: inside a PID namespace (most containers)
  // the worker's getpid() differs and the exclusion cannot match, so kjit's own
  // work counts as someone else's and the GPU looks busy. That errs on the side
  // of not evaluating.
  double others_utilization_percent = -1;

  uint64_t memory_free_bytes = 0;
  uint64_t memory_total_bytes = 0;

  // Processes with a CUDA context on the device, as NVML reports them (host
  // PIDs; empty if NVML will not say, e.g. without permission).
  std::vector<uint32_t> compute_pids;
};

struct SampleOptions {
  // Processes whose utilization does not make the GPU busy: kjit's own workers.
  std::vector<uint32_t> exclude_pids;
  // And every process descended from one of them (what a worker starts: compute-sanitizer and its target),
  // by DescendsFrom: only the processes NVML reports are looked up.
  bool exclude_descendants = false;
  // How far back others_utilization_percent looks. NVML samples every 1/6 s
  // to 1 s, so much less than 1 s may see no sample at all; <= 0 means every
  // sample the driver still holds.
  std::chrono::milliseconds window{1000};
};

// Whether `pid` is a descendant of one of `ancestors` (its parent, or its parent's, up to `max_depth`
// generations), from /proc/<pid>/stat; false for a process that is gone or unreadable.
bool DescendsFrom(uint32_t pid, const std::vector<uint32_t>& ancestors, int max_depth = 8);

class Nvml {
 public:
  // Loads `$KJIT_NVML_LIBRARY` if set, else "libnvidia-ml.so.1", and initialises
  // NVML. Each call returns a new handle (NVML counts nvmlInit calls, so
  // handles are independent); keep one for the life of the component using it.
  static Result<std::shared_ptr<Nvml>> Load();
  static Result<std::shared_ptr<Nvml>> Load(const std::string& library);

  // Resolves the entry points through `resolve` (symbol name -> address, or
  // null if absent) instead of dlsym: for tests that supply a fake NVML.
  // `library` only names the source in messages.
  using SymbolResolver = std::function<void*(const char* symbol)>;
  static Result<std::shared_ptr<Nvml>> LoadWith(const SymbolResolver& resolve, const std::string& library);

  ~Nvml();  // nvmlShutdown
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  const std::string& library() const { return library_; }
  unsigned device_count() const { return device_count_; }

  // Samples the GPU named by `device`: a decimal NVML index ("0"), or a UUID
  // ("GPU-8f6c...", "MIG-..."). NVML indices follow PCI order and ignore
  // CUDA_VISIBLE_DEVICES, so they need not match CUDA's ordinals: callers
  // holding a CUdevice should pass GpuUuidString(cuDeviceGetUuid(...)).
  // kNoDevice if there is no such GPU, kInvalidArgument for an empty name.
  Result<GpuSample> Sample(const std::string& device, const SampleOptions& options = {}) const;

 private:
  Nvml();
  std::unique_ptr<nvml_abi::Api> api_;
  std::string library_;
  unsigned device_count_ = 0;
  bool initialized_ = false;  // nvmlInit succeeded: the destructor owes an nvmlShutdown
};

// The NVML spelling of a full GPU's UUID, "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx",
// from the bytes cuDeviceGetUuid returns.
std::string GpuUuidString(const CUuuid& uuid);

}  // namespace kjit
