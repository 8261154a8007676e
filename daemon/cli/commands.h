// The `akadzed` subcommands. Each Add*Command registers its options on the
// CLI11 app and sets `action` to the code that runs once parsing succeeded;
// the action returns the process exit code (see docs/cli.md):
//   0 success, 1 runtime failure (database, I/O), 2 bad usage.
//
// Thread-safety: called from main() only.
#pragma once

#include <CLI/CLI.hpp>

#include "embedded/throwaway_postgres.h"

#include <functional>
#include <memory>
#include <string>

namespace akadzed::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
// 78 (EX_CONFIG): a configuration error, see config/config.h (kExitConfig).

using Action = std::function<int()>;

void AddMigrateCommand(CLI::App& app, Action& action);
void AddClaimCommand(CLI::App& app, Action& action);
void AddLimitsCommand(CLI::App& app, Action& action);
void AddDemoCommand(CLI::App& app, Action& action);
void AddLessonCommand(CLI::App& app, Action& action);
void AddRunCommand(CLI::App& app, Action& action);
void AddCheckConfigCommand(CLI::App& app, Action& action);
// periodic next (cli/periodic_command.cpp).
void AddPeriodicCommand(CLI::App& app, Action& action);
// enqueue, jobs, queues, workers, status (cli/admin_commands.cpp).
void AddAdminCommands(CLI::App& app, Action& action);

// Starts a throwaway PostgreSQL for the quick-start commands (demo, lesson),
// migrates it and says so on stdout. The cluster is removed when the returned
// object is destroyed.
std::unique_ptr<ThrowawayPostgres> StartEmbeddedDatabase();

// The database to use: --database-url if given, else $AKADZE_DATABASE_URL,
// else "" (libpq's defaults: PG* variables, service file).
std::string ResolveDatabaseUrl(const std::string& flag);

// Adds --database-url to a subcommand.
void AddDatabaseOption(CLI::App* command, std::string& url);

// Prints "<prefix>: <message>" on stderr, with secrets redacted, on one line.
void PrintError(const std::string& prefix, const std::string& message);
// Same for an exception; a database error about a missing akadze table or
// column gets a hint to run `akadzed migrate`.
void PrintError(const std::string& prefix, const std::exception& error);

// Runs a command's body and turns what it throws into the documented exit
// codes: std::invalid_argument is bad usage ("<command>: ...", exit 2),
// anything else a failure ("<command> failed: ...", exit 1).
int RunCommand(const std::string& command, const std::function<int()>& body);

}  // namespace akadzed::cli
