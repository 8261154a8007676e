#include "schema/migrations.h"

#include <algorithm>

#include "pg/pg_error.h"
#include "pg/transaction.h"

namespace akadzed {

std::string_view ExpectedSchemaVersion() {
  auto all = EmbeddedMigrations();
  return all.empty() ? std::string_view() : all.back().version;
}

std::vector<std::string> Migrate(pg::Connection& conn, std::span<const Migration> migrations) {
  pg::Transaction tx(conn);
  // The lock comes first: CREATE SCHEMA IF NOT EXISTS itself races.
  tx.exec("SELECT pg_advisory_xact_lock(hashtext('akadze.migrate'))");
  tx.exec(
      "SET LOCAL client_min_messages = warning;"
      "CREATE SCHEMA IF NOT EXISTS akadze;"
      "CREATE TABLE IF NOT EXISTS akadze.schema_migrations ("
      "  version text PRIMARY KEY,"
      "  applied_at timestamptz NOT NULL DEFAULT now())");
  pg::Result done = tx.exec("SELECT version FROM akadze.schema_migrations");
  std::vector<std::string> applied_before;
  for (int i = 0; i < done.rows(); ++i) applied_before.emplace_back(done.text(i, 0));

  std::vector<std::string> applied;
  for (const Migration& m : migrations) {
    std::string version(m.version);
    if (std::find(applied_before.begin(), applied_before.end(), version) != applied_before.end()) {
      continue;
    }
    try {
      tx.exec(m.sql);
    } catch (const pg::PgError& e) {
      // Name the migration; keep the typed error.
      if (e.poisons_connection()) throw;
      if (e.transient()) throw pg::TransientError("migration " + version + ": " + e.what(), e.sqlstate());
      throw pg::SqlError("migration " + version + ": " + e.what(), e.sqlstate());
    }
    tx.exec("INSERT INTO akadze.schema_migrations (version) VALUES ($1)",
            pg::Params().add(version));
    applied.push_back(version);
  }
  tx.commit();
  return applied;
}

std::vector<std::string> AppliedMigrations(pg::Connection& conn) {
  pg::Result exists = conn.exec("SELECT to_regclass('akadze.schema_migrations') IS NOT NULL");
  std::vector<std::string> out;
  if (!exists.boolean(0, 0)) return out;
  pg::Result rows = conn.exec("SELECT version FROM akadze.schema_migrations ORDER BY version");
  for (int i = 0; i < rows.rows(); ++i) out.emplace_back(rows.text(i, 0));
  return out;
}

std::string SchemaMismatch(pg::Connection& conn) {
  std::vector<std::string> applied = AppliedMigrations(conn);
  std::string have = applied.empty() ? "none" : applied.back();
  if (have == ExpectedSchemaVersion()) return "";
  if (!applied.empty() && have > std::string(ExpectedSchemaVersion())) {  // "NNN_..." sort by number
    return "the database schema is at migration " + have + ", newer than this akadzed knows (" +
           std::string(ExpectedSchemaVersion()) + "): upgrade akadzed";
  }
  return "the database schema is at migration " + have + ", this akadzed needs " +
         std::string(ExpectedSchemaVersion()) + ": run `akadzed migrate`";
}

}  // namespace akadzed
