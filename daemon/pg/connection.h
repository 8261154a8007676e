// One libpq connection (PGconn), owned, with statement execution that throws
// the typed errors of pg_error.h.
//
// Thread-safety: a Connection must be used by one thread at a time (libpq's
// rule). Moving it transfers ownership.
#pragma once

#include <libpq-fe.h>

#include <memory>
#include <string>
#include <string_view>

#include "pg/params.h"
#include "pg/result.h"

namespace akadzed::pg {

class Connection {
 public:
  // Opens a connection. `conninfo` is a libpq URL or keyword string; "" means
  // libpq's defaults (PG* environment variables, service file). Sets
  // application_name to `application_name` unless conninfo names one.
  // Unless conninfo (or $PGCONNECT_TIMEOUT) says otherwise: connect_timeout
  // 10 s, TCP keepalives after 30 s idle (10 s apart, 3 probes) and
  // tcp_user_timeout 60 s, so a vanished server surfaces as an error.
  // Throws ConnectionError (message redacted) if the server can't be reached.
  static Connection Open(const std::string& conninfo,
                         std::string_view application_name = "akadzed");

  Connection(Connection&&) noexcept = default;
  Connection& operator=(Connection&&) noexcept = default;

  // Runs one or more statements without parameters (simple query protocol).
  // Returns the last statement's result. Throws a PgError subclass on failure.
  Result exec(std::string_view sql);
  // Runs one statement with text-format parameters (extended protocol, unnamed
  // statement: works through PgBouncer in transaction mode).
  Result exec(std::string_view sql, const Params& params);

  // False once libpq reports the connection as bad.
  bool healthy() const;
  // Server's process id, for pg_terminate_backend in tests.
  int backend_pid() const;
  PGconn* raw() const { return conn_.get(); }

 private:
  explicit Connection(PGconn* conn) : conn_(conn, &PQfinish) {}
  Result check(PGresult* result, std::string_view sql, bool during_commit);
  friend class Transaction;

  std::unique_ptr<PGconn, decltype(&PQfinish)> conn_{nullptr, &PQfinish};
};

}  // namespace akadzed::pg
