#include "kjit/runtime/driver.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

namespace kjit {
namespace {

#define KJIT_STRINGIZE_INNER_(x) #x
#define KJIT_STRINGIZE_(x) KJIT_STRINGIZE_INNER_(x)

// The driver API versions kjit's calls are written against. Older drivers lack
// some of the _v2 entry points resolved below.
constexpr int kMinDriverVersion = 12000;

std::string VersionText(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

}  // namespace

std::string DescribeCuResult(const Driver* driver, CUresult result) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (driver != nullptr) {
    driver->api().cuGetErrorName(result, &name);
    driver->api().cuGetErrorString(result, &text);
  }
  std::string out = name ? name : ("CUresult " + std::to_string(static_cast<int>(result)));
  if (text) {
    out += " (";
    out += text;
    out += ")";
  }
  return out;
}

Status Driver::Check(CUresult result, std::string_view what) const {
  if (result == CUDA_SUCCESS) return Status::Ok();
  std::string m(what);
  m += " failed: ";
  m += DescribeCuResult(this, result);
  return Status(StatusCode::kCudaError, std::move(m));
}

Driver::~Driver() {
  // The handle is deliberately never dlclose'd: CUDA registers atexit handlers
  // and TLS destructors inside libcuda, and unloading it under them crashes.
  handle_ = nullptr;
}

Result<std::unique_ptr<Driver>> Driver::Load(const std::string& library) {
  std::unique_ptr<Driver> d(new Driver());
  d->library_ = library;
  d->handle_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (d->handle_ == nullptr) {
    const char* err = dlerror();
    return Status(StatusCode::kNoDriver,
                  "cannot load the CUDA driver (" + library + "): " + (err ? err : "unknown dlopen error") +
                      ". kjit needs an NVIDIA driver to run kernels; without one it compiles but runs nothing, "
                      "and PyTorch's own kernels are used.");
  }

#define KJIT_DRIVER_FN(name)                                                                      \
  {                                                                                               \
    void* sym = dlsym(d->handle_, KJIT_STRINGIZE_(name));                                         \
    if (sym == nullptr) {                                                                         \
      return Status(StatusCode::kDriverTooOld, std::string("the CUDA driver in ") + library +     \
                                                   " has no entry point " KJIT_STRINGIZE_(name)   \
                                                   "; install an NVIDIA driver for CUDA 12.0 or newer"); \
    }                                                                                             \
    d->api_.name = reinterpret_cast<decltype(d->api_.name)>(sym);                                 \
  }
#include "kjit/runtime/driver_functions.inc"
#undef KJIT_DRIVER_FN

  CUresult r = d->api_.cuInit(0);
  if (r == CUDA_ERROR_STUB_LIBRARY) {
    return Status(StatusCode::kNoDriver,
                  library + " is the CUDA toolkit's stub library, not a driver; no GPU can be used here");
  }
  if (r == CUDA_ERROR_NO_DEVICE) {
    return Status(StatusCode::kNoDevice, "the CUDA driver loaded but sees no GPU (cuInit: " +
                                             DescribeCuResult(d.get(), r) +
                                             "); check CUDA_VISIBLE_DEVICES and nvidia-smi");
  }
  if (r != CUDA_SUCCESS) {
    return Status(StatusCode::kNoDevice, "cuInit failed: " + DescribeCuResult(d.get(), r) +
                                             "; check that the NVIDIA kernel module is loaded (nvidia-smi)");
  }
  KJIT_RETURN_IF_ERROR(d->Check(d->api_.cuDriverGetVersion(&d->version_), "cuDriverGetVersion"));
  if (d->version_ < kMinDriverVersion) {
    return Status(StatusCode::kDriverTooOld, "the CUDA driver supports CUDA " + VersionText(d->version_) +
                                                 "; kjit needs " + VersionText(kMinDriverVersion) +
                                                 " or newer: update the NVIDIA driver");
  }
  KJIT_RETURN_IF_ERROR(d->Check(d->api_.cuDeviceGetCount(&d->device_count_), "cuDeviceGetCount"));
  if (d->device_count_ <= 0) {
    return Status(StatusCode::kNoDevice, "the CUDA driver loaded but reports no GPU");
  }
  return d;
}

Result<const Driver*> Driver::Get() {
  static std::once_flag once;
  static Driver* driver = nullptr;  // leaked on purpose: see ~Driver
  static Status* failure = nullptr;
  std::call_once(once, [] {
    const char* env = std::getenv("KJIT_CUDA_DRIVER");
    std::string library = (env != nullptr && *env != '\0') ? env : "libcuda.so.1";
    auto loaded = Load(library);
    if (loaded.ok()) {
      driver = std::move(loaded).value().release();
    } else {
      failure = new Status(loaded.status());
    }
  });
  if (driver != nullptr) return static_cast<const Driver*>(driver);
  return *failure;
}

}  // namespace kjit
