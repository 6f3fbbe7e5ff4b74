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
// - The file also holds, for the daemon and the RL policy, the task queue
//   (task_queue.h), the measurement log of every evaluated candidate
//   (measurement_log.h) and policy checkpoints (checkpoint_store.h): each a
//   store of its own over this cache's connection, reached by tasks(),
//   measurements() and checkpoints().
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kjit/cache/checkpoint_store.h"
#include "kjit/cache/measurement_log.h"
#include "kjit/cache/record.h"
#include "kjit/cache/task_queue.h"
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

  // ---- the file's other stores, over the same connection (valid as long as the cache)
  TaskQueue& tasks();
  const TaskQueue& tasks() const;
  MeasurementLog& measurements();
  const MeasurementLog& measurements() const;
  CheckpointStore& checkpoints();

 private:
  struct Impl;
  explicit KernelCache(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kjit::cache
