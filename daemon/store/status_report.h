// What `akadzed status` and the status page (docs/status-page.md) show, read
// in one READ ONLY transaction that never scans akadze.jobs: every statement
// reads a bounded range of an index, and under a held MVCC horizon steps
// over none of the dead entries of the claims and finishes it keeps
// (docs/claim.md, "Counts past the floors").
//
//   queues            the names: those the database knows outside
//                     akadze.jobs (the workers' queues, pauses, caps, stored
//                     claim floors) and those with queued jobs between them
//                     (a skip scan of jobs_claim_idx inside each gap:
//                     FirstInGapSql, store/job_sql.h); at most max_queues,
//                     by name. A queue known only by its stored floor shows
//                     while it has queued jobs
//   ready, scheduled  the QueuedCounter's (claim/queue_counts.h: past the
//                     queue's stored claim floor), split by run_at <= now();
//                     each read stops at count_cap + 1, past which both are
//                     lower bounds (`capped`)
//   running           the registered workers' running jobs, each read past
//                     its stored running floor (RunningJobsOfWorkersSql),
//                     counted per queue
//   oldest ready      the QueuedCounter's: the first ready job of each level
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
#include <functional>
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

// A queue's queued jobs as a QueuedCounter counts them.
struct QueuedCount {
  std::int64_t total = 0;  // queued jobs counted: more than the cap means "at least"
  std::int64_t ready = 0;  // of them, run_at <= now()
  std::optional<double> oldest_ready_age_seconds;  // none ready: nullopt
};
// Counts the queued jobs of each of `queues` (in its order), each up to
// `cap` + 1 (0: all), through `conn` inside the caller's transaction. The
// claim's (claim/queue_counts.h) reads past the queues' stored claim
// floors; the store cannot (the floors are the claim's), so the caller
// passes it in.
using QueuedCounter = std::function<std::vector<QueuedCount>(pg::Connection& conn,
                                                             const std::vector<std::string>& queues,
                                                             std::int64_t cap)>;

// Reads the report in one READ ONLY transaction (statement_timeout per
// statement), the queued counts by `count_queued`. Throws pg::PgError.
StatusReport ReadStatusReport(pg::Connection& conn, const QueuedCounter& count_queued,
                              const StatusReportOptions& options = {});

// The report's queue section alone (what the /metrics gauges export):
// three statements in one round trip, then `count_queued`'s, through
// `conn` in the caller's transaction. count_cap 0: counts without a bound.
struct QueueSection {
  std::string generated_at;  // the server's now(), ISO-8601 UTC
  std::vector<QueueStatus> queues;
  bool truncated = false;  // more than max_queues queues
};
QueueSection ReadQueueSection(pg::Connection& conn, const QueuedCounter& count_queued,
                              const StatusReportOptions& options);

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
