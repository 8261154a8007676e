// Typed errors for everything that talks to PostgreSQL.
//
// Every libpq failure in akadzed is turned into one of these classes by
// ThrowForResult() / ThrowForConnection() / ThrowLost() below (the last for a
// connection the client gives up on: no reply in time), and nowhere else (the one
// other throw site is Transaction::commit(), for a COMMIT the server answered
// with ROLLBACK: no libpq error exists then). Callers
// decide what to do from the type alone:
//   SqlError        the statement failed; the connection is usable once the
//                   transaction is rolled back. Not worth retrying as is.
//   TransientError  a SqlError that a retry of the whole transaction may cure
//                   (serialization failure, deadlock, lock timeout).
//   RowFaultError   a SqlError that one row of the statement may have caused
//                   (IsRowFaultSqlState: a data exception, a constraint, an
//                   application's trigger raising): the statement may be
//                   retried row by row, and a row that still fails given an
//                   outcome of its own (store/poison_rows.h).
//   ConnectionError the connection is gone or unusable; discard it, reconnect
//                   and retry. Always transient.
//   InDoubtError    the connection broke (or no reply came) while COMMIT was in flight: the
//                   transaction may or may not have committed.
// Messages never contain a password: they pass through RedactSecrets().
// Code that must tell the kinds apart without catching each class (a loop's
// RoundGuard, the error counter) asks PgError::kind() or, for an exception
// of any type, ErrorKindOf(): the one place that sorts them.
//
// Thread-safety: the classes are immutable values, safe to share.
#pragma once

#include <libpq-fe.h>

#include <chrono>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

namespace akadzed::pg {

// What a failure is, for a caller deciding what to do about it.
enum class ErrorKind {
  kConnection,  // ConnectionError: the server is away; reconnect and retry
  kInDoubt,     // InDoubtError: the connection broke during COMMIT
  kTransient,   // TransientError: retry the whole transaction
  kRowFault,    // RowFaultError: one row's fault; isolate it (store/poison_rows.h)
  kSql,         // any other SqlError: the server's state or the statement
  kOther,       // not a PgError (a bug, a hook's refusal, out of memory)
};

// "connection", "in_doubt", "transient", "row_fault", "sql", "other".
const char* ErrorKindName(ErrorKind kind);

class PgError : public std::runtime_error {
 public:
  PgError(const std::string& message, std::string sqlstate)
      : std::runtime_error(message), sqlstate_(std::move(sqlstate)) {}

  // Five-character SQLSTATE, or "" when the error did not come from the server.
  const std::string& sqlstate() const { return sqlstate_; }
  // True when retrying the whole transaction (maybe on a new connection) may succeed.
  virtual bool transient() const { return false; }
  // True when the connection must be discarded.
  virtual bool poisons_connection() const { return false; }
  virtual ErrorKind kind() const { return ErrorKind::kSql; }

 private:
  std::string sqlstate_;
};

class SqlError : public PgError {
 public:
  using PgError::PgError;
};

class TransientError : public SqlError {
 public:
  using SqlError::SqlError;
  bool transient() const override { return true; }
  ErrorKind kind() const override { return ErrorKind::kTransient; }
};

class RowFaultError : public SqlError {
 public:
  using SqlError::SqlError;
  ErrorKind kind() const override { return ErrorKind::kRowFault; }
};

class ConnectionError : public PgError {
 public:
  using PgError::PgError;
  bool transient() const override { return true; }
  bool poisons_connection() const override { return true; }
  ErrorKind kind() const override { return ErrorKind::kConnection; }
};

class InDoubtError : public ConnectionError {
 public:
  using ConnectionError::ConnectionError;
  ErrorKind kind() const override { return ErrorKind::kInDoubt; }
};

// The kind of `error` (a PgError's kind(); kOther for any other exception,
// or none): the one sorting of failures, by type, for code that holds an
// exception of any type (std::current_exception() in a catch).
ErrorKind ErrorKindOf(const std::exception_ptr& error) noexcept;
// The SQLSTATE of `error` (a PgError's sqlstate()); "" for any other
// exception, none, or an error that did not come from the server.
std::string SqlStateOf(const std::exception_ptr& error);

// True for SQLSTATEs after which a retry of the transaction may succeed.
bool IsTransientSqlState(std::string_view sqlstate);
// True for SQLSTATEs that mean the session is gone (class 08, admin shutdown, ...).
bool IsConnectionSqlState(std::string_view sqlstate);
// True for SQLSTATEs that may be the fault of one row of a statement (a data
// exception, a constraint, an application's trigger or hook raising, ...),
// false for the server's state rather than the data (no SQLSTATE, classes
// 08, 25 such as a read-only transaction, 40, 53, 55, 57 such as a statement
// timeout or cancel, 58, XX): only after the former may a statement be
// retried row by row and a row that still fails be given an outcome.
// ThrowForResult() throws RowFaultError for these; callers catch the type.
bool IsRowFaultSqlState(std::string_view sqlstate);

// Sees every PgError just before ThrowForResult(), ThrowForConnection() or
// Transaction::commit() throws it, on the throwing thread: the daemon counts
// database errors by kind there, once each. OnError must be cheap and must
// not throw.
class ErrorObserver {
 public:
  virtual ~ErrorObserver() = default;
  virtual void OnError(const PgError& error) noexcept = 0;
};

// Installs `observer` for the whole process (nullptr: none, the default).
// A thread raising an error holds its own reference while it reports, so an
// observer replaced meanwhile is freed only after that report.
void SetErrorObserver(std::shared_ptr<ErrorObserver> observer);
// Tells the installed observer, if any, about `error`.
void ReportError(const PgError& error) noexcept;

// Throws the typed error for a failed result (result may be null: out of memory
// or connection trouble). `what` names the operation for the message.
// `during_commit` turns a lost connection into InDoubtError.
[[noreturn]] void ThrowForResult(PGconn* conn, const PGresult* result, std::string_view what,
                                 bool during_commit = false);

// Throws ConnectionError (InDoubtError `during_commit`) for a connection the
// client gave up on or found broken: "<what>: <detail>".
[[noreturn]] void ThrowLost(std::string_view what, std::string_view detail, bool during_commit);

// Throws ConnectionError for a connection that failed to open or broke.
// `conninfo`, when given, is what the connection was opened with: any
// password it carries is removed from the message even where libpq quotes it
// alone.
[[noreturn]] void ThrowForConnection(PGconn* conn, std::string_view what,
                                     std::string_view conninfo = {});

}  // namespace akadzed::pg
