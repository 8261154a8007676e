#include "pg/transaction.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "pg/pg_error.h"

namespace akadzed::pg {

namespace {

// SET LOCAL, as a setting of this transaction: it holds through a
// transaction pooler.
std::string Local(const char* name, std::string_view value) {
  return std::string("set_config('") + name + "', '" + std::string(value) + "', true)";
}

constexpr const char* kCustomPlans = "SELECT set_config('plan_cache_mode', 'force_custom_plan', true)";

}  // namespace

std::vector<std::string> Transaction::BeginStatements(bool with_check_interval) const {
  std::vector<std::string> out{begin_sql_};
  std::vector<std::string> settings;
  if (generic_plans_) settings.push_back(Local("plan_cache_mode", "force_generic_plan"));
  if (const long long ms = conn_.bounds_.stall.count(); ms > 0) {
    settings.push_back(Local("idle_in_transaction_session_timeout", std::to_string(ms)));
    settings.push_back(Local("lock_timeout", std::to_string(ms)));
    // The server ends a statement that runs toward the client's reply
    // deadline a second before it, with a clean 57014, rather than the
    // client closing the connection on a statement still running.
    if (const long long reply = conn_.bounds_.reply.count(); reply >= 2000) {
      settings.push_back(Local("statement_timeout", std::to_string(reply - 1000)));
    }
    if (with_check_interval) {
      settings.push_back(Local("client_connection_check_interval", std::to_string(std::min(ms, 1000LL))));
    }
  }
  if (settings.empty()) return out;
  std::string set = "SELECT ";
  for (std::size_t i = 0; i < settings.size(); ++i) set += (i ? ", " : "") + settings[i];
  out.push_back(std::move(set));
  return out;
}

namespace {

std::string Joined(const std::vector<std::string>& statements) {
  std::string out;
  for (const std::string& s : statements) out += (out.empty() ? "" : "; ") + s;
  return out;
}

}  // namespace

Transaction::Transaction(Connection& conn, std::string_view begin_sql, Begin when, Plans plans)
    : conn_(conn), begin_sql_(begin_sql), generic_plans_(plans == Plans::kGeneric) {
  if (when == Begin::kWithFirstStatement) {
    begin_pending_ = true;
    return;
  }
  // One round trip, as a bare BEGIN: the bounds ride along.
  BeginWith("");
}

bool Transaction::WantsCheckInterval() const {
  return conn_.bounds_.stall.count() > 0 && !conn_.check_interval_refused_ &&
         PQserverVersion(conn_.raw()) >= 140000;
}

void Transaction::KeepGenericPlansOnlyIfPrepared() {
  // Unnamed statements (through a pooler, or after a prepared statement
  // failed) are planned on every run anyway: a forced generic plan would
  // save nothing and may be worse for the values. pooled() asks the server
  // once per connection, as the first prepared statement would.
  if (generic_plans_ && !(conn_.prepare_ && !conn_.pooled())) generic_plans_ = false;
}

Result Transaction::BeginWith(std::string_view sql) {
  KeepGenericPlansOnlyIfPrepared();
  const std::string after = sql.empty() ? std::string() : "; " + std::string(sql);
  if (WantsCheckInterval()) {
    try {
      return conn_.exec(Joined(BeginStatements(true)) + after);
    } catch (const SqlError& e) {
      // 22023: a server that cannot watch its clients' sockets (not Linux)
      // refuses any value but 0; the other bounds still apply. Nothing of
      // the query took effect (it failed in a transaction block): begin
      // again without the setting.
      if (e.sqlstate() != "22023") throw;
      conn_.check_interval_refused_ = true;
      conn_.exec("ROLLBACK");
    }
  }
  return conn_.exec(Joined(BeginStatements(false)) + after);
}

std::vector<Result> Transaction::Pipeline(std::span<const PipelinedStatement> statements, bool during_commit) {
  failed_statement_ = -1;
  if (begin_pending_) KeepGenericPlansOnlyIfPrepared();
  for (;;) {
    // What goes out: the deferred BEGIN with its settings, then `statements`
    // with the switch to custom plans before the first one planned for its
    // values. position[i]: where statements[i] is in `all`.
    const bool check_interval = begin_pending_ && WantsCheckInterval();
    const std::vector<std::string> begin =
        begin_pending_ ? BeginStatements(check_interval) : std::vector<std::string>{};
    std::vector<PipelinedStatement> all;
    for (const std::string& s : begin) all.push_back(PipelinedStatement{s});
    std::vector<std::size_t> position;
    bool generic = generic_plans_;
    for (const PipelinedStatement& st : statements) {
      if (generic && !st.prepare) {
        all.push_back(PipelinedStatement{kCustomPlans});
        generic = false;
      }
      position.push_back(all.size());
      all.push_back(st);
    }
    const bool was_pending = begin_pending_;
    const bool was_generic = generic_plans_;
    begin_pending_ = false;
    generic_plans_ = generic;
    try {
      std::vector<Result> results = conn_.pipeline(all, during_commit);
      if (all.size() == statements.size()) return results;
      std::vector<Result> ours;
      ours.reserve(statements.size());
      for (std::size_t p : position) ours.push_back(std::move(results[p]));
      return ours;
    } catch (const std::invalid_argument&) {
      begin_pending_ = was_pending;  // refused before anything was sent
      generic_plans_ = was_generic;
      throw;
    } catch (const PgError& e) {
      const int failed = conn_.failed_statement();
      // Of `statements`: the one that failed, or -1 when it was one of ours.
      const auto it = std::find(position.begin(), position.end(), static_cast<std::size_t>(failed));
      failed_statement_ = failed < 0 || it == position.end() ? -1 : static_cast<int>(it - position.begin());
      // As in BeginWith: the settings statement failed, so nothing after
      // it ran; begin again without the one setting it may refuse.
      if (!check_interval || e.sqlstate() != "22023" || failed != 1) throw;
      conn_.check_interval_refused_ = true;
      conn_.exec("ROLLBACK");
      begin_pending_ = true;
      generic_plans_ = was_generic;
    }
  }
}

Result Transaction::exec(std::string_view sql) {
  if (!begin_pending_) return conn_.exec(sql);
  // Simple query protocol, as exec(sql) is (it may carry several
  // statements): BEGIN and the settings ride in the same query string.
  begin_pending_ = false;
  return BeginWith(sql);
}

Result Transaction::exec(std::string_view sql, const Params& params) {
  if (!begin_pending_) return conn_.exec(sql, params);
  const PipelinedStatement one{sql, &params};
  return std::move(Pipeline(std::span(&one, 1), false).front());
}

Result Transaction::exec(const Statement& statement) {
  if (statement.prepare()) return exec(statement.sql, statement.params());
  if (!begin_pending_ && !generic_plans_) return conn_.exec_replanned(statement.sql, statement.params());
  const PipelinedStatement one{statement.sql, &statement.params(), false};
  return std::move(Pipeline(std::span(&one, 1), false).front());
}

std::vector<Result> Transaction::pipeline(std::span<const PipelinedStatement> statements) {
  return Pipeline(statements, false);
}

std::vector<Result> Transaction::end_after(std::span<const PipelinedStatement> statements, bool commit) {
  if (!open_) throw std::logic_error("pg::Transaction::end_after: the transaction has ended");
  std::vector<PipelinedStatement> all(statements.begin(), statements.end());
  all.push_back(PipelinedStatement{commit ? "COMMIT" : "ROLLBACK"});
  std::vector<Result> results;
  try {
    results = Pipeline(all, commit);
  } catch (const PgError&) {
    // A COMMIT that failed ended the transaction on the server; a statement
    // before it leaves it open (aborted) for the destructor's ROLLBACK.
    if (failed_statement_ == static_cast<int>(all.size()) - 1) open_ = false;
    throw;
  }
  open_ = false;
  Result end = std::move(results.back());
  results.pop_back();
  const char* status = PQcmdStatus(end.raw());
  if (commit && status != nullptr && std::strcmp(status, "ROLLBACK") == 0) {
    SqlError error("COMMIT failed: the transaction had been aborted and was rolled back", "25P02");
    ReportError(error);
    throw error;
  }
  return results;
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
  if (begin_pending_) return;  // nothing was sent: nothing to commit
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
  if (begin_pending_) return;  // nothing was sent
  if (conn_.healthy()) conn_.exec("ROLLBACK");
}

}  // namespace akadzed::pg
