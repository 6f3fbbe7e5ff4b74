#include "kjit/runtime/nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "kjit/runtime/nvml_abi.h"

// Where the toolkit has nvml.h, prove that the hand-written ABI matches it.
#if __has_include(<nvml.h>)
#define NVML_NO_UNVERSIONED_FUNC_DEFS  // keep nvml.h's renaming macros off our identifiers
#include <nvml.h>

#include <cstddef>
namespace kjit::nvml_abi {
#define KJIT_NVML_SAME_FIELD_(ours, theirs, field)                                                                \
  static_assert(offsetof(ours, field) == offsetof(theirs, field) && sizeof(ours::field) == sizeof(theirs::field), \
                "nvml_abi.h: " #ours "::" #field " does not match nvml.h")
static_assert(sizeof(Return) == sizeof(nvmlReturn_t));
static_assert(kErrorNotFound == NVML_ERROR_NOT_FOUND && kErrorInsufficientSize == NVML_ERROR_INSUFFICIENT_SIZE &&
              kErrorNotSupported == NVML_ERROR_NOT_SUPPORTED && kErrorGpuIsLost == NVML_ERROR_GPU_IS_LOST &&
              kErrorDriverNotLoaded == NVML_ERROR_DRIVER_NOT_LOADED && kErrorNoPermission == NVML_ERROR_NO_PERMISSION &&
              kErrorLibRmVersionMismatch == NVML_ERROR_LIB_RM_VERSION_MISMATCH &&
              kErrorGpuNotFound == NVML_ERROR_GPU_NOT_FOUND && kErrorUnknown == NVML_ERROR_UNKNOWN);
static_assert(kUuidBufferSize == NVML_DEVICE_UUID_V2_BUFFER_SIZE);
static_assert(sizeof(Utilization) == sizeof(nvmlUtilization_t));
KJIT_NVML_SAME_FIELD_(Utilization, nvmlUtilization_t, gpu);
static_assert(sizeof(Memory) == sizeof(nvmlMemory_t));
KJIT_NVML_SAME_FIELD_(Memory, nvmlMemory_t, total);
KJIT_NVML_SAME_FIELD_(Memory, nvmlMemory_t, free);
static_assert(sizeof(ProcessUtilizationSample) == sizeof(nvmlProcessUtilizationSample_t));
KJIT_NVML_SAME_FIELD_(ProcessUtilizationSample, nvmlProcessUtilizationSample_t, pid);
KJIT_NVML_SAME_FIELD_(ProcessUtilizationSample, nvmlProcessUtilizationSample_t, timeStamp);
KJIT_NVML_SAME_FIELD_(ProcessUtilizationSample, nvmlProcessUtilizationSample_t, smUtil);
static_assert(sizeof(ProcessInfo) == sizeof(nvmlProcessInfo_t));
KJIT_NVML_SAME_FIELD_(ProcessInfo, nvmlProcessInfo_t, pid);
KJIT_NVML_SAME_FIELD_(ProcessInfo, nvmlProcessInfo_t, usedGpuMemory);
#undef KJIT_NVML_SAME_FIELD_
}  // namespace kjit::nvml_abi
#endif

namespace kjit {
namespace {

using nvml_abi::Return;

std::string Describe(const nvml_abi::Api& api, Return r) {
  const char* text = api.nvmlErrorString != nullptr ? api.nvmlErrorString(r) : nullptr;
  std::string out = text != nullptr ? text : "unknown error";
  out += " (nvmlReturn ";
  out += std::to_string(r);
  out += ")";
  return out;
}

// The code for a failed query on a device we already hold. Most failures
// here are the GPU or driver being momentarily unable to answer.
StatusCode QueryCode(Return r) {
  switch (r) {
    case nvml_abi::kErrorGpuIsLost:
    case nvml_abi::kErrorGpuNotFound: return StatusCode::kNoDevice;
    case nvml_abi::kErrorDriverNotLoaded:
    case nvml_abi::kErrorLibRmVersionMismatch:
    case nvml_abi::kErrorLibraryNotFound: return StatusCode::kNoDriver;
    case nvml_abi::kErrorFunctionNotFound: return StatusCode::kDriverTooOld;
    case nvml_abi::kErrorUninitialized:
    case nvml_abi::kErrorInvalidArgument: return StatusCode::kInternal;  // a held handle and valid pointers: kjit's bug
    default: return StatusCode::kUnavailable;
  }
}

// The code for a failed device lookup: the name does not denote a GPU we may use.
StatusCode LookupCode(Return r) {
  switch (r) {
    case nvml_abi::kErrorInvalidArgument:
    case nvml_abi::kErrorNotFound:
    case nvml_abi::kErrorNoPermission: return StatusCode::kNoDevice;
    default: return QueryCode(r);
  }
}

// Runs an NVML "fill this array" query: first asks for the size, then fills,
// retrying while processes appear between the two calls. `call(buffer, &count)`
// receives a null buffer and count 0 on the first round.
template <typename T, typename Call>
Return QueryArray(const Call& call, std::vector<T>* out) {
  std::vector<T> buffer;
  for (int attempt = 0; attempt < 4; ++attempt) {
    unsigned int count = static_cast<unsigned int>(buffer.size());
    const Return r = call(buffer.empty() ? nullptr : buffer.data(), &count);
    if (r == nvml_abi::kSuccess && (!buffer.empty() || count == 0)) {
      buffer.resize(std::min<size_t>(count, buffer.size()));
      *out = std::move(buffer);
      return r;
    }
    // Success with a null buffer and a count is a size answer too.
    if (r != nvml_abi::kSuccess && r != nvml_abi::kErrorInsufficientSize) return r;
    // Headroom, because processes come and go between the calls.
    buffer.resize(std::max<size_t>(count, buffer.size()) + 8);
  }
  return nvml_abi::kErrorInsufficientSize;
}

bool IsDecimalIndex(const std::string& s) {
  return !s.empty() && s.size() <= 9 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

Nvml::Nvml() : api_(std::make_unique<nvml_abi::Api>()) {}

Nvml::~Nvml() {
  // nvmlInit/nvmlShutdown are reference-counted by NVML, so this only ends
  // NVML for the process when it was the last handle. The library itself is
  // never dlclose'd, as with libcuda (driver.cc): driver libraries keep
  // process-wide state that does not expect to be unloaded.
  if (initialized_) api_->nvmlShutdown();
}

Result<std::shared_ptr<Nvml>> Nvml::Load() {
  const char* env = std::getenv("KJIT_NVML_LIBRARY");
  return Load((env != nullptr && *env != '\0') ? env : "libnvidia-ml.so.1");
}

Result<std::shared_ptr<Nvml>> Nvml::Load(const std::string& library) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    return Status(StatusCode::kNoDriver,
                  "cannot load NVML (" + library + "): " + (err ? err : "unknown dlopen error") +
                      ". NVML comes with the NVIDIA driver; without it kjit cannot tell whether a GPU is idle.");
  }
  return LoadWith([handle](const char* symbol) { return dlsym(handle, symbol); }, library);
}

Result<std::shared_ptr<Nvml>> Nvml::LoadWith(const SymbolResolver& resolve, const std::string& library) {
  std::shared_ptr<Nvml> n(new Nvml());
  n->library_ = library;

#define KJIT_NVML_RESOLVE_(ret, name, params)                                                          \
  {                                                                                                    \
    void* sym = resolve(#name);                                                                        \
    if (sym == nullptr) {                                                                              \
      return Status(StatusCode::kDriverTooOld,                                                         \
                    "NVML in " + library + " has no entry point " #name "; update the NVIDIA driver"); \
    }                                                                                                  \
    n->api_->name = reinterpret_cast<decltype(n->api_->name)>(sym);                                    \
  }
  KJIT_NVML_FUNCTIONS(KJIT_NVML_RESOLVE_)
#undef KJIT_NVML_RESOLVE_

  const Return r = n->api_->nvmlInit_v2();
  if (r != nvml_abi::kSuccess) {
    StatusCode code = StatusCode::kNoDriver;
    std::string hint = "check that the NVIDIA kernel module is loaded (nvidia-smi)";
    if (r == nvml_abi::kErrorNoPermission) {
      code = StatusCode::kNoDevice;
      hint = "this user may not open the GPU device files (/dev/nvidia*)";
    } else if (r == nvml_abi::kErrorLibRmVersionMismatch) {
      hint = "the driver library and kernel module differ in version (upgraded without a reboot?)";
    } else if (r == nvml_abi::kErrorTimeout || r == nvml_abi::kErrorInUse) {
      code = StatusCode::kUnavailable;
      hint = "try again";
    }
    return Status(code, "nvmlInit (" + library + ") failed: " + Describe(*n->api_, r) + "; " + hint);
  }
  n->initialized_ = true;

  const Return c = n->api_->nvmlDeviceGetCount_v2(&n->device_count_);
  if (c != nvml_abi::kSuccess) {
    return Status(QueryCode(c), "nvmlDeviceGetCount failed: " + Describe(*n->api_, c));
  }
  if (n->device_count_ == 0) {
    return Status(StatusCode::kNoDevice, "NVML (" + library + ") loaded but sees no GPU");
  }
  return n;
}

Result<GpuSample> Nvml::Sample(const std::string& device, const SampleOptions& options) const {
  const nvml_abi::Api& api = *api_;
  if (device.empty()) return InvalidArgument("no GPU named: pass an NVML index (\"0\") or a UUID (\"GPU-...\")");

  nvml_abi::Device handle = nullptr;
  Return r;
  if (IsDecimalIndex(device)) {
    r = api.nvmlDeviceGetHandleByIndex_v2(static_cast<unsigned int>(std::strtoul(device.c_str(), nullptr, 10)),
                                          &handle);
  } else {
    r = api.nvmlDeviceGetHandleByUUID(device.c_str(), &handle);
  }
  if (r != nvml_abi::kSuccess) {
    std::string m = "no GPU " + device + " in NVML: " + Describe(api, r) + " (NVML sees " +
                    std::to_string(device_count_) + " GPU(s)";
    if (IsDecimalIndex(device)) m += "; NVML indices follow PCI order and ignore CUDA_VISIBLE_DEVICES";
    m += ")";
    return Status(LookupCode(r), std::move(m));
  }
  auto fail = [&](Return code, const char* what) {
    return Status(QueryCode(code), std::string(what) + "(" + device + ") failed: " + Describe(api, code));
  };

  GpuSample s;
  char uuid[nvml_abi::kUuidBufferSize] = {};
  r = api.nvmlDeviceGetUUID(handle, uuid, sizeof(uuid));
  if (r != nvml_abi::kSuccess) return fail(r, "nvmlDeviceGetUUID");
  uuid[sizeof(uuid) - 1] = '\0';
  s.uuid = uuid;

  nvml_abi::Memory memory{};
  r = api.nvmlDeviceGetMemoryInfo(handle, &memory);
  if (r != nvml_abi::kSuccess) return fail(r, "nvmlDeviceGetMemoryInfo");
  s.memory_total_bytes = memory.total;
  s.memory_free_bytes = std::min(memory.free, memory.total);

  // Utilization is optional: MIG instances and some vGPUs have none, and the
  // idle gate knows what to do with "unknown".
  nvml_abi::Utilization utilization{};
  r = api.nvmlDeviceGetUtilizationRates(handle, &utilization);
  if (r == nvml_abi::kSuccess) {
    s.utilization_percent = std::min(utilization.gpu, 100u);
  } else if (r != nvml_abi::kErrorNotSupported && r != nvml_abi::kErrorNoPermission) {
    return fail(r, "nvmlDeviceGetUtilizationRates");
  }

  std::vector<nvml_abi::ProcessInfo> processes;
  r = QueryArray<nvml_abi::ProcessInfo>(
      [&](nvml_abi::ProcessInfo* buf, unsigned int* count) {
        return api.nvmlDeviceGetComputeRunningProcesses_v3(handle, count, buf);
      },
      &processes);
  if (r == nvml_abi::kSuccess) {
    for (const auto& p : processes) s.compute_pids.push_back(p.pid);
    std::sort(s.compute_pids.begin(), s.compute_pids.end());
    s.compute_pids.erase(std::unique(s.compute_pids.begin(), s.compute_pids.end()), s.compute_pids.end());
  } else if (r != nvml_abi::kErrorNotSupported && r != nvml_abi::kErrorNoPermission) {
    return fail(r, "nvmlDeviceGetComputeRunningProcesses");
  }

  // Others' utilization: any failure means "unknown", not a failed sample, so
  // that a GPU without per-process accounting can still be gated on the
  // device-wide figure.
  const auto now_us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  const long long window_us = std::chrono::duration_cast<std::chrono::microseconds>(options.window).count();
  const unsigned long long since = window_us > 0 && now_us > window_us ? now_us - window_us : 0;
  std::vector<nvml_abi::ProcessUtilizationSample> samples;
  r = QueryArray<nvml_abi::ProcessUtilizationSample>(
      [&](nvml_abi::ProcessUtilizationSample* buf, unsigned int* count) {
        return api.nvmlDeviceGetProcessUtilization(handle, buf, count, since);
      },
      &samples);
  if (r == nvml_abi::kErrorNotFound) {
    s.others_utilization_percent = 0;  // NVML's answer for "no process ran a kernel since `since`"
  } else if (r == nvml_abi::kSuccess) {
    // NVML documents one sample per process; should it give several, the
    // busiest stands for the process, which errs towards "busy".
    std::map<unsigned int, unsigned int> busiest;
    std::map<unsigned int, bool> excluded;  // per process, looked up once
    for (const auto& sample : samples) {
      if (sample.timeStamp < since) continue;
      auto [known, fresh] = excluded.try_emplace(sample.pid, false);
      if (fresh) {
        known->second = std::find(options.exclude_pids.begin(), options.exclude_pids.end(), sample.pid) !=
                            options.exclude_pids.end() ||
                        (options.exclude_descendants && DescendsFrom(sample.pid, options.exclude_pids));
      }
      if (known->second) continue;
      unsigned int& b = busiest[sample.pid];
      b = std::max(b, sample.smUtil);
    }
    double total = 0;
    for (const auto& [pid, util] : busiest) total += util;
    s.others_utilization_percent = std::min(total, 100.0);
  }
  return s;
}

bool DescendsFrom(uint32_t pid, const std::vector<uint32_t>& ancestors, int max_depth) {
  if (ancestors.empty()) return false;
  uint32_t at = pid;
  for (int depth = 0; depth < max_depth && at > 1; ++depth) {
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so the fields after its last ')'.
    const std::string path = "/proc/" + std::to_string(at) + "/stat";
    FILE* f = std::fopen(path.c_str(), "r");
    if (f == nullptr) return false;  // gone meanwhile
    char buffer[1024];
    const size_t n = std::fread(buffer, 1, sizeof(buffer) - 1, f);
    std::fclose(f);
    buffer[n] = '\0';
    const char* close = std::strrchr(buffer, ')');
    char state = 0;
    unsigned long ppid = 0;
    if (close == nullptr || std::sscanf(close + 1, " %c %lu", &state, &ppid) != 2) return false;
    at = static_cast<uint32_t>(ppid);
    if (std::find(ancestors.begin(), ancestors.end(), at) != ancestors.end()) return true;
  }
  return false;
}

std::string GpuUuidString(const CUuuid& uuid) {
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  char out[48];
  std::snprintf(out, sizeof(out), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return out;
}

}  // namespace kjit
