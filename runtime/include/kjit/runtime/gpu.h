// RAII handles for the CUDA objects kjit uses, and a checked kernel launch.
//
// Every handle here is move-only and releases what it owns in its destructor.
// Constructors that can fail are static factories returning Result<>. Handles
// hold the CUcontext they were made in and make it current around the driver
// calls that need one, except Launch, which runs on the caller's thread as it
// is (PyTorch's threads have the primary context current) and refuses to run if
// no context is current.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "kjit/runtime/device.h"
#include "kjit/runtime/driver.h"
#include "kjit/runtime/status.h"

namespace kjit {

// The device's primary context: the one PyTorch and the CUDA runtime use, so
// kernels kjit loads can run on PyTorch's streams and read its tensors.
class PrimaryContext {
 public:
  // Retains the primary context of device `ordinal`, through the process-wide driver.
  static Result<PrimaryContext> Retain(int ordinal);
  static Result<PrimaryContext> Retain(const Driver& driver, int ordinal);

  PrimaryContext(PrimaryContext&& other) noexcept;
  PrimaryContext& operator=(PrimaryContext&& other) noexcept;
  ~PrimaryContext();

  const Driver& driver() const { return *driver_; }
  CUcontext get() const { return context_; }
  CUdevice device() const { return device_; }
  const DeviceInfo& info() const { return info_; }

 private:
  PrimaryContext() = default;
  void Reset();
  const Driver* driver_ = nullptr;
  CUcontext context_ = nullptr;
  CUdevice device_ = 0;
  DeviceInfo info_;
};

// Makes a context current on this thread for its scope, then restores the previous one.
class ContextGuard {
 public:
  static Result<ContextGuard> Push(const Driver& driver, CUcontext context);
  static Result<ContextGuard> Push(const PrimaryContext& context) { return Push(context.driver(), context.get()); }
  ContextGuard(ContextGuard&& other) noexcept;
  ContextGuard& operator=(ContextGuard&&) = delete;
  ~ContextGuard();

 private:
  ContextGuard() = default;
  const Driver* driver_ = nullptr;
  bool pushed_ = false;
};

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
  uint64_t count() const { return uint64_t{x} * y * z; }
};

struct LaunchConfig {
  Dim3 grid;
  Dim3 block;
  unsigned dynamic_shared_bytes = 0;
};

// The limits a launch is checked against: the device's, narrowed by what the
// compiled function can do (registers limit its threads per block).
struct LaunchLimits {
  int max_threads_per_block = 0;
  int max_block_dim[3] = {0, 0, 0};
  int max_grid_dim[3] = {0, 0, 0};
  int static_shared_bytes = 0;
  int max_shared_bytes_optin = 0;  // static + dynamic may not exceed this
  int default_dynamic_shared_limit = 0;  // dynamic bytes allowed without opt-in
  int registers_per_thread = 0;
  int local_bytes_per_thread = 0;  // spills and stack: worth a look if non-zero
  // Blocks in the cluster the kernel was compiled for (__cluster_dims__); 0 without one. Above the
  // portable 8 (sm_90: 16), GetFunction has opted the function in to a non-portable cluster size.
  int cluster_blocks = 0;
};

// Returns OK if `config` fits `limits`, else kLaunchConfig saying which limit and by how much.
Status CheckLaunchConfig(const LaunchConfig& config, const LaunchLimits& limits);

// A kernel in a loaded Module. Valid while its Module lives.
class Function {
 public:
  Function(const Function& other);
  Function& operator=(const Function&) = delete;

  CUfunction get() const { return function_; }
  const std::string& name() const { return name_; }
  const LaunchLimits& limits() const { return limits_; }

  // Checks `config` against the limits, raises the function's dynamic shared
  // memory limit when the launch needs more than the default, and enqueues the
  // kernel on `stream`. `args` is cuLaunchKernel's kernelParams array. Errors
  // from the launch itself are returned; faults inside the kernel surface at the
  // next synchronisation, as with any CUDA launch.
  Status Launch(const LaunchConfig& config, CUstream stream, void** args) const;

