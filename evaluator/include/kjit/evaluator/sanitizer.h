// NVIDIA's compute-sanitizer over a candidate's first verification: an
// out-of-bounds read that happened to land in memory the evaluator's allocator
// owns (harmless there, a fault or a leak of another tensor's data in a user's
// process), and shared-memory races, are rejections.
//
// The worker cannot run the sanitizer over itself, so it runs a copy of itself
// as the sanitizer's target (kjit-evaluator --sanitize-request FILE): that child
// evaluates the same request over one normal input set without timing, with
// PyTorch's caching allocator off (PYTORCH_NO_CUDA_MEMORY_CACHING=1), so that
// every tensor is an allocation of its own and a read past one is outside any.
// memcheck runs for every kernel; racecheck where the kernel uses shared memory.
//
// Where the tool is missing or does not run (a runtime without its support),
// the check is reported as not run and the verdict stands on the rest: the
// sanitizer adds evidence, its absence takes none away.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kjit/runtime/status.h"

namespace kjit::eval {

// The exit code the sanitizer is told to return when it found errors.
inline constexpr int kSanitizerErrorExit = 86;

// What one sanitizer run reported.
struct SanitizerReport {
  int errors = 0;                // from its summary line; at least 1 when it exited kSanitizerErrorExit
  std::string first_error;       // "Invalid __global__ read of size 4 bytes at k+0x1d0 ... is out of bounds"
  bool summary_seen = false;     // the tool printed its summary: it did run
};

// Reads the tool's output ("========= ..." lines) and its exit code.
SanitizerReport ParseSanitizerOutput(std::string_view output, int exit_code);

// The compute-sanitizer to use: `configured` if it names an executable file, "auto" (or empty) looks in
// $PATH and then /usr/local/cuda/bin; "off" none. Empty when there is none.
std::string FindSanitizer(const std::string& configured);

// The command line of one run: the sanitizer, its options for `tool` ("memcheck" or "racecheck") with
// only kernels named like `entry_point` checked, then the target `worker` with its own arguments.
std::vector<std::string> SanitizerCommand(const std::string& sanitizer, const std::string& tool,
                                          const std::string& entry_point, const std::string& worker,
                                          const std::vector<std::string>& worker_args);

// Runs `argv` with PYTORCH_NO_CUDA_MEMORY_CACHING=1 added to this process's environment, in a process
// group of its own, stdout and stderr together into a file; kills the group after `timeout`, or as soon as
// `stop` (polled every 20 ms, when given) says so: a sanitized run holds the GPU for seconds, and the
// user's program comes first. Returns the exit code (128 + signal for a signal, -1 for the timeout or a
// stop) and the output.
struct ProcessResult {
  int exit_code = 0;
  bool timed_out = false;
  bool stopped = false;
  std::string output;
};
Result<ProcessResult> RunForSanitizer(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                                      const std::function<bool()>& stop = {});

}  // namespace kjit::eval
