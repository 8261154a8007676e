// A throwaway PgBouncer in front of a ThrowawayPostgres, for the test
// programs' PgBouncer mode (AKADZED_TEST_PGBOUNCER, tests/support/test_main.cpp):
// Debian's pgbouncer started as a child process, in transaction pooling
// mode, with every database of the cluster reachable through it (`* =`
// fallback). Its config and log are in a fresh temporary directory, deleted
// on destruction; its Unix socket (no TCP) is in the cluster's private socket
// directory, on another port.
//
// It runs as the user that owns the cluster's directory (pgbouncer refuses
// root: as root that is `postgres`), and dies with the process that started
// it (PR_SET_PDEATHSIG), so a crashed test program leaves no pooler behind.
// Authentication is `trust` on its socket; users are looked up in the
// cluster through auth_user `postgres`, so roles a test creates can log in.
//
// Thread-safety: start/stop from one thread; conninfo() from any thread.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <memory>
#include <string>

#include "embedded/throwaway_postgres.h"

namespace akadzed::test {

class ThrowawayPgBouncer {
 public:
  // Server connections per (database, user) pair: small, so that a daemon's
  // connections (queues + 2 and more) really share server connections.
  static constexpr int kPoolSize = 10;

  // Writes the config, starts pgbouncer and waits until it serves a query.
  // Throws std::runtime_error with the tail of its log when that fails.
  static std::unique_ptr<ThrowawayPgBouncer> Start(const ThrowawayPostgres& cluster);
  // Stops pgbouncer (SIGTERM: immediate shutdown) and removes the directory
  // unless AKADZED_KEEP_PG is set.
  ~ThrowawayPgBouncer();
  ThrowawayPgBouncer(const ThrowawayPgBouncer&) = delete;
  ThrowawayPgBouncer& operator=(const ThrowawayPgBouncer&) = delete;

  // Keyword conninfo for database `dbname` as user `postgres`, through PgBouncer.
  std::string conninfo(const std::string& dbname) const;
  const std::filesystem::path& socket_directory() const { return socket_dir_; }
  int port() const { return port_; }
  // The directory of pgbouncer.ini, users.txt and pgbouncer.log.
  const std::filesystem::path& directory() const { return dir_; }
  // pgbouncer's own log (connections, pooler errors).
  std::filesystem::path log_path() const { return dir_ / "pgbouncer.log"; }

 private:
  ThrowawayPgBouncer() = default;
  void Stop();
  std::string LogTail() const;

  std::filesystem::path dir_;
  std::filesystem::path socket_dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace akadzed::test
