// The on-disk kernel cache: SQLite in WAL mode, shared by every process of a user.
//
// Contract:
// - Many processes may open the same file and read and write at once. Every
//   write is one transaction: a record is stored whole or not at all, also if
//   the writer is killed. A writer that finds the database locked retries for
//   `busy_timeout`, then returns kUnavailable ("database locked").
// - Lookup serves only records with status kVerified whose arch and toolchain
//   equal the reader's, and re-checks the CUBIN checksum before serving: a
//   record that fails it is quarantined (status kQuarantined, with the reason)
//   and never served again. Lookup does not write otherwise; use counts and
//   per-key hit/miss counters arrive in batches through RecordUses.
// - Of a key's servable records Lookup takes the lowest median among those timed
//   on the reader's GPU model, and only when there is none the lowest median of
//   all: one arch spans models (an H100 and an H200 are both sm_90) whose
//   timings do not compare, and a record timed on the reader's model is the one
//   measured faster than PyTorch there.
// - The total size of stored kernels is kept under a limit (default 1 GiB) by
//   evicting the least recently used records when an insert goes over it.
// - Opening a file that is not a kjit cache, or one written by a newer kjit
//   (schema version above kSchemaVersion), fails with a clear error and leaves
//   the file untouched. Older schema versions are migrated on open.
// - The file also holds, for the daemon and the RL policy, the task queue, the
//   measurement history of every evaluated candidate, and policy checkpoints.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kjit/cache/record.h"
#include "kjit/runtime/status.h"

