// What kjitd and an evaluator worker say to each other.
//
// kjitd starts one worker process per GPU (kjit-evaluator) with a socket on
// file descriptor 3. Both sides send frames: a 4-byte little-endian length,
// then that many bytes of JSON (one object with a "type"). JSON because this
// channel is private to one host and one build, and readable in a log; the
// public protocol (ipc/) is msgpack.
//
//   worker -> kjitd   hello      {device}            once, when the GPU and PyTorch are ready
//                     unavailable {reason}           instead of hello; the worker then exits
//   kjitd -> worker   baseline   {id, key, memory_cap_bytes}
//                     evaluate   {id, key, candidate, memory_cap_bytes}
//                     exit       {}
//   worker -> kjitd   progress   {id, phase, deadline_ms}  before each phase; kjitd kills the
//                                                     worker if the phase outlives its deadline
//                     baseline_result {id, ...}
//                     verdict    {id, ...}           worker_exits: the worker's CUDA context is
//                                                     gone (a fault) and it exits after this
//
// Fields added later are optional on the wire, so either side may be older:
// a missing `unfit` (baseline_result, verdict) reads false, a missing
// `screen_only` false, a missing launch `workspace_bytes` 0.
//
// A verdict's outcome is a policy::Outcome name; kjitd adds the outcomes a
// worker cannot report itself (fault when it died, hang when it was killed).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string_view>
#include <variant>
#include <string>
#include <vector>

#include "kjit/cache/record.h"
#include "kjit/runtime/status.h"

