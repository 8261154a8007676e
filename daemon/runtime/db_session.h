// A database session that reconnects: the connection one daemon thread owns,
// opened on first use and dropped after a connection-level error, so that the
// next use opens a fresh one.
//
// Thread-safety: owned and used by one thread.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>

#include "pg/connection.h"
#include "pg/pg_error.h"

namespace akadzed {

class DbSession {
 public:
  // `stall_timeout` bounds every transaction of the session, and every wait
  // for a reply (pg::SessionBounds::ForStall).
  DbSession(std::string conninfo, std::string application_name,
            std::chrono::milliseconds stall_timeout = std::chrono::milliseconds(0))
      : conninfo_(std::move(conninfo)),
        application_name_(std::move(application_name)),
        bounds_(pg::SessionBounds::ForStall(stall_timeout)) {}

  // Runs body(connection), opening the connection first if needed. A
  // ConnectionError (from opening or from body) or a connection libpq reports
  // bad afterwards drops the connection; the error is rethrown either way.
  template <typename Body>
  auto Run(Body&& body) -> decltype(body(std::declval<pg::Connection&>())) {
    try {
      if (!conn_ || !conn_->healthy()) {
        conn_.reset();
        conn_.emplace(pg::Connection::Open(conninfo_, application_name_, bounds_));
      }
      return body(*conn_);
    } catch (const pg::ConnectionError&) {
      conn_.reset();
      throw;
    }
  }

  const std::string& conninfo() const { return conninfo_; }

 private:
  std::string conninfo_;
  std::string application_name_;
  pg::SessionBounds bounds_;
  std::optional<pg::Connection> conn_;
};

}  // namespace akadzed
