// A transaction on a Connection: BEGIN on construction, ROLLBACK on
// destruction unless commit() succeeded.
//
// commit() throws InDoubtError when the connection breaks while COMMIT is in
// flight, and SqlError when the server answers COMMIT with ROLLBACK (the
// transaction had already failed).
//
// Thread-safety: as the Connection it wraps (one thread at a time).
#pragma once

#include <string_view>

#include "pg/connection.h"

namespace akadzed::pg {

class Transaction {
 public:
  // Starts a transaction. `begin_sql` may carry an isolation level.
  explicit Transaction(Connection& conn, std::string_view begin_sql = "BEGIN");
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  Result exec(std::string_view sql) { return conn_.exec(sql); }
  Result exec(std::string_view sql, const Params& params) { return conn_.exec(sql, params); }

  void commit();
  // Rolls back now; a no-op once committed or rolled back.
  void rollback();
  Connection& connection() { return conn_; }

 private:
  Connection& conn_;
  bool open_ = true;
};

}  // namespace akadzed::pg
