#include "kjit/runtime/status.h"

namespace kjit {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kNoDriver: return "no_driver";
    case StatusCode::kNoDevice: return "no_device";
    case StatusCode::kDriverTooOld: return "driver_too_old";
    case StatusCode::kCudaError: return "cuda_error";
    case StatusCode::kCompileError: return "compile_error";
    case StatusCode::kNvrtcError: return "nvrtc_error";
    case StatusCode::kLaunchConfig: return "launch_config";
    case StatusCode::kIOError: return "io_error";
    case StatusCode::kCorruption: return "corruption";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kInternal: return "internal";
    case StatusCode::kPermissionDenied: return "permission_denied";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  std::string out(StatusCodeName(code_));
  out += ": ";
  out += message_;
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return Status(code_, std::move(m));
}

}  // namespace kjit
