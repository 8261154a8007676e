// What `akadzed status` and the status page (docs/status-page.md) show, read
// in one READ ONLY transaction that never scans akadze.jobs: every statement
// reads a bounded range of an index.
//
//   queues            the names: a skip scan of jobs_claim_idx (one probe
//                     per queue with queued jobs), pause rows and the
//                     workers' queues (jobs run and finish under a worker);
//                     at most max_queues, by name
//   ready, scheduled  the first count_cap + 1 entries of the queue's range
//                     of jobs_claim_idx, split by run_at <= now(); past the
//                     cap both are lower bounds (`capped`). A job the sweep
//                     is about to cancel (cancel requested, expired) counts
//                     until it does (one heartbeat round)
//   running           the running jobs, read once and counted per queue
//                     (jobs_running_worker_idx: at most the cluster's slots)
//   oldest ready      one probe per distinct priority of the queue's queued
//                     jobs (the first run_at of each), the 100 highest
//                     priorities only (a queue with ready jobs only below
//                     them shows ready jobs and no age)
//   finished/minute   akadze.queue_minutes (migrations/007_status_page.sql):
//                     the jobs akadzed daemons finished, per queue and minute,
//                     last hour: at most 60 rows per queue
//   limits, held keys ListLimitUse (store/job_admin.h), ListHeldLimitKeys
//                     (each key's queued jobs counted up to count_cap + 1)
//   workers           ListWorkers
//   recent failures   jobs_failed_finished_idx, newest first (rows without
//                     finished_at left out)
//   horizon           what holds back the database's MVCC horizon
//                     (store/horizon.h): the oldest holders, by PostgreSQL's
//                     own times (no daemon's first-seen times here)
//
// Job args and results are never read.
//
// The finish counts' writer, AddQueueMinutes, is here too: the one place
// that knows the table's shape.
//
// Thread-safety: functions use the connection they are given, one thread at
// a time; they hold no state of their own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pg/connection.h"
#include "store/horizon.h"
#include "store/job_admin.h"
#include "store/limits_table.h"

namespace akadzed {

struct StatusReportOptions {
  std::int64_t count_cap = 500;       // ready, scheduled and held jobs counted up to this
  std::size_t max_queues = 200;       // queues shown, by name
  std::size_t max_held_keys = 100;    // held keys listed (the rest counted)
  std::size_t max_failures = 20;      // recent failures listed
  std::int64_t statement_timeout_ms = 2000;  // per statement; 0: none
};

// Jobs finished in one minute (akadze.queue_minutes, summed over workers).
struct MinuteCount {
  std::string minute;  // ISO-8601 UTC, the minute's start
  std::int64_t succeeded = 0;
  std::int64_t failed = 0;
  std::int64_t cancelled = 0;
};

struct QueueStatus {
  std::string queue;
  bool paused = false;
  std::optional<std::string> paused_at;
  std::int64_t ready = 0;
  std::int64_t scheduled = 0;
  bool capped = false;  // more than count_cap queued: ready and scheduled are lower bounds
  std::int64_t running = 0;
  std::optional<std::int64_t> max_running;         // the queue's cluster-wide cap; nullopt: none
  std::optional<double> oldest_ready_age_seconds;  // none ready: nullopt
  std::vector<MinuteCount> finished_per_minute;    // 60, oldest first, the last is now's minute
};

struct RecentFailure {
  std::int64_t id = 0;
  std::string task;
  std::string queue;
  std::int64_t attempt = 0;
  std::int64_t max_attempts = 0;
  std::optional<std::string> finished_at;
  std::optional<std::string> error_kind;     // the last errors entry's `error`
  std::optional<std::string> error_message;  // its `message`, at most 500 characters
};

struct StatusReport {
  std::string generated_at;  // the server's now(), ISO-8601 UTC
  std::int64_t count_cap = 0;
  std::vector<QueueStatus> queues;
  bool queues_truncated = false;  // more than max_queues queues
  std::vector<LimitUse> limits;
  std::vector<HeldLimitKey> held_keys;
  std::int64_t held_keys_total = 0;
  std::vector<WorkerRow> workers;
  std::vector<RecentFailure> recent_failures;
  HorizonReport horizon;
};

// Reads the report in one READ ONLY transaction (statement_timeout per
// statement). Throws pg::PgError.
StatusReport ReadStatusReport(pg::Connection& conn, const StatusReportOptions& options = {});

// Jobs a worker finished since its last write, per queue.
struct QueueFinishCount {
  std::string queue;
  std::int64_t succeeded = 0;
  std::int64_t failed = 0;
  std::int64_t cancelled = 0;
};

// Adds `counts` to the current minute's rows of akadze.queue_minutes and
// deletes rows older than a day (those no other daemon is deleting); one
// statement. Throws pg::PgError (nothing written then).
void AddQueueMinutes(pg::Connection& conn, const std::vector<QueueFinishCount>& counts);

}  // namespace akadzed
