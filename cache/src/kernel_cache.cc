#include "kjit/cache/kernel_cache.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <mutex>

#include "kjit/runtime/op_key.h"
#include "kjit/runtime/paths.h"
#include "connection.h"
#include "record_json.h"
#include "sqlite.h"
#include "sqlite_stores.h"

namespace kjit::cache {
namespace {

using sql::Database;
using sql::Statement;
using sql::Transaction;

constexpr const char* kMagic = "kjit-cache";

// Runs last seen in the same millisecond are told apart by when they started, so "the newest run" and the
// pruning of the oldest agree however fast reports come.
const std::string kRunsNewestFirst = "runs.last_seen_ms DESC, runs.started_ms DESC, runs.id DESC";

// Version 1 of the schema. A later version appends a migration to kMigrations
// (never edits this text), so that every earlier file can be brought forward.
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;

CREATE TABLE kernels (
  id INTEGER PRIMARY KEY,
  key_hash BLOB NOT NULL,
  key_bytes BLOB NOT NULL,
  key_text TEXT NOT NULL,
  op TEXT NOT NULL,
  arch INTEGER NOT NULL,
  status INTEGER NOT NULL,
  status_reason TEXT NOT NULL DEFAULT '',
  source TEXT NOT NULL,
  compile_options TEXT NOT NULL,
  entry_point TEXT NOT NULL,
  grid_x INTEGER NOT NULL, grid_y INTEGER NOT NULL, grid_z INTEGER NOT NULL,
  block_x INTEGER NOT NULL, block_y INTEGER NOT NULL, block_z INTEGER NOT NULL,
  dynamic_shared_bytes INTEGER NOT NULL,
  family TEXT NOT NULL,
  policy_version TEXT NOT NULL,
  design TEXT NOT NULL,
  timing TEXT NOT NULL,
  baseline TEXT NOT NULL,
  median_us REAL NOT NULL,
  baseline_us REAL NOT NULL,
  verification TEXT NOT NULL,
  driver_version INTEGER NOT NULL,
  nvrtc_major INTEGER NOT NULL,
  nvrtc_minor INTEGER NOT NULL,
  codegen_version INTEGER NOT NULL,
  cubin BLOB NOT NULL,
  cubin_checksum BLOB NOT NULL,
  serve_checksum BLOB NOT NULL,
  record_checksum BLOB NOT NULL,
  size_bytes INTEGER NOT NULL,
  created_ms INTEGER NOT NULL,
  last_used_ms INTEGER NOT NULL,
  use_count INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX kernels_by_key ON kernels (key_hash, status);
CREATE INDEX kernels_by_last_use ON kernels (last_used_ms, size_bytes);
-- The running total of stored bytes, kept in the same transaction as every
-- change, so that the size limit costs O(1) per insert instead of a table scan.
CREATE TRIGGER kernels_bytes_insert AFTER INSERT ON kernels BEGIN
  UPDATE meta SET value = CAST(value AS INTEGER) + NEW.size_bytes WHERE name = 'total_bytes';
END;
CREATE TRIGGER kernels_bytes_delete AFTER DELETE ON kernels BEGIN
  UPDATE meta SET value = CAST(value AS INTEGER) - OLD.size_bytes WHERE name = 'total_bytes';
END;

CREATE TABLE key_stats (
  key_hash BLOB PRIMARY KEY,
  key_text TEXT NOT NULL,
  hits INTEGER NOT NULL,
  misses INTEGER NOT NULL,
  last_seen_ms INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE tasks (
  id INTEGER PRIMARY KEY,
  key_hash BLOB NOT NULL,
  key_bytes BLOB NOT NULL,
  priority INTEGER NOT NULL,
  state TEXT NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  detail TEXT NOT NULL DEFAULT '',
  created_ms INTEGER NOT NULL,
  updated_ms INTEGER NOT NULL
);
CREATE INDEX tasks_queue ON tasks (state, priority DESC, id);

CREATE TABLE measurements (
  id INTEGER PRIMARY KEY,
  key_hash BLOB NOT NULL,
  key_bytes BLOB NOT NULL,
  family TEXT NOT NULL,
  policy_version TEXT NOT NULL,
  design TEXT NOT NULL,
  outcome TEXT NOT NULL,
  median_us REAL NOT NULL,
  baseline_us REAL NOT NULL,
  reward REAL NOT NULL,
  detail TEXT NOT NULL,
  created_ms INTEGER NOT NULL
);
CREATE INDEX measurements_by_family ON measurements (family, id);

CREATE TABLE policy_checkpoints (
  id INTEGER PRIMARY KEY,
  version TEXT NOT NULL,
  blob BLOB NOT NULL,
  checksum BLOB NOT NULL,
  status TEXT NOT NULL,
  created_ms INTEGER NOT NULL
);
)sql";

// Version 2: the task queue learns expected gain (misses merge into one task per key).
constexpr const char* kSchemaV2 = R"sql(
ALTER TABLE tasks ADD COLUMN calls INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN observed_us REAL NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN expected_gain_us REAL NOT NULL DEFAULT 0;
DROP INDEX tasks_queue;
CREATE INDEX tasks_queue ON tasks (state, priority DESC, expected_gain_us DESC, id);
CREATE INDEX tasks_by_key ON tasks (key_hash, state);
)sql";

// Version 3: kernels learn a per-launch workspace (LaunchShape::workspace_bytes);
// rows stored before it read as 0 (no workspace), their checksums unchanged.
constexpr const char* kSchemaV3 = R"sql(
ALTER TABLE kernels ADD COLUMN workspace_bytes INTEGER NOT NULL DEFAULT 0;
)sql";

// Version 4: the queue is worked by tuners (kjitd's, later several machines'): claims with leases,
// rounds, and each key's results so far. Rows of version 3 read as unclaimed, round 0, no results.
constexpr const char* kSchemaV4 = R"sql(
ALTER TABLE tasks ADD COLUMN claimed_by TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN lease_until_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN not_before_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN round INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN calls_at_tune INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN trials INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN best_us REAL NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN baseline_us REAL NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN floor_us REAL NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN record_id INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN policy_version TEXT NOT NULL DEFAULT '';
)sql";

// Version 5: per-run use counters for `kjit report --run` (RecordUses with a RunInfo).
constexpr const char* kSchemaV5 = R"sql(
CREATE TABLE runs (
  id TEXT PRIMARY KEY,
  pid INTEGER NOT NULL,
  program TEXT NOT NULL,
  started_ms INTEGER NOT NULL,
  last_seen_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX runs_by_last_seen ON runs (last_seen_ms);
CREATE TABLE run_uses (
  run_id TEXT NOT NULL,
  key_hash BLOB NOT NULL,
  hits INTEGER NOT NULL,
  misses INTEGER NOT NULL,
  PRIMARY KEY (run_id, key_hash)
) WITHOUT ROWID;
)sql";

// Version 6: the PyTorch version that verified a kernel (KernelRecord::torch_version); rows before it read as
// '' (not recorded), their checksums unchanged.
constexpr const char* kSchemaV6 = R"sql(
ALTER TABLE kernels ADD COLUMN torch_version TEXT NOT NULL DEFAULT '';
)sql";

