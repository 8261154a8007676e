// `akadzed run` (the daemon) and `akadzed check-config`.
//
// Exit codes (docs/cli.md): 0 clean stop / config ok, 1 runtime failure
// (e.g. the database cannot be used at start), 2 bad usage, 78 config error.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <iostream>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>

#include "sample_rows/demo_jobs.h"
#include "store/limits_table.h"
#include "cli/commands.h"
#include "config/config.h"
#include "core/duration.h"
#include "core/redact.h"
#include "pg/connection.h"
#include "pg/pg_error.h"
#include "schema/migrations.h"
#include "worker/daemon.h"
#include "worker/handler_registry.h"
#include "runtime/logging.h"
#include "runtime/service_loop.h"

namespace akadzed::cli {

namespace {

struct RunOptions {
  std::string config_path;
  std::string database_url;
  bool migrate = false;
  bool embedded_demo = false;
  std::string demo_duration;
};

// The quick start's job source: every second a few sample jobs for the
// example config's handlers (greet: shell, checksum: plugin), some of which
// fail once or snooze, over three limit keys. With a duration, it sends the
// process SIGTERM when the time is up, so the daemon stops the normal way.
class DemoProducer {
 public:
  DemoProducer(std::string conninfo, std::optional<std::int64_t> duration_us)
      : conninfo_(std::move(conninfo)), duration_us_(duration_us) {
    loop_.Start("demo producer", [this] { Loop(); });
  }
  ~DemoProducer() { loop_.Stop(); }

 private:
  void Loop() {
    const auto start = loop_.clock().Now();
    int round = 0;
    try {
      pg::Connection conn = pg::Connection::Open(conninfo_, "akadzed demo producer");
      SetLimit(conn, LimitRow{"*", 1, std::nullopt, std::nullopt});
      for (;;) {
        EnqueueDemoRound(conn, ++round);
        if (loop_.Sleep(std::chrono::seconds(1))) return;
        if (duration_us_ && loop_.clock().Now() - start >=
                                std::chrono::microseconds(*duration_us_)) {
          spdlog::info("demo | {} passed, stopping", FormatDuration(*duration_us_));
          kill(getpid(), SIGTERM);
          return;
        }
      }
    } catch (const std::exception& e) {
      spdlog::error("demo_producer_failed | {}", OneLine(e.what()));
    }
  }

  std::string conninfo_;
  std::optional<std::int64_t> duration_us_;
  ServiceLoop loop_;  // the producer's thread and its stop
};

// What `run` starts with: the config, its handlers and transition hooks.
struct LoadedConfig {
  DaemonConfig config;
  HandlerMap handlers;
  std::unique_ptr<TransitionHooks> hooks;
};

// Loads the config and builds its handlers and hooks, or prints the error
// and returns nullopt (exit 78).
std::optional<LoadedConfig> LoadForRun(const std::string& path) {
  try {
    DaemonConfig config = LoadConfigFile(path);
    ConfigureLogging(config.logging);
    HandlerMap handlers = BuildHandlers(config);
    std::unique_ptr<TransitionHooks> hooks = BuildHooks(config);
    return LoadedConfig{std::move(config), std::move(handlers), std::move(hooks)};
  } catch (const ConfigError& e) {
    PrintError("akadzed run: config error", e.what());
    return std::nullopt;
  }
}

int Run(const RunOptions& o) {
  // Before any thread exists (the embedded server's helpers included).
  BlockDaemonSignals();
  // Shell handlers run as our user: keep them (and any process of that user)
  // out of our /proc/<pid>/environ and memory, which hold the database
  // password, and from ptrace. No core dumps follow (docs/security.md).
  prctl(PR_SET_DUMPABLE, 0);
  std::optional<std::int64_t> demo_duration;
  if (!o.demo_duration.empty()) {
    std::string error;
    demo_duration = ParseDuration(o.demo_duration, &error);
    if (!demo_duration) throw std::invalid_argument("--demo-duration: " + error);
  }
  auto loaded = LoadForRun(o.config_path);
  if (!loaded) return kExitConfig;
  auto& [config, handlers, hooks] = *loaded;

  std::unique_ptr<ThrowawayPostgres> server;
  std::string conninfo;
  if (o.embedded_demo) {
    server = StartEmbeddedDatabase();
    conninfo = server->conninfo();
  } else {
    conninfo = ResolveDatabaseUrl(o.database_url.empty() ? config.database.url : o.database_url);
    if (o.migrate) {
      pg::Connection conn = pg::Connection::Open(conninfo, "akadzed migrate");
      for (const auto& v : Migrate(conn)) spdlog::info("migrate applied={}", v);
    }
  }
  std::unique_ptr<DemoProducer> producer;
  if (o.embedded_demo) producer = std::make_unique<DemoProducer>(conninfo, demo_duration);
  Daemon daemon(std::move(config), conninfo, std::move(handlers), std::move(hooks));
  int code = daemon.Run();
  producer.reset();
  return code;
}

int CheckConfig(const std::string& path) {
  try {
    DaemonConfig config = LoadConfigFile(path);
    VerifyHandlers(config);
    std::cout << path << ": ok (" << config.queues.size() << " queues, " << config.handlers.size()
              << " handlers)" << std::endl;
    return kExitOk;
  } catch (const ConfigError& e) {
    PrintError("akadzed check-config", e.what());
    return kExitConfig;
  }
}

}  // namespace

void AddRunCommand(CLI::App& app, Action& action) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Run the worker daemon (until SIGTERM/SIGINT)");
  cmd->add_option("--config,-c", options->config_path, "YAML config file (docs/configuration.md)")
      ->required();
  AddDatabaseOption(cmd, options->database_url);
  cmd->add_flag("--migrate", options->migrate, "Apply pending migrations before starting");
  cmd->add_flag("--embedded-demo", options->embedded_demo,
                "Start a throwaway PostgreSQL and feed it sample jobs (the README's quick start)");
  cmd->add_option("--demo-duration", options->demo_duration,
                  "With --embedded-demo: stop after this long (e.g. 20s)");
  cmd->callback([&action, options] {
    action = [options] { return RunCommand("akadzed run", [&] { return Run(*options); }); };
  });
}

void AddCheckConfigCommand(CLI::App& app, Action& action) {
  auto path = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("check-config", "Validate a config file without starting");
  cmd->add_option("file", *path, "YAML config file")->required();
  cmd->callback([&action, path] { action = [path] { return CheckConfig(*path); }; });
}

}  // namespace akadzed::cli