namespace kjit::daemon {

inline constexpr size_t kMaxWorkerFrameBytes = 64u << 20;
inline constexpr int kWorkerFd = 3;

// A kernel to evaluate, and the calling convention it follows (kernel ABI v2):
// its parameters are one device pointer per tensor argument of the key's call,
// in argument order (tensor lists flattened, an absent optional tensor passed
// as a null pointer), then one pointer per output tensor of the op, in the order
// PyTorch returns them. Each pointer addresses the view's first element (the
// storage offset applied). Sizes, strides and scalars are the key's, fixed: the
// source is specialised to them. Outputs are laid out as PyTorch's own kernel
// lays them out.
//
// Workspace (v2; v1 is v2 with launch.workspace_bytes == 0, and a v1 kernel
// takes no extra parameter): when launch.workspace_bytes > 0 the launcher passes
// one more pointer after the outputs, to workspace_bytes bytes of device memory
// (at most kMaxWorkspaceBytes, aligned to at least 16 bytes) that
//   - are all zero when the kernel starts,
//   - are ordered on the launch stream: every earlier use of the same bytes has
//     finished before the kernel starts, and no launch runs concurrently on them
//     (another stream gets other bytes),
//   - and that the kernel must leave all zero when it finishes: a counter it
//     incremented is reset, a partial it wrote is cleared (typically by the one
//     block that consumes them, as it reads them).
// Why the kernel restores the zeros rather than the launcher re-zeroing before
// each launch: re-zeroing is a memset per call, a second stream operation (and
// a second node in a captured CUDA graph) that on a cache hit costs about as
// much host and device time as a short kernel, while restoring costs the kernel
// one store per byte it used, which it mostly reads anyway. So a launcher zeroes
// a buffer once, when it allocates it, and reuses it for any later launch of
// any workspace kernel on the same stream. The evaluator holds candidates to
// this: it zeroes the workspace once per evaluation, passes the same one to
// every run (verification and timing), and rejects a candidate that leaves a
// non-zero byte (outcome stateful) or writes outside it (out_of_bounds).
// A launch that fails, or a kernel that faults, may leave the bytes non-zero:
// a launcher never reuses a workspace after one of its launches failed (the
// shim drops the buffer and takes a new, zeroed one; a fault loses the CUDA
// context anyway). Under CUDA graph capture nothing runs while the graph is
// built, so a buffer cannot be zeroed eagerly there: the shim then takes a fresh
// buffer per launch from PyTorch's caching allocator (the graph's private pool)
// and zeroes it with a memset captured before the kernel, which every replay
// repeats.
using cache::kMaxWorkspaceBytes;  // 1 GiB

struct CandidateSpec {
  std::string source;
  std::string entry_point;  // extern "C" symbol
  std::vector<std::string> options;
  cache::LaunchShape launch;
  cache::DesignPoint design;
};

// What compiling a candidate takes: EvaluateRequest::compile_ahead's entries.
struct CompileAhead {
  std::string source;
  std::vector<std::string> options;
  friend bool operator==(const CompileAhead&, const CompileAhead&) = default;
};

struct TimingStats {
  double median_us = 0;
  double spread_us = 0;    // interquartile range
  double ci_rel = 0;       // half-width of the median's 95% confidence interval, relative to the median
  double min_us = 0;
  double max_us = 0;
  int runs = 0;
};

struct WorkerDevice {
  int ordinal = 0;
  std::string name;
  std::string uuid;
  int arch = 0;
  int sm_count = 0;
  int sm_clock_khz = 0;
  int memory_clock_khz = 0;
  double copy_bandwidth_bytes_per_s = 0;
  uint64_t l2_bytes = 0;
  int driver_version = 0;
  int nvrtc_major = 0;
  int nvrtc_minor = 0;
  std::string torch_version;
  uint32_t pid = 0;
};

struct KernelResources {
  int registers = 0;
  int spill_bytes = 0;        // spill stores reported by ptxas, or -1 if unknown
  int local_bytes = 0;        // per thread
  int static_shared_bytes = 0;
  int max_threads_per_block = 0;
};

struct Roofline {
  double bytes = 0;       // bytes an ideal kernel moves: inputs read once, outputs written once
  double flops = 0;       // from the op's traits; 0 if unknown or memory-bound
  double floor_us = 0;    // max(bytes / copy bandwidth, flops / peak)
  double bandwidth_fraction = 0;  // achieved bytes/s over the copy bandwidth
  double flop_fraction = 0;
};

struct BaselineRequest {
  uint64_t id = 0;
  std::string key_bytes;
  uint64_t memory_cap_bytes = 0;  // 0: no cap
};

struct BaselineResult {
  uint64_t id = 0;
  std::string error_code;  // empty on success; a StatusCodeName otherwise
  std::string error;
  TimingStats timing;
  Roofline roofline;
  std::vector<std::string> outputs;  // one line per output, e.g. "f32[64,1024]"
  bool backoff = false;  // not enough memory or GPU busy: retry later
  // The key's working set can never fit this GPU (more than ~0.9 of its total
  // memory, evaluator/memory.h): not worth retrying here; backoff is false and
  // error starts "unfit: ", naming the bytes needed and the GPU's total.
  bool unfit = false;
};

struct EvaluateRequest {
  uint64_t id = 0;
  std::string key_bytes;
  CandidateSpec candidate;
  uint64_t memory_cap_bytes = 0;
  // A quick look for search, never for the cache: one run on one input set
  // (kept between requests for the same key, so a sweep over many points of
  // one key builds its inputs once), compared with the reference, then a
  // short timing. The verdict is never accepted; its verification lists the
  // input kind "screen". Search screens every point and fully evaluates the best.
  bool screen_only = false;
  // The candidates likely to come next (the client's guess): the worker compiles them with NVRTC on CPU
  // threads while it verifies and times this one, so that their own requests find them compiled (the
  // compiler's in-memory cache). Only source and options are read. A newer list replaces an older one
  // not yet compiled.
  std::vector<CompileAhead> compile_ahead;
};

struct Verdict {
  uint64_t id = 0;
  std::string outcome;  // policy::OutcomeName
  std::string reason;   // why it failed; "verified" when it did not
  bool compiled = false;
  std::string compile_log;
  double compile_ms = 0;       // NVRTC's time for this kernel (whenever it was compiled)
  double compile_wait_ms = 0;  // what this job waited for it: ~0 when compiled ahead
  bool compile_cached = false;  // the worker's compile cache held it (compiled ahead, or by an earlier job)
  KernelResources resources;
  std::string cubin;  // set when verified
  cache::Verification verification;
  TimingStats timing;
  TimingStats baseline;
  Roofline roofline;
  double reward = 0;
  bool accepted = false;
  double total_ms = 0;  // the whole evaluation, compile included
  bool worker_exits = false;
  bool retry_later = false;  // resource_backoff that may pass (memory short now): kjitd retries the job
  // resource_backoff that cannot pass on this GPU: the key's working set is
  // over ~0.9 of its total memory. retry_later is false and the reason starts "unfit: ".
  bool unfit = false;
};

struct Progress {
  uint64_t id = 0;
  std::string phase;  // "compile", "verify", "time"
  int64_t deadline_ms = 0;
};

struct Hello {
  WorkerDevice device;
};
struct Unavailable {
  std::string reason;
};
struct Exit {};

using WorkerMessage = std::variant<Hello, Unavailable, BaselineRequest, BaselineResult, EvaluateRequest, Verdict,
                                   Progress, Exit>;

// JSON text of a message, and back. Decoding is strict about types and
// requires "type"; unknown fields are ignored.
std::string EncodeWorkerMessage(const WorkerMessage& message);
Result<WorkerMessage> DecodeWorkerMessage(std::string_view json);

// Writes one frame, retrying short writes; kIOError if the peer is gone.
Status WriteFrame(int fd, std::string_view payload);

// Accumulates bytes from a non-blocking fd and yields whole frames.
class FrameReader {
 public:
  // Reads what is available. kIOError at end of file or on error (the peer is gone);
  // kCorruption for a frame over kMaxWorkerFrameBytes.
  Status ReadAvailable(int fd);
  // The next whole frame, if one has arrived.
  std::optional<std::string> Next();

 private:
  std::string buffer_;
};

// Blocking read of exactly one frame (the worker's side).
Result<std::string> ReadFrameBlocking(int fd);

}  // namespace kjit::daemon
