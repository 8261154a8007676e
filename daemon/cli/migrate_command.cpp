#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "pg/pg_error.h"
#include "schema/migrations.h"

namespace akadzed::cli {

void AddMigrateCommand(CLI::App& app, Action& action) {
  auto url = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("migrate", "Create or upgrade the akadze schema (idempotent)");
  AddDatabaseOption(cmd, *url);
  cmd->callback([&action, url] {
    action = [url]() -> int {
      return RunCommand("migrate", [&] {
        pg::Connection conn = pg::Connection::Open(ResolveDatabaseUrl(*url), "akadzed migrate");
        std::vector<std::string> applied = Migrate(conn);
        if (applied.empty()) {
          std::cout << "schema up to date" << std::endl;
        }
        for (const auto& v : applied) std::cout << "applied " << v << std::endl;
        return kExitOk;
      });
    };
  });
}

}  // namespace akadzed::cli
