// The PostgreSQL every test program shares: one throwaway cluster started by
// the test main (tests/support/test_main.cpp) before any test runs, and a fresh
// database per test.
//
// PgBouncer mode: with AKADZED_TEST_PGBOUNCER set (to anything but "" or
// "0"), the test main also starts a PgBouncer in transaction pooling mode
// (support/throwaway_pgbouncer.h), and FreshDatabase() hands out conninfos
// that go through it, so the code under test (the daemon, the CLI, the claim)
// runs pooled. What a test needs a real session for (LISTEN, a backend pid
// to terminate, session-level locks or settings) it opens on
// DirectConninfo(db). A test case that needs a direct session throughout is
// tagged [direct]: its FreshDatabase() connects directly, and the
// PgBouncer CTest entries leave it out ("~[direct]").
//
// Thread-safety: every function may be called from any thread.
#pragma once

#include <cstdint>
#include <string>

#include "embedded/throwaway_postgres.h"
#include "pg/connection.h"

namespace akadzed::test {

// The running cluster. Fails the test program if it could not start.
ThrowawayPostgres& Cluster();

// Creates a new, empty database and returns its conninfo: through PgBouncer
// in PgBouncer mode (except in a [direct] test case), else directly. With
// `migrated`, the database already has every embedded migration applied (it
// is copied from a template migrated once per test program).
std::string FreshDatabase(bool migrated = true);

// `conninfo` (one FreshDatabase() returned, maybe with keywords appended)
// pointed straight at the cluster, for a session PgBouncer would not keep.
// Outside PgBouncer mode it is `conninfo` itself.
std::string DirectConninfo(const std::string& conninfo);

// True when FreshDatabase() hands out PgBouncer conninfos: in PgBouncer mode,
// outside [direct] test cases.
bool ThroughPgBouncer();

// Path of the akadzed binary under test (from the AKADZED_BIN environment
// variable that CTest sets, else the build tree default).
std::string AkadzedBinary();

// How many sessions wait for an advisory lock in the database `conn` is
// connected to: a claim waiting for its queue's claim lock, a migration for
// the migrations lock. Counted by database, not by pid (through PgBouncer a
// client's server process is not the pid libpq got at login), and not
// cluster-wide (other test programs' databases share the cluster).
std::int64_t AdvisoryLockWaiters(pg::Connection& conn);

// The first column of the first row of `sql` (a `SELECT count(*) ...`), as
// an integer.
std::int64_t Count(pg::Connection& conn, const std::string& sql);

// How many rows of akadze.jobs are in `state`.
std::int64_t JobsInState(pg::Connection& conn, const std::string& state);

}  // namespace akadzed::test
