// The task queue in the cache file's `tasks` table (task_queue.h).
#include <algorithm>
#include <mutex>
#include <optional>

#include "kjit/runtime/op_key.h"
#include "sqlite_stores.h"

namespace kjit::cache {

using sql::Database;
using sql::Statement;
using sql::Transaction;

namespace {

constexpr const char* kTaskColumns =
    "id, key_bytes, key_hash, priority, state, attempts, detail, calls, observed_us, expected_gain_us, created_ms, "
    "updated_ms, claimed_by, lease_until_ms, not_before_ms, round, calls_at_tune, trials, best_us, baseline_us, "
    "floor_us, record_id, policy_version";
constexpr const char* kTaskOrder = " ORDER BY priority DESC, expected_gain_us DESC, id";

Task ReadTask(const Statement& s) {
  Task t;
  t.id = s.Int(0);
  t.key_bytes = s.Blob(1);
  t.key_hash = BlobHash(s.BlobView(2));
  t.priority = static_cast<int>(s.Int(3));
  t.state = s.Text(4);
  t.attempts = static_cast<int>(s.Int(5));
  t.detail = s.Text(6);
  t.calls = static_cast<uint64_t>(s.Int(7));
  t.observed_us = s.Double(8);
  t.expected_gain_us = s.Double(9);
  t.created_unix_ms = s.Int(10);
  t.updated_unix_ms = s.Int(11);
  t.claimed_by = s.Text(12);
  t.lease_until_unix_ms = s.Int(13);
  t.not_before_unix_ms = s.Int(14);
  t.round = static_cast<int>(s.Int(15));
  t.calls_at_tune = static_cast<uint64_t>(s.Int(16));
  t.trials = static_cast<int>(s.Int(17));
  t.best_us = s.Double(18);
  t.baseline_us = s.Double(19);
  t.floor_us = s.Double(20);
  t.record_id = s.Int(21);
  t.policy_version = s.Text(22);
  return t;
}

// Whether a closed task comes back for another round now that it has `calls` calls.
bool ReopenOnGrowth(const std::string& state, uint64_t calls, uint64_t calls_at_tune, double best_us,
                    double floor_us) {
  if (state != "done" && state != "failed") return false;  // unfit keys stay unfit
  if (static_cast<double>(calls) < kRetuneCallsFactor * static_cast<double>(std::max<uint64_t>(calls_at_tune, 1))) {
    return false;
  }
  // A kernel already near the floor has nothing left worth a round.
  return !(best_us > 0 && floor_us > 0 && best_us <= kNearFloor * floor_us);
}

// Merges misses or a submission into the key's task (the newest row of the key), or opens one, in one
// transaction so that two processes reporting the same key at once still make one task.
Result<TaskMerge> MergeTask(Database& db, const std::string& key_bytes, uint64_t calls, double observed_us,
                            int priority, const std::string& detail, bool submitted) {
  KJIT_ASSIGN_OR_RETURN(OpKey key, OpKey::Decode(key_bytes));
  const std::string hash = HashBlob(key.Hash());
  const int64_t now = NowMs();
  KJIT_ASSIGN_OR_RETURN(Transaction txn, Transaction::Begin(db));
  KJIT_ASSIGN_OR_RETURN(Statement find,
                        db.Prepare("SELECT id, calls, observed_us, priority, state, calls_at_tune, best_us, floor_us "
                                   "FROM tasks WHERE key_hash = ? ORDER BY (state IN ('queued', 'running')) DESC, id "
                                   "DESC LIMIT 1"));
  find.BindBlob(1, hash);
  KJIT_ASSIGN_OR_RETURN(bool found, find.Step());
  TaskMerge out;
  if (found) {
    out.task_id = find.Int(0);
    out.merged = true;
    const auto old_calls = static_cast<uint64_t>(find.Int(1));
    const uint64_t total = old_calls + calls;
    // The mean time per call over every call reported so far.
    const double mean = total > 0 ? (find.Double(2) * static_cast<double>(old_calls) +
                                     observed_us * static_cast<double>(calls)) /
                                        static_cast<double>(total)
                                  : find.Double(2);
    const int new_priority = std::max(priority, static_cast<int>(find.Int(3)));
    std::string state = find.Text(4);
    const bool open = state == "queued" || state == "running";
    if (!open && (submitted || ReopenOnGrowth(state, total, static_cast<uint64_t>(find.Int(5)), find.Double(6),
                                              find.Double(7)))) {
      state = "queued";
      out.reopened = true;
    }
    find.Reset();
    KJIT_ASSIGN_OR_RETURN(Statement up, db.Prepare("UPDATE tasks SET calls = ?, observed_us = ?, expected_gain_us = "
                                                   "?, priority = ?, detail = CASE WHEN ? != '' THEN ? ELSE detail "
                                                   "END, updated_ms = ?, state = ?, not_before_ms = CASE WHEN ? THEN "
                                                   "0 ELSE not_before_ms END WHERE id = ?"));
    up.Bind(1, static_cast<int64_t>(total)).Bind(2, mean).Bind(3, mean * static_cast<double>(total));
    up.Bind(4, int64_t{new_priority}).BindText(5, detail).BindText(6, detail).Bind(7, now).BindText(8, state);
    up.Bind(9, int64_t{out.reopened}).Bind(10, out.task_id);
    KJIT_RETURN_IF_ERROR(up.Run());
  } else {
    find.Reset();
    KJIT_ASSIGN_OR_RETURN(Statement ins, db.Prepare("INSERT INTO tasks (key_hash, key_bytes, priority, state, detail, "
                                                    "calls, observed_us, expected_gain_us, created_ms, updated_ms) "
                                                    "VALUES (?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?)"));
    ins.BindBlob(1, hash).BindBlob(2, key_bytes).Bind(3, int64_t{priority}).BindText(4, detail);
    ins.Bind(5, static_cast<int64_t>(calls)).Bind(6, observed_us).Bind(7, observed_us * static_cast<double>(calls));
    ins.Bind(8, now).Bind(9, now);
    KJIT_RETURN_IF_ERROR(ins.Run());
    out.task_id = db.LastInsertId();
  }
  KJIT_RETURN_IF_ERROR(txn.Commit());
  return out;
}

Status ClaimLost(int64_t id, const std::string& claimer) {
  return Status(StatusCode::kUnavailable, "claim lost: task " + std::to_string(id) + " is no longer running under " +
                                              (claimer.empty() ? std::string("this claimer") : claimer));
}

}  // namespace

namespace {

class SqliteTaskQueue final : public TaskQueue {
 public:
  explicit SqliteTaskQueue(Connection& c) : c_(c) {}
  Result<TaskMerge> AddMiss(const std::string& key_bytes, uint64_t calls, double observed_us) override;
  Result<TaskMerge> SubmitTask(const std::string& key_bytes, int priority, const std::string& detail) override;
  Result<std::optional<Task>> ClaimTask(const ClaimOptions& claim) override;
  Status RenewClaim(int64_t id, const ClaimOptions& claim) override;
  Status CompleteTask(int64_t id, const std::string& claimer, const TaskResult& result) override;
  Status FinishTask(int64_t id, bool ok, const std::string& detail) override;
  Result<int> ReleaseClaims(const std::string& claimer_prefix) override;
  Result<Task> GetTask(int64_t id) const override;
  Result<std::vector<Task>> ListTasks(const std::string& state, int limit) const override;

