// The YAML config loader: the example file, defaults, and one exact
// "file:line: message" for each kind of bad config.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "config/config.h"
#include "core/duration.h"

namespace akadzed {
namespace {

namespace fs = std::filesystem;

// A fresh directory under $TMPDIR (or /tmp), removed with its contents.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/akadzed-config-XXXXXX";
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // Writes `text` to `name` (parent directories created) and returns its path.
  std::string Write(const std::string& name, const std::string& text,
                    fs::perms perms = fs::perms(0644)) const {
    const fs::path file = path_ / name;
    fs::create_directories(file.parent_path());
    std::ofstream(file, std::ios::binary) << text;
    fs::permissions(file, perms);
    return file.string();
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

const fs::perms kExecutable = fs::perms(0755);

// A valid config to build on: queue at line 2, handler at line 4.
const std::string kBase =
    "queues:\n"                            // 1
    "  - {name: default, slots: 1}\n"      // 2
    "handlers:\n"                          // 3
    "  echo:\n"                            // 4
    "    shell: {command: [echo, hi]}\n";  // 5

// The message ParseConfig throws for `text` as `<dir>/config.yaml`, with the
// file name replaced by "F", or "loaded" when it loads.
std::string ErrorOf(const TempDir& dir, const std::string& text) {
  const std::string file = (dir.path() / "config.yaml").string();
  try {
    ParseConfig(text, file);
    return "loaded";
  } catch (const ConfigError& e) {
    std::string message = e.what();
    if (message.rfind(file, 0) == 0) message.replace(0, file.size(), "F");
    return message;
  }
}

std::string ReadExample() {
  const fs::path example =
      fs::path(__FILE__).parent_path().parent_path().parent_path() / "config/akadzed.example.yaml";
  std::ifstream in(example);
  REQUIRE(in);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST_CASE("the example config loads with the documented values", "[config]") {
  TempDir dir;
  const std::string greet = dir.Write("handlers/greet.sh", "#!/bin/sh\necho hi\n", kExecutable);
  const std::string file = dir.Write("akadzed.yaml", ReadExample());
  const DaemonConfig config = LoadConfigFile(file);

  CHECK(config.path == file);
  CHECK(config.database.url.empty());
  CHECK(config.worker.heartbeat_interval_us == 5'000'000);
  CHECK(config.worker.heartbeat_ttl_us == 30'000'000);
  CHECK(config.worker.poll_interval_us == 1'000'000);
  CHECK(config.worker.shutdown_timeout_us == 30'000'000);
  CHECK_FALSE(config.worker.listen_notify);

  REQUIRE(config.queues.size() == 2);
  CHECK(config.queues[0].name == "default");
  CHECK(config.queues[0].slots == 4);
  CHECK(config.queues[0].mode == ClaimMode::kFair);
  CHECK_FALSE(config.queues[0].aging_us);
  CHECK(config.queues[1].name == "reports");
  CHECK(config.queues[1].slots == 2);
  CHECK(config.queues[1].mode == ClaimMode::kOrdered);
  CHECK(config.queues[1].aging_us == 30'000'000);
  CHECK(config.queues[0].line > 0);
  CHECK(config.queues[1].line > config.queues[0].line);

  REQUIRE(config.handlers.size() == 2);
  const HandlerConfig& g = config.handlers.at("greet");
  CHECK(g.task == "greet");
  REQUIRE(std::holds_alternative<ShellHandlerConfig>(g.kind));
  const auto& shell = std::get<ShellHandlerConfig>(g.kind);
  CHECK(shell.command == std::vector<std::string>{greet});
  CHECK(shell.timeout_us == 30'000'000);
  CHECK(shell.kill_grace_us == 10'000'000);
  CHECK(shell.env.empty());
  CHECK(shell.working_directory.empty());

  const HandlerConfig& c = config.handlers.at("checksum");
  REQUIRE(std::holds_alternative<PluginHandlerConfig>(c.kind));
  const auto& plugin = std::get<PluginHandlerConfig>(c.kind);
  CHECK(plugin.path == "libakadzed_example.so");
  CHECK(plugin.config_json == R"({"algorithm":"fnv1a"})");
  CHECK(plugin.timeout_us == 0);
  CHECK(c.line > g.line);

  CHECK(config.logging.level == "info");
  CHECK(config.logging.format == LogFormat::kAuto);
}

TEST_CASE("omitted keys take their defaults", "[config]") {
  TempDir dir;
  const DaemonConfig config = ParseConfig(kBase, (dir.path() / "config.yaml").string());
  const WorkerConfig defaults;
  CHECK(config.database.url.empty());
  CHECK(config.worker.heartbeat_interval_us == defaults.heartbeat_interval_us);
  CHECK(config.worker.heartbeat_ttl_us == defaults.heartbeat_ttl_us);
  CHECK(config.worker.poll_interval_us == defaults.poll_interval_us);
  CHECK(config.worker.shutdown_timeout_us == defaults.shutdown_timeout_us);
  CHECK(config.worker.finish_batch_delay_us == 0);
  REQUIRE(config.queues.size() == 1);
  CHECK(config.queues[0].mode == ClaimMode::kOrdered);
  CHECK_FALSE(config.queues[0].aging_us);
  CHECK(config.queues[0].keep_succeeded);
  CHECK(config.queues[0].line == 2);
  const HandlerConfig& echo = config.handlers.at("echo");
  CHECK(echo.line == 4);
  const auto& shell = std::get<ShellHandlerConfig>(echo.kind);
  CHECK(shell.command == std::vector<std::string>{"echo", "hi"});  // bare: PATH at exec
  CHECK(shell.max_line_bytes == 4096);
  CHECK(shell.max_output_bytes == 1 << 20);
  CHECK(config.logging.level == "info");
  CHECK(config.logging.format == LogFormat::kAuto);
}

TEST_CASE("every key is read", "[config]") {
  TempDir dir;
  dir.Write("bin/job", "#!/bin/sh\n", kExecutable);
  dir.Write("plugins/libx.so", "not really");
  fs::create_directories(dir.path() / "work");
  const DaemonConfig config = ParseConfig(
      "database: {url: 'postgresql://app:s3cret@db.example/app'}\n"
      "worker:\n"
      "  heartbeat_interval: 2s\n"
      "  heartbeat_ttl: 1m\n"
      "  poll_interval: 250ms\n"
      "  shutdown_timeout: 0s\n"
      "  listen_notify: true\n"
      "  finish_batch_delay: 1s\n"
      "queues:\n"
      "  - {name: a, slots: 10000, prefetch: 10000, mode: fair, aging: 1h30m, keep_succeeded: false}\n"
      "handlers:\n"
      "  s:\n"
      "    shell:\n"
      "      command: [bin/../bin/job, --flag, '']\n"
      "      env: {MODE: fast, PORT: 8080, _X1: ''}\n"
      "      working_directory: work\n"
      "      timeout: 5m\n"
      "      kill_grace: 0s\n"
      "      max_line_bytes: 100\n"
      "      max_output_bytes: 0\n"
      "  p:\n"
      "    plugin:\n"
      "      path: ./plugins/libx.so\n"
      "      timeout: 10s\n"
      "      config:\n"
      "        n: 3\n"
      "        ratio: -0.5\n"
      "        on: true\n"
      "        none: ~\n"
      "        quoted: '42'\n"
      "        list: [a, 1, {b: null}]\n"
      "logging: {level: debug, format: journald}\n",
      (dir.path() / "config.yaml").string());
  CHECK(config.database.url == "postgresql://app:s3cret@db.example/app");
  CHECK(config.worker.heartbeat_interval_us == 2'000'000);
  CHECK(config.worker.heartbeat_ttl_us == 60'000'000);
  CHECK(config.worker.poll_interval_us == 250'000);
  CHECK(config.worker.shutdown_timeout_us == 0);
  CHECK(config.worker.listen_notify);
  CHECK(config.worker.finish_batch_delay_us == 1'000'000);
  CHECK(config.queues[0].slots == 10000);
  CHECK(config.queues[0].prefetch == 10000);
  CHECK(config.queues[0].mode == ClaimMode::kFair);
  CHECK(config.queues[0].aging_us == 5'400'000'000);
  CHECK_FALSE(config.queues[0].keep_succeeded);

  const auto& shell = std::get<ShellHandlerConfig>(config.handlers.at("s").kind);
  CHECK(shell.command == std::vector<std::string>{(dir.path() / "bin/job").string(), "--flag", ""});
  CHECK(shell.env ==
        std::map<std::string, std::string>{{"MODE", "fast"}, {"PORT", "8080"}, {"_X1", ""}});
  CHECK(shell.working_directory == (dir.path() / "work").string());
  CHECK(shell.timeout_us == 300'000'000);
  CHECK(shell.kill_grace_us == 0);
  CHECK(shell.max_line_bytes == 100);
  CHECK(shell.max_output_bytes == 0);

  const auto& plugin = std::get<PluginHandlerConfig>(config.handlers.at("p").kind);
  CHECK(plugin.path == (dir.path() / "plugins/libx.so").string());
  CHECK(plugin.timeout_us == 10'000'000);
  CHECK(plugin.config_json ==
        R"({"list":["a",1,{"b":null}],"n":3,"none":null,"on":true,"quoted":"42","ratio":-0.5})");
  CHECK(config.logging.level == "debug");
  CHECK(config.logging.format == LogFormat::kJournald);
}

TEST_CASE("unknown keys are rejected at every level", "[config]") {
  TempDir dir;
  CHECK(ErrorOf(dir, kBase + "metric: {}\n") ==
        "F:6: metric: unknown key (known: database, worker, queues, handlers, periodic, hooks, "
        "pruning, logging, metrics, web)");
  CHECK(ErrorOf(dir, "worker:\n  heartbeat_interval: 5s\n  heartbeat_intervall: 5s\n" + kBase) ==
        "F:3: worker.heartbeat_intervall: unknown key (known: heartbeat_interval, heartbeat_ttl, "
        "poll_interval, shutdown_timeout, listen_notify, finish_batch_delay)");
  CHECK(ErrorOf(dir, "database: {host: x}\n" + kBase) ==
        "F:1: database.host: unknown key (known: url, stall_timeout, horizon_warn_after)");
  CHECK(ErrorOf(dir, "queues:\n  - name: a\n    slots: 1\n    weight: 2\nhandlers: {}\n") ==
        "F:4: queues[0].weight: unknown key (known: name, slots, prefetch, mode, aging, keep_succeeded)");
  CHECK(ErrorOf(dir, kBase + "  other:\n    shel: {command: [x]}\n") ==
        "F:7: handlers.other.shel: unknown key (known: shell, plugin)");
  CHECK(ErrorOf(dir, kBase + "  other:\n    shell:\n      command: [x]\n      timout: 5s\n") ==
        "F:9: handlers.other.shell.timout: unknown key (known: command, env, working_directory, "
        "timeout, kill_grace, max_line_bytes, max_output_bytes)");
  CHECK(ErrorOf(dir, kBase + "  p:\n    plugin: {path: x.so, args: {}}\n") ==
        "F:7: handlers.p.plugin.args: unknown key (known: path, config, timeout)");
  CHECK(ErrorOf(dir, kBase + "logging:\n  level: info\n  colour: true\n") ==
        "F:8: logging.colour: unknown key (known: level, format, file)");
}

TEST_CASE("duplicate keys are rejected", "[config]") {
  TempDir dir;
  CHECK(ErrorOf(dir, "worker:\n  poll_interval: 1s\n  poll_interval: 2s\n" + kBase) ==
        "F:3: worker.poll_interval: duplicate key (first on line 2)");
  CHECK(ErrorOf(dir, kBase + "  echo:\n    shell: {command: [true]}\n") ==
        "F:6: handlers.echo: duplicate key (first on line 4)");
}

TEST_CASE("values of the wrong type are rejected", "[config]") {
  TempDir dir;
  CHECK(ErrorOf(dir, "worker: [1, 2]\n" + kBase) ==
        "F:1: worker: expected a mapping, got a sequence");
  CHECK(ErrorOf(dir, "queues: {name: a}\nhandlers: {}\n") ==
        "F:1: queues: expected a sequence, got a mapping");
  CHECK(ErrorOf(dir, "queues:\n  - default\n") ==
        "F:2: queues[0]: expected a mapping, got \"default\"");
  CHECK(ErrorOf(dir, "database:\n  url: [a]\n" + kBase) ==
        "F:2: database.url: expected a string, got a sequence");
  CHECK(ErrorOf(dir, "worker:\n  listen_notify: yes\n" + kBase) ==
        "F:2: worker.listen_notify: expected true or false, got \"yes\"");
  CHECK(ErrorOf(dir, kBase + "  x:\n    shell: {command: ./run.sh --fast}\n") ==
        "F:7: handlers.x.shell.command: expected a sequence of arguments, e.g. [\"./job.sh\", "
        "\"--fast\"], got \"./run.sh --fast\"");
  CHECK(ErrorOf(dir, kBase + "  x:\n    shell:\n      command: [a, {b: c}]\n") ==
        "F:8: handlers.x.shell.command[1]: expected a string, got a mapping");
  CHECK(ErrorOf(dir, kBase + "  x:\n    plugin: {path: x.so, config: [1]}\n") ==
        "F:7: handlers.x.plugin.config: expected a mapping, got a sequence");
  CHECK(ErrorOf(dir, kBase + "  [a, b]: {}\n") ==
        "F:6: handlers: keys must be strings, got a sequence");
  // A key with no value is reported on its own line, not the next one.
  CHECK(ErrorOf(dir, "worker:\n  poll_interval:\n  listen_notify: true\n" + kBase) ==
        "F:2: worker.poll_interval: expected a duration such as 500ms, 30s or 5m, got nothing");
}

TEST_CASE("bad durations carry ParseDuration's reason", "[config]") {
  TempDir dir;
  std::string reason;
  REQUIRE_FALSE(ParseDuration("5x", &reason));
  CHECK(ErrorOf(dir, "worker:\n  heartbeat_interval: 5x\n" + kBase) ==
        "F:2: worker.heartbeat_interval: " + reason);
  REQUIRE_FALSE(ParseDuration("30", &reason));
  CHECK(ErrorOf(dir, "queues:\n  - name: a\n    slots: 1\n    aging: 30\n") ==
        "F:4: queues[0].aging: " + reason);
  CHECK(ErrorOf(dir, "worker: {poll_interval: 0s}\n" + kBase) ==
        "F:1: worker.poll_interval: must be greater than 0");
  CHECK(ErrorOf(dir, "queues:\n  - {name: a, slots: 1, aging: 0ms}\n") ==
        "F:2: queues[0].aging: must be greater than 0");
  CHECK(ErrorOf(dir, kBase + "  x:\n    shell:\n      command: [x]\n      kill_grace: soon\n") ==
        "F:9: handlers.x.shell.kill_grace: invalid duration 'soon': expected a number at position "
        "1 (examples: 500ms, 30s, 5m, 1h30m)");
}

TEST_CASE("pruning: defaults, values and errors", "[config]") {
  TempDir dir;
  const DaemonConfig defaults = ParseConfig(kBase, (dir.path() / "c.yaml").string());
  CHECK(defaults.pruning.enabled);
  CHECK(defaults.pruning.retention_us == 7LL * 24 * 3600 * 1'000'000);
  CHECK(defaults.pruning.interval_us == 60'000'000);
  CHECK(defaults.pruning.batch_size == 1000);
  const DaemonConfig set = ParseConfig(
      kBase + "pruning: {enabled: false, retention: 2d, interval: 5m, batch_size: 500}\n",
      (dir.path() / "c.yaml").string());
  CHECK_FALSE(set.pruning.enabled);
  CHECK(set.pruning.retention_us == 2LL * 24 * 3600 * 1'000'000);
  CHECK(set.pruning.interval_us == 300'000'000);
  CHECK(set.pruning.batch_size == 500);
  CHECK(ErrorOf(dir, kBase + "pruning:\n  retention: 0s\n") ==
        "F:7: pruning.retention: must be greater than 0");
  CHECK(ErrorOf(dir, kBase + "pruning:\n  batch: 5\n") ==
        "F:7: pruning.batch: unknown key (known: enabled, retention, interval, batch_size)");
}

TEST_CASE("heartbeat_ttl must exceed heartbeat_interval", "[config]") {
  TempDir dir;
  CHECK(ErrorOf(dir, "worker:\n  heartbeat_interval: 10s\n  heartbeat_ttl: 10s\n" + kBase) ==
        "F:3: worker: heartbeat_ttl (10s) must be greater than heartbeat_interval "
        "(10s); at least twice it is recommended");
  // Only the interval given: the default ttl (30s) is too short for it.
  CHECK(ErrorOf(dir, "worker:\n  poll_interval: 1s\n  heartbeat_interval: 1m\n" + kBase) ==
        "F:3: worker: heartbeat_ttl (30s) must be greater than "
        "heartbeat_interval (1m); at least twice it is recommended");
  // Past that, the lease (ttl - the largest kill_grace - 250ms) must cover
  // two heartbeat intervals, or a lost lease could leave a handler running
  // into another daemon's rescue.
  CHECK(ErrorOf(dir, "worker:\n  heartbeat_interval: 10s\n  heartbeat_ttl: 11s\n" + kBase) ==
        "F:1: worker: worker.heartbeat_ttl (11s) must be at least 2 x worker.heartbeat_interval (10s) + "
        "the largest handlers.*.shell.kill_grace (10s) + 250ms: a daemon that loses its lease must have "
        "stopped its handlers before another may rescue their jobs");
  const std::string fast = "worker: {heartbeat_interval: 200ms, heartbeat_ttl: 1500ms}\nqueues: [{name: q, slots: 1}]\n";
  auto handlers = [](const std::string& a_grace, const std::string& b_grace) {
    return "handlers:\n  a: {shell: {command: [echo], kill_grace: " + a_grace +
           "}}\n  b: {shell: {command: [echo], kill_grace: " + b_grace + "}}\n";
  };
  CHECK(ErrorOf(dir, fast + handlers("10s", "0s")) != "loaded");
  CHECK(ErrorOf(dir, fast + handlers("850ms", "0s")) == "loaded");
  CHECK(ErrorOf(dir, fast + handlers("0s", "851ms")) ==
        "F:1: worker: worker.heartbeat_ttl (1s500ms) must be at least 2 x worker.heartbeat_interval (200ms) + "
        "the largest handlers.*.shell.kill_grace (851ms) + 250ms: a daemon that loses its lease must have "
        "stopped its handlers before another may rescue their jobs");
  const DaemonConfig set = ParseConfig(fast + handlers("300ms", "700ms"), (dir.path() / "c.yaml").string());
  CHECK(MaxKillGraceUs(set) == 700'000);
  CHECK(LeaseSpanUs(set.worker, MaxKillGraceUs(set)) == 550'000);
}

TEST_CASE("database.stall_timeout: default, value and bounds", "[config]") {
  TempDir dir;
  const DaemonConfig defaults = ParseConfig(kBase, (dir.path() / "c.yaml").string());
  CHECK(defaults.database.stall_timeout_us == 5'000'000);
  const DaemonConfig fast = ParseConfig("worker: {heartbeat_interval: 200ms, heartbeat_ttl: 3s}\nqueues: [{name: q, slots: 1}]\n"
                                        "handlers:\n  a: {shell: {command: [echo], kill_grace: 500ms}}\n",
                                        (dir.path() / "c.yaml").string());
  CHECK(fast.database.stall_timeout_us == 1'500'000);
  const DaemonConfig set =
      ParseConfig("database: {stall_timeout: 750ms}\n" + kBase, (dir.path() / "c.yaml").string());
  CHECK(set.database.stall_timeout_us == 750'000);
  CHECK(ErrorOf(dir, "database: {stall_timeout: 50ms}\n" + kBase) ==
        "F:1: database.stall_timeout: must be at least 100ms, got 50ms");
  CHECK(ErrorOf(dir, "database: {stall_timeout: 30s}\n" + kBase) ==
        "F:1: database.stall_timeout (30s) must be shorter than worker.heartbeat_ttl (30s)");
}

TEST_CASE("database.horizon_warn_after: 5m by default, a duration, 0s or off", "[config]") {
  TempDir dir;
  const std::string file = (dir.path() / "c.yaml").string();
  CHECK(ParseConfig(kBase, file).database.horizon_warn_after_us == 300'000'000);
  CHECK(ParseConfig("database: {horizon_warn_after: 90s}\n" + kBase, file).database.horizon_warn_after_us ==
        90'000'000);
  CHECK(ParseConfig("database: {horizon_warn_after: 0s}\n" + kBase, file).database.horizon_warn_after_us == 0);
  CHECK(ParseConfig("database: {horizon_warn_after: off}\n" + kBase, file).database.horizon_warn_after_us == 0);
  CHECK(ErrorOf(dir, "database: {horizon_warn_after: soon}\n" + kBase) ==
        "F:1: database.horizon_warn_after: expected a duration such as 5m or 1h, or off, got \"soon\"");
  CHECK(ErrorOf(dir, "database:\n  horizon_warn_after: [5m]\n" + kBase) ==
        "F:2: database.horizon_warn_after: expected a duration such as 5m or 1h, or off, got a sequence");
  CHECK(ErrorOf(dir, "database: {horizon_warn_after: false}\n" + kBase) ==
        "F:1: database.horizon_warn_after: expected a duration such as 5m or 1h, or off, got \"false\"");
}

TEST_CASE("worker.finish_batch_delay is a duration from 0 to 1s", "[config]") {
  TempDir dir;
  CHECK(ParseConfig("worker: {finish_batch_delay: 0s}\n" + kBase, (dir.path() / "c.yaml").string())
            .worker.finish_batch_delay_us == 0);
  CHECK(ParseConfig("worker: {finish_batch_delay: 20ms}\n" + kBase, (dir.path() / "c.yaml").string())
            .worker.finish_batch_delay_us == 20'000);
  CHECK(ErrorOf(dir, "worker: {finish_batch_delay: 2s}\n" + kBase) ==
        "F:1: worker.finish_batch_delay: must be at most 1s, got 2s");
  CHECK(ErrorOf(dir, "worker: {finish_batch_delay: -1ms}\n" + kBase).starts_with(
        "F:1: worker.finish_batch_delay: "));
}

TEST_CASE("queues are checked", "[config]") {
  TempDir dir;
  const std::string handlers = "handlers:\n  echo:\n    shell: {command: [echo]}\n";
  CHECK(ErrorOf(dir,
                "queues:\n  - name: a\n    slots: 1\n  - name: b\n    slots: many\n" + handlers) ==
        "F:5: queues[1].slots: expected an integer from 1 to 10000, got \"many\"");
  CHECK(ErrorOf(dir, "queues:\n  - {name: a, slots: 0}\n" + handlers) ==
        "F:2: queues[0].slots: expected an integer from 1 to 10000, got \"0\"");
  CHECK(ErrorOf(dir, "queues:\n  - {name: a, slots: 10001}\n" + handlers) ==
        "F:2: queues[0].slots: expected an integer from 1 to 10000, got \"10001\"");
  CHECK(ErrorOf(dir, "queues:\n  - {name: a, slots: 2.5}\n" + handlers) ==
        "F:2: queues[0].slots: expected an integer from 1 to 10000, got \"2.5\"");
  CHECK(ErrorOf(dir, "queues:\n  - {name: a, slots: 1, prefetch: -1}\n" + handlers) ==
        "F:2: queues[0].prefetch: expected an integer from 0 to 10000, got \"-1\"");
  CHECK(ErrorOf(dir, "queues:\n  - {name: a, slots: 1, prefetch: 10001}\n" + handlers) ==
        "F:2: queues[0].prefetch: expected an integer from 0 to 10000, got \"10001\"");
  CHECK(ErrorOf(dir, "queues:\n  - {name: a, slots: 1, keep_succeeded: no-thanks}\n" + handlers) ==
        "F:2: queues[0].keep_succeeded: expected true or false, got \"no-thanks\"");
  CHECK(ErrorOf(dir,
                "queues:\n  - name: a\n    slots: 1\n\n  - slots: 2\n    name: a\n" + handlers) ==
        "F:6: queues[1].name: duplicate queue name (first defined on line 2)");
  CHECK(ErrorOf(dir, "queues:\n  - {name: a, slots: 1, mode: random}\n" + handlers) ==
        "F:2: queues[0].mode: expected one of ordered, fair, got \"random\"");
  CHECK(ErrorOf(dir, "queues:\n  - {name: '', slots: 1}\n" + handlers) ==
        "F:2: queues[0].name: must not be empty");
  CHECK(ErrorOf(dir, "queues:\n  - {slots: 1}\n" + handlers) ==
        "F:2: queues[0].name: missing required key");
  CHECK(ErrorOf(dir, "queues:\n  - name: a\n" + handlers) ==
        "F:2: queues[0].slots: missing required key");
  CHECK(ErrorOf(dir, "queues: []\n" + handlers) == "F:1: queues: at least one queue is required");
  CHECK(ErrorOf(dir, "queues:\n" + handlers) == "F:1: queues: at least one queue is required");
  CHECK(ErrorOf(dir, handlers) == "F:1: queues: missing required key");
}

TEST_CASE("handlers need exactly one of shell or plugin", "[config]") {
  TempDir dir;
  CHECK(ErrorOf(dir, kBase + "  x:\n    shell: {command: [echo]}\n    plugin: {path: x.so}\n") ==
        "F:6: handlers.x: expected exactly one of shell or plugin, got both");
  CHECK(ErrorOf(dir, kBase + "  x: {}\n") == "F:6: handlers.x: expected one of shell or plugin");
  CHECK(ErrorOf(dir, kBase + "  x:\n") == "F:6: handlers.x: expected one of shell or plugin");
  CHECK(ErrorOf(dir, kBase + "  x:\n    shell:\n      env: {A: b}\n") ==
        "F:7: handlers.x.shell.command: missing required key");
  CHECK(ErrorOf(dir, kBase + "  x:\n    shell:\n") ==
        "F:7: handlers.x.shell.command: missing required key");
  CHECK(ErrorOf(dir, kBase + "  x:\n    shell:\n      command: []\n") ==
        "F:8: handlers.x.shell.command: must not be empty");
  CHECK(ErrorOf(dir, kBase + "  x:\n    shell:\n      command: ['', a]\n") ==
        "F:8: handlers.x.shell.command[0]: must not be empty");
  CHECK(ErrorOf(dir, kBase + "  x:\n    plugin: {timeout: 1s}\n") ==
        "F:7: handlers.x.plugin.path: missing required key");
  CHECK(ErrorOf(dir, "queues:\n  - {name: a, slots: 1}\nhandlers: {}\n") ==
        "F:3: handlers: at least one handler is required");
  CHECK(ErrorOf(dir, "queues:\n  - {name: a, slots: 1}\nhandlers:\n") ==
        "F:3: handlers: at least one handler is required");
  CHECK(ErrorOf(dir, "queues:\n  - {name: a, slots: 1}\n") ==
        "F:1: handlers: missing required key");
}

TEST_CASE("shell commands and working directories resolve against the config dir", "[config]") {
  TempDir dir;
  const std::string missing = (dir.path() / "handlers/missing.sh").string();
  CHECK(
      ErrorOf(dir, kBase + "  x:\n    shell:\n      command:\n        - ./handlers/missing.sh\n") ==
      "F:9: handlers.x.shell.command[0]: cannot execute " + missing +
          ": No such file or directory");
  const std::string plain = dir.Write("handlers/plain.sh", "#!/bin/sh\n");
  CHECK(ErrorOf(dir, kBase + "  x:\n    shell: {command: [handlers/plain.sh]}\n") ==
        "F:7: handlers.x.shell.command[0]: cannot execute " + plain + ": Permission denied");
  fs::create_directories(dir.path() / "adir");
  CHECK(ErrorOf(dir, kBase + "  x:\n    shell: {command: [./adir]}\n") ==
        "F:7: handlers.x.shell.command[0]: cannot execute " + (dir.path() / "adir").string() +
            ": not a regular file");
  CHECK(ErrorOf(dir, kBase + "  x:\n    shell: {command: [/nonexistent/akadzed/job]}\n") ==
        "F:7: handlers.x.shell.command[0]: cannot execute /nonexistent/akadzed/job: No such file "
        "or directory");
  CHECK(ErrorOf(dir, kBase + "  x:\n    shell: {command: [echo], working_directory: nowhere}\n") ==
        "F:7: handlers.x.shell.working_directory: cannot enter " +
            (dir.path() / "nowhere").string() + ": No such file or directory");
  CHECK(ErrorOf(
            dir,
            kBase + "  x:\n    shell: {command: [echo], working_directory: handlers/plain.sh}\n") ==
        "F:7: handlers.x.shell.working_directory: cannot enter " + plain + ": not a directory");

  // A relative config path resolves against the current directory first.
  const std::string job = dir.Write("sub/job", "#!/bin/sh\n", kExecutable);
  struct Chdir {
    fs::path old = fs::current_path();
    explicit Chdir(const fs::path& to) { fs::current_path(to); }
    ~Chdir() { fs::current_path(old); }
  };
  DaemonConfig config;
  {
    Chdir in(dir.path());
    config =
        ParseConfig(kBase + "  x:\n    shell: {command: [.././job]}\n", "sub/inner/config.yaml");
  }
  CHECK(std::get<ShellHandlerConfig>(config.handlers.at("x").kind).command[0] == job);
}

TEST_CASE("shell env names are checked", "[config]") {
  TempDir dir;
  CHECK(ErrorOf(dir,
                kBase + "  x:\n    shell:\n      command: [echo]\n      env:\n        1X: a\n") ==
        "F:10: handlers.x.shell.env.1X: not a valid environment variable name (letters, digits and "
        "_, not starting with a digit)");
  CHECK(ErrorOf(dir, kBase + "  x:\n    shell:\n      command: [echo]\n      env: {A=B: c}\n") ==
        "F:9: handlers.x.shell.env.A=B: not a valid environment variable name (letters, digits and "
        "_, not starting with a digit)");
  CHECK(
      ErrorOf(dir,
              kBase + "  x:\n    shell:\n      command: [echo]\n      env: {AKADZE_JOB_ID: 1}\n") ==
      "F:9: handlers.x.shell.env.AKADZE_JOB_ID: the AKADZE_ prefix is reserved for variables the "
      "daemon sets");
  CHECK(ErrorOf(dir, kBase + "  x:\n    shell:\n      command: [echo]\n      env: {A: [1]}\n") ==
        "F:9: handlers.x.shell.env.A: expected a string, got a sequence");
  CHECK(ErrorOf(dir, kBase + "  x:\n    shell:\n      command: [echo, \"a\\0b\"]\n") ==
        "F:8: handlers.x.shell.command[1]: must not contain a NUL byte");
  // A long name (YAML's explicit key: implicit ones stop at 1024 characters)
  // is checked without recursion: std::regex overflowed the stack.
  CHECK(ErrorOf(dir, kBase + "  x:\n    shell:\n      command: [echo]\n      env:\n        ? _" +
                         std::string(500000, 'A') + "\n        : v\n") == "loaded");
}

TEST_CASE("plugin paths and configs", "[config]") {
  TempDir dir;
  CHECK(ErrorOf(dir, kBase + "  p:\n    plugin: {path: lib/missing.so}\n") ==
        "F:7: handlers.p.plugin.path: cannot load " + (dir.path() / "lib/missing.so").string() +
            ": No such file or directory");
  CHECK(ErrorOf(dir, kBase + "  p:\n    plugin: {path: ''}\n") ==
        "F:7: handlers.p.plugin.path: must not be empty");
  CHECK(ErrorOf(dir,
                kBase + "  p:\n    plugin:\n      path: x.so\n      config: &self {me: *self}\n") ==
        "F:9: handlers.p.plugin.config: nested more than 64 levels deep");
  // Aliases fanning out (10^6 values from a few hundred bytes) are refused fast.
  std::string laughs = "      config:\n        a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  for (char level = 'b'; level <= 'f'; ++level) {
    std::string prev(1, static_cast<char>(level - 1));
    laughs += std::string("        ") + level + ": &" + level + " [";
    for (int i = 0; i < 10; ++i) laughs += (i ? ", *" : "*") + prev;
    laughs += "]\n";
  }
  CHECK(ErrorOf(dir, kBase + "  p:\n    plugin:\n      path: x.so\n" + laughs) ==
        "F:9: handlers.p.plugin.config: expands to more than 100000 values (aliases fanning out?)");
  // A very long plain number stays a string instead of recursing in std::regex.
  const std::string digits(300000, '1');
  TempDir numbers;
  const DaemonConfig long_number =
      ParseConfig(kBase + "  p:\n    plugin: {path: libx.so, config: {n: " + digits + "}}\n",
                  (numbers.path() / "c.yaml").string());
  CHECK(std::get<PluginHandlerConfig>(long_number.handlers.at("p").kind).config_json ==
        "{\"n\":\"" + digits + "\"}");
  TempDir other;
  const DaemonConfig config =
      ParseConfig(kBase + "  p:\n    plugin: {path: libnowhere.so, config:}\n",
                  (other.path() / "c.yaml").string());
  const auto& plugin = std::get<PluginHandlerConfig>(config.handlers.at("p").kind);
  CHECK(plugin.path == "libnowhere.so");  // bare names: searched when loading
  CHECK(plugin.config_json == "{}");
}

TEST_CASE("logging values are checked", "[config]") {
  TempDir dir;
  CHECK(ErrorOf(dir, kBase + "logging:\n  level: verbose\n") ==
        "F:7: logging.level: expected one of trace, debug, info, warn, error, critical, off, got "
        "\"verbose\"");
  CHECK(ErrorOf(dir, kBase + "logging: {format: text}\n") ==
        "F:6: logging.format: expected one of auto, logfmt, json, journald, got \"text\"");
  CHECK(ErrorOf(dir, kBase + "logging: {file: logs/akadzed.log}\n") ==
        "F:6: logging.file: must be an absolute path (it is reopened on SIGHUP, whatever the cwd)");
}

TEST_CASE("passwords never reach a message", "[config]") {
  TempDir dir;
  const std::string error =
      ErrorOf(dir, "queues:\n  - {name: a, slots: 'postgresql://bob:hunter2@db/app'}\n");
  CHECK(error ==
        "F:2: queues[0].slots: expected an integer from 1 to 10000, got "
        "\"postgresql://bob:***@db/app\"");
  CHECK(ErrorOf(dir, "database: {url: 'host=db password=hunter2'}\n" + kBase) == "loaded");
  CHECK(ErrorOf(dir, "database: {url: 'host=db password=hunter2'}\nqueues: 3\n").find("hunter2") ==
        std::string::npos);
}

TEST_CASE("YAML syntax errors, empty files and odd documents", "[config]") {
  TempDir dir;
  CHECK(ErrorOf(dir, "queues:\n  - {name: a, slots: 1\nhandlers: {}\n") ==
        "F:3: invalid YAML: end of map flow not found");
  CHECK(ErrorOf(dir, "queues:\n  - name: a\n   slots: 1\n") ==
        "F:3: invalid YAML: end of sequence not found");
  CHECK(ErrorOf(dir, "worker:\n  a: 1\n\tb: 2\n") ==
        "F:3: invalid YAML: illegal tab when looking for indentation");
  CHECK(ErrorOf(dir, "") == "F: the configuration is empty (queues and handlers are required)");
  CHECK(ErrorOf(dir, "# nothing\n\n") ==
        "F: the configuration is empty (queues and handlers are required)");
  CHECK(
      ErrorOf(dir, "- a\n- b\n") ==
      "F:1: expected a mapping of database, worker, queues, handlers, periodic, hooks, pruning, logging, metrics and web, got a sequence");
  CHECK(ErrorOf(dir, "\n\nhello\n") ==
        "F:3: expected a mapping of database, worker, queues, handlers, periodic, hooks, pruning, logging, metrics and web, got \"hello\"");
  CHECK(ErrorOf(dir, kBase + "---\nqueues: []\n") == "F:7: expected one YAML document, found more");
  CHECK(ErrorOf(dir, kBase + "---\n") == "F:7: expected one YAML document, found more");
  // yaml-cpp's parser does not get past these; YAML::LoadAll looped forever.
  CHECK(ErrorOf(dir, ",") == "F:1: invalid YAML: unexpected \",\"");
  CHECK(ErrorOf(dir, "- a\n,") == "F:2: invalid YAML: unexpected \",\"");
  // A key with a line break still makes a one-line message.
  CHECK(ErrorOf(dir, kBase + "\"a\\nb\": 1\n") ==
        "F:6: a b: unknown key (known: database, worker, queues, handlers, periodic, hooks, "
        "pruning, logging, metrics, web)");
}

TEST_CASE("a file that cannot be read", "[config]") {
  TempDir dir;
  const std::string missing = (dir.path() / "missing.yaml").string();
  CHECK_THROWS_WITH(LoadConfigFile(missing), missing + ": cannot read: No such file or directory");
  CHECK_THROWS_WITH(LoadConfigFile(dir.path().string()),
                    dir.path().string() + ": cannot read: Is a directory");
  const std::string bad = dir.Write("bad.yaml", "queues:\n  - {name: a, slots: -1}\n");
  CHECK_THROWS_WITH(LoadConfigFile(bad),
                    bad + ":2: queues[0].slots: expected an integer from 1 to 10000, got \"-1\"");
}


TEST_CASE("periodic entries: defaults, values and errors", "[config][periodic]") {
  TempDir dir;
  const DaemonConfig c = ParseConfig(
      kBase +
          "periodic:\n"                                                      // 6
          "  nightly:\n"                                                     // 7
          "    cron: \"30 2 * * MON-FRI\"\n"                                  // 8
          "  sync:\n"                                                        // 9
          "    every: 90s\n"
          "    task: sync-task\n"
          "    queue: reports\n"
          "    args: {scope: all, n: 3}\n"
          "    priority: -5\n"
          "    max_attempts: 7\n"
          "    overlap: false\n"
          "    grace: 10m\n",
      (dir.path() / "c.yaml").string());
  REQUIRE(c.periodic.size() == 2);
  const PeriodicConfig& nightly = c.periodic[0];
  CHECK(nightly.name == "nightly");
  CHECK(nightly.task == "nightly");
  CHECK(nightly.queue == "default");
  CHECK(nightly.args_json == "{}");
  CHECK(nightly.overlap);
  CHECK(nightly.grace_us == 60'000'000);
  CHECK(nightly.max_attempts == 3);
  CHECK(nightly.line == 7);
  CHECK(nightly.schedule.Describe() == "cron \"30 2 * * MON-FRI\"");
  const PeriodicConfig& sync = c.periodic[1];
  CHECK(sync.task == "sync-task");
  CHECK(sync.queue == "reports");
  CHECK(sync.args_json == R"({"n":3,"scope":"all"})");
  CHECK(sync.priority == -5);
  CHECK(sync.max_attempts == 7);
  CHECK_FALSE(sync.overlap);
  CHECK(sync.grace_us == 600'000'000);
  CHECK(sync.schedule.NextFireAfterUs(0) == 90'000'000);

  CHECK(ErrorOf(dir, kBase + "periodic:\n  p: {cron: \"61 * * * *\"}\n") ==
        "F:7: periodic.p.cron: cron \"61 * * * *\": minute: 61 is out of range 0-59");
  CHECK(ErrorOf(dir, kBase + "periodic:\n  p: {every: 0s}\n") ==
        "F:7: periodic.p.every: every \"0s\": interval must be positive");
  CHECK(ErrorOf(dir, kBase + "periodic:\n  p: {cron: \"* * * * *\", every: 1m}\n") ==
        "F:7: periodic.p: expected exactly one of cron or every, got both");
  CHECK(ErrorOf(dir, kBase + "periodic:\n  p: {task: x}\n") ==
        "F:7: periodic.p: expected one of cron or every");
  CHECK(ErrorOf(dir, kBase + "periodic:\n  p: {every: 1m, args: [1]}\n") ==
        "F:7: periodic.p.args: expected a mapping (the job's args object), got a sequence");
  CHECK(ErrorOf(dir, kBase + "periodic:\n  p: {every: 1m, max_attempts: 0}\n") ==
        "F:7: periodic.p.max_attempts: expected an integer from 1 to 1000000, got \"0\"");
  CHECK(ErrorOf(dir, kBase + "periodic:\n  p: {every: 1m, when: now}\n").starts_with(
      "F:7: periodic.p.when: unknown key (known: cron, every, task, queue, args,"));

  // A cron entry's clock: a zone of the system's database.
  const DaemonConfig zoned = ParseConfig(
      kBase + "periodic:\n  p: {cron: \"0 8 * * 1-5\", timezone: America/New_York}\n",
      (dir.path() / "c.yaml").string());
  REQUIRE(zoned.periodic.size() == 1);
  CHECK(zoned.periodic[0].schedule.Describe() == "cron \"0 8 * * 1-5\" in America/New_York");
  // 2026-12-08 08:00 EST.
  CHECK(zoned.periodic[0].schedule.NextFireAfterUs(1'796'688'000'000'000) == 1'796'734'800'000'000);
  CHECK(ErrorOf(dir, kBase + "periodic:\n  p: {cron: \"0 8 * * *\", timezone: Mars/Olympus}\n") ==
        "F:7: periodic.p.timezone: timezone \"Mars/Olympus\": not in the system's time zone database "
        "(/usr/share/zoneinfo)");
  CHECK(ErrorOf(dir, kBase + "periodic:\n  p: {every: 1h, timezone: Europe/Berlin}\n") ==
        "F:7: periodic.p.timezone: applies to cron entries only (an every entry counts real time, in UTC)");
}

TEST_CASE("hooks: filters, sql or plugin, and errors", "[config][hooks]") {
  TempDir dir;
  const DaemonConfig c = ParseConfig(
      kBase +
          "hooks:\n"                                                          // 6
          "  - name: outbox\n"                                                // 7
          "    to: [succeeded, failed]\n"
          "    sql: INSERT INTO outbox VALUES ($1)\n"
          "  - name: audit\n"                                                 // 10
          "    from: queued\n"
          "    plugin: {path: libaudit.so, config: {table: t}}\n",
      (dir.path() / "c.yaml").string());
  REQUIRE(c.hooks.size() == 2);
  CHECK(c.hooks[0].name == "outbox");
  CHECK(c.hooks[0].sql == "INSERT INTO outbox VALUES ($1)");
  CHECK(c.hooks[0].from.empty());
  CHECK(c.hooks[0].Matches(JobState::kRunning, JobState::kFailed));
  CHECK_FALSE(c.hooks[0].Matches(JobState::kRunning, JobState::kQueued));
  CHECK(c.hooks[1].line == 10);
  CHECK(c.hooks[1].plugin.has_value());
  CHECK(c.hooks[1].plugin->config_json == R"({"table":"t"})");
  CHECK(c.hooks[1].Matches(JobState::kQueued, JobState::kRunning));
  CHECK(c.hooks[1].Matches(JobState::kQueued, JobState::kCancelled));
  CHECK_FALSE(c.hooks[1].Matches(JobState::kRunning, JobState::kQueued));

  CHECK(ErrorOf(dir, kBase + "hooks:\n  - {name: a, sql: x, plugin: {path: p.so}}\n") ==
        "F:7: hooks[0]: expected exactly one of sql or plugin, got both");
  CHECK(ErrorOf(dir, kBase + "hooks:\n  - {name: a}\n") ==
        "F:7: hooks[0]: expected one of sql or plugin");
  CHECK(ErrorOf(dir, kBase + "hooks:\n  - {name: a, sql: x, to: done}\n") ==
        "F:7: hooks[0].to: expected one of queued, running, succeeded, failed, cancelled, got \"done\"");
  CHECK(ErrorOf(dir, kBase + "hooks:\n  - {name: a, sql: x, from: []}\n") ==
        "F:7: hooks[0].from: must not be empty (leave it out to match any state)");
  CHECK(ErrorOf(dir, kBase + "hooks:\n  - {name: a, sql: x}\n  - {name: a, sql: y}\n") ==
        "F:8: hooks[1].name: duplicate hook name (first defined on line 7)");
  CHECK(ErrorOf(dir, kBase + "hooks:\n  - {sql: x}\n") == "F:7: hooks[0].name: missing required key");
}

TEST_CASE("metrics: defaults, addresses and errors", "[config][metrics]") {
  TempDir dir;
  const DaemonConfig defaults = ParseConfig(kBase, (dir.path() / "c.yaml").string());
  CHECK(defaults.metrics.enabled);
  CHECK(defaults.metrics.host == "127.0.0.1");
  CHECK(defaults.metrics.port == 9464);
  const DaemonConfig v6 = ParseConfig(kBase + "metrics: {listen: \"[::1]:0\"}\n",
                                      (dir.path() / "c.yaml").string());
  CHECK(v6.metrics.host == "::1");
  CHECK(v6.metrics.port == 0);
  const DaemonConfig off = ParseConfig(kBase + "metrics: {enabled: false}\n",
                                       (dir.path() / "c.yaml").string());
  CHECK_FALSE(off.metrics.enabled);
  for (const char* bad : {"localhost:9464", "127.0.0.1", "127.0.0.1:70000", "::1:9464", ":9464"}) {
    INFO(bad);
    CHECK(ErrorOf(dir, kBase + "metrics:\n  listen: \"" + bad + "\"\n")
              .starts_with("F:7: metrics.listen: expected an IP address and a port such as"));
  }
}

TEST_CASE("web: defaults, the admin token file and its errors", "[config][web]") {
  TempDir dir;
  const DaemonConfig defaults = ParseConfig(kBase, (dir.path() / "c.yaml").string());
  CHECK(defaults.web.enabled);
  CHECK(defaults.web.admin_token_file.empty());
  CHECK_FALSE(ParseConfig(kBase + "web: {enabled: false}\n", (dir.path() / "c.yaml").string()).web.enabled);

  const std::string good = dir.Write("token", "  0123456789abcdef \n", fs::perms(0600));
  CHECK(ParseConfig(kBase + "web: {admin_token_file: " + good + "}\n", (dir.path() / "c.yaml").string())
            .web.admin_token_file == good);
  const std::string open = dir.Write("open", "0123456789abcdef0123\n", fs::perms(0604));
  const std::string short_token = dir.Write("short", "0123456789abcde\n", fs::perms(0600));
  const std::string missing = (dir.path() / "missing").string();
  const std::map<std::string, std::string> errors = {
      {"token", "F:7: web.admin_token_file: must be an absolute path (it is read for each action, whatever the cwd)"},
      {open, "F:7: web.admin_token_file: " + open + " must not be open to other users (chmod o-rwx " + open + ")"},
      {short_token, "F:7: web.admin_token_file: " + short_token + " must hold a token of at least 16 characters"},
      {missing, "F:7: web.admin_token_file: cannot read " + missing + ": No such file or directory"},
  };
  for (const auto& [path, error] : errors) {
    INFO(path);
    CHECK(ErrorOf(dir, kBase + "web:\n  admin_token_file: " + path + "\n") == error);
  }
}

}  // namespace
}  // namespace akadzed