// kMigrations[v] brings a file from schema version v to v + 1. Version 0 is
// an empty file.
constexpr const char* kMigrations[] = {kSchemaV1, kSchemaV2, kSchemaV3, kSchemaV4, kSchemaV5, kSchemaV6};
static_assert(std::size(kMigrations) == kSchemaVersion, "one migration per schema version");

// Every column of `kernels`, in a fixed order that ReadRecord expects: the
// table's own order (Export copies rows with it), later versions' columns last.
constexpr const char* kKernelColumns =
    "id, key_hash, key_bytes, key_text, op, arch, status, status_reason, source, compile_options, entry_point, "
    "grid_x, grid_y, grid_z, block_x, block_y, block_z, dynamic_shared_bytes, family, policy_version, design, "
    "timing, baseline, median_us, baseline_us, verification, driver_version, nvrtc_major, nvrtc_minor, "
    "codegen_version, cubin, cubin_checksum, serve_checksum, record_checksum, size_bytes, created_ms, "
    "last_used_ms, use_count, workspace_bytes, torch_version";

constexpr const char* kSummaryColumns =
    "id, key_hash, key_text, op, arch, status, median_us, baseline_us, "
    "CASE WHEN median_us > 0 THEN baseline_us / median_us ELSE 0 END AS speedup, size_bytes, created_ms, "
    "last_used_ms, use_count, timing";

bool FileExists(const std::string& path) {
  struct stat st{};
  return stat(path.c_str(), &st) == 0;
}

uint64_t FileSize(const std::string& path) {
  struct stat st{};
  return stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

std::string ParentDir(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos || slash == 0 ? std::string() : path.substr(0, slash);
}

// Reads a full row selected with kKernelColumns.
Result<KernelRecord> ReadRecord(const Statement& s) {
  KernelRecord r;
  int c = 0;
  r.id = s.Int(c++);
  r.key_hash = BlobHash(s.BlobView(c++));
  r.key_bytes = s.Blob(c++);
  r.key_text = s.Text(c++);
  r.op = s.Text(c++);
  r.arch = static_cast<int>(s.Int(c++));
  r.status = static_cast<RecordStatus>(s.Int(c++));
  r.status_reason = s.Text(c++);
  r.source = s.Text(c++);
  KJIT_ASSIGN_OR_RETURN(r.compile_options, OptionsFromJson(s.Text(c++)));
  r.entry_point = s.Text(c++);
  for (auto& g : r.launch.grid) g = static_cast<uint32_t>(s.Int(c++));
  for (auto& b : r.launch.block) b = static_cast<uint32_t>(s.Int(c++));
  r.launch.dynamic_shared_bytes = static_cast<uint32_t>(s.Int(c++));
  c += 2;  // family, policy_version: copies of what `design` holds
  KJIT_ASSIGN_OR_RETURN(r.design, DesignFromJson(s.Text(c++)));
  KJIT_ASSIGN_OR_RETURN(r.timing, TimingFromJson(s.Text(c++)));
  KJIT_ASSIGN_OR_RETURN(r.baseline, TimingFromJson(s.Text(c++)));
  c += 2;  // median_us, baseline_us: copies for sorting
  KJIT_ASSIGN_OR_RETURN(r.verification, VerificationFromJson(s.Text(c++)));
  r.toolchain.driver_version = static_cast<int>(s.Int(c++));
  r.toolchain.nvrtc_major = static_cast<int>(s.Int(c++));
  r.toolchain.nvrtc_minor = static_cast<int>(s.Int(c++));
  r.toolchain.codegen_version = static_cast<int>(s.Int(c++));
  r.cubin = s.Blob(c++);
  r.cubin_checksum = BlobHash(s.BlobView(c++));
  c++;  // serve_checksum: checked by CheckRecord against the recomputed one
  r.record_checksum = BlobHash(s.BlobView(c++));
  c++;  // size_bytes
  r.created_unix_ms = s.Int(c++);
  r.last_used_unix_ms = s.Int(c++);
  r.use_count = static_cast<uint64_t>(s.Int(c++));
  r.launch.workspace_bytes = static_cast<uint64_t>(s.Int(c++));
  r.torch_version = s.Text(c++);
  return r;
}

// OK if every checksum of a stored record holds; else why not.
Status CheckRecord(const KernelRecord& r, std::string_view stored_serve_checksum) {
  if (r.ComputeCubinChecksum() != r.cubin_checksum) return Corruption("CUBIN checksum mismatch");
  if (r.ComputeServeChecksum() != BlobHash(stored_serve_checksum)) return Corruption("serve checksum mismatch");
  if (r.ComputeRecordChecksum() != r.record_checksum) return Corruption("record checksum mismatch");
  auto key = OpKey::Decode(r.key_bytes);
  if (!key.ok()) return Corruption("stored key does not decode: " + key.status().message());
  if (key->Hash() != r.key_hash) return Corruption("stored key hash does not match its key");
  return Status::Ok();
}

std::string MismatchReason(int arch, const Toolchain& have, const std::string& torch_version,
                           const ReaderContext& reader) {
  if (arch != reader.arch) {
    return "built for sm_" + std::to_string(arch) + ", reader is sm_" + std::to_string(reader.arch);
  }
  if (!(have == reader.toolchain)) {
    return "built with " + have.ToString() + ", reader has " + reader.toolchain.ToString();
  }
  if (!reader.torch_version.empty() && torch_version != reader.torch_version) {
    return "verified under " + (torch_version.empty() ? std::string("an unrecorded PyTorch version")
                                                      : "PyTorch " + torch_version) +
           ", reader has PyTorch " + reader.torch_version;
  }
  return "";
}

// WHERE clause and bindings shared by List and Export.
struct Filter {
  std::string where = " WHERE 1";
  std::vector<std::string> texts;
  std::vector<int64_t> ints;
  std::vector<bool> is_text;
};

Filter MakeFilter(const ListFilter& f) {
  Filter out;
  if (!f.op.empty()) {
    out.where += " AND op = ?";
    out.texts.push_back(f.op);
    out.is_text.push_back(true);
  }
  if (f.status) {
    out.where += " AND status = ?";
    out.ints.push_back(static_cast<int64_t>(*f.status));
    out.is_text.push_back(false);
  }
  if (f.arch) {
    out.where += " AND arch = ?";
    out.ints.push_back(*f.arch);
    out.is_text.push_back(false);
  }
  if (f.after_id > 0) {
    out.where += " AND id > ?";
    out.ints.push_back(f.after_id);
    out.is_text.push_back(false);
  }
  return out;
}

void BindFilter(Statement& s, const Filter& f, int first = 1) {
  size_t t = 0, i = 0;
  for (size_t k = 0; k < f.is_text.size(); ++k) {
    if (f.is_text[k]) {
      s.BindText(first + static_cast<int>(k), f.texts[t++]);
    } else {
      s.Bind(first + static_cast<int>(k), f.ints[i++]);
    }
  }
}

RecordSummary ReadSummary(const Statement& s) {
  RecordSummary r;
  r.id = s.Int(0);
  r.key_hash = BlobHash(s.BlobView(1));
  r.key_text = s.Text(2);
  r.op = s.Text(3);
  r.arch = static_cast<int>(s.Int(4));
  r.status = static_cast<RecordStatus>(s.Int(5));
  r.median_us = s.Double(6);
  r.baseline_us = s.Double(7);
  r.speedup = s.Double(8);
  r.size_bytes = static_cast<uint64_t>(s.Int(9));
  r.created_unix_ms = s.Int(10);
  r.last_used_unix_ms = s.Int(11);
  r.use_count = static_cast<uint64_t>(s.Int(12));
  if (auto timing = TimingFromJson(s.Text(13)); timing.ok()) r.timed_on = TimedModel(timing->device);
  return r;
}

}  // namespace