  // How many of the kernel's clusters (its compile-time __cluster_dims__) fit on the device at once with
  // `config`'s block and shared memory: 0 where a cluster cannot be placed at all (a non-portable size on
  // a GPU whose GPCs are too small, too much shared memory for the cluster's SMs). Errors for a kernel
  // without a cluster.
  Result<int> MaxActiveClusters(const LaunchConfig& config) const;

  // Same, with the kernel's arguments given by value: Launch(cfg, s, ptr, n).
  template <typename... Args>
  Status LaunchWith(const LaunchConfig& config, CUstream stream, Args... args) const {
    void* params[] = {static_cast<void*>(&args)..., nullptr};
    return Launch(config, stream, params);
  }

 private:
  friend class Module;
  Function() = default;
  // Raises the function's dynamic shared memory limit to `bytes` where the default is lower.
  Status AllowDynamicShared(unsigned bytes) const;
  const Driver* driver_ = nullptr;
  CUfunction function_ = nullptr;
  std::string name_;
  LaunchLimits limits_;
  mutable std::atomic<int> dynamic_shared_configured_{0};
};

// A loaded CUBIN (or PTX) image.
class Module {
 public:
  // Loads `image` into `context`. A CUBIN for the wrong arch fails here with the
  // driver's reason; the JIT log, if any, is appended to the message.
  static Result<Module> Load(const PrimaryContext& context, std::string_view image);
  Module(Module&& other) noexcept;
  Module& operator=(Module&& other) noexcept;
  ~Module();

  // Looks up a __global__ function by its symbol (extern "C" name, or the lowered
  // name NVRTC reported for a name expression).
  Result<Function> GetFunction(const std::string& name) const;
  CUmodule get() const { return module_; }

 private:
  Module() = default;
  void Reset();
  const Driver* driver_ = nullptr;
  CUcontext context_ = nullptr;
  CUmodule module_ = nullptr;
  DeviceInfo info_;
};

class Stream {
 public:
  static Result<Stream> Create(const PrimaryContext& context);  // non-blocking w.r.t. the legacy stream
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&&) = delete;
  ~Stream();
  CUstream get() const { return stream_; }
  Status Synchronize() const;

 private:
  Stream() = default;
  const Driver* driver_ = nullptr;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
};

class Event {
 public:
  static Result<Event> Create(const PrimaryContext& context);
  Event(Event&& other) noexcept;
  Event& operator=(Event&&) = delete;
  ~Event();
  CUevent get() const { return event_; }
  Status Record(CUstream stream) const;
  Status Synchronize() const;
  // Milliseconds between two recorded, completed events.
  static Result<float> ElapsedMs(const Event& start, const Event& end);

 private:
  Event() = default;
  const Driver* driver_ = nullptr;
  CUcontext context_ = nullptr;
  CUevent event_ = nullptr;
};

// Device memory from cuMemAlloc.
class DeviceBuffer {
 public:
  static Result<DeviceBuffer> Allocate(const PrimaryContext& context, size_t bytes);
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;
  ~DeviceBuffer();

  CUdeviceptr get() const { return ptr_; }
  size_t size() const { return bytes_; }
  // Each of these has finished on the GPU when it returns, so a kernel launched next on any stream sees its
  // bytes. CopyToHost waits for the legacy stream only: synchronize a non-blocking stream writing the buffer first.
  Status CopyFromHost(const void* src, size_t bytes) const;
  Status CopyToHost(void* dst, size_t bytes) const;
  // Fills every 32-bit word with `pattern` (e.g. a NaN bit pattern, to poison outputs).
  Status Fill32(uint32_t pattern) const;

 private:
  DeviceBuffer() = default;
  const Driver* driver_ = nullptr;
  CUcontext context_ = nullptr;
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

}  // namespace kjit
