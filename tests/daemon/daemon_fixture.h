// A fresh migrated database, a temporary directory and the helpers the
// misbehaving-handler and security tests share: write a config, start
// `akadzed run` against the database, enqueue jobs, read rows, and look at
// processes.
//
// Thread-safety: one fixture per test.
#pragma once

#include <catch2/catch.hpp>

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "pg/connection.h"
#include "support/daemon_process.h"
#include "support/test_cluster.h"

namespace akadzed::test {

// Fast timings so that leases, retries and drains show within seconds.
inline constexpr const char* kFastWorkerConfig = R"(worker:
  heartbeat_interval: 200ms
  heartbeat_ttl: 1500ms
  poll_interval: 100ms
  shutdown_timeout: 2s
)";

struct HandlerTestFixture {
  std::string db = FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  TempDir dir;
  int started = 0;

  // Writes akadzed.yaml: `worker`, one fair queue of `slots`, `handlers`
  // (YAML under `handlers:`), then `extra` top-level YAML; returns its path.
  std::string Config(const std::string& handlers, const std::string& extra = "",
                     int slots = 4, const std::string& worker = kFastWorkerConfig) {
    return dir.Write("akadzed.yaml",
                     worker + "queues:\n  - name: default\n    slots: " + std::to_string(slots) +
                         "\n    mode: fair\nhandlers:\n" + handlers +
                         "logging:\n  level: debug\n  format: logfmt\n"
                         "metrics: {listen: 127.0.0.1:0}\n" + extra);
  }
  // Starts `akadzed run` on `config` against `database` (default: db), with
  // the test and example plugin directories on the plugin path.
  std::unique_ptr<DaemonProcess> Start(const std::string& config, EnvChanges env = {},
                                       const std::string& database = "") {
    env.emplace("AKADZED_PLUGIN_PATH",
                std::string(AKADZED_TEST_PLUGIN_DIR) + ":" + AKADZED_EXAMPLE_PLUGIN_DIR);
    std::vector<std::string> args{"run", "--config", config};
    if (!(database.empty() && env.count("AKADZE_DATABASE_URL") != 0)) {
      args.insert(args.end(), {"--database-url", database.empty() ? db : database});
    }
    return std::make_unique<DaemonProcess>(
        args, env, dir.path() + "/daemon" + std::to_string(++started) + ".log");
  }
  std::int64_t Enqueue(const std::string& task, const std::string& args = "{}",
                       int max_attempts = 3) {
    return conn
        .exec("INSERT INTO akadze.jobs (task, args, max_attempts) VALUES ($1, $2::jsonb, $3)"
              " RETURNING id",
              pg::Params().add(task).add(args).add(max_attempts))
        .int64(0, 0);
  }
  nlohmann::json Row(std::int64_t id) {
    return nlohmann::json::parse(
        conn.exec("SELECT to_jsonb(j) - 'args' FROM akadze.jobs j WHERE id = $1",
                  pg::Params().add(id))
            .text(0, 0));
  }
  std::string State(std::int64_t id) {
    return std::string(
        conn.exec("SELECT state FROM akadze.jobs WHERE id = $1", pg::Params().add(id)).text(0, 0));
  }
  bool WaitState(std::int64_t id, const std::string& state,
                 std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    return WaitUntil([&] { return State(id) == state; }, timeout);
  }
  std::int64_t Count(const std::string& sql) { return conn.exec(sql).int64(0, 0); }
};

// A `handlers:` entry running `script_path`, with `extra` lines (indented
// six spaces) under `shell:`.
inline std::string ShellHandlerYaml(const std::string& task, const std::string& script_path,
                                    const std::string& extra = "") {
  // kill_grace 500ms unless `extra` sets it: the fast timings' lease
  // (1500ms - kill_grace - 250ms) must cover two heartbeat intervals.
  const std::string grace = extra.find("kill_grace:") == std::string::npos ? "      kill_grace: 500ms\n" : "";
  return "  " + task + ":\n    shell:\n      command: [\"" + script_path + "\"]\n" + grace + extra;
}

// Gone, or a zombie nobody reaps yet: either way it runs no more.
inline bool ProcessGone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return true;
  auto close_paren = text.rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < text.size() &&
         text[close_paren + 2] == 'Z';
}

// The number in a pid file a handler wrote, 0 while it is not there yet.
inline pid_t ReadPidFile(const std::string& file) {
  std::ifstream in(file);
  pid_t pid = 0;
  in >> pid;
  return pid;
}

// A field of /proc/<pid>/status in kB (VmRSS, VmHWM), -1 when unreadable.
inline long StatusKb(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  }
  return -1;
}

}  // namespace akadzed::test
