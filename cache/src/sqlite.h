// Thin RAII over the SQLite C API, with errors as kjit::Status. Internal to cache/.
#pragma once

#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "kjit/runtime/status.h"

namespace kjit::cache::sql {

// Maps an SQLite result code to a Status: BUSY/LOCKED -> kUnavailable,
// CORRUPT/NOTADB -> kCorruption, CANTOPEN/IOERR/FULL/READONLY -> kIOError.
Status ToStatus(int rc, sqlite3* db, std::string_view what);

class Statement {
 public:
  Statement() = default;
  Statement(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  Statement(Statement&& o) noexcept;
  Statement& operator=(Statement&& o) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement();

  // Parameters are 1-based, as in SQLite.
  Statement& Bind(int i, int64_t v);
  Statement& Bind(int i, double v);
  Statement& BindText(int i, std::string_view v);
  Statement& BindBlob(int i, std::string_view v);
  Statement& BindNull(int i);

  // True while there is a row; false when done.
  Result<bool> Step();
  // Runs to completion, ignoring rows.
  Status Run();
  // Clears bindings and rewinds, for reuse.
  void Reset();

  int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  double Double(int col) const { return sqlite3_column_double(stmt_, col); }
  std::string Text(int col) const;
  std::string Blob(int col) const;
  std::string_view BlobView(int col) const;  // valid until the next Step/Reset
  bool IsNull(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }

 private:
  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
  Status bind_error_;
};

class Database {
 public:
  // flags: SQLITE_OPEN_READONLY or SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE.
  static Result<Database> Open(const std::string& path, int flags, std::chrono::milliseconds busy_timeout);
  Database() = default;
  Database(Database&& o) noexcept;
  Database& operator=(Database&& o) noexcept;
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;
  ~Database();

  sqlite3* get() const { return db_; }
  Status Exec(const std::string& sql);
  Result<Statement> Prepare(std::string_view sql);
  int64_t LastInsertId() const { return sqlite3_last_insert_rowid(db_); }
  int Changes() const { return sqlite3_changes(db_); }

 private:
  sqlite3* db_ = nullptr;
};

// BEGIN IMMEDIATE (takes the write lock up front, so a writer waits at the
// start, not half-way) ... COMMIT; rolls back unless committed.
class Transaction {
 public:
  static Result<Transaction> Begin(Database& db);
  Transaction(Transaction&& o) noexcept;
  Transaction& operator=(Transaction&&) = delete;
  ~Transaction();
  Status Commit();

 private:
  explicit Transaction(Database* db) : db_(db) {}
  Database* db_ = nullptr;
  bool open_ = false;
};

}  // namespace kjit::cache::sql
