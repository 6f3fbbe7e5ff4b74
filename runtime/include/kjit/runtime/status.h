// Status and Result<T>: how every kjit function reports failure.
//
// kjit runs inside other people's processes (the shim) and must never take them
// down, so no public kjit function throws and none aborts on a recoverable
// error. A function that can fail returns a Status, or a Result<T> holding
// either a value or a non-OK Status. The message is written for the person who
// reads it in a log: what failed, the library's own error name and text, and,
// where there is one, what to do about it.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace kjit {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,  // the caller passed something malformed
  kNotFound,         // a lookup found nothing (not an error in itself)
  kNoDriver,         // libcuda.so.1 could not be loaded, or is a stub
  kNoDevice,         // the driver loaded but there is no usable GPU
  kDriverTooOld,     // the driver lacks a symbol or version kjit needs
  kCudaError,        // a CUDA driver call failed (message holds CUresult name)
  kCompileError,     // NVRTC rejected the source (message holds the log)
  kNvrtcError,       // NVRTC itself failed (message holds nvrtcResult name)
  kLaunchConfig,     // a launch configuration exceeds the device's limits
  kIOError,          // a file could not be read or written
  kCorruption,       // bytes did not decode or failed a check
  kUnavailable,      // a resource is temporarily missing (e.g. daemon down)
  kInternal,         // a broken invariant inside kjit: please report it
  kPermissionDenied,  // the caller may not do this (e.g. a read-only client of kjitd)
};
// The last code, for loops over every code (codes are only ever appended).
inline constexpr StatusCode kLastStatusCode = StatusCode::kPermissionDenied;

// Stable, lower-case name of a code ("no_driver"), for logs and wire formats.
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "no_driver: libcuda.so.1: cannot open shared object file ..." or "ok".
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context: `.
  Status WithContext(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status Corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
inline Status IOError(std::string m) { return {StatusCode::kIOError, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    assert(!status_.ok() && "Result built from an OK status has no value");
    if (status_.ok()) status_ = Internal("Result constructed from OK status without a value");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;  // OK while value_ holds a value
};

}  // namespace kjit

// Propagates a non-OK Status from an expression returning Status.
#define KJIT_RETURN_IF_ERROR(expr)                 \
  do {                                             \
    ::kjit::Status kjit_status_ = (expr);          \
    if (!kjit_status_.ok()) return kjit_status_;   \
  } while (0)

#define KJIT_CONCAT_INNER_(a, b) a##b
#define KJIT_CONCAT_(a, b) KJIT_CONCAT_INNER_(a, b)

// `KJIT_ASSIGN_OR_RETURN(auto x, ExprReturningResult());`
#define KJIT_ASSIGN_OR_RETURN(lhs, expr) \
  KJIT_ASSIGN_OR_RETURN_IMPL_(KJIT_CONCAT_(kjit_result_, __LINE__), lhs, expr)
#define KJIT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