namespace kjit::cache {

inline constexpr int kSchemaVersion = 6;

// $KJIT_CACHE if set, else <kjit::CacheDir()>/cache.db ($XDG_CACHE_HOME/kjit/cache.db).
std::string DefaultCachePath();

struct OpenOptions {
  std::string path;          // empty: DefaultCachePath()
  bool read_only = false;    // never writes (no quarantine, no migration); fails if the file is missing
  bool create = true;        // create the file (and its directory) if missing
  std::chrono::milliseconds busy_timeout{5000};
  uint64_t default_size_limit_bytes = 1ull << 30;  // used when a new file is created
};

// Who is asking: a record is served only to a reader with the same arch and toolchain.
struct ReaderContext {
  int arch = 0;
  Toolchain toolchain;
  // The reader's GPU model as the driver names it ("NVIDIA H200"; TimedModel of a
  // record's Timing::device). Empty: no preference among the key's records.
  std::string device_model;
  // The reader's PyTorch (TORCH_VERSION, "2.11.0"): only records verified under it are served, since a
  // kernel is verified against that PyTorch's kernels and output layouts. Empty: no check (tools, tests).
  std::string torch_version;
};

// What the shim needs to launch a cached kernel.
struct ServedKernel {
  int64_t id = 0;
  std::string cubin;
  std::string entry_point;
  LaunchShape launch;
  // Non-empty when the reader named its GPU model and no record was timed on it: the model that timed the
  // record served instead ("NVIDIA H100 80GB HBM3"; "?" if the record does not say). The reader should then
  // ask for the key to be timed on its own model (the shim submits a task once per key and process).
  std::string timed_on_other_model;
  // The outputs as the evaluator verified them (Verification::outputs); empty when the record does not say.
  std::vector<VerifiedOutput> outputs;
};

// One line of `kjit cache ls`.
struct RecordSummary {
  int64_t id = 0;
  Hash128 key_hash;
  std::string key_text;
  std::string op;
  int arch = 0;
  RecordStatus status = RecordStatus::kCandidate;
  double median_us = 0;
  double baseline_us = 0;
  double speedup = 0;
  uint64_t size_bytes = 0;
  int64_t created_unix_ms = 0;
  int64_t last_used_unix_ms = 0;
  uint64_t use_count = 0;
  std::string timed_on;  // the GPU model that timed it (TimedModel), empty if not known
};

struct ListFilter {
  std::string op;  // exact op name ("aten::_softmax"); empty: any
  std::optional<RecordStatus> status;
  std::optional<int> arch;
  enum class SortBy { kSpeedup, kLastUse, kSize, kCreated } sort = SortBy::kCreated;
  bool descending = true;
  int limit = 0;  // 0: no limit
  int64_t after_id = 0;  // only records with a larger id (newer ones): for watching the cache
};

struct CacheStats {
  uint64_t records = 0;
  uint64_t by_status[4] = {0, 0, 0, 0};  // indexed by RecordStatus
  uint64_t bytes = 0;                    // sum of KernelRecord::size_bytes
  uint64_t size_limit_bytes = 0;
  uint64_t file_bytes = 0;  // the database file, WAL included
  uint64_t keys_seen = 0;   // keys with hit/miss counters
  uint64_t hits = 0;
  uint64_t misses = 0;
  std::vector<RecordSummary> best;  // verified records with the highest speedups
  double hit_rate() const { return hits + misses ? static_cast<double>(hits) / static_cast<double>(hits + misses) : 0; }
};

// A batch of use counts from one process (the shim flushes these now and then).
struct UseReport {
  Hash128 key_hash;
  int64_t record_id = 0;  // the record served on hits; 0 if none
  uint64_t hits = 0;
  uint64_t misses = 0;
  std::string key_text;   // recorded the first time a key is seen
};

// The program run a batch of use reports belongs to (ipc report_uses' run fields). The processes of one
// `kjit run` share an id; each run keeps its own per-key counters beside the all-time ones.
struct RunInfo {
  std::string id;
  uint32_t pid = 0;
  std::string program;          // the command line
  int64_t started_unix_ms = 0;  // 0: unknown (the first report's time stands in)
};

// A run's totals (ListRuns). Only the newest kMaxRunsKept runs are kept; older ones are dropped as new ones come.
struct RunSummary {
  std::string id;
  uint32_t pid = 0;  // the first reporting process
  std::string program;
  int64_t started_unix_ms = 0;
  int64_t last_seen_unix_ms = 0;
  uint64_t keys = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
};
inline constexpr int kMaxRunsKept = 200;

// One key's counters from the clients' use reports (RecordUses).
struct KeyStats {
  Hash128 key_hash;
  std::string key_text;  // empty when no report named it
  uint64_t hits = 0;
  uint64_t misses = 0;
  int64_t last_seen_unix_ms = 0;
};

struct VerifyReport {
  uint64_t checked = 0;
  bool integrity_ok = true;        // PRAGMA integrity_check
  std::string integrity_message;   // its first lines when not ok
  struct Problem {
    int64_t id;
    std::string key_text;
    std::string reason;
  };
  std::vector<Problem> quarantined;  // records newly quarantined by this run
  std::vector<Problem> mismatched;   // arch/toolchain differ from the context given (not quarantined)
};

struct EvictReport {
  uint64_t removed = 0;
  uint64_t freed_bytes = 0;
  uint64_t remaining_bytes = 0;
};

// Imported records come from elsewhere: their checksums are plain hashes anyone can recompute, so a file can
// claim any kernel verified and any timing. By default a verified record enters quarantined, with the reason
// kImportedReason + the file (never served), until kjitd has verified it and timed it on this machine's GPU
// (it then stores the kernel again with its own timing). `trust` keeps the file's statuses and timings.
struct ImportOptions {
  bool trust = false;
};
inline constexpr std::string_view kImportedReason = "imported from ";

struct ImportReport {
  uint64_t imported = 0;
  uint64_t awaiting_verification = 0;  // of those, verified in the file: quarantined until kjitd re-verifies them
  uint64_t duplicates = 0;  // same key and CUBIN checksum already present
  std::vector<std::string> rejected;  // one reason per record that failed its checks
};

// The daemon's task queue: one row per key, the key's tuning history.
// States: "queued" (waiting for a tuner), "running" (claimed by a tuner, which
// holds a lease), "done" (tuned: a kernel was stored, or none beat PyTorch),
// "unfit" (the key can never be evaluated on this machine, e.g. its working set
// exceeds the GPU's memory) and "failed" (an error that trials cannot fix).
// Queued tasks are ordered by priority, then expected gain (calls x time per
// call: what a faster kernel could save), then age. Misses and submissions for
// a key merge into its row: an open (queued or running) one absorbs them; a
// done or failed one is queued again (a later round) when its calls have grown
// kRetuneCallsFactor-fold since it was tuned and its best kernel is not already
// within kNearFloor of the memory floor, or when a client submits it; an unfit
// one only counts the calls.
//
// Claims are safe when several tuners share the file (and, later, a database):
// a claim names its claimer and holds a lease; one key is claimed by one tuner
// at a time; a claim whose lease ran out (its tuner crashed) may be taken by
// another; only the claimer may renew or complete it.
struct Task {
  int64_t id = 0;
  std::string key_bytes;
  Hash128 key_hash;
  int priority = 0;
  std::string state;
  int attempts = 0;           // claims so far
  std::string detail;
  uint64_t calls = 0;         // misses reported for the key
  double observed_us = 0;     // mean time per call of PyTorch's kernel, as the clients saw it
  double expected_gain_us = 0;
  int64_t created_unix_ms = 0;
  int64_t updated_unix_ms = 0;
  // Claims and rounds.
  std::string claimed_by;       // the running claim's owner; empty otherwise
  int64_t lease_until_unix_ms = 0;
  int64_t not_before_unix_ms = 0;  // a queued task handed back to wait (GPU memory short now)
  int round = 0;                // tuning rounds completed
  uint64_t calls_at_tune = 0;   // calls when the last round was claimed
  // Results over every round.
  int trials = 0;
  double best_us = 0;           // the fastest verified kernel's median (0: none)
  double baseline_us = 0;       // PyTorch's, as the evaluator timed it
  double floor_us = 0;          // the memory/compute floor
  int64_t record_id = 0;        // the record holding the best kernel (0: none stored)
  std::string policy_version;   // who proposed the best kernel
};

inline constexpr double kRetuneCallsFactor = 4.0;
inline constexpr double kNearFloor = 1.25;

// Who claims, for how long; `now_unix_ms` 0 reads the clock (tests pass a time).
struct ClaimOptions {
  std::string claimer;
  std::chrono::milliseconds lease{std::chrono::minutes(5)};
  int64_t now_unix_ms = 0;
};

// What became of a claimed task's round.
struct TaskResult {
  std::string state;  // "done", "unfit", "failed", or "queued" (handed back: another round, or wait)
  std::string detail;
  int trials = 0;     // this round's; added to the task's
  double best_us = 0, baseline_us = 0, floor_us = 0;  // 0: unchanged
  int64_t record_id = 0;
  std::string policy_version;
  bool round_done = false;          // counts as a tuning round (false: handed back untried)
  int64_t not_before_unix_ms = 0;   // "queued": not claimed again before this
  std::optional<int> priority;      // "queued": the task's priority from now on
};

struct TaskMerge {
  int64_t task_id = 0;
  bool merged = false;    // joined the key's existing task
  bool reopened = false;  // ... which was closed and is queued again (another round)
};

// One evaluated candidate, whatever its outcome (issue 8 learns from these).
struct Measurement {
  int64_t id = 0;
  Hash128 key_hash;
  std::string key_bytes;
  DesignPoint design;
  std::string outcome;  // "verified", "slower", "wrong", "compile_error", "fault", "timeout", ...
  double median_us = 0;
  double baseline_us = 0;
  double reward = 0;
  std::string detail;
  int64_t created_unix_ms = 0;
};

struct PolicyCheckpoint {
  int64_t id = 0;
  std::string version;
  std::string blob;
  Hash128 checksum;  // filled in by PutCheckpoint
  std::string status;  // "good" or "set_aside"
  int64_t created_unix_ms = 0;
};

class KernelCache {
 public:
  static Result<std::unique_ptr<KernelCache>> Open(const OpenOptions& options = {});
  // Creates a new cache file at an older schema version, for migration tests.
  static Status CreateAtSchemaVersion(const std::string& path, int version);
  ~KernelCache();
  KernelCache(const KernelCache&) = delete;
  KernelCache& operator=(const KernelCache&) = delete;

