#include <cstdlib>
#include <iostream>

#include "cli/commands.h"
#include "core/redact.h"

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

void PrintError(const std::string& prefix, const std::string& message) {
  std::cerr << prefix << ": " << OneLine(RedactSecrets(message)) << std::endl;
}

}  // namespace akadzed::cli
