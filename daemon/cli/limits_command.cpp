#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "store/limits_table.h"
#include "cli/commands.h"
#include "core/duration.h"
#include "pg/pg_error.h"

namespace akadzed::cli {

namespace {

struct LimitsOptions {
  std::string url;
  std::string key;
  std::optional<std::int64_t> max_running;
  std::optional<std::int64_t> max_starts;
  std::string starts_window;
  bool json = false;
};

std::string Cap(const std::optional<std::int64_t>& v) { return v ? std::to_string(*v) : "-"; }

// Runs `body` on a connection to `url`; `check`, if given, first, before any
// connection attempt (its std::invalid_argument is a usage error).
int Run(const std::string& what, const std::function<void(pg::Connection&)>& body,
        const std::string& url, const std::function<void()>& check = {}) {
  return RunCommand("limits " + what, [&] {
    if (check) check();
    pg::Connection conn = pg::Connection::Open(ResolveDatabaseUrl(url), "akadzed limits");
    body(conn);
    return kExitOk;
  });
}

}  // namespace

void AddLimitsCommand(CLI::App& app, Action& action) {
  auto o = std::make_shared<LimitsOptions>();
  CLI::App* limits = app.add_subcommand("limits", "Show and change per-key limits");
  limits->require_subcommand(1);

  CLI::App* set = limits->add_subcommand("set", "Create or replace the limits of KEY ('*': default row)");
  AddDatabaseOption(set, o->url);
  set->add_option("KEY", o->key, "Limit key, or '*' for the default row")->required();
  set->add_option("--max-running", o->max_running, "Most running jobs of the key")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{2147483647}));
  auto* starts = set->add_option("--max-starts", o->max_starts, "Most starts per --starts-window")
                     ->check(CLI::Range(std::int64_t{1}, std::int64_t{2147483647}));
  auto* window = set->add_option("--starts-window", o->starts_window,
                                 "Window of --max-starts, e.g. 1m, 30s, 1h");
  starts->needs(window);
  window->needs(starts);
  set->callback([&action, o] {
    action = [o]() -> int {
      std::string error;
      LimitRow row{o->key, o->max_running, o->max_starts, std::nullopt};
      if (!o->starts_window.empty()) {
        row.starts_window_us = ParseDuration(o->starts_window, &error);
        if (!row.starts_window_us) {
          PrintError("limits set", "--starts-window: " + error);
          return kExitUsage;
        }
      }
      return Run("set", [&](pg::Connection& conn) {
        SetLimit(conn, row);
        std::cout << "set " << row.key << " max_running=" << Cap(row.max_running)
                  << " max_starts=" << Cap(row.max_starts) << " starts_window="
                  << (row.starts_window_us ? FormatDuration(*row.starts_window_us) : "-")
                  << std::endl;
      }, o->url, [&] { ValidateLimit(row); });
    };
  });

  CLI::App* list = limits->add_subcommand("list", "List all limits rows");
  AddDatabaseOption(list, o->url);
  list->add_flag("--json", o->json, "Print a JSON array");
  list->callback([&action, o] {
    action = [o]() -> int {
      return Run("list", [&](pg::Connection& conn) {
        std::vector<LimitRow> rows = ListLimits(conn);
        if (o->json) {
          nlohmann::json out = nlohmann::json::array();
          auto opt = [](const std::optional<std::int64_t>& v) {
            return v ? nlohmann::json(*v) : nlohmann::json();
          };
          for (const LimitRow& r : rows) {
            out.push_back({{"key", r.key},
                           {"max_running", opt(r.max_running)},
                           {"max_starts", opt(r.max_starts)},
                           {"starts_window", r.starts_window_us
                                                 ? nlohmann::json(FormatDuration(*r.starts_window_us))
                                                 : nlohmann::json()}});
          }
          std::cout << out.dump() << std::endl;
          return;
        }
        std::cout << "KEY\tMAX_RUNNING\tMAX_STARTS\tSTARTS_WINDOW" << std::endl;
        for (const LimitRow& r : rows) {
          std::cout << r.key << '\t' << Cap(r.max_running) << '\t' << Cap(r.max_starts) << '\t'
                    << (r.starts_window_us ? FormatDuration(*r.starts_window_us) : "-") << std::endl;
        }
      }, o->url);
    };
  });

  CLI::App* del = limits->add_subcommand("delete", "Delete the limits row of KEY");
  AddDatabaseOption(del, o->url);
  del->add_option("KEY", o->key, "Limit key")->required();
  del->callback([&action, o] {
    action = [o]() -> int {
      bool found = false;
      int rc = Run("delete", [&](pg::Connection& conn) { found = DeleteLimit(conn, o->key); }, o->url);
      if (rc != kExitOk) return rc;
      if (!found) {
        PrintError("limits delete failed", "no limits row for key '" + o->key + "'");
        return kExitFailure;
      }
      std::cout << "deleted " << o->key << std::endl;
      return kExitOk;
    };
  });
}

}  // namespace akadzed::cli
