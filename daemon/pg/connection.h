// One libpq connection (PGconn), owned, with statement execution that throws
// the typed errors of pg_error.h.
//
// Statements with parameters are prepared on the connection the first time
// they run and executed by name after that, which saves the server parsing
// and planning them again (on the claim's statements, planning took twice
// as long as running them: docs/benchmarks.md). A statement's name is a hash
// of its text and parameter types, so one name always means one statement.
// Not through a pooler: a connection whose server process is not the one the
// login reported (PgBouncer) runs every statement unnamed, as prepared
// statements would land on whichever server connection the pool gave out.
//
// Thread-safety: a Connection must be used by one thread at a time (libpq's
// rule). Moving it transfers ownership.
#pragma once

#include <libpq-fe.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "pg/params.h"
#include "pg/result.h"

namespace akadzed::pg {

// The bounds a daemon session puts on the server and on itself.
//
// `stall`: every Transaction's BEGIN also sets idle_in_transaction_session_timeout
// and lock_timeout to it (and client_connection_check_interval on
// PostgreSQL 14+), SET LOCAL so that it holds through a transaction pooler.
// A client cut off mid-transaction then holds no lock on the server longer
// than that: the server ends the session. A lock wait past it fails with 55P03.
//
// `reply`: the longest the client waits for a statement's reply (sending it
// included). A reply that does not come in time (a pooler holding the query
// while it has no server connection to give, a network that drops packets
// while TCP still looks alive) closes the connection and throws
// ConnectionError, or InDoubtError for a COMMIT: the caller's usual path for
// a lost connection (reconnect, no attempt spent). 0: unbounded. With both
// bounds and `reply` of 2 s or more, a Transaction's BEGIN also sets
// statement_timeout to `reply` - 1 s: a statement that runs that long (not
// one held on the way) fails on the server first, with 57014.
struct SessionBounds {
  std::chrono::milliseconds stall{0};
  std::chrono::milliseconds reply{0};

  // The daemon's rule: with a positive `stall_timeout`, replies are awaited
  // max(3 x stall_timeout, 5 s). A statement of the daemon waits for a lock
  // at most `stall_timeout` and runs for milliseconds; the rest is slack for
  // a loaded server. Without one, nothing is bounded.
  static SessionBounds ForStall(std::chrono::milliseconds stall_timeout);
};

// One statement of Connection::pipeline(): `params` null runs it without
// parameters (still one statement: no semicolons). `prepare` as exec() (true)
// or exec_replanned() (false).
struct PipelinedStatement {
  std::string_view sql;
  const Params* params = nullptr;
  bool prepare = true;
};

class Connection {
 public:
  // Opens a connection. `conninfo` is a libpq URL or keyword string; "" means
  // libpq's defaults (PG* environment variables, service file). Sets
  // application_name to `application_name` unless conninfo names one.
  // Unless conninfo (or $PGCONNECT_TIMEOUT) says otherwise: connect_timeout
  // 10 s, TCP keepalives after 30 s idle (10 s apart, 3 probes) and
  // tcp_user_timeout 60 s, so a vanished server surfaces as an error.
  // Unless conninfo (or $PGTARGETSESSIONATTRS) says otherwise,
  // target_session_attrs=read-write: of a multi-host URL's hosts, the first
  // that takes writes (a standby is skipped).
  // `bounds` (SessionBounds above) bound its transactions on the server and
  // its waits for replies here; by default neither is bounded.
  static Connection Open(const std::string& conninfo,
                         std::string_view application_name = "akadzed", SessionBounds bounds = {});

  Connection(Connection&&) noexcept = default;
  Connection& operator=(Connection&&) noexcept = default;

