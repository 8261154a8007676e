// The PgBouncer mode itself (tests/support/test_cluster.h): that the suite
// really runs through the pooler when asked to, and what the daemon says
// when LISTEN/NOTIFY is turned on behind one. Each test holds in both modes,
// with the expectation of the mode it runs in.
#include <catch2/catch.hpp>

#include <signal.h>

#include "pg/connection.h"
#include "support/daemon_process.h"
#include "support/test_cluster.h"

namespace akadzed::test {
namespace {

using namespace std::chrono_literals;

// The server process that ran a statement, and the pid libpq got at login:
// the same on a direct session, unrelated through PgBouncer (its own key).
bool SameBackend(pg::Connection& conn) {
  return conn.exec("SELECT pg_backend_pid()").int64(0, 0) == conn.backend_pid();
}

TEST_CASE("PgBouncer mode: FreshDatabase goes through the pooler, DirectConninfo does not",
          "[pgbouncer]") {
  const std::string db = FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  pg::Connection direct = pg::Connection::Open(DirectConninfo(db));
  CHECK(SameBackend(direct));
  CHECK(direct.exec("SELECT current_database()").text(0, 0) ==
        conn.exec("SELECT current_database()").text(0, 0));
  if (ThroughPgBouncer()) {
    CHECK_FALSE(SameBackend(conn));
    // Keywords appended to a FreshDatabase() conninfo survive the rewrite.
    pg::Connection mine = pg::Connection::Open(DirectConninfo(db + " application_name=mine"));
    CHECK(mine.exec("SHOW application_name").text(0, 0) == "mine");
    CHECK(SameBackend(mine));
  } else {
    CHECK(SameBackend(conn));
    CHECK(DirectConninfo(db) == db);
  }
}

TEST_CASE("listen_notify behind a pooler: the daemon warns listen_pooled and still polls",
          "[daemon][pgbouncer]") {
  const std::string db = FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  TempDir dir;
  const std::string noop = dir.Write("noop.sh", "#!/bin/sh\n", true);
  const std::string config = dir.Write(
      "akadzed.yaml",
      "worker:\n  heartbeat_interval: 200ms\n  heartbeat_ttl: 1500ms\n  poll_interval: 100ms\n"
      "  shutdown_timeout: 2s\n  listen_notify: true\n"
      "queues:\n  - {name: default, slots: 2}\n"
      "handlers:\n  noop:\n    shell: {command: [\"" + noop + "\"], kill_grace: 500ms}\n"
      "logging: {level: debug, format: logfmt}\n"
      "metrics: {listen: 127.0.0.1:0}\n");
  DaemonProcess daemon({"run", "--config", config, "--database-url", db}, {},
                       dir.path() + "/daemon.log");
  // The listener checks for a pooler before it logs this line.
  REQUIRE(daemon.WaitForLog("listen channel=akadze_jobs"));
  CHECK((daemon.Log().find("listen_pooled") != std::string::npos) == ThroughPgBouncer());
  const auto id = conn.exec("INSERT INTO akadze.jobs (task) VALUES ('noop') RETURNING id").int64(0, 0);
  CHECK(WaitUntil([&] {
    return conn.exec("SELECT state FROM akadze.jobs WHERE id = $1", pg::Params().add(id))
               .text(0, 0) == "succeeded";
  }));
  daemon.Signal(SIGTERM);
  CHECK(daemon.Wait() == 0);
}

}  // namespace
}  // namespace akadzed::test
