// akadzed: a worker daemon for jobs stored in PostgreSQL (the akadze model).
#include <CLI/CLI.hpp>

#include <csignal>
#include <iostream>

#include "cli/commands.h"
#include "core/redact.h"

int main(int argc, char** argv) {
  // A closed stdout (e.g. piped into head) must not kill us before cleanup:
  // writes fail with EPIPE instead.
  signal(SIGPIPE, SIG_IGN);
  CLI::App app{"akadzed: runs jobs stored in PostgreSQL", "akadzed"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("akadzed ") + AKADZED_VERSION);
  akadzed::cli::Action action;
  akadzed::cli::AddRunCommand(app, action);
  akadzed::cli::AddCheckConfigCommand(app, action);
  akadzed::cli::AddPeriodicCommand(app, action);
  akadzed::cli::AddMigrateCommand(app, action);
  akadzed::cli::AddClaimCommand(app, action);
  akadzed::cli::AddLimitsCommand(app, action);
  akadzed::cli::AddDemoCommand(app, action);
  akadzed::cli::AddLessonCommand(app, action);
  akadzed::cli::AddAdminCommands(app, action);
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      known = known || sub->get_name() == argv[1];
    }
    if (!known) {
      std::cerr << "akadzed: unknown command '" << akadzed::OneLine(akadzed::RedactSecrets(argv[1]))
                << "' (see akadzed --help)" << std::endl;
      return akadzed::cli::kExitUsage;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // CLI11 echoes stray arguments, which may be a database URL with a password.
    std::cerr << "akadzed: " << akadzed::OneLine(akadzed::RedactSecrets(e.what()))
              << " (see akadzed --help)" << std::endl;
    return akadzed::cli::kExitUsage;
  }
  if (!action) return akadzed::cli::kExitUsage;
  return action();
}