std::string DefaultCachePath() {
  if (const char* p = std::getenv("KJIT_CACHE"); p != nullptr && *p != '\0') return p;
  return CacheDir() + "/cache.db";
}

// The kernel store's state beside the connection it shares with the file's other stores.
struct KernelCache::Impl : Connection {
  int version = 0;
  uint64_t size_limit = 0;
  std::optional<Statement> lookup;  // prepared once: the read path runs it per key
  // The other stores, over this connection (made once it is open).
  std::unique_ptr<TaskQueue> tasks;
  std::unique_ptr<MeasurementLog> measurements;
  std::unique_ptr<CheckpointStore> checkpoints;

  Status Migrate(int from, uint64_t default_limit, int to = kSchemaVersion);
  Result<uint64_t> TotalBytes();
  Result<EvictReport> EvictLocked(uint64_t target);
  Result<int64_t> InsertLocked(KernelRecord r, bool keep_checksums);
  Status Quarantine(int64_t id, const std::string& reason);
};

KernelCache::KernelCache(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
KernelCache::~KernelCache() = default;

const std::string& KernelCache::path() const { return impl_->path; }
TaskQueue& KernelCache::tasks() { return *impl_->tasks; }
const TaskQueue& KernelCache::tasks() const { return *impl_->tasks; }
MeasurementLog& KernelCache::measurements() { return *impl_->measurements; }
const MeasurementLog& KernelCache::measurements() const { return *impl_->measurements; }
CheckpointStore& KernelCache::checkpoints() { return *impl_->checkpoints; }
int KernelCache::schema_version() const { return impl_->version; }
uint64_t KernelCache::size_limit() const { return impl_->size_limit; }

Status KernelCache::Impl::Migrate(int from, uint64_t default_limit, int to) {
  KJIT_ASSIGN_OR_RETURN(Transaction txn, Transaction::Begin(db));
  // Re-read inside the write lock: another process may have migrated meanwhile.
  int current = from;
  {
    KJIT_ASSIGN_OR_RETURN(Statement has_meta,
                          db.Prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"));
    KJIT_ASSIGN_OR_RETURN(bool meta_exists, has_meta.Step());
    if (meta_exists) {
      KJIT_ASSIGN_OR_RETURN(Statement s, db.Prepare("SELECT value FROM meta WHERE name = 'schema_version'"));
      KJIT_ASSIGN_OR_RETURN(bool row, s.Step());
      if (row) current = std::atoi(s.Text(0).c_str());
    }
  }
  if (current >= to) return txn.Commit();  // another process got here first
  for (int v = current; v < to; ++v) {
    KJIT_RETURN_IF_ERROR(db.Exec(kMigrations[v]).WithContext("migrating the cache schema from version " +
                                                              std::to_string(v)));
  }
  if (current == 0) {
    KJIT_ASSIGN_OR_RETURN(Statement s, db.Prepare("INSERT INTO meta (name, value) VALUES (?, ?)"));
    const std::pair<std::string, std::string> rows[] = {{"magic", kMagic},
                                                        {"size_limit_bytes", std::to_string(default_limit)},
                                                        {"total_bytes", "0"},
                                                        {"created_ms", std::to_string(NowMs())}};
    for (const auto& [k, v] : rows) {
      s.BindText(1, k).BindText(2, v);
      KJIT_RETURN_IF_ERROR(s.Run());
      s.Reset();
    }
  }
  KJIT_ASSIGN_OR_RETURN(
      Statement set, db.Prepare("INSERT OR REPLACE INTO meta (name, value) VALUES ('schema_version', ?)"));
  set.BindText(1, std::to_string(to));
  KJIT_RETURN_IF_ERROR(set.Run());
  return txn.Commit();
}

Status KernelCache::CreateAtSchemaVersion(const std::string& path, int version) {
  if (version < 1 || version > kSchemaVersion) return InvalidArgument("no schema version " + std::to_string(version));
  if (FileExists(path)) return InvalidArgument(path + " exists");
  Impl impl;
  impl.path = path;
  KJIT_ASSIGN_OR_RETURN(impl.db, Database::Open(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                                                std::chrono::milliseconds(5000)));
  KJIT_RETURN_IF_ERROR(impl.db.Exec("PRAGMA journal_mode = WAL"));
  return impl.Migrate(0, 1ull << 30, version);
}

Result<std::unique_ptr<KernelCache>> KernelCache::Open(const OpenOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->path = options.path.empty() ? DefaultCachePath() : options.path;
  impl->read_only = options.read_only;
  const bool exists = FileExists(impl->path);
  if (!exists && (options.read_only || !options.create)) {
    return NotFound("no kernel cache at " + impl->path +
                    " (nothing has been cached yet; set KJIT_CACHE or --cache to use another)");
  }
  if (!exists) {
    const std::string dir = ParentDir(impl->path);
    if (!dir.empty()) KJIT_RETURN_IF_ERROR(MakeDirectories(dir, 0700));
  }
  const int flags = options.read_only ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  KJIT_ASSIGN_OR_RETURN(impl->db, Database::Open(impl->path, flags, options.busy_timeout));
  Database& db = impl->db;

  // Is this a kjit cache, and of which version? Any read fails on a file that
  // is not an SQLite database at all.
  std::vector<std::string> tables;
  {
    auto s = db.Prepare("SELECT name FROM sqlite_master WHERE type = 'table'");
    if (!s.ok()) return s.status().WithContext(impl->path + " is not a kjit cache");
    while (true) {
      auto row = s->Step();
      if (!row.ok()) return row.status().WithContext(impl->path + " is not a kjit cache");
      if (!*row) break;
      tables.push_back(s->Text(0));
    }
  }
  int version = 0;
  if (!tables.empty()) {
    const bool has_meta = std::find(tables.begin(), tables.end(), "meta") != tables.end();
    std::string magic, version_text, limit_text;
    if (has_meta) {
      KJIT_ASSIGN_OR_RETURN(Statement s, db.Prepare("SELECT name, value FROM meta"));
      while (true) {
        KJIT_ASSIGN_OR_RETURN(bool row, s.Step());
        if (!row) break;
        const std::string name = s.Text(0);
        if (name == "magic") magic = s.Text(1);
        if (name == "schema_version") version_text = s.Text(1);
        if (name == "size_limit_bytes") limit_text = s.Text(1);
      }
    }
    if (magic != kMagic || version_text.empty()) {
      return Corruption(impl->path + " is an SQLite database but not a kjit cache (no kjit meta table)");
    }
    version = std::atoi(version_text.c_str());
    if (version > kSchemaVersion) {
      return Status(StatusCode::kInvalidArgument,
                    impl->path + " has cache schema version " + std::to_string(version) + "; this kjit reads up to " +
                        std::to_string(kSchemaVersion) + ". Update kjit, or point KJIT_CACHE at another file.");
    }
    impl->size_limit = std::strtoull(limit_text.c_str(), nullptr, 10);
  }
  if (version < kSchemaVersion) {
    if (options.read_only) {
      return Status(StatusCode::kInvalidArgument, impl->path + " has cache schema version " + std::to_string(version) +
                                                      " and must be migrated; open it once without read-only");
    }
    // WAL lets readers go on while one process writes; NORMAL sync keeps the
    // file consistent after a crash at the price of possibly losing the last
    // commits on power loss, which a cache can afford.
    if (version == 0) KJIT_RETURN_IF_ERROR(db.Exec("PRAGMA journal_mode = WAL"));
    KJIT_RETURN_IF_ERROR(impl->Migrate(version, options.default_size_limit_bytes));
    if (version == 0) impl->size_limit = options.default_size_limit_bytes;
  }
  if (!options.read_only) KJIT_RETURN_IF_ERROR(db.Exec("PRAGMA synchronous = NORMAL"));
  impl->version = kSchemaVersion;
  impl->tasks = NewSqliteTaskQueue(*impl);
  impl->measurements = NewSqliteMeasurementLog(*impl);
  impl->checkpoints = NewSqliteCheckpointStore(*impl);
  return std::unique_ptr<KernelCache>(new KernelCache(std::move(impl)));
}

// ---------------------------------------------------------------- kernels

Result<uint64_t> KernelCache::Impl::TotalBytes() {
  KJIT_ASSIGN_OR_RETURN(Statement s, db.Prepare("SELECT CAST(value AS INTEGER) FROM meta WHERE name = 'total_bytes'"));
  KJIT_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return Corruption(path + ": the cache's byte total is missing from its meta table");
  return static_cast<uint64_t>(std::max<int64_t>(0, s.Int(0)));
}

Result<EvictReport> KernelCache::Impl::EvictLocked(uint64_t target) {
  EvictReport rep;
  KJIT_ASSIGN_OR_RETURN(uint64_t total, TotalBytes());
  if (total > target) {
    KJIT_ASSIGN_OR_RETURN(Statement s, db.Prepare("SELECT id, size_bytes FROM kernels ORDER BY last_used_ms, id"));
    std::vector<int64_t> victims;
    while (total > target) {
      KJIT_ASSIGN_OR_RETURN(bool row, s.Step());
      if (!row) break;
      victims.push_back(s.Int(0));
      const auto bytes = static_cast<uint64_t>(s.Int(1));
      total -= std::min(total, bytes);
      rep.freed_bytes += bytes;
    }
    KJIT_ASSIGN_OR_RETURN(Statement del, db.Prepare("DELETE FROM kernels WHERE id = ?"));
    for (int64_t id : victims) {
      del.Bind(1, id);
      KJIT_RETURN_IF_ERROR(del.Run());
      del.Reset();
    }
    rep.removed = victims.size();
  }
  rep.remaining_bytes = total;
  return rep;
}

Result<int64_t> KernelCache::Impl::InsertLocked(KernelRecord r, bool keep_checksums) {
  KJIT_ASSIGN_OR_RETURN(OpKey key, OpKey::Decode(r.key_bytes));
  r.key_hash = key.Hash();
  r.key_text = key.ToString();
  r.op = key.OpName();
  r.arch = key.arch;
  const int64_t now = NowMs();
  if (r.created_unix_ms == 0) r.created_unix_ms = now;
  if (r.last_used_unix_ms == 0) r.last_used_unix_ms = r.created_unix_ms;
  if (!keep_checksums) {
    r.cubin_checksum = r.ComputeCubinChecksum();
    r.record_checksum = r.ComputeRecordChecksum();
  }
  const Hash128 serve = r.ComputeServeChecksum();

  // NULL for the id, a parameter for every other column of kKernelColumns.
  std::string placeholders = "NULL";
  for (const char* c = kKernelColumns; *c != '\0'; ++c) {
    if (*c == ',') placeholders += ", ?";
  }
  KJIT_ASSIGN_OR_RETURN(Statement ins,
                        db.Prepare(std::string("INSERT INTO kernels (") + kKernelColumns + ") VALUES (" + placeholders + ")"));
  int c = 1;
  ins.BindBlob(c++, HashBlob(r.key_hash));
  ins.BindBlob(c++, r.key_bytes);
  ins.BindText(c++, r.key_text);
  ins.BindText(c++, r.op);
  ins.Bind(c++, int64_t{r.arch});
  ins.Bind(c++, static_cast<int64_t>(r.status));
  ins.BindText(c++, r.status_reason);
  ins.BindText(c++, r.source);
  ins.BindText(c++, OptionsToJson(r.compile_options).dump());
  ins.BindText(c++, r.entry_point);
  for (uint32_t g : r.launch.grid) ins.Bind(c++, int64_t{g});
  for (uint32_t b : r.launch.block) ins.Bind(c++, int64_t{b});
  ins.Bind(c++, int64_t{r.launch.dynamic_shared_bytes});
  ins.BindText(c++, r.design.family);
  ins.BindText(c++, r.design.policy_version);
  ins.BindText(c++, ToJson(r.design).dump());
  ins.BindText(c++, ToJson(r.timing).dump());
  ins.BindText(c++, ToJson(r.baseline).dump());
  ins.Bind(c++, r.timing.median_us);
  ins.Bind(c++, r.baseline.median_us);
  ins.BindText(c++, ToJson(r.verification).dump());
  ins.Bind(c++, int64_t{r.toolchain.driver_version});
  ins.Bind(c++, int64_t{r.toolchain.nvrtc_major});
  ins.Bind(c++, int64_t{r.toolchain.nvrtc_minor});
  ins.Bind(c++, int64_t{r.toolchain.codegen_version});
  ins.BindBlob(c++, r.cubin);
  ins.BindBlob(c++, HashBlob(r.cubin_checksum));
  ins.BindBlob(c++, HashBlob(serve));
  ins.BindBlob(c++, HashBlob(r.record_checksum));
  ins.Bind(c++, static_cast<int64_t>(r.size_bytes()));
  ins.Bind(c++, r.created_unix_ms);
  ins.Bind(c++, r.last_used_unix_ms);
  ins.Bind(c++, static_cast<int64_t>(r.use_count));
  ins.Bind(c++, static_cast<int64_t>(r.launch.workspace_bytes));
  ins.BindText(c++, r.torch_version);
  KJIT_RETURN_IF_ERROR(ins.Run());
  return db.LastInsertId();
}

Result<int64_t> KernelCache::Insert(KernelRecord record) {
  if (impl_->read_only) return InvalidArgument("the kernel cache was opened read-only");
  std::lock_guard lock(impl_->mu);
  KJIT_ASSIGN_OR_RETURN(Transaction txn, Transaction::Begin(impl_->db));
  KJIT_ASSIGN_OR_RETURN(int64_t id, impl_->InsertLocked(std::move(record), /*keep_checksums=*/false));
  if (impl_->size_limit > 0) KJIT_RETURN_IF_ERROR(impl_->EvictLocked(impl_->size_limit).status());
  KJIT_RETURN_IF_ERROR(txn.Commit());
  return id;
}

Status KernelCache::Impl::Quarantine(int64_t id, const std::string& reason) {
  if (read_only) return Status::Ok();  // a read-only reader skips the record; a writer will mark it
  KJIT_ASSIGN_OR_RETURN(Statement s, db.Prepare("UPDATE kernels SET status = ?, status_reason = ? WHERE id = ?"));
  s.Bind(1, static_cast<int64_t>(RecordStatus::kQuarantined)).BindText(2, reason).Bind(3, id);
  return s.Run();
}

Status KernelCache::SetStatus(int64_t id, RecordStatus status, const std::string& reason) {
  if (impl_->read_only) return InvalidArgument("the kernel cache was opened read-only");
  std::lock_guard lock(impl_->mu);
  KJIT_ASSIGN_OR_RETURN(Statement s, impl_->db.Prepare("UPDATE kernels SET status = ?, status_reason = ? WHERE id = ?"));
  s.Bind(1, static_cast<int64_t>(status)).BindText(2, reason).Bind(3, id);
  KJIT_RETURN_IF_ERROR(s.Run());
  if (impl_->db.Changes() == 0) return NotFound("no kernel record " + std::to_string(id));
  return Status::Ok();
}

Result<int64_t> KernelCache::FindVerified(const KernelRecord& record) const {
  KJIT_ASSIGN_OR_RETURN(OpKey key, OpKey::Decode(record.key_bytes));
  KernelRecord r = record;
  r.cubin_checksum = r.ComputeCubinChecksum();
  std::lock_guard lock(impl_->mu);
  KJIT_ASSIGN_OR_RETURN(Statement s, impl_->db.Prepare("SELECT id, timing FROM kernels WHERE key_hash = ? AND "
                                                       "status = 1 AND serve_checksum = ? ORDER BY id"));
  s.BindBlob(1, HashBlob(key.Hash())).BindBlob(2, HashBlob(r.ComputeServeChecksum()));
  const std::string model = TimedModel(record.timing.device);
  while (true) {
    KJIT_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return int64_t{0};
    if (model.empty()) return s.Int(0);
    auto timing = TimingFromJson(s.Text(1));
    if (timing.ok() && TimedModel(timing->device) == model) return s.Int(0);
  }
}

Result<KernelCache::Best> KernelCache::BestVerified(const Hash128& key_hash, const std::string& model,
                                                   const std::string& torch_version) const {
  std::lock_guard lock(impl_->mu);
  KJIT_ASSIGN_OR_RETURN(Statement s, impl_->db.Prepare("SELECT id, median_us, timing, torch_version FROM kernels "
                                                       "WHERE key_hash = ? AND status = 1 ORDER BY median_us, id"));
  s.BindBlob(1, HashBlob(key_hash));
  while (true) {
    KJIT_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return Best{};
    if (!torch_version.empty() && s.Text(3) != torch_version) continue;
    if (!model.empty()) {
      auto timing = TimingFromJson(s.Text(2));
      const std::string timed = timing.ok() ? TimedModel(timing->device) : std::string();
      if (!timed.empty() && timed != model) continue;
    }
    return Best{s.Int(0), s.Double(1)};
  }
}

Result<KernelRecord> KernelCache::Get(int64_t id) const {
  std::lock_guard lock(impl_->mu);
  KJIT_ASSIGN_OR_RETURN(Statement s,
                        impl_->db.Prepare(std::string("SELECT ") + kKernelColumns + " FROM kernels WHERE id = ?"));
  s.Bind(1, id);
  KJIT_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return NotFound("no kernel record " + std::to_string(id));
  return ReadRecord(s);
}

Status KernelCache::Remove(int64_t id) {
  if (impl_->read_only) return InvalidArgument("the kernel cache was opened read-only");
  std::lock_guard lock(impl_->mu);
  KJIT_ASSIGN_OR_RETURN(Statement s, impl_->db.Prepare("DELETE FROM kernels WHERE id = ?"));
  s.Bind(1, id);
  KJIT_RETURN_IF_ERROR(s.Run());
  if (impl_->db.Changes() == 0) return NotFound("no kernel record " + std::to_string(id));
  return Status::Ok();
}

Result<ServedKernel> KernelCache::Lookup(const Hash128& key_hash, const ReaderContext& reader) {
  std::lock_guard lock(impl_->mu);
  if (!impl_->lookup) {
    KJIT_ASSIGN_OR_RETURN(
        impl_->lookup,
        impl_->db.Prepare("SELECT id, key_bytes, entry_point, grid_x, grid_y, grid_z, block_x, block_y, block_z, "
                          "dynamic_shared_bytes, arch, driver_version, nvrtc_major, nvrtc_minor, codegen_version, "
                          "cubin, cubin_checksum, serve_checksum, workspace_bytes, timing, torch_version, verification FROM kernels WHERE "
                          "key_hash = ? AND status = 1 "
                          "ORDER BY median_us, id"));
  }
  Statement& s = *impl_->lookup;
  s.Reset();
  s.BindBlob(1, HashBlob(key_hash));
  std::string why_not;
  std::vector<std::pair<int64_t, std::string>> bad;
  // Rows come fastest first: the first good one timed on the reader's model is served; the
  // first good one of any model is kept in case none is.
  std::optional<ServedKernel> served;
  std::optional<ServedKernel> other_model;
  std::string other_model_name;
  while (!served) {
    auto row = s.Step();
    if (!row.ok()) {
      s.Reset();
      return row.status();
    }
    if (!*row) break;
    KernelRecord r;
    r.key_bytes = s.Blob(1);
    r.entry_point = s.Text(2);
    for (int i = 0; i < 3; ++i) r.launch.grid[i] = static_cast<uint32_t>(s.Int(3 + i));
    for (int i = 0; i < 3; ++i) r.launch.block[i] = static_cast<uint32_t>(s.Int(6 + i));
    r.launch.dynamic_shared_bytes = static_cast<uint32_t>(s.Int(9));
    r.launch.workspace_bytes = static_cast<uint64_t>(s.Int(18));
    r.arch = static_cast<int>(s.Int(10));
    r.toolchain = {static_cast<int>(s.Int(11)), static_cast<int>(s.Int(12)), static_cast<int>(s.Int(13)),
                   static_cast<int>(s.Int(14))};
    r.torch_version = s.Text(20);
    const std::string mismatch = MismatchReason(r.arch, r.toolchain, r.torch_version, reader);
    if (!mismatch.empty()) {
      why_not = mismatch;
      continue;
    }
    bool readers_model = true;
    std::string model;
    if (!reader.device_model.empty()) {
      // Only the record's checksum guards the timing text: one that does not parse
      // counts as another model's, and Verify finds what is wrong with it.
      auto timing = TimingFromJson(s.Text(19));
      if (timing.ok()) model = TimedModel(timing->device);
      readers_model = timing.ok() && model == reader.device_model;
      if (!readers_model && other_model) continue;
    }
    const std::string_view cubin = s.BlobView(15);
    r.cubin_checksum = BlobHash(s.BlobView(16));
    if (HashBytes(cubin) != r.cubin_checksum) {
      bad.emplace_back(s.Int(0), "CUBIN checksum mismatch");
      continue;
    }
    if (r.ComputeServeChecksum() != BlobHash(s.BlobView(17))) {
      bad.emplace_back(s.Int(0), "serve checksum mismatch");
      continue;
    }
    auto verification = VerificationFromJson(s.Text(21));
    if (!verification.ok()) {
      bad.emplace_back(s.Int(0), "its verification record does not parse");
      continue;
    }
    ServedKernel k{s.Int(0), std::string(cubin), std::move(r.entry_point), r.launch, {}, std::move(verification->outputs)};
    if (!readers_model) other_model_name = model.empty() ? "?" : model;
    (readers_model ? served : other_model) = std::move(k);
  }
  s.Reset();
  for (const auto& [id, reason] : bad) {
    KJIT_RETURN_IF_ERROR(impl_->Quarantine(id, reason + " (found by lookup)"));
    why_not = "a record failed its checksum and was quarantined";
  }
  if (served) return *served;
  if (other_model) {
    other_model->timed_on_other_model = other_model_name;
    return *other_model;
  }
  return NotFound(why_not.empty() ? "no verified kernel for this key" : "no kernel served: " + why_not);
}

Status KernelCache::RecordUses(std::span<const UseReport> uses, const RunInfo* run) {
  if (impl_->read_only) return InvalidArgument("the kernel cache was opened read-only");
  if (uses.empty()) return Status::Ok();
  if (run != nullptr && run->id.empty()) return InvalidArgument("a use report's run has no id");
  std::lock_guard lock(impl_->mu);
  KJIT_ASSIGN_OR_RETURN(Transaction txn, Transaction::Begin(impl_->db));
  KJIT_ASSIGN_OR_RETURN(Statement stats,
                        impl_->db.Prepare("INSERT INTO key_stats (key_hash, key_text, hits, misses, last_seen_ms) "
                                          "VALUES (?, ?, ?, ?, ?) ON CONFLICT (key_hash) DO UPDATE SET "
                                          "hits = hits + excluded.hits, misses = misses + excluded.misses, "
                                          "last_seen_ms = excluded.last_seen_ms, key_text = CASE WHEN "
                                          "excluded.key_text != '' THEN excluded.key_text ELSE key_text END"));
  KJIT_ASSIGN_OR_RETURN(Statement used, impl_->db.Prepare("UPDATE kernels SET use_count = use_count + ?, "
                                                          "last_used_ms = ? WHERE id = ?"));
  const int64_t now = NowMs();
  for (const auto& u : uses) {
    stats.BindBlob(1, HashBlob(u.key_hash)).BindText(2, u.key_text);
    stats.Bind(3, static_cast<int64_t>(u.hits)).Bind(4, static_cast<int64_t>(u.misses)).Bind(5, now);
    KJIT_RETURN_IF_ERROR(stats.Run());
    stats.Reset();
    if (u.record_id != 0 && u.hits > 0) {
      used.Bind(1, static_cast<int64_t>(u.hits)).Bind(2, now).Bind(3, u.record_id);
      KJIT_RETURN_IF_ERROR(used.Run());
      used.Reset();
    }
  }
  if (run != nullptr) {
    KJIT_ASSIGN_OR_RETURN(Statement known, impl_->db.Prepare("SELECT 1 FROM runs WHERE id = ?"));
    known.BindText(1, run->id);
    KJIT_ASSIGN_OR_RETURN(bool existed, known.Step());
    KJIT_ASSIGN_OR_RETURN(Statement upsert,
                          impl_->db.Prepare("INSERT INTO runs (id, pid, program, started_ms, last_seen_ms) VALUES "
                                            "(?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET last_seen_ms = "
                                            "excluded.last_seen_ms, started_ms = MIN(started_ms, excluded.started_ms)"));
    upsert.BindText(1, run->id).Bind(2, static_cast<int64_t>(run->pid)).BindText(3, run->program);
    upsert.Bind(4, run->started_unix_ms > 0 ? run->started_unix_ms : now).Bind(5, now);
    KJIT_RETURN_IF_ERROR(upsert.Run());
    KJIT_ASSIGN_OR_RETURN(Statement counts,
                          impl_->db.Prepare("INSERT INTO run_uses (run_id, key_hash, hits, misses) VALUES (?, ?, ?, ?) "
                                            "ON CONFLICT (run_id, key_hash) DO UPDATE SET hits = hits + "
                                            "excluded.hits, misses = misses + excluded.misses"));
    for (const auto& u : uses) {
      counts.BindText(1, run->id).BindBlob(2, HashBlob(u.key_hash));
      counts.Bind(3, static_cast<int64_t>(u.hits)).Bind(4, static_cast<int64_t>(u.misses));
      KJIT_RETURN_IF_ERROR(counts.Run());
      counts.Reset();
    }
    // A new run pushes the oldest out, so the table stays bounded however many programs run.
    if (!existed) {
      KJIT_RETURN_IF_ERROR(impl_->db.Exec(
          "DELETE FROM runs WHERE id IN (SELECT id FROM runs ORDER BY " + kRunsNewestFirst + " LIMIT -1 OFFSET " +
          std::to_string(kMaxRunsKept) + ");"
          "DELETE FROM run_uses WHERE run_id NOT IN (SELECT id FROM runs);"));
    }
  }
  return txn.Commit();
}

namespace {

// Rows of (key_hash, key_text, hits, misses, last_seen_ms), as ListKeyStats and ListRunKeyStats select them.
Result<std::vector<KeyStats>> ReadKeyStats(Statement& s) {
  std::vector<KeyStats> out;
  while (true) {
    KJIT_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back({BlobHash(s.BlobView(0)), s.Text(1), static_cast<uint64_t>(s.Int(2)), static_cast<uint64_t>(s.Int(3)),
                   s.Int(4)});
  }
  return out;
}

}  // namespace

Result<std::vector<RunSummary>> KernelCache::ListRuns(int limit) const {
  std::lock_guard lock(impl_->mu);
  KJIT_ASSIGN_OR_RETURN(Statement s,
                        impl_->db.Prepare("SELECT runs.id, runs.pid, runs.program, runs.started_ms, runs.last_seen_ms, "
                                          "COUNT(u.key_hash), COALESCE(SUM(u.hits), 0), COALESCE(SUM(u.misses), 0) "
                                          "FROM runs LEFT JOIN run_uses u ON u.run_id = runs.id GROUP BY runs.id "
                                          "ORDER BY " + kRunsNewestFirst + " LIMIT ?"));
  s.Bind(1, limit > 0 ? static_cast<int64_t>(limit) : int64_t{-1});
  std::vector<RunSummary> out;
  while (true) {
    KJIT_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back({s.Text(0), static_cast<uint32_t>(s.Int(1)), s.Text(2), s.Int(3), s.Int(4),
                   static_cast<uint64_t>(s.Int(5)), static_cast<uint64_t>(s.Int(6)), static_cast<uint64_t>(s.Int(7))});
  }
  return out;
}

Result<std::vector<KeyStats>> KernelCache::ListRunKeyStats(const std::string& run_id) const {
  std::lock_guard lock(impl_->mu);
  KJIT_ASSIGN_OR_RETURN(Statement known, impl_->db.Prepare("SELECT 1 FROM runs WHERE id = ?"));
  known.BindText(1, run_id);
  KJIT_ASSIGN_OR_RETURN(bool found, known.Step());
  if (!found) return NotFound("no run \"" + run_id + "\" in the cache (`kjit report --runs` lists the kept runs)");
  KJIT_ASSIGN_OR_RETURN(Statement s,
                        impl_->db.Prepare("SELECT u.key_hash, COALESCE(k.key_text, ''), u.hits, u.misses, r.last_seen_ms "
                                          "FROM run_uses u JOIN runs r ON r.id = u.run_id LEFT JOIN key_stats k ON "
                                          "k.key_hash = u.key_hash WHERE u.run_id = ? ORDER BY u.hits + u.misses DESC, "
                                          "u.key_hash"));
  s.BindText(1, run_id);
  return ReadKeyStats(s);
}

Result<std::vector<KeyStats>> KernelCache::ListKeyStats() const {
  std::lock_guard lock(impl_->mu);
  KJIT_ASSIGN_OR_RETURN(Statement s, impl_->db.Prepare("SELECT key_hash, key_text, hits, misses, last_seen_ms FROM "
                                                       "key_stats ORDER BY hits + misses DESC, key_hash"));
  return ReadKeyStats(s);
}

Result<std::vector<int64_t>> KernelCache::Resolve(const std::string& text) const {
  if (text.empty()) return InvalidArgument("empty record key");
  std::lock_guard lock(impl_->mu);
  std::vector<int64_t> ids;
  if (std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); }) && text.size() < 12) {
    KJIT_ASSIGN_OR_RETURN(Statement s, impl_->db.Prepare("SELECT id FROM kernels WHERE id = ?"));
    s.Bind(1, static_cast<int64_t>(std::stoll(text)));
    KJIT_ASSIGN_OR_RETURN(bool row, s.Step());
    if (row) ids.push_back(s.Int(0));
    if (!ids.empty()) return ids;
  }
  if (text.size() < 4 || text.size() > 32 ||
      !std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isxdigit(c); })) {
    if (ids.empty()) return NotFound("no record matches '" + text + "' (give a record id or 4+ hex digits of a key hash)");
  }
  std::string upper = text;
  for (auto& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  KJIT_ASSIGN_OR_RETURN(Statement s, impl_->db.Prepare("SELECT id FROM kernels WHERE hex(key_hash) LIKE ? ORDER BY id"));
  s.BindText(1, upper + "%");
  while (true) {
    KJIT_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    ids.push_back(s.Int(0));
  }
  if (ids.empty()) return NotFound("no record matches '" + text + "'");
  return ids;
}

