// What the kernel cache stores about one kernel.
//
// A KernelRecord is everything needed to serve a kernel (its OpKey, CUBIN and
// launch configuration), to trust it (verification evidence, checksums,
// toolchain versions) and to learn from it (design point, policy version,
// timings against PyTorch's own kernel). The cache writes a record whole or not
// at all, and serves it only when its status is kVerified, its checksums hold,
// and its arch and toolchain match the reader's.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kjit/runtime/hash.h"
#include "kjit/runtime/status.h"

namespace kjit::cache {

enum class RecordStatus : int {
  kCandidate = 0,    // compiled, not yet verified: never served
  kVerified = 1,     // matched PyTorch and was faster: served
  kRejected = 2,     // failed verification or was not faster: kept for learning, never served
  kQuarantined = 3,  // failed a checksum or check after it was stored: never served
};
std::string_view RecordStatusName(RecordStatus s);  // "verified", ...
Result<RecordStatus> ParseRecordStatus(std::string_view name);

// The largest workspace a kernel may ask for (LaunchShape::workspace_bytes).
inline constexpr uint64_t kMaxWorkspaceBytes = uint64_t{1} << 30;

struct LaunchShape {
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
  uint32_t dynamic_shared_bytes = 0;
  // Bytes of per-launch scratch memory the kernel takes as one extra pointer
  // parameter after its outputs (kernel ABI v2, daemon/worker_protocol.h):
  // zeroed before the kernel first sees it, and left zeroed by the kernel.
  // 0: none, and no extra parameter (ABI v1). Records stored before the field
  // existed read as 0, with their checksums unchanged.
  uint64_t workspace_bytes = 0;
  friend bool operator==(const LaunchShape&, const LaunchShape&) = default;
};

// Where a kernel came from in its design space.
struct DesignPoint {
  std::string family;                       // e.g. "softmax"
  std::map<std::string, std::string> knobs;  // e.g. {"threads_per_row": "256", "vector_width": "4"}
  std::string policy_version;               // the policy that proposed it, e.g. "expert-default" or "ppo-17"
  friend bool operator==(const DesignPoint&, const DesignPoint&) = default;
};

struct Timing {
  double median_us = 0;
  double spread_us = 0;  // interquartile range of the runs
  int runs = 0;
  // The GPU that timed it: its model name, a space and its UUID, e.g.
  // "NVIDIA H200 GPU-6d75a55a-..."; empty if not known (records before kjitd named it).
  std::string device;
  int sm_clock_khz = 0;  // 0 if not known
  int memory_clock_khz = 0;
  friend bool operator==(const Timing&, const Timing&) = default;
};

// The model part of Timing::device ("NVIDIA H200" of "NVIDIA H200 GPU-6d75..."): the
// text before a last word that is a GPU or MIG UUID (empty if that word is all), or all of it
// when there is none.
// Timings are comparable only between GPUs of one model: an H100 and an H200 share sm_90.
std::string TimedModel(std::string_view device);

// An output as the evaluator verified it: as PyTorch's kernel returned it for the key. The shim serves a
// record only to a process whose first call laid its outputs out the same way (it allocates a hit's outputs
// like that first call's).
struct VerifiedOutput {
  bool defined = true;   // false: PyTorch returned an undefined tensor here
  int scalar_type = 0;   // c10::ScalarType as its integer (records are per PyTorch version)
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  friend bool operator==(const VerifiedOutput&, const VerifiedOutput&) = default;
};

struct Verification {
  std::vector<uint64_t> seeds;
  std::vector<std::string> input_kinds;  // "normal", "uniform", "large", "small", ...
  std::vector<std::string> edge_cases_passed;  // "nan", "inf", "neg_zero", "empty", "non_contiguous", "unaligned"
  double max_abs_error = 0;
  double max_rel_error = 0;
  double atol = 0;
  double rtol = 0;
  std::vector<VerifiedOutput> outputs;  // empty: not recorded (records before it; kjit_seed_defaults --direct)
  friend bool operator==(const Verification&, const Verification&) = default;
};
// A Verification as the JSON text the cache stores (and the worker protocol carries), and back.
std::string VerificationJson(const Verification& v);
Result<Verification> ParseVerificationJson(const std::string& text);

// The versions that produced the CUBIN. A record is served only to readers with the same ones.
struct Toolchain {
  int driver_version = 0;  // cuDriverGetVersion, e.g. 13000
  int nvrtc_major = 0;
  int nvrtc_minor = 0;
  int codegen_version = 0;  // kjit's code generator version for the family
  friend bool operator==(const Toolchain&, const Toolchain&) = default;
  std::string ToString() const;  // "driver 13.0, nvrtc 13.0, codegen 1"
};

// This process's toolchain: the loaded CUDA driver's version (0 without one),
// NVRTC's, and codegen 0 (kjitd does not yet store a family's codegen version).
// What kjitd stores with a kernel it verifies, and so what the shim must match:
// both use this one function.
Toolchain RunningToolchain();

struct KernelRecord {
  int64_t id = 0;  // assigned by the cache; 0 before insertion

  // The key. key_bytes is OpKey::Encode(); key_hash and key_text are derived from it on insert.
  std::string key_bytes;
  Hash128 key_hash;
  std::string key_text;
  std::string op;  // OpKey::OpName(): the op of a single call, "chain(mul,tanh,...)" of a chain; for filtering
  int arch = 0;    // the key's arch, for filtering

  // The kernel.
  std::string source;
  std::vector<std::string> compile_options;
  std::string entry_point;  // symbol in the CUBIN
  std::string cubin;
  LaunchShape launch;
  DesignPoint design;

  Timing timing;    // the candidate
  Timing baseline;  // PyTorch's own kernel, same run
  Verification verification;
  Toolchain toolchain;
  // The PyTorch whose kernels verified it (TORCH_VERSION of the evaluator, "2.11.0"); a reader with another
  // version is not served it (ReaderContext::torch_version). Empty: not recorded (records before schema 6).
  std::string torch_version;

  RecordStatus status = RecordStatus::kCandidate;
  std::string status_reason;  // why it was rejected or quarantined
  int64_t created_unix_ms = 0;
  int64_t last_used_unix_ms = 0;
  uint64_t use_count = 0;

  // Checksums, filled in by the cache on insert: of the CUBIN, and of every
  // immutable field (key, source, options, entry, launch, CUBIN checksum, toolchain).
  Hash128 cubin_checksum;
  Hash128 record_checksum;

  double speedup() const { return timing.median_us > 0 ? baseline.median_us / timing.median_us : 0; }
  uint64_t size_bytes() const { return cubin.size() + source.size() + key_bytes.size(); }

  // Recomputes the checksums from the fields. The serve checksum covers what
  // Lookup hands out (key, entry point, launch shape, toolchain, CUBIN checksum;
  // launch.workspace_bytes only when it is not 0, so that the checksums of
  // records stored before it existed still hold),
  // so the read path can check it without parsing the rest; the record checksum
  // covers every immutable field, the serve checksum included.
  Hash128 ComputeCubinChecksum() const;
  Hash128 ComputeServeChecksum() const;
  Hash128 ComputeRecordChecksum() const;
};

}  // namespace kjit::cache
