// The daemon's log file end to end: `logging: {format: json, file: ...}`
// gets one JSON object per line with a job's events, handlers do not inherit
// the file, and a logrotate-style move plus SIGHUP moves the writing to a
// new file (also when the config no longer loads). Every wait is for a
// condition, never a fixed sleep.
#include <catch2/catch.hpp>

#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "pg/connection.h"
#include "support/daemon_process.h"
#include "support/test_cluster.h"

namespace akadzed::test {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Every line of `path` parsed as JSON (a line that does not parse fails the
// test).
std::vector<json> JsonLines(const std::string& path) {
  std::vector<json> lines;
  for (const std::string& line : Lines(ReadAll(path))) {
    INFO(path << ": " << line);
    json parsed;
    REQUIRE_NOTHROW(parsed = json::parse(line));
    REQUIRE(parsed.is_object());
    lines.push_back(std::move(parsed));
  }
  return lines;
}

// The events of job `id` in `lines`, in order.
std::vector<std::string> JobEvents(const std::vector<json>& lines, std::int64_t id) {
  std::vector<std::string> events;
  for (const json& line : lines) {
    if (line.value("job", "") == std::to_string(id)) events.push_back(line["event"]);
  }
  return events;
}

bool HasJobEvent(const std::string& path, std::int64_t id, const std::string& event) {
  for (const std::string& line : Lines(ReadAll(path))) {
    json parsed = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_object() && parsed.value("job", "") == std::to_string(id) &&
        parsed.value("event", "") == event) {
      return true;
    }
  }
  return false;
}

bool HasEvent(const std::string& path, const std::string& event) {
  for (const std::string& line : Lines(ReadAll(path))) {
    json parsed = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_object() && parsed.value("event", "") == event) return true;
  }
  return false;
}

struct LogFileFixture {
  std::string db = FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  TempDir dir;
  std::string log_file = dir.path() + "/akadzed.log";
  // Lists its open descriptors' targets, so that an inherited log file shows.
  std::string script = dir.Write(
      "fds.sh", "#!/bin/sh\nfor f in /proc/$$/fd/*; do echo \"fd $f -> $(readlink \"$f\")\"; done\n",
      true);

  std::string Config() {
    return dir.Write("akadzed.yaml",
                     "worker:\n  heartbeat_interval: 200ms\n  heartbeat_ttl: 1500ms\n"
                     "  poll_interval: 100ms\n  shutdown_timeout: 2s\n"
                     "queues:\n  - name: default\n    slots: 2\n"
                     "handlers:\n  fds:\n    shell:\n      command: [\"" + script + "\"]\n      kill_grace: 500ms\n"
                     "metrics: {listen: 127.0.0.1:0}\n"
                     "logging:\n  level: info\n  format: json\n  file: " + log_file + "\n");
  }
  std::int64_t Enqueue() {
    return conn
        .exec("INSERT INTO akadze.jobs (task, args) VALUES ('fds', '{\"secret_arg\": 1}')"
              " RETURNING id")
        .int64(0, 0);
  }
};

TEST_CASE("format json with a file: one JSON object per line, reopened after a move and SIGHUP",
          "[daemon][logging]") {
  LogFileFixture f;
  const std::string config = f.Config();
  const std::string stderr_path = f.dir.path() + "/stderr.log";
  DaemonProcess daemon({"run", "--config", config, "--database-url", f.db}, {}, stderr_path);

  const std::int64_t first = f.Enqueue();
  REQUIRE(WaitUntil([&] { return HasJobEvent(f.log_file, first, "finish"); }));
  {
    const std::vector<json> lines = JsonLines(f.log_file);
    REQUIRE(!lines.empty());
    for (const json& line : lines) {
      CHECK(line["ts"].is_string());
      CHECK(line["level"].is_string());
      CHECK(line["event"].is_string());
    }
    CHECK(std::any_of(lines.begin(), lines.end(),
                      [](const json& line) { return line["event"] == "registered"; }));
    const std::vector<std::string> events = JobEvents(lines, first);
    REQUIRE(events.size() >= 3);
    CHECK(events.front() == "start");
    CHECK(events.back() == "finish");
    bool fd_lines = false;
    for (const json& line : lines) {
      if (line["event"] != "output") continue;
      fd_lines = true;
      CHECK(line["task"] == "fds");
      CHECK(line["stream"] == "stdout");
      // The handler did not inherit the log file.
      CHECK(line["msg"].get<std::string>().find("akadzed.log") == std::string::npos);
    }
    CHECK(fd_lines);
    for (const json& line : lines) {
      if (line["event"] == "finish") {
        CHECK(line["outcome"] == "success");
        CHECK(line["state"] == "succeeded");
        CHECK(line["queue"] == "default");
      }
    }
  }
  // Nothing on stderr, and never the job's args.
  CHECK(ReadAll(stderr_path).empty());
  CHECK(ReadAll(f.log_file).find("secret_arg") == std::string::npos);

  // logrotate: move the file, then SIGHUP; the daemon creates a new one.
  const std::string rotated = f.log_file + ".1";
  fs::rename(f.log_file, rotated);
  daemon.Signal(SIGHUP);
  REQUIRE(WaitUntil([&] { return HasEvent(f.log_file, "reload"); }));
  const std::int64_t second = f.Enqueue();
  REQUIRE(WaitUntil([&] { return HasJobEvent(f.log_file, second, "finish"); }));
  CHECK(JobEvents(JsonLines(rotated), second).empty());
  CHECK(JobEvents(JsonLines(f.log_file), second).front() == "start");
  CHECK_FALSE(HasEvent(rotated, "reload"));

  // Again with a config that no longer loads: the file is reopened anyway.
  fs::rename(f.log_file, f.log_file + ".2");
  f.dir.Write("akadzed.yaml", "queues: [\n");
  daemon.Signal(SIGHUP);
  REQUIRE(WaitUntil([&] { return HasEvent(f.log_file, "reload_failed"); }));
  const std::int64_t third = f.Enqueue();
  REQUIRE(WaitUntil([&] { return HasJobEvent(f.log_file, third, "finish"); }));

  daemon.Signal(SIGTERM);
  REQUIRE(daemon.Wait() == 0);
  CHECK(HasEvent(f.log_file, "stopped"));
  JsonLines(f.log_file + ".2");  // every line of every file is JSON
  CHECK(ReadAll(stderr_path).empty());
}

TEST_CASE("a log file that cannot be opened is a config error at start (exit 78)",
          "[daemon][logging]") {
  LogFileFixture f;
  f.log_file = f.dir.path() + "/missing-dir/akadzed.log";
  CommandResult run = RunAkadzed({"run", "--config", f.Config(), "--database-url", f.db});
  CHECK(run.exit_code == 78);
  CHECK(run.err.find("logging.file: cannot open " + f.log_file) != std::string::npos);
}

}  // namespace
}  // namespace akadzed::test
