// The subset of NVML's C ABI that kjit::Nvml calls, declared here.
//
// The CUDA toolkit does not always ship nvml.h (it is a separate component),
// and kjit never links libnvidia-ml, so the types and prototypes are written
// out from nvml.h (CUDA 12/13). They are ABI-stable: NVML versions a symbol
// (nvmlInit -> nvmlInit_v2) whenever a signature or struct changes, and each
// name below is the versioned symbol, so these layouts cannot drift under us.
// Where the real nvml.h is on the include path, nvml.cc checks every layout
// against it at compile time.
//
// Only nvml.cc and tests (which build fake NVMLs from it) include this.
#pragma once

namespace kjit::nvml_abi {

// nvmlReturn_t is a C enum with non-negative values: an int in the ABI.
using Return = int;
inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorUninitialized = 1;
inline constexpr Return kErrorInvalidArgument = 2;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorNoPermission = 4;
inline constexpr Return kErrorNotFound = 6;
inline constexpr Return kErrorInsufficientSize = 7;
inline constexpr Return kErrorDriverNotLoaded = 9;
inline constexpr Return kErrorTimeout = 10;
inline constexpr Return kErrorLibraryNotFound = 12;
inline constexpr Return kErrorFunctionNotFound = 13;
inline constexpr Return kErrorGpuIsLost = 15;
inline constexpr Return kErrorLibRmVersionMismatch = 18;
inline constexpr Return kErrorInUse = 19;
inline constexpr Return kErrorNoData = 21;
inline constexpr Return kErrorGpuNotFound = 28;
inline constexpr Return kErrorUnknown = 999;

// NVML_DEVICE_UUID_V2_BUFFER_SIZE: room for "GPU-..." or "MIG-..." and the NUL.
inline constexpr unsigned int kUuidBufferSize = 96;

struct DeviceSt;
using Device = DeviceSt*;  // nvmlDevice_t

struct Utilization {  // nvmlUtilization_t
  unsigned int gpu;     // % of the last sample period in which a kernel ran
  unsigned int memory;  // % of it in which device memory was read or written
};

struct Memory {  // nvmlMemory_t (v1)
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct ProcessUtilizationSample {  // nvmlProcessUtilizationSample_t
  unsigned int pid;
  unsigned long long timeStamp;  // CPU time, microseconds since the epoch
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
};

struct ProcessInfo {  // nvmlProcessInfo_t, as ..._v3 fills it
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

// X(return type, symbol, parameter list): every entry point kjit resolves.
#define KJIT_NVML_FUNCTIONS(X)                                                                          \
  X(::kjit::nvml_abi::Return, nvmlInit_v2, ())                                                          \
  X(::kjit::nvml_abi::Return, nvmlShutdown, ())                                                         \
  X(const char*, nvmlErrorString, (::kjit::nvml_abi::Return))                                           \
  X(::kjit::nvml_abi::Return, nvmlDeviceGetCount_v2, (unsigned int*))                                   \
  X(::kjit::nvml_abi::Return, nvmlDeviceGetHandleByIndex_v2, (unsigned int, ::kjit::nvml_abi::Device*)) \
  X(::kjit::nvml_abi::Return, nvmlDeviceGetHandleByUUID, (const char*, ::kjit::nvml_abi::Device*))      \
  X(::kjit::nvml_abi::Return, nvmlDeviceGetUUID, (::kjit::nvml_abi::Device, char*, unsigned int))       \
  X(::kjit::nvml_abi::Return, nvmlDeviceGetUtilizationRates,                                            \
    (::kjit::nvml_abi::Device, ::kjit::nvml_abi::Utilization*))                                         \
  X(::kjit::nvml_abi::Return, nvmlDeviceGetMemoryInfo, (::kjit::nvml_abi::Device, ::kjit::nvml_abi::Memory*)) \
  X(::kjit::nvml_abi::Return, nvmlDeviceGetProcessUtilization,                                          \
    (::kjit::nvml_abi::Device, ::kjit::nvml_abi::ProcessUtilizationSample*, unsigned int*,              \
     unsigned long long))                                                                               \
  X(::kjit::nvml_abi::Return, nvmlDeviceGetComputeRunningProcesses_v3,                                  \
    (::kjit::nvml_abi::Device, unsigned int*, ::kjit::nvml_abi::ProcessInfo*))

// One pointer per entry point, typed by the list above.
struct Api {
#define KJIT_NVML_API_MEMBER_(ret, name, params) ret(*name) params = nullptr;
  KJIT_NVML_FUNCTIONS(KJIT_NVML_API_MEMBER_)
#undef KJIT_NVML_API_MEMBER_
};

}  // namespace kjit::nvml_abi
