// The measurement log in the cache file's `measurements` table (measurement_log.h).
#include <mutex>

#include "kjit/runtime/op_key.h"
#include "record_json.h"
#include "sqlite_stores.h"

namespace kjit::cache {

using sql::Statement;

namespace {
constexpr const char* kMeasurementColumns =
    "id, key_hash, key_bytes, design, outcome, median_us, baseline_us, reward, detail, created_ms";

// The rows of a query of kMeasurementColumns.
Result<std::vector<Measurement>> ReadMeasurements(Statement& s) {
  std::vector<Measurement> out;
  while (true) {
    KJIT_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    Measurement m;
    m.id = s.Int(0);
    m.key_hash = BlobHash(s.BlobView(1));
    m.key_bytes = s.Blob(2);
    KJIT_ASSIGN_OR_RETURN(m.design, DesignFromJson(s.Text(3)));
    m.outcome = s.Text(4);
    m.median_us = s.Double(5);
    m.baseline_us = s.Double(6);
    m.reward = s.Double(7);
    m.detail = s.Text(8);
    m.created_unix_ms = s.Int(9);
    out.push_back(std::move(m));
  }
  return out;
}
}  // namespace

namespace {

class SqliteMeasurementLog final : public MeasurementLog {
 public:
  explicit SqliteMeasurementLog(Connection& c) : c_(c) {}
  Result<int64_t> AddMeasurement(Measurement m) override;
  Result<std::vector<Measurement>> ListMeasurements(const std::string& family, int limit) const override;
  Result<std::vector<Measurement>> ListMeasurementsOfKey(const Hash128& key_hash) const override;

 private:
  Connection& c_;
};

Result<int64_t> SqliteMeasurementLog::AddMeasurement(Measurement m) {
  KJIT_ASSIGN_OR_RETURN(OpKey key, OpKey::Decode(m.key_bytes));
  std::lock_guard lock(c_.mu);
  KJIT_ASSIGN_OR_RETURN(Statement s, c_.db.Prepare(
                                         "INSERT INTO measurements (key_hash, key_bytes, family, policy_version, "
                                         "design, outcome, median_us, baseline_us, reward, detail, created_ms) "
                                         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
  s.BindBlob(1, HashBlob(key.Hash())).BindBlob(2, m.key_bytes).BindText(3, m.design.family);
  s.BindText(4, m.design.policy_version).BindText(5, ToJson(m.design).dump()).BindText(6, m.outcome);
  s.Bind(7, m.median_us).Bind(8, m.baseline_us).Bind(9, m.reward).BindText(10, m.detail);
  s.Bind(11, m.created_unix_ms != 0 ? m.created_unix_ms : NowMs());
  KJIT_RETURN_IF_ERROR(s.Run());
  return c_.db.LastInsertId();
}

Result<std::vector<Measurement>> SqliteMeasurementLog::ListMeasurements(const std::string& family, int limit) const {
  std::lock_guard lock(c_.mu);
  std::string q = std::string("SELECT ") + kMeasurementColumns + " FROM measurements WHERE ? = '' OR family = ? ORDER BY id";
  if (limit > 0) q += " LIMIT " + std::to_string(limit);
  KJIT_ASSIGN_OR_RETURN(Statement s, c_.db.Prepare(q));
  s.BindText(1, family).BindText(2, family);
  return ReadMeasurements(s);
}

Result<std::vector<Measurement>> SqliteMeasurementLog::ListMeasurementsOfKey(const Hash128& key_hash) const {
  std::lock_guard lock(c_.mu);
  KJIT_ASSIGN_OR_RETURN(Statement s, c_.db.Prepare(std::string("SELECT ") + kMeasurementColumns +
                                                       " FROM measurements WHERE key_hash = ? ORDER BY id"));
  s.BindBlob(1, HashBlob(key_hash));
  return ReadMeasurements(s);
}

}  // namespace

std::unique_ptr<MeasurementLog> NewSqliteMeasurementLog(Connection& connection) {
  return std::make_unique<SqliteMeasurementLog>(connection);
}

}  // namespace kjit::cache
