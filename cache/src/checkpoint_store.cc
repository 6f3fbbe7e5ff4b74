// The checkpoint store in the cache file's `policy_checkpoints` table (checkpoint_store.h).
#include <mutex>
#include <optional>
#include <vector>

#include "sqlite_stores.h"

namespace kjit::cache {

using sql::Statement;

namespace {

class SqliteCheckpointStore final : public CheckpointStore {
 public:
  explicit SqliteCheckpointStore(Connection& c) : c_(c) {}
  Result<int64_t> PutCheckpoint(PolicyCheckpoint checkpoint) override;
  Result<PolicyCheckpoint> LatestGoodCheckpoint() override;
  Status SetCheckpointAside(int64_t id) override;

 private:
  Connection& c_;
};

Result<int64_t> SqliteCheckpointStore::PutCheckpoint(PolicyCheckpoint c) {
  std::lock_guard lock(c_.mu);
  KJIT_ASSIGN_OR_RETURN(Statement s, c_.db.Prepare("INSERT INTO policy_checkpoints (version, blob, checksum, "
                                                       "status, created_ms) VALUES (?, ?, ?, ?, ?)"));
  s.BindText(1, c.version).BindBlob(2, c.blob).BindBlob(3, HashBlob(HashBytes(c.blob)));
  s.BindText(4, c.status.empty() ? "good" : c.status).Bind(5, c.created_unix_ms != 0 ? c.created_unix_ms : NowMs());
  KJIT_RETURN_IF_ERROR(s.Run());
  return c_.db.LastInsertId();
}

Result<PolicyCheckpoint> SqliteCheckpointStore::LatestGoodCheckpoint() {
  std::lock_guard lock(c_.mu);
  KJIT_ASSIGN_OR_RETURN(Statement s, c_.db.Prepare("SELECT id, version, blob, checksum, status, created_ms FROM "
                                                       "policy_checkpoints WHERE status = 'good' ORDER BY id DESC"));
  std::vector<int64_t> bad;
  std::optional<PolicyCheckpoint> found;
  while (!found) {
    KJIT_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    PolicyCheckpoint c;
    c.id = s.Int(0);
    c.version = s.Text(1);
    c.blob = s.Blob(2);
    c.checksum = BlobHash(s.BlobView(3));
    c.status = s.Text(4);
    c.created_unix_ms = s.Int(5);
    if (HashBytes(c.blob) != c.checksum) {
      bad.push_back(c.id);
      continue;
    }
    found = std::move(c);
  }
  s.Reset();
  if (!c_.read_only && !bad.empty()) {
    KJIT_ASSIGN_OR_RETURN(Statement u, c_.db.Prepare("UPDATE policy_checkpoints SET status = 'set_aside' WHERE id = ?"));
    for (int64_t id : bad) {
      u.Bind(1, id);
      KJIT_RETURN_IF_ERROR(u.Run());
      u.Reset();
    }
  }
  if (!found) return NotFound("no good policy checkpoint");
  return *found;
}

Status SqliteCheckpointStore::SetCheckpointAside(int64_t id) {
  std::lock_guard lock(c_.mu);
  KJIT_ASSIGN_OR_RETURN(Statement u,
                        c_.db.Prepare("UPDATE policy_checkpoints SET status = 'set_aside' WHERE id = ?"));
  u.Bind(1, id);
  KJIT_RETURN_IF_ERROR(u.Run());
  if (c_.db.Changes() == 0) return NotFound("no policy checkpoint " + std::to_string(id));
  return Status::Ok();
}

}  // namespace

std::unique_ptr<CheckpointStore> NewSqliteCheckpointStore(Connection& connection) {
  return std::make_unique<SqliteCheckpointStore>(connection);
}

}  // namespace kjit::cache