  const std::string& path() const;
  int schema_version() const;

  // ---- kernels
  // Derives key_hash, key_text, op, arch from key_bytes (which must decode as an
  // OpKey), computes checksums, stores it in one transaction and evicts LRU
  // records if the size limit is exceeded. Returns the id. created_unix_ms and
  // last_used_unix_ms are kept if set (imports, reproducible samples), else
  // now; status and use_count are stored as given.
  Result<int64_t> Insert(KernelRecord record);
  Status SetStatus(int64_t id, RecordStatus status, const std::string& reason);
  Result<KernelRecord> Get(int64_t id) const;
  Status Remove(int64_t id);
  // The id of a verified record that serves exactly this kernel (the same serve checksum: key, entry
  // point, launch shape, toolchain and CUBIN) timed on the same GPU model as `record` (any model when
  // record.timing.device is empty), or 0 if there is none. `record` need not be stored. A kernel timed on
  // another model is stored again with this model's timing: readers prefer their own model's records.
  Result<int64_t> FindVerified(const KernelRecord& record) const;
  // The fastest verified record of the key timed on GPU `model` (TimedModel; every model's where `model` is
  // empty; a record that does not name its GPU counts for every model): its id and median, id 0 if none.
  struct Best {
    int64_t id = 0;
    double median_us = 0;
  };
  // With `torch_version`, only records verified under that PyTorch count.
  Result<Best> BestVerified(const Hash128& key_hash, const std::string& model,
                            const std::string& torch_version = "") const;

