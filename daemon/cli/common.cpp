#include <cstdlib>
#include <iostream>

#include "cli/commands.h"
#include "core/redact.h"
#include "pg/pg_error.h"
#include "schema/migrations.h"

namespace akadzed::cli {

std::string ResolveDatabaseUrl(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("AKADZE_DATABASE_URL"); env != nullptr) return env;
  return "";
}

void AddDatabaseOption(CLI::App* command, std::string& url) {
  command->add_option("--database-url", url,
                      "PostgreSQL URL or conninfo (default: $AKADZE_DATABASE_URL, else libpq's "
                      "PG* defaults)");
}

std::unique_ptr<ThrowawayPostgres> StartEmbeddedDatabase() {
  std::cout << "starting a throwaway PostgreSQL..." << std::endl;
  auto server = ThrowawayPostgres::Start();
  std::cout << "PostgreSQL running in " << server->directory().string() << " (removed on exit)"
            << std::endl;
  pg::Connection conn = pg::Connection::Open(server->conninfo(), "akadzed");
  for (const auto& v : Migrate(conn)) std::cout << "applied " << v << std::endl;
  return server;
}

void PrintError(const std::string& prefix, const std::exception& error) {
  std::string message = error.what();
  if (const auto* pg_error = dynamic_cast<const pg::PgError*>(&error)) {
    const std::string& state = pg_error->sqlstate();
    if (state == "42P01" || state == "42703" || state == "42883" || state == "3F000") {
      message += " (is the akadze schema migrated? run: akadzed migrate)";
    }
  }
  PrintError(prefix, message);
}

int RunCommand(const std::string& command, const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::invalid_argument& e) {
    PrintError(command, e);
    return kExitUsage;
  } catch (const std::exception& e) {
    PrintError(command + " failed", e);
    return kExitFailure;
  }
}

void PrintError(const std::string& prefix, const std::string& message) {
  std::cerr << prefix << ": " << OneLine(RedactSecrets(message)) << std::endl;
}

}  // namespace akadzed::cli
