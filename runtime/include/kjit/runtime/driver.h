// The CUDA driver API, loaded at run time.
//
// kjit never links libcuda: the shim is preloaded into processes that may run
// on machines with no GPU, and every CPU test must run on CI machines without a
// driver. The driver is opened with dlopen("libcuda.so.1") the first time a
// caller asks for it; each entry point is looked up by the exact versioned
// symbol that the cuda.h we compiled against names (cuMemAlloc -> cuMemAlloc_v2),
// so the ABI of every call matches the header's prototype.
//
// Failure to load is a typed Status, never a crash:
//   kNoDriver      libcuda.so.1 is missing, or is the toolkit's stub library
//   kDriverTooOld  the driver lacks an entry point or reports a version below 12.0
//   kNoDevice      cuInit succeeded or said so, but no GPU is visible
#pragma once

#include <cuda.h>

#include <memory>
#include <string>
#include <string_view>

#include "kjit/runtime/status.h"

namespace kjit {

// One pointer per driver entry point kjit uses. The types come from cuda.h, so a
// mismatch between a prototype and its symbol cannot compile.
struct DriverApi {
#define KJIT_DRIVER_FN(name) decltype(&::name) name = nullptr;
#include "kjit/runtime/driver_functions.inc"
#undef KJIT_DRIVER_FN
};

class Driver {
 public:
  // The process-wide driver, loaded and initialised on first call (thread-safe).
  // The library is `$KJIT_CUDA_DRIVER` if set, else "libcuda.so.1". The outcome,
  // success or failure, is remembered for the life of the process.
  static Result<const Driver*> Get();

  // Loads a driver from `library` without touching the process-wide one. For
  // tests and tools that probe a specific file.
  static Result<std::unique_ptr<Driver>> Load(const std::string& library);

  ~Driver();
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;

  const DriverApi& api() const { return api_; }
  const std::string& library() const { return library_; }
  int version() const { return version_; }  // cuDriverGetVersion, e.g. 13000
  int device_count() const { return device_count_; }

  // OK for CUDA_SUCCESS, else kCudaError with "what: NAME (description)".
  Status Check(CUresult result, std::string_view what) const;

 private:
  Driver() = default;
  void* handle_ = nullptr;
  std::string library_;
  DriverApi api_;
  int version_ = 0;
  int device_count_ = 0;
};

// "CUDA_ERROR_INVALID_VALUE (invalid argument)", using the driver if loaded.
std::string DescribeCuResult(const Driver* driver, CUresult result);

}  // namespace kjit
