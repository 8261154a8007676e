// A database session that reconnects: the connection one daemon thread owns,
// opened on first use and dropped after a connection-level error, so that the
// next use opens a fresh one. SharedDbSession is one such session that
// several loops take in turn (the lease keeper and the services beside it
// share the "akadzed lease" connection; only the keeper opens it).
//
// Thread-safety: a DbSession is owned and used by one thread; a
// SharedDbSession's Run may be called from any thread (one body at a time).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>

#include "core/thread_annotations.h"
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
  // True while a connection is open and libpq reports it good.
  bool connected() const { return conn_ && conn_->healthy(); }

 private:
  std::string conninfo_;
  std::string application_name_;
  pg::SessionBounds bounds_;
  std::optional<pg::Connection> conn_;
};

// One DbSession for several threads: the lease keeper's connection, which
// the services beside it share. Run holds the session's mutex for the body,
// so they send their statements in turn, on one connection. Only one of
// them (the keeper, every heartbeat) opens the connection; the others use it
// while it is open (RunIfConnected), so that none of them holds the turn
// waiting for a server that is away, and the database being away is noticed
// and logged by one loop. A body must not take a lock another user of the
// session may hold while it waits for this one.
class SharedDbSession {
 public:
  SharedDbSession(std::string conninfo, std::string application_name,
                  std::chrono::milliseconds stall_timeout = std::chrono::milliseconds(0))
      : session_(std::move(conninfo), std::move(application_name), stall_timeout) {}

  // DbSession::Run: opens the connection first if needed.
  template <typename Body>
  decltype(auto) Run(Body&& body) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return session_.Run(std::forward<Body>(body));
  }
  // True while the connection is open (the database answered its opener).
  bool connected() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return session_.connected();
  }
  // Runs body(connection) if the connection is open and returns true;
  // returns false, running nothing, if it is not (dropped after an error,
  // not yet opened). A ConnectionError from body drops it, as Run does.
  template <typename Body>
  bool RunIfConnected(Body&& body) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (!session_.connected()) return false;
    session_.Run(std::forward<Body>(body));
    return true;
  }

 private:
  Mutex mu_;
  DbSession session_ GUARDED_BY(mu_);
};

}  // namespace akadzed