 private:
  Connection& c_;
};


Result<TaskMerge> SqliteTaskQueue::AddMiss(const std::string& key_bytes, uint64_t calls, double observed_us) {
  if (c_.read_only) return InvalidArgument("the kernel cache was opened read-only");
  if (!(observed_us >= 0)) return InvalidArgument("observed time must be a non-negative number");
  std::lock_guard lock(c_.mu);
  return MergeTask(c_.db, key_bytes, calls, observed_us, 0, "", /*submitted=*/false);
}

Result<TaskMerge> SqliteTaskQueue::SubmitTask(const std::string& key_bytes, int priority, const std::string& detail) {
  if (c_.read_only) return InvalidArgument("the kernel cache was opened read-only");
  std::lock_guard lock(c_.mu);
  return MergeTask(c_.db, key_bytes, 0, 0.0, priority, detail, /*submitted=*/true);
}

Result<Task> SqliteTaskQueue::GetTask(int64_t id) const {
  std::lock_guard lock(c_.mu);
  KJIT_ASSIGN_OR_RETURN(Statement s,
                        c_.db.Prepare(std::string("SELECT ") + kTaskColumns + " FROM tasks WHERE id = ?"));
  s.Bind(1, id);
  KJIT_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return NotFound("no task " + std::to_string(id));
  return ReadTask(s);
}

Result<std::optional<Task>> SqliteTaskQueue::ClaimTask(const ClaimOptions& claim) {
  if (c_.read_only) return InvalidArgument("the kernel cache was opened read-only");
  const int64_t now = claim.now_unix_ms != 0 ? claim.now_unix_ms : NowMs();
  std::lock_guard lock(c_.mu);
  // BEGIN IMMEDIATE: the select and the update are one step for every process sharing the file.
  KJIT_ASSIGN_OR_RETURN(Transaction txn, Transaction::Begin(c_.db));
  KJIT_ASSIGN_OR_RETURN(Statement s, c_.db.Prepare(std::string("SELECT ") + kTaskColumns +
                                                       " FROM tasks WHERE (state = 'queued' AND not_before_ms <= ?) "
                                                       "OR (state = 'running' AND lease_until_ms > 0 AND "
                                                       "lease_until_ms < ?)" +
                                                       kTaskOrder + " LIMIT 1"));
  s.Bind(1, now).Bind(2, now);
  KJIT_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return std::optional<Task>();
  Task t = ReadTask(s);
  s.Reset();
  const int64_t lease_until = now + std::max<int64_t>(1, claim.lease.count());
  KJIT_ASSIGN_OR_RETURN(Statement u, c_.db.Prepare("UPDATE tasks SET state = 'running', attempts = attempts + 1, "
                                                       "claimed_by = ?, lease_until_ms = ?, not_before_ms = 0, "
                                                       "calls_at_tune = calls, updated_ms = ? WHERE id = ?"));
  u.BindText(1, claim.claimer).Bind(2, lease_until).Bind(3, now).Bind(4, t.id);
  KJIT_RETURN_IF_ERROR(u.Run());
  KJIT_RETURN_IF_ERROR(txn.Commit());
  t.state = "running";
  ++t.attempts;
  t.claimed_by = claim.claimer;
  t.lease_until_unix_ms = lease_until;
  t.not_before_unix_ms = 0;
  t.calls_at_tune = t.calls;
  return std::optional<Task>(std::move(t));
}

Status SqliteTaskQueue::RenewClaim(int64_t id, const ClaimOptions& claim) {
  if (c_.read_only) return InvalidArgument("the kernel cache was opened read-only");
  const int64_t now = claim.now_unix_ms != 0 ? claim.now_unix_ms : NowMs();
  std::lock_guard lock(c_.mu);
  KJIT_ASSIGN_OR_RETURN(Statement s, c_.db.Prepare("UPDATE tasks SET lease_until_ms = ?, updated_ms = ? WHERE "
                                                       "id = ? AND state = 'running' AND claimed_by = ?"));
  s.Bind(1, now + std::max<int64_t>(1, claim.lease.count())).Bind(2, now).Bind(3, id).BindText(4, claim.claimer);
  KJIT_RETURN_IF_ERROR(s.Run());
  if (c_.db.Changes() == 0) return ClaimLost(id, claim.claimer);
  return Status::Ok();
}

Status SqliteTaskQueue::CompleteTask(int64_t id, const std::string& claimer, const TaskResult& r) {
  if (c_.read_only) return InvalidArgument("the kernel cache was opened read-only");
  if (r.state != "done" && r.state != "unfit" && r.state != "failed" && r.state != "queued") {
    return InvalidArgument("a task ends done, unfit, failed or queued, not '" + r.state + "'");
  }
  std::lock_guard lock(c_.mu);
  KJIT_ASSIGN_OR_RETURN(
      Statement s,
      c_.db.Prepare(
          "UPDATE tasks SET state = ?, detail = ?, updated_ms = ?, claimed_by = '', lease_until_ms = 0, "
          "not_before_ms = ?, priority = CASE WHEN ? THEN ? ELSE priority END, round = round + ?, "
          "trials = trials + ?, "
          "best_us = CASE WHEN ? > 0 AND (best_us = 0 OR ? < best_us) THEN ? ELSE best_us END, "
          "record_id = CASE WHEN ? > 0 AND (best_us = 0 OR ? < best_us) THEN ? ELSE record_id END, "
          "policy_version = CASE WHEN ? > 0 AND (best_us = 0 OR ? < best_us) THEN ? ELSE policy_version END, "
          "baseline_us = CASE WHEN ? > 0 THEN ? ELSE baseline_us END, "
          "floor_us = CASE WHEN ? > 0 THEN ? ELSE floor_us END "
          "WHERE id = ? AND state = 'running' AND claimed_by = ?"));
  // Every CASE reads the row as it was before the update, so record_id and policy_version follow the same
  // comparison as best_us.
  s.BindText(1, r.state).BindText(2, r.detail).Bind(3, NowMs()).Bind(4, r.not_before_unix_ms);
  s.Bind(5, int64_t{r.priority.has_value()}).Bind(6, int64_t{r.priority.value_or(0)});
  s.Bind(7, int64_t{r.round_done}).Bind(8, int64_t{r.trials});
  s.Bind(9, r.best_us).Bind(10, r.best_us).Bind(11, r.best_us);
  s.Bind(12, r.best_us).Bind(13, r.best_us).Bind(14, r.record_id);
  s.Bind(15, r.best_us).Bind(16, r.best_us).BindText(17, r.policy_version);
  s.Bind(18, r.baseline_us).Bind(19, r.baseline_us).Bind(20, r.floor_us).Bind(21, r.floor_us);
  s.Bind(22, id).BindText(23, claimer);
  KJIT_RETURN_IF_ERROR(s.Run());
  if (c_.db.Changes() == 0) return ClaimLost(id, claimer);
  return Status::Ok();
}

Result<int> SqliteTaskQueue::ReleaseClaims(const std::string& claimer_prefix) {
  if (c_.read_only) return InvalidArgument("the kernel cache was opened read-only");
  if (claimer_prefix.empty()) return InvalidArgument("ReleaseClaims needs a claimer prefix");
  std::lock_guard lock(c_.mu);
  KJIT_ASSIGN_OR_RETURN(Statement s, c_.db.Prepare("UPDATE tasks SET state = 'queued', claimed_by = '', "
                                                       "lease_until_ms = 0, updated_ms = ? WHERE state = 'running' "
                                                       "AND substr(claimed_by, 1, ?) = ?"));
  s.Bind(1, NowMs()).Bind(2, static_cast<int64_t>(claimer_prefix.size())).BindText(3, claimer_prefix);
  KJIT_RETURN_IF_ERROR(s.Run());
  return static_cast<int>(c_.db.Changes());
}

Status SqliteTaskQueue::FinishTask(int64_t id, bool ok, const std::string& detail) {
  std::lock_guard lock(c_.mu);
  KJIT_ASSIGN_OR_RETURN(Statement s, c_.db.Prepare("UPDATE tasks SET state = ?, detail = ?, updated_ms = ?, "
                                                       "claimed_by = '', lease_until_ms = 0, round = round + 1 "
                                                       "WHERE id = ?"));
  s.BindText(1, ok ? "done" : "failed").BindText(2, detail).Bind(3, NowMs()).Bind(4, id);
  KJIT_RETURN_IF_ERROR(s.Run());
  if (c_.db.Changes() == 0) return NotFound("no task " + std::to_string(id));
  return Status::Ok();
}

Result<std::vector<Task>> SqliteTaskQueue::ListTasks(const std::string& state, int limit) const {
  std::lock_guard lock(c_.mu);
  std::string q = std::string("SELECT ") + kTaskColumns + " FROM tasks WHERE ? = '' OR state = ?" + kTaskOrder;
  if (limit > 0) q += " LIMIT " + std::to_string(limit);
  KJIT_ASSIGN_OR_RETURN(Statement s, c_.db.Prepare(q));
  s.BindText(1, state).BindText(2, state);
  std::vector<Task> out;
  while (true) {
    KJIT_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back(ReadTask(s));
  }
  return out;
}

}  // namespace

std::unique_ptr<TaskQueue> NewSqliteTaskQueue(Connection& connection) {
  return std::make_unique<SqliteTaskQueue>(connection);
}

}  // namespace kjit::cache
