// The schema migrations compiled into the binary from migrations/NNN_name.sql,
// and the runner that applies them.
//
// Thread-safety: EmbeddedMigrations() is immutable data. Migrate() uses the
// Connection it is given (one thread at a time); concurrent Migrate() calls on
// different connections are safe: they serialize on an advisory lock.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pg/connection.h"

namespace akadzed {

struct Migration {
  std::string_view version;  // file stem, e.g. "001_initial"
  std::string_view sql;
};

// All migrations, in file (version) order.
std::span<const Migration> EmbeddedMigrations();

// The version of the newest embedded migration: the schema this binary needs.
std::string_view ExpectedSchemaVersion();

// Applies every migration not yet recorded in akadze.schema_migrations, in
// order, inside one transaction under
// pg_advisory_xact_lock(hashtext('akadze.migrate')). Returns the versions
// applied (empty: schema up to date). Calls `on_applied` for each. Throws
// PgError when a migration fails; nothing is applied then.
std::vector<std::string> Migrate(pg::Connection& conn,
                                 std::span<const Migration> migrations = EmbeddedMigrations());

// Versions recorded in akadze.schema_migrations, oldest first; empty when the
// schema does not exist yet.
std::vector<std::string> AppliedMigrations(pg::Connection& conn);

// "" when the database's newest applied migration is ExpectedSchemaVersion(),
// else why not, in one line: "the database schema is at migration X, this
// akadzed needs Y: run `akadzed migrate`" (X is "none" without a schema).
// `akadzed run` refuses to start on a mismatch; /readyz answers 503 with it.
// Throws PgError.
std::string SchemaMismatch(pg::Connection& conn);

}  // namespace akadzed
