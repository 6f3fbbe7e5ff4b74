#include "sqlite.h"

#include <utility>

namespace kjit::cache::sql {

Status ToStatus(int rc, sqlite3* db, std::string_view what) {
  if (rc == SQLITE_OK || rc == SQLITE_DONE || rc == SQLITE_ROW) return Status::Ok();
  std::string m(what);
  m += ": ";
  m += (db != nullptr) ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return Status(StatusCode::kUnavailable,
                    m + " (the kernel cache is locked by another process; try again, or raise the timeout)");
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return Status(StatusCode::kCorruption, m + " (the file is damaged or is not a kjit cache)");
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_READONLY:
    case SQLITE_PERM:
      return Status(StatusCode::kIOError, m);
    case SQLITE_CONSTRAINT:
    case SQLITE_MISMATCH:
    case SQLITE_RANGE:
      return Status(StatusCode::kInvalidArgument, m);
    default:
      return Status(StatusCode::kInternal, m);
  }
}

// ---------------------------------------------------------------- Statement

Statement::Statement(Statement&& o) noexcept
    : db_(o.db_), stmt_(std::exchange(o.stmt_, nullptr)), bind_error_(std::move(o.bind_error_)) {}

Statement& Statement::operator=(Statement&& o) noexcept {
  if (this != &o) {
    if (stmt_ != nullptr) sqlite3_finalize(stmt_);
    db_ = o.db_;
    stmt_ = std::exchange(o.stmt_, nullptr);
    bind_error_ = std::move(o.bind_error_);
  }
  return *this;
}

Statement::~Statement() {
  if (stmt_ != nullptr) sqlite3_finalize(stmt_);
}

namespace {
void Note(Status& slot, int rc, sqlite3* db) {
  if (rc != SQLITE_OK && slot.ok()) slot = ToStatus(rc, db, "bind");
}
}  // namespace

Statement& Statement::Bind(int i, int64_t v) {
  Note(bind_error_, sqlite3_bind_int64(stmt_, i, v), db_);
  return *this;
}
Statement& Statement::Bind(int i, double v) {
  Note(bind_error_, sqlite3_bind_double(stmt_, i, v), db_);
  return *this;
}
Statement& Statement::BindText(int i, std::string_view v) {
  Note(bind_error_, sqlite3_bind_text64(stmt_, i, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8), db_);
  return *this;
}
Statement& Statement::BindBlob(int i, std::string_view v) {
  // A zero-length blob must still be a blob, not NULL: pass a valid pointer.
  static const char kEmpty = 0;
  Note(bind_error_, sqlite3_bind_blob64(stmt_, i, v.empty() ? &kEmpty : v.data(), v.size(), SQLITE_TRANSIENT), db_);
  return *this;
}
Statement& Statement::BindNull(int i) {
  Note(bind_error_, sqlite3_bind_null(stmt_, i), db_);
  return *this;
}

Result<bool> Statement::Step() {
  if (!bind_error_.ok()) return bind_error_;
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return ToStatus(rc, db_, "sqlite3_step");
}

Status Statement::Run() {
  while (true) {
    KJIT_ASSIGN_OR_RETURN(bool row, Step());
    if (!row) return Status::Ok();
  }
}

void Statement::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  bind_error_ = Status::Ok();
}

std::string Statement::Text(int col) const {
  const auto* p = sqlite3_column_text(stmt_, col);
  const int n = sqlite3_column_bytes(stmt_, col);
  return p ? std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(n)) : std::string();
}

std::string Statement::Blob(int col) const { return std::string(BlobView(col)); }

std::string_view Statement::BlobView(int col) const {
  const void* p = sqlite3_column_blob(stmt_, col);
  const int n = sqlite3_column_bytes(stmt_, col);
  return p ? std::string_view(static_cast<const char*>(p), static_cast<size_t>(n)) : std::string_view();
}

// ---------------------------------------------------------------- Database

Result<Database> Database::Open(const std::string& path, int flags, std::chrono::milliseconds busy_timeout) {
  Database d;
  const int rc = sqlite3_open_v2(path.c_str(), &d.db_, flags | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) return ToStatus(rc, d.db_, "cannot open " + path);
  sqlite3_extended_result_codes(d.db_, 1);
  sqlite3_busy_timeout(d.db_, static_cast<int>(busy_timeout.count()));
  return d;
}

Database::Database(Database&& o) noexcept : db_(std::exchange(o.db_, nullptr)) {}

Database& Database::operator=(Database&& o) noexcept {
  if (this != &o) {
    if (db_ != nullptr) sqlite3_close_v2(db_);
    db_ = std::exchange(o.db_, nullptr);
  }
  return *this;
}

Database::~Database() {
  if (db_ != nullptr) sqlite3_close_v2(db_);
}

Status Database::Exec(const std::string& sql) {
  char* err = nullptr;
  const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
  if (err != nullptr) sqlite3_free(err);
  return ToStatus(rc, db_, "executing SQL");
}

Result<Statement> Database::Prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  const int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()), SQLITE_PREPARE_PERSISTENT, &stmt,
                                    nullptr);
  if (rc != SQLITE_OK) return ToStatus(rc, db_, "preparing SQL");
  return Statement(db_, stmt);
}

// ---------------------------------------------------------------- Transaction

Result<Transaction> Transaction::Begin(Database& db) {
  Transaction t(&db);
  KJIT_RETURN_IF_ERROR(db.Exec("BEGIN IMMEDIATE"));
  t.open_ = true;
  return t;
}

Transaction::Transaction(Transaction&& o) noexcept : db_(o.db_), open_(std::exchange(o.open_, false)) {}

Transaction::~Transaction() {
  if (open_) (void)db_->Exec("ROLLBACK");
}

Status Transaction::Commit() {
  KJIT_RETURN_IF_ERROR(db_->Exec("COMMIT"));
  open_ = false;
  return Status::Ok();
}

}  // namespace kjit::cache::sql
