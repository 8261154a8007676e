// A transaction on a Connection: BEGIN on construction, ROLLBACK on
// destruction unless commit() succeeded.
//
// commit() throws InDoubtError when the connection breaks while COMMIT is in
// flight, and SqlError when the server answers COMMIT with ROLLBACK (the
// transaction had already failed).
//
// Thread-safety: as the Connection it wraps (one thread at a time).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pg/connection.h"
#include "pg/statement.h"

namespace akadzed::pg {

class Transaction {
 public:
  // When BEGIN (and the session bounds' settings) reach the server.
  enum class Begin {
    kNow,                 // in the constructor, a round trip of its own
    kWithFirstStatement,  // pipelined with the transaction's first statement
  };

  // How the transaction's prepared statements are planned.
  enum class Plans {
    // As the server says (plan_cache_mode): under `auto`, a statement whose
    // generic plan looks costlier than its custom ones is planned on every
    // execution, which for the claim's statements took longer than running
    // them (docs/benchmarks.md, "Generic plans for the claim").
    kServerDefault,
    // plan_cache_mode = force_generic_plan, local to the transaction: each
    // prepared statement is planned once per connection (on a connection
    // that runs every statement unnamed, through a pooler, this is
    // kServerDefault). A statement that
    // must be planned for its values (Statement::prepare() false,
    // PipelinedStatement::prepare false) switches the rest of the
    // transaction to force_custom_plan first, in the same round trip.
    kGeneric,
  };

  // Starts a transaction. `begin_sql` may carry an isolation level.
  explicit Transaction(Connection& conn, std::string_view begin_sql = "BEGIN", Begin when = Begin::kNow,
                       Plans plans = Plans::kServerDefault);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  // exec(sql) may carry several statements (simple query protocol), also
  // with a deferred BEGIN.
  Result exec(std::string_view sql);
  Result exec(std::string_view sql, const Params& params);
  // A built statement: prepared, or planned for its values when
  // Statement::prepare() says so.
  Result exec(const Statement& statement);
  // Connection::pipeline() inside the transaction.
  std::vector<Result> pipeline(std::span<const PipelinedStatement> statements);

  void commit();
  // Rolls back now; a no-op once committed or rolled back.
  void rollback();
  // `statements`, then COMMIT (`commit`) or ROLLBACK, in one round trip;
  // their results. Throws as pipeline() and commit() do; when a statement
  // before the COMMIT fails, the transaction is still open (the destructor
  // rolls it back).
  std::vector<Result> end_after(std::span<const PipelinedStatement> statements, bool commit);
  Connection& connection() { return conn_; }

 private:
  // The statements that begin the transaction: BEGIN, then the session
  // bounds (Connection::Open) as settings local to it.
  std::vector<std::string> BeginStatements(bool with_check_interval) const;
  // Whether BEGIN sets client_connection_check_interval: with a stall bound,
  // on PostgreSQL 14 or later, unless this server refused it before.
  bool WantsCheckInterval() const;
  // BEGIN with the settings, then `sql` (none when empty), in one simple
  // query; retried without the check interval when the server refuses it.
  Result BeginWith(std::string_view sql);
  // Plans::kGeneric holds only on a connection that prepares statements
  // (not through a pooler); asked before BEGIN is sent.
  void KeepGenericPlansOnlyIfPrepared();
  // Runs `statements` after the deferred BEGIN, if any is still to send,
  // and the switch to custom plans before the first statement planned for
  // its values (Plans::kGeneric); returns the results of `statements` only.
  std::vector<Result> Pipeline(std::span<const PipelinedStatement> statements, bool during_commit);

  Connection& conn_;
  std::string begin_sql_;
  bool begin_pending_ = false;  // Begin::kWithFirstStatement, nothing sent yet
  bool generic_plans_ = false;  // Plans::kGeneric and not yet switched to custom plans
  bool open_ = true;
  int failed_statement_ = -1;   // of the last Pipeline() that threw the server's error, in its `statements`
};

}  // namespace akadzed::pg