  // Runs one or more statements without parameters (simple query protocol).
  // Returns the last statement's result. Throws a PgError subclass on failure.
  Result exec(std::string_view sql);
  // Runs one statement with text-format parameters (extended protocol):
  // prepared on first use and executed by name, or unnamed through a pooler
  // (see the top of this file). A prepared statement the server no longer
  // has, or whose result type a migration changed, fails once with the
  // server's error; the connection runs every statement unnamed after that.
  Result exec(std::string_view sql, const Params& params);
  // Runs one statement with parameters unnamed: parsed and planned for these
  // values each time. For statements whose best plan depends on the values,
  // such as a batch of arrays from one to thousands of elements long, where
  // a prepared statement's generic plan can be far worse (the finisher's
  // batch update took 84 ms instead of 7 ms for ~500 jobs).
  Result exec_replanned(std::string_view sql, const Params& params);
  // Sends `statements` together (libpq's pipeline mode) and reads their
  // results in order: one round trip for all of them, within the reply
  // bound. The server runs them one after another, each with a snapshot of
  // its own under READ COMMITTED (a statement sees what committed while the
  // one before it ran, as with separate round trips). Outside a transaction
  // block they run as one implicit transaction. When one fails the server
  // skips the rest; throws the first error, as exec() would. `during_commit`:
  // the statements end with COMMIT, and a lost connection is InDoubtError.
  std::vector<Result> pipeline(std::span<const PipelinedStatement> statements, bool during_commit = false);
  // After pipeline() threw the server's error: the index of the statement
  // that failed; -1 otherwise (the connection, or nothing, failed).
  int failed_statement() const { return failed_statement_; }

  // Round trips to the server so far: each exec() and pipeline() is one (a
  // statement's first exec() two: it is prepared first).
  std::int64_t round_trips() const { return round_trips_; }

  // This process's number for the connection: each Open() gets the next one.
  // What a reader knew of the database in memory (a claim's floor, the
  // reconcile's) is kept only while it reads through the same connection: a
  // new one may reach a server that lost transactions since (a crash with
  // synchronous_commit off hands their ids out again, under the same
  // pg_postmaster_start_time()), where what it knew is no longer true.
  std::uint64_t serial() const { return serial_; }

  // True when the connection goes through a pooler: the server process that
  // answers is not the one the login reported. Asked once (one round trip),
  // then remembered. Throws like exec().
  bool pooled();

  // False once libpq reports the connection as bad, or once a reply did not
  // come in time (the connection is closed then; every statement after that
  // throws ConnectionError).
  bool healthy() const;
  // Server's process id, for pg_terminate_backend in tests.
  int backend_pid() const;
  PGconn* raw() const { return conn_.get(); }

 private:
  explicit Connection(PGconn* conn) : conn_(conn, &PQfinish) {}
  // One exchange with the server: what is awaited, and until when.
  struct Exchange {
    std::string_view sql;  // names the statement in errors
    bool during_commit = false;
    std::optional<std::chrono::steady_clock::time_point> deadline;
  };
  Exchange StartExchange(std::string_view sql, bool during_commit);
  Result check(Result result, std::string_view sql, bool during_commit);
  // Awaits the reply of a statement PQsend*() just sent (`sent`: its return
  // value), within bounds_.reply: every result, the first error kept as
  // PQexec keeps it; then check(). On a reply not in time, closes the
  // connection and throws.
  Result Await(int sent, std::string_view sql, bool during_commit);
  // Sends what libpq could not write at once, within the exchange's deadline.
  void FlushSent(const Exchange& x);
  // The next result of the exchange (null at the end of a statement's
  // results), waiting within its deadline.
  Result NextResult(const Exchange& x);
  // Waits for `events` on the socket within the exchange's deadline, or
  // closes the connection and throws.
  void WaitReady(const Exchange& x, short events);
  // Reads what arrived; a read error libpq did not count as a lost
  // connection closes it here (else PQgetResult would wait unbounded).
  void Consume(const Exchange& x);
  // Waits until the socket is ready for `events` (1), `deadline` passes (0)
  // or poll() fails (-errno). No deadline: waits as long as it takes.
  int WaitSocket(short events, std::optional<std::chrono::steady_clock::time_point> deadline) const;
  // Closes the connection and throws ConnectionError (InDoubtError
  // `during_commit`) saying `detail`.
  [[noreturn]] void Drop(std::string_view sql, bool during_commit, const std::string& detail);
  Result ExecParams(std::string_view sql, const Params& params, bool prepare);
  friend class Transaction;

  std::unique_ptr<PGconn, decltype(&PQfinish)> conn_{nullptr, &PQfinish};
  std::optional<bool> pooled_;  // unknown until pooled() first runs
  SessionBounds bounds_;  // see Open()
  bool check_interval_refused_ = false;  // the server refused client_connection_check_interval
  bool prepare_ = true;         // false once pooled, or once a prepared statement failed
  std::unordered_set<std::uint64_t> prepared_;  // statement hashes prepared here
  std::int64_t round_trips_ = 0;
  std::uint64_t serial_ = 0;
  int failed_statement_ = -1;  // see failed_statement()
};

}  // namespace akadzed::pg