Result<std::vector<RecordSummary>> KernelCache::List(const ListFilter& filter) const {
  std::lock_guard lock(impl_->mu);
  const Filter f = MakeFilter(filter);
  std::string order;
  switch (filter.sort) {
    case ListFilter::SortBy::kSpeedup: order = "speedup"; break;
    case ListFilter::SortBy::kLastUse: order = "last_used_ms"; break;
    case ListFilter::SortBy::kSize: order = "size_bytes"; break;
    case ListFilter::SortBy::kCreated: order = "created_ms"; break;
  }
  const char* dir = filter.descending ? " DESC" : " ASC";
  std::string q = std::string("SELECT ") + kSummaryColumns + " FROM kernels" + f.where + " ORDER BY " + order + dir +
                  ", id" + dir;
  if (filter.limit > 0) q += " LIMIT " + std::to_string(filter.limit);
  KJIT_ASSIGN_OR_RETURN(Statement s, impl_->db.Prepare(q));
  BindFilter(s, f);
  std::vector<RecordSummary> out;
  while (true) {
    KJIT_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back(ReadSummary(s));
  }
  return out;
}

Result<CacheStats> KernelCache::Stats(int best_n) const {
  CacheStats st;
  {
    std::lock_guard lock(impl_->mu);
    KJIT_ASSIGN_OR_RETURN(Statement s, impl_->db.Prepare(
                                           "SELECT status, COUNT(*), COALESCE(SUM(size_bytes), 0) FROM kernels "
                                           "GROUP BY status"));
    while (true) {
      KJIT_ASSIGN_OR_RETURN(bool row, s.Step());
      if (!row) break;
      const int64_t status = s.Int(0);
      if (status >= 0 && status < 4) st.by_status[status] = static_cast<uint64_t>(s.Int(1));
      st.records += static_cast<uint64_t>(s.Int(1));
      st.bytes += static_cast<uint64_t>(s.Int(2));
    }
    KJIT_ASSIGN_OR_RETURN(Statement k, impl_->db.Prepare(
                                           "SELECT COUNT(*), COALESCE(SUM(hits), 0), COALESCE(SUM(misses), 0) FROM "
                                           "key_stats"));
    KJIT_ASSIGN_OR_RETURN(bool row, k.Step());
    if (row) {
      st.keys_seen = static_cast<uint64_t>(k.Int(0));
      st.hits = static_cast<uint64_t>(k.Int(1));
      st.misses = static_cast<uint64_t>(k.Int(2));
    }
  }
  st.size_limit_bytes = impl_->size_limit;
  st.file_bytes = FileSize(impl_->path) + FileSize(impl_->path + "-wal");
  ListFilter best;
  best.status = RecordStatus::kVerified;
  best.sort = ListFilter::SortBy::kSpeedup;
  best.limit = best_n;
  KJIT_ASSIGN_OR_RETURN(st.best, List(best));
  return st;
}

