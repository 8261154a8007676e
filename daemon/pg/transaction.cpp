#include "pg/transaction.h"

#include <cstring>

#include "pg/pg_error.h"

namespace akadzed::pg {

Transaction::Transaction(Connection& conn, std::string_view begin_sql) : conn_(conn) {
  conn_.exec(begin_sql);
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
  Result result = conn_.check(PQexec(conn_.raw(), "COMMIT"), "COMMIT", /*during_commit=*/true);
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