  // The shim's read path. NotFound (with the reason in the message) when no
  // record may be served for this key and reader.
  Result<ServedKernel> Lookup(const Hash128& key_hash, const ReaderContext& reader);
  // Adds the counts to each key's all-time counters and, with `run`, to that run's own.
  Status RecordUses(std::span<const UseReport> uses, const RunInfo* run = nullptr);
  // Every key's use counters, busiest first.
  Result<std::vector<KeyStats>> ListKeyStats() const;
  // The kept runs, the most recently seen first (at most `limit`; 0: all).
  Result<std::vector<RunSummary>> ListRuns(int limit = 0) const;
  // One run's per-key counters, busiest first (key_text from the all-time counters); NotFound for an unknown run.
  Result<std::vector<KeyStats>> ListRunKeyStats(const std::string& run_id) const;

  // Record ids for a record id ("42") or a key-hash prefix of at least 4 hex digits.
  Result<std::vector<int64_t>> Resolve(const std::string& id_or_hash_prefix) const;
  Result<std::vector<RecordSummary>> List(const ListFilter& filter = {}) const;
  Result<CacheStats> Stats(int best_n = 5) const;

  // Re-checks every record's checksums (quarantining failures) and runs
  // PRAGMA integrity_check; with a reader, also lists records whose arch or
  // toolchain differ from it.
  Result<VerifyReport> Verify(const ReaderContext* reader = nullptr);
  Result<EvictReport> Evict(uint64_t target_bytes);
  Status SetSizeLimit(uint64_t bytes);
  uint64_t size_limit() const;

  // One portable file (itself a kjit cache database) holding the records that
  // pass `filter` (by default: verified ones). Import checks every record's
  // checksums and key before it takes it.
  Result<uint64_t> Export(const std::string& file, const ListFilter& filter) const;
  Result<ImportReport> Import(const std::string& file, const ImportOptions& options = {});

  // ---- for the daemon and the policy
  // A client ran PyTorch's kernel `calls` times for this key, `observed_us` each:
  // adds to the key's open task, or opens one.
  Result<TaskMerge> AddMiss(const std::string& key_bytes, uint64_t calls, double observed_us);
  // Asks for a key to be tuned; merges into an open task, raising its priority.
  Result<TaskMerge> SubmitTask(const std::string& key_bytes, int priority, const std::string& detail = "");
  Result<int64_t> EnqueueTask(const std::string& key_bytes, int priority, const std::string& detail = "");
  // The queue's first claimable task (queued and not waiting, or running with an expired lease),
  // marked running under `claim` in one transaction; none: an empty optional.
  Result<std::optional<Task>> ClaimTask(const ClaimOptions& claim);
  Result<std::optional<Task>> ClaimNextTask();  // ClaimTask by an anonymous claimer, 5-minute lease
  // Extends a claim's lease. kUnavailable ("claim lost") when the task is no longer running under
  // this claimer (its lease expired and another tuner took it, or it was completed).
  Status RenewClaim(int64_t id, const ClaimOptions& claim);
  // Ends a claim with its round's result; kUnavailable ("claim lost") as for RenewClaim.
  Status CompleteTask(int64_t id, const std::string& claimer, const TaskResult& result);
  Status FinishTask(int64_t id, bool ok, const std::string& detail);  // done/failed, whoever holds it
  // Hands back (queued, no round counted) every running task whose claimer starts with `claimer_prefix`
  // (not empty): a tuner that is known to be gone. Returns how many.
  Result<int> ReleaseClaims(const std::string& claimer_prefix);
  Result<Task> GetTask(int64_t id) const;
  Result<std::vector<Task>> ListTasks(const std::string& state = "", int limit = 0) const;  // queue order
  Result<int64_t> AddMeasurement(Measurement m);
  Result<std::vector<Measurement>> ListMeasurements(const std::string& family = "", int limit = 0) const;
  // One key's measurements, oldest first (a tuning round's history).
  Result<std::vector<Measurement>> ListMeasurementsOfKey(const Hash128& key_hash) const;
  Result<int64_t> PutCheckpoint(PolicyCheckpoint checkpoint);
  // The newest checkpoint whose status is "good" and whose checksum holds;
  // checkpoints that fail their checksum are set aside on the way.
  Result<PolicyCheckpoint> LatestGoodCheckpoint();
  // Marks a checkpoint "set_aside" (its checksum held but its reader could not
  // use it: damaged before it was stored, or written by an incompatible
  // policy), so LatestGoodCheckpoint passes over it from then on.
  Status SetCheckpointAside(int64_t id);

 private:
  struct Impl;
  explicit KernelCache(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kjit::cache
