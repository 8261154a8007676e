// The `akadzed` subcommands. Each Add*Command registers its options on the
// CLI11 app and sets `action` to the code that runs once parsing succeeded;
// the action returns the process exit code (see docs/cli.md):
//   0 success, 1 runtime failure (database, I/O), 2 bad usage.
//
// Thread-safety: called from main() only.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace akadzed::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

using Action = std::function<int()>;

void AddMigrateCommand(CLI::App& app, Action& action);
void AddClaimCommand(CLI::App& app, Action& action);
void AddLimitsCommand(CLI::App& app, Action& action);
void AddDemoCommand(CLI::App& app, Action& action);

// The database to use: --database-url if given, else $AKADZE_DATABASE_URL,
// else "" (libpq's defaults: PG* variables, service file).
std::string ResolveDatabaseUrl(const std::string& flag);

// Adds --database-url to a subcommand.
void AddDatabaseOption(CLI::App* command, std::string& url);

// Prints "<prefix>: <message>" on stderr, with secrets redacted, on one line.
void PrintError(const std::string& prefix, const std::string& message);

}  // namespace akadzed::cli
