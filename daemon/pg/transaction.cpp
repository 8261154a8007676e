#include "pg/transaction.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "pg/pg_error.h"

namespace akadzed::pg {

Transaction::Transaction(Connection& conn, std::string_view begin_sql) : conn_(conn) {
  const long long ms = conn_.bounds_.stall.count();
  if (ms <= 0) {
    conn_.exec(begin_sql);
    return;
  }
  // One round trip, as a bare BEGIN: the bounds ride along (Connection::Open).
  std::string sql(begin_sql);
  sql += "; SET LOCAL idle_in_transaction_session_timeout = " + std::to_string(ms) +
         "; SET LOCAL lock_timeout = " + std::to_string(ms);
  // The server ends a statement that runs toward the client's reply
  // deadline a second before it, with a clean 57014, rather than the client
  // closing the connection on a statement still running.
  if (const long long reply = conn_.bounds_.reply.count(); reply >= 2000) {
    sql += "; SET LOCAL statement_timeout = " + std::to_string(reply - 1000);
  }
  if (!conn_.check_interval_refused_ && PQserverVersion(conn_.raw()) >= 140000) {
    const std::string with_check =
        sql + "; SET LOCAL client_connection_check_interval = " + std::to_string(std::min(ms, 1000LL));
    try {
      conn_.exec(with_check);
      return;
    } catch (const SqlError& e) {
      // 22023: a server that cannot watch its clients' sockets (not Linux)
      // refuses any value but 0; the other bounds still apply.
      if (e.sqlstate() != "22023") throw;
      conn_.check_interval_refused_ = true;
      conn_.exec("ROLLBACK");
    }
  }
  conn_.exec(sql);
}

Transaction::~Transaction() {
  if (!open_) return;
  try {
    rollback();
  } catch (...) {
    // A broken connection has no transaction left to roll back.
  }
}

void Transaction::commit() {
  open_ = false;
  Result result = conn_.Await(PQsendQuery(conn_.raw(), "COMMIT"), "COMMIT", /*during_commit=*/true);
  const char* status = PQcmdStatus(result.raw());
  if (status != nullptr && std::strcmp(status, "ROLLBACK") == 0) {
    SqlError error("COMMIT failed: the transaction had been aborted and was rolled back", "25P02");
    ReportError(error);
    throw error;
  }
}

void Transaction::rollback() {
  if (!open_) return;
  open_ = false;
  if (conn_.healthy()) conn_.exec("ROLLBACK");
}

}  // namespace akadzed::pg
