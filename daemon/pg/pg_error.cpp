#include "pg/pg_error.h"

#include <atomic>
#include <string>

#include "core/redact.h"

namespace akadzed::pg {

const char* ErrorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kConnection: return "connection";
    case ErrorKind::kInDoubt: return "in_doubt";
    case ErrorKind::kTransient: return "transient";
    case ErrorKind::kRowFault: return "row_fault";
    case ErrorKind::kSql: return "sql";
    case ErrorKind::kOther: return "other";
  }
  return "other";
}

ErrorKind ErrorKindOf(const std::exception_ptr& error) noexcept {
  if (!error) return ErrorKind::kOther;
  try {
    std::rethrow_exception(error);
  } catch (const PgError& e) {
    return e.kind();
  } catch (...) {
    return ErrorKind::kOther;
  }
}

std::string SqlStateOf(const std::exception_ptr& error) {
  if (!error) return {};
  try {
    std::rethrow_exception(error);
  } catch (const PgError& e) {
    return e.sqlstate();
  } catch (...) {
    return {};
  }
}

bool IsTransientSqlState(std::string_view s) {
  return s == "40001"     // serialization_failure
         || s == "40P01"  // deadlock_detected
         || s == "55P03"  // lock_not_available
         || s == "57P03"  // cannot_connect_now (server starting up)
         || s == "53300"  // too_many_connections
         || IsConnectionSqlState(s);
}

bool IsRowFaultSqlState(std::string_view s) {
  if (s.size() != 5) return false;
  for (std::string_view server : {"08", "25", "40", "53", "55", "57", "58", "XX"}) {
    if (s.starts_with(server)) return false;
  }
  return true;
}

bool IsConnectionSqlState(std::string_view s) {
  return s.starts_with("08")  // connection_exception class
         || s == "57P01"      // admin_shutdown
         || s == "57P02"      // crash_shutdown
         || s == "57P03"      // cannot_connect_now
         // read_only_sql_transaction: a standby, or a primary demoted by a
         // failover; another host of a multi-host URL may take writes, and a
         // job must not fail because of where the connection landed.
         || s == "25006";
}

namespace {

std::atomic<std::shared_ptr<ErrorObserver>> g_observer;

// Reports `error` and throws it.
template <typename Error>
[[noreturn]] void Raise(const Error& error) {
  ReportError(error);
  throw error;
}

std::string Message(std::string_view what, std::string_view detail) {
  std::string text(what);
  std::string clean = OneLine(RedactSecrets(detail));
  if (!clean.empty()) {
    text += ": ";
    text += clean;
  }
  return text;
}

}  // namespace

void SetErrorObserver(std::shared_ptr<ErrorObserver> observer) {
  g_observer.store(std::move(observer));
}

void ReportError(const PgError& error) noexcept {
  if (std::shared_ptr<ErrorObserver> observer = g_observer.load()) observer->OnError(error);
}

void ThrowForResult(PGconn* conn, const PGresult* result, std::string_view what,
                    bool during_commit) {
  std::string sqlstate;
  std::string detail;
  if (result != nullptr) {
    const char* state = PQresultErrorField(result, PG_DIAG_SQLSTATE);
    if (state != nullptr) sqlstate = state;
    const char* primary = PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY);
    detail = primary != nullptr ? primary : PQresultErrorMessage(result);
  }
  if (detail.empty() && conn != nullptr) detail = PQerrorMessage(conn);
  if (detail.empty()) detail = "unknown libpq error";

  // Every error the server sends carries a SQLSTATE; one without was made by
  // libpq itself because the connection broke. libpq may still say
  // CONNECTION_OK then: the first statement on an idle connection whose
  // server died (pg_ctl restart -m immediate) fails with "server closed the
  // connection unexpectedly" and only the next one sees CONNECTION_BAD
  // (found by tests/faults/restart_test.cpp).
  const bool lost = (conn != nullptr && PQstatus(conn) == CONNECTION_BAD) ||
                    IsConnectionSqlState(sqlstate) || sqlstate.empty();
  std::string message = Message(what, detail);
  if (lost) {
    if (during_commit) {
      Raise(InDoubtError("commit outcome unknown, " + message, sqlstate));
    }
    Raise(ConnectionError(message, sqlstate));
  }
  if (IsTransientSqlState(sqlstate)) Raise(TransientError(message, sqlstate));
  if (IsRowFaultSqlState(sqlstate)) Raise(RowFaultError(message, sqlstate));
  Raise(SqlError(message, sqlstate));
}

void ThrowLost(std::string_view what, std::string_view detail, bool during_commit) {
  const std::string message = Message(what, detail);
  if (during_commit) Raise(InDoubtError("commit outcome unknown, " + message, ""));
  Raise(ConnectionError(message, ""));
}

void ThrowForConnection(PGconn* conn, std::string_view what, std::string_view conninfo) {
  std::string detail = conn != nullptr ? PQerrorMessage(conn) : "out of memory";
  Raise(ConnectionError(Message(what, RedactSecrets(detail, conninfo)), ""));
}

}  // namespace akadzed::pg