Result<VerifyReport> KernelCache::Verify(const ReaderContext* reader) {
  VerifyReport rep;
  std::lock_guard lock(impl_->mu);
  {
    KJIT_ASSIGN_OR_RETURN(Statement s, impl_->db.Prepare("PRAGMA integrity_check"));
    std::string message;
    while (true) {
      KJIT_ASSIGN_OR_RETURN(bool row, s.Step());
      if (!row) break;
      const std::string line = s.Text(0);
      if (line != "ok") {
        rep.integrity_ok = false;
        if (message.size() < 2000) message += line + "\n";
      }
    }
    rep.integrity_message = message;
  }
  KJIT_ASSIGN_OR_RETURN(Statement s, impl_->db.Prepare(std::string("SELECT ") + kKernelColumns +
                                                       " FROM kernels ORDER BY id"));
  std::vector<VerifyReport::Problem> bad;
  while (true) {
    KJIT_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    ++rep.checked;
    const int64_t id = s.Int(0);
    const std::string key_text = s.Text(3);
    const auto status = static_cast<RecordStatus>(s.Int(6));
    auto record = ReadRecord(s);
    Status check = record.ok() ? CheckRecord(*record, s.BlobView(32)) : record.status();
    if (!check.ok()) {
      if (status != RecordStatus::kQuarantined) bad.push_back({id, key_text, check.message()});
      continue;
    }
    if (reader != nullptr) {
      const std::string mismatch = MismatchReason(record->arch, record->toolchain, record->torch_version, *reader);
      if (!mismatch.empty()) rep.mismatched.push_back({id, key_text, mismatch});
    }
  }
  for (const auto& p : bad) KJIT_RETURN_IF_ERROR(impl_->Quarantine(p.id, p.reason + " (found by verify)"));
  rep.quarantined = std::move(bad);
  if (!impl_->read_only) {
    // The running byte total is derived data: recompute it rather than trust it.
    KJIT_RETURN_IF_ERROR(impl_->db.Exec("UPDATE meta SET value = (SELECT COALESCE(SUM(size_bytes), 0) FROM kernels) "
                                        "WHERE name = 'total_bytes'"));
  }
  return rep;
}

