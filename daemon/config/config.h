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
#include <string_view>
#include <variant>
#include <vector>

#include "claim/claim_planner.h"
#include "core/job_states.h"
#include "periodic/schedule.h"

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
  // Every transaction of a daemon session sets idle_in_transaction_session_timeout
  // and lock_timeout to this (SET LOCAL, so through PgBouncer too): a daemon
  // cut off mid-transaction holds no lock longer than this, and a claim waits
  // at most this long for its queue's claim lock before it retries.
  // 100 ms .. heartbeat_ttl; when not set, 5 s or heartbeat_ttl / 2 if less.
  std::int64_t stall_timeout_us = 5'000'000;
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

// How log lines are written: logfmt (`ts=... level=info event=job_started
// id=42 ...`), one JSON object per line, or logfmt with the sd-daemon
// priority prefix and no timestamp for the journal. auto is journald when
// stderr is the journal, else logfmt.
enum class LogFormat { kAuto, kLogfmt, kJson, kJournald };

struct LoggingConfig {
  std::string level = "info";                    // trace..critical, off
  LogFormat format = LogFormat::kAuto;
  // Absolute path of a file to append to instead of stderr; "" = stderr.
  // Reopened on SIGHUP (for logrotate).
  std::string file;
};

// The HTTP listener for /metrics, /healthz and /readyz.
struct MetricsConfig {
  bool enabled = true;
  std::string host = "127.0.0.1";                // an IP address; "::" or "0.0.0.0" for all
  int port = 9464;                               // 0 = any free port (logged)
};

// One periodic entry: a job of `task` enqueued at every fire instant of
// `schedule`, by whichever daemon records the fire first in
// akadze.periodic_runs.
struct PeriodicConfig {
  std::string name;                              // key in periodic_runs
  Schedule schedule = Schedule{EverySchedule(60'000'000)};
  std::string task;                              // defaults to the name
  std::string queue = "default";
  std::string args_json = "{}";                  // `args:` mapping as JSON
  int priority = 0;                              // -32768..32767
  int max_attempts = 3;                          // >= 1
  // false: no new job while the previous one of this entry is queued or
  // running (unique_key 'periodic:<name>').
  bool overlap = true;
  // A fire older than this is skipped, never backfilled (a daemon that was
  // down for a day does not enqueue a day of jobs).
  std::int64_t grace_us = 60'000'000;
  int line = 0;
};

// A transition hook: runs in the transaction that moves a job from one of
// `from` to one of `to` (empty = any); if it fails, the transition is rolled
// back. Exactly one of `sql` (a statement with the job's fields as $1..$N,
// docs/configuration.md lists them) or `plugin` (a .so exporting
// akadzed_hook_v1, docs/plugins.md).
struct HookConfig {
  std::string name;
  std::vector<std::string> from;
  std::vector<std::string> to;
  std::string sql;
  std::optional<PluginHandlerConfig> plugin;     // path and config; timeout unused
  int line = 0;

  // True if this hook fires for from -> to.
  bool Matches(std::string_view from_state, std::string_view to_state) const;
};

struct DaemonConfig {
  std::string path;                              // the file it came from
  DatabaseConfig database;
  WorkerConfig worker;
  std::vector<QueueConfig> queues;               // at least one, unique names
  std::map<std::string, HandlerConfig> handlers; // by task name
  PruningConfig pruning;
  LoggingConfig logging;
  MetricsConfig metrics;
  std::vector<PeriodicConfig> periodic;          // unique names, file order
  std::vector<HookConfig> hooks;                 // run in file order
};

// What a daemon needs between its lease deadline and the first moment
// another daemon may rescue its jobs, besides the largest kill_grace: the
// timer's precision and a KILL taking effect.
inline constexpr std::int64_t kLeaseStopMarginUs = 250'000;

// The largest kill_grace of the shell handlers (0 without any).
std::int64_t MaxKillGraceUs(const DaemonConfig& config);

// How long a lease lasts after its last successful heartbeat was sent:
// heartbeat_ttl - the largest kill_grace - kLeaseStopMarginUs. Every handler
// of a daemon that reaches it is dead (TERM, KILL after its grace) by the
// time another daemon may rescue its jobs (heartbeat_ttl after that
// heartbeat reached the server). Validation keeps it >= 2 * heartbeat_interval.
std::int64_t LeaseSpanUs(const WorkerConfig& worker, std::int64_t max_kill_grace_us);

// "" when `worker` and a largest kill_grace of `max_kill_grace_us` give a
// lease span of at least two heartbeat intervals, else the one-line reason.
std::string LeaseSpanProblem(const WorkerConfig& worker, std::int64_t max_kill_grace_us);

// Reads and validates `path`. Throws ConfigError.
DaemonConfig LoadConfigFile(const std::string& path);

// Parses YAML `text` as if read from `path` (used in messages and to resolve
// relative paths). Throws ConfigError.
DaemonConfig ParseConfig(const std::string& text, const std::string& path);

}  // namespace akadzed
