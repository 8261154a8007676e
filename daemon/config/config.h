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
#include "core/config_error.h"
#include "core/job_states.h"
#include "handlers/handler_config.h"
#include "hooks/hook_config.h"
#include "metrics/metrics_config.h"
#include "periodic/periodic_config.h"
#include "runtime/logging_config.h"
#include "web/web_config.h"

namespace akadzed {

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
  // A warning once per episode when something has held back the database's
  // MVCC horizon longer than this (metrics/horizon_watch.h); 0 ("off" or
  // 0s in the file): no warning.
  std::int64_t horizon_warn_after_us = 300'000'000;
};

struct WorkerConfig {
  std::int64_t heartbeat_interval_us = 5'000'000;
  std::int64_t heartbeat_ttl_us = 30'000'000;   // > heartbeat_interval
  std::int64_t poll_interval_us = 1'000'000;
  std::int64_t shutdown_timeout_us = 30'000'000;
  bool listen_notify = false;  // LISTEN akadze_jobs for early wake-ups
  // How long the finisher gathers finishes before it writes them (0..1 s;
  // docs/configuration.md, "Batched finishes").
  std::int64_t finish_batch_delay_us = 0;
};

struct QueueConfig {
  std::string name;
  int slots = 1;                                 // 1..10000
  // Jobs claimed beyond the slots, held to start the moment a slot frees
  // (0..10000; docs/configuration.md, "Prefetch").
  int prefetch = 0;
  ClaimMode mode = ClaimMode::kOrdered;          // "ordered" | "fair"
  std::optional<std::int64_t> aging_us;          // priority aging interval
  // false: a job of this queue that succeeds is deleted by its finish, not
  // kept for pruning (docs/configuration.md, "Keeping succeeded jobs").
  bool keep_succeeded = true;
  int line = 0;                                  // where it was defined
};

// Deleting finished jobs (and old periodic runs and start marks). Every
// daemon prunes; rows another daemon is deleting are skipped.
struct PruningConfig {
  bool enabled = true;
  std::int64_t retention_us = 7LL * 24 * 3600 * 1'000'000;  // finished longer ago: deleted
  std::int64_t interval_us = 60'000'000;                    // between pruning rounds
  int batch_size = 1000;                                    // rows per DELETE, 1..100000
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
  WebConfig web;
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