Result<EvictReport> KernelCache::Evict(uint64_t target_bytes) {
  if (impl_->read_only) return InvalidArgument("the kernel cache was opened read-only");
  std::lock_guard lock(impl_->mu);
  KJIT_ASSIGN_OR_RETURN(Transaction txn, Transaction::Begin(impl_->db));
  KJIT_ASSIGN_OR_RETURN(EvictReport rep, impl_->EvictLocked(target_bytes));
  KJIT_RETURN_IF_ERROR(txn.Commit());
  return rep;
}

Status KernelCache::SetSizeLimit(uint64_t bytes) {
  if (impl_->read_only) return InvalidArgument("the kernel cache was opened read-only");
  std::lock_guard lock(impl_->mu);
  KJIT_ASSIGN_OR_RETURN(Statement s,
                        impl_->db.Prepare("INSERT OR REPLACE INTO meta (name, value) VALUES ('size_limit_bytes', ?)"));
  s.BindText(1, std::to_string(bytes));
  KJIT_RETURN_IF_ERROR(s.Run());
  impl_->size_limit = bytes;
  return Status::Ok();
}

// ---------------------------------------------------------------- export / import

Result<uint64_t> KernelCache::Export(const std::string& file, const ListFilter& filter) const {
  if (FileExists(file)) return InvalidArgument(file + " already exists; export writes a new file");
  OpenOptions o;
  o.path = file;
  KJIT_ASSIGN_OR_RETURN(auto target, Open(o));  // a new cache file with the current schema
  // The copy runs on the target's connection, reading this cache through
  // ATTACH, so it works also when this cache was opened read-only.
  Impl& t = *target->impl_;
  std::lock_guard lock(t.mu);
  KJIT_ASSIGN_OR_RETURN(Statement attach, t.db.Prepare("ATTACH DATABASE ? AS export_source"));
  attach.BindText(1, impl_->path);
  KJIT_RETURN_IF_ERROR(attach.Run());
  const Filter f = MakeFilter(filter);
  Status copied = [&]() -> Status {
    KJIT_ASSIGN_OR_RETURN(Statement copy, t.db.Prepare(std::string("INSERT INTO main.kernels SELECT ") +
                                                       kKernelColumns + " FROM export_source.kernels" + f.where));
    BindFilter(copy, f);
    return copy.Run();
  }();
  const uint64_t n = copied.ok() ? static_cast<uint64_t>(t.db.Changes()) : 0;
  KJIT_RETURN_IF_ERROR(t.db.Exec("DETACH DATABASE export_source"));
  KJIT_RETURN_IF_ERROR(copied);
  return n;
}

