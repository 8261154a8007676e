// The PostgreSQL every test program shares: one throwaway cluster started by
// the test main (tests/support/test_main.cpp) before any test runs, and a fresh
// database per test.
//
// Thread-safety: FreshDatabase() may be called from any thread.
#pragma once

#include <string>

#include "embedded/throwaway_postgres.h"
#include "pg/connection.h"

namespace akadzed::test {

// The running cluster. Fails the test program if it could not start.
ThrowawayPostgres& Cluster();

// Creates a new, empty database and returns its conninfo. With `migrated`,
// the database already has every embedded migration applied (it is copied
// from a template migrated once per test program).
std::string FreshDatabase(bool migrated = true);

// Path of the akadzed binary under test (from the AKADZED_BIN environment
// variable that CTest sets, else the build tree default).
std::string AkadzedBinary();

}  // namespace akadzed::test
