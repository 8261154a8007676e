// The daemon's configuration: one YAML file (docs/configuration.md) parsed
// into plain structs. Loading validates everything the daemon will need
// (types, ranges, durations, unknown keys, handler paths), so a config that
// loads is one `akadzed run` can start with.
//
// Thread-safety: LoadConfigFile/ParseConfig are pure apart from reading the
// file (and, for plugins and shell commands, checking that paths exist); a
// DaemonConfig is a value, safe to copy and read from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "claim/claim_planner.h"

namespace akadzed {

// Exit code for a configuration error (sysexits.h EX_CONFIG).
inline constexpr int kExitConfig = 78;

// A rejected configuration. what() is one line: "<file>:<line>: <message>"
// (line is 1-based; "<file>: <message>" when no line applies, e.g. the file
// cannot be read).
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct DatabaseConfig {
  // libpq URL or keyword string; "" means $AKADZE_DATABASE_URL, then libpq's
  // own defaults (PG* variables, service file). Never logged unredacted.
  std::string url;
};

struct WorkerConfig {
  std::int64_t heartbeat_interval_us = 5'000'000;
  std::int64_t heartbeat_ttl_us = 30'000'000;   // > heartbeat_interval
  std::int64_t poll_interval_us = 1'000'000;
  std::int64_t shutdown_timeout_us = 30'000'000;
  bool listen_notify = false;  // LISTEN akadze_jobs for early wake-ups
};

struct QueueConfig {
  std::string name;
  int slots = 1;                                 // 1..10000
  ClaimMode mode = ClaimMode::kOrdered;          // "ordered" | "fair"
  std::optional<std::int64_t> aging_us;          // priority aging interval
  int line = 0;                                  // where it was defined
};

struct ShellHandlerConfig {
  // argv; command[0] is looked up in PATH when it has no '/', a relative
  // path with '/' is resolved against the config file's directory.
  std::vector<std::string> command;
  std::map<std::string, std::string> env;        // added to the child's env
  std::string working_directory;                 // "" = the daemon's cwd
  std::int64_t timeout_us = 0;                   // 0 = no timeout
  std::int64_t kill_grace_us = 10'000'000;       // TERM -> KILL
  std::size_t max_line_bytes = 4096;             // a log line is cut there
  std::size_t max_output_bytes = 1 << 20;        // stdout+stderr logged per run
};

struct PluginHandlerConfig {
  // Path of the .so: absolute, relative to the config file's directory when
  // it contains '/', else a file name searched in the plugin directories.
  std::string path;
  std::string config_json = "{}";                // `config:` mapping as JSON
  std::int64_t timeout_us = 0;                   // 0 = no timeout
};

struct HandlerConfig {
  std::string task;
  std::variant<ShellHandlerConfig, PluginHandlerConfig> kind;
  int line = 0;
};

// Deleting finished jobs (and old periodic runs and start marks). Every
// daemon prunes; rows another daemon is deleting are skipped.
struct PruningConfig {
  bool enabled = true;
  std::int64_t retention_us = 7LL * 24 * 3600 * 1'000'000;  // finished longer ago: deleted
  std::int64_t interval_us = 60'000'000;                    // between pruning rounds
  int batch_size = 1000;                                    // rows per DELETE, 1..100000
};

enum class LogFormat { kAuto, kText, kJournald };

struct LoggingConfig {
  std::string level = "info";                    // trace..critical, off
  LogFormat format = LogFormat::kAuto;           // auto: journald when under it
};

struct DaemonConfig {
  std::string path;                              // the file it came from
  DatabaseConfig database;
  WorkerConfig worker;
  std::vector<QueueConfig> queues;               // at least one, unique names
  std::map<std::string, HandlerConfig> handlers; // by task name
  PruningConfig pruning;
  LoggingConfig logging;
};

// Reads and validates `path`. Throws ConfigError.
DaemonConfig LoadConfigFile(const std::string& path);

// Parses YAML `text` as if read from `path` (used in messages and to resolve
// relative paths). Throws ConfigError.
DaemonConfig ParseConfig(const std::string& text, const std::string& path);

}  // namespace akadzed