Result<ImportReport> KernelCache::Import(const std::string& file, const ImportOptions& options) {
  if (impl_->read_only) return InvalidArgument("the kernel cache was opened read-only");
  OpenOptions o;
  o.path = file;
  o.read_only = true;
  auto source = Open(o);
  if (!source.ok()) return source.status().WithContext("cannot import " + file);
  if ((*source)->path() == impl_->path) return InvalidArgument("cannot import a cache into itself");

  ImportReport rep;
  std::vector<KernelRecord> good;
  {
    std::lock_guard lock((*source)->impl_->mu);
    KJIT_ASSIGN_OR_RETURN(Statement s, (*source)->impl_->db.Prepare(std::string("SELECT ") + kKernelColumns +
                                                                     " FROM kernels ORDER BY id"));
    while (true) {
      KJIT_ASSIGN_OR_RETURN(bool row, s.Step());
      if (!row) break;
      const std::string key_text = s.Text(3);
      auto record = ReadRecord(s);
      Status check = record.ok() ? CheckRecord(*record, s.BlobView(32)) : record.status();
      if (check.ok() && record->status == RecordStatus::kQuarantined) check = Corruption("it is quarantined");
      if (!check.ok()) {
        rep.rejected.push_back(key_text + ": " + check.message());
        continue;
      }
      good.push_back(std::move(*record));
    }
  }
  std::lock_guard lock(impl_->mu);
  KJIT_ASSIGN_OR_RETURN(Transaction txn, Transaction::Begin(impl_->db));
  KJIT_ASSIGN_OR_RETURN(Statement dup, impl_->db.Prepare("SELECT 1 FROM kernels WHERE key_hash = ? AND "
                                                         "cubin_checksum = ? AND record_checksum = ?"));
  for (auto& r : good) {
    dup.BindBlob(1, HashBlob(r.key_hash)).BindBlob(2, HashBlob(r.cubin_checksum)).BindBlob(3, HashBlob(r.record_checksum));
    KJIT_ASSIGN_OR_RETURN(bool exists, dup.Step());
    dup.Reset();
    if (exists) {
      ++rep.duplicates;
      continue;
    }
    r.use_count = 0;
    if (!options.trust && r.status == RecordStatus::kVerified) {
      r.status = RecordStatus::kQuarantined;
      r.status_reason = std::string(kImportedReason) + file + ": not verified on this machine yet (kjitd verifies and "
                        "times it on this GPU before anything is served it)";
      ++rep.awaiting_verification;
    }
    KJIT_RETURN_IF_ERROR(impl_->InsertLocked(std::move(r), /*keep_checksums=*/true).status());
    ++rep.imported;
  }
  if (impl_->size_limit > 0) KJIT_RETURN_IF_ERROR(impl_->EvictLocked(impl_->size_limit).status());
  KJIT_RETURN_IF_ERROR(txn.Commit());
  return rep;
}

}  // namespace kjit::cache
