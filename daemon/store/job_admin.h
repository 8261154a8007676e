// Operator reads and writes of akadze.jobs, akadze.queue_pauses and
// akadze.workers for the admin commands (`akadzed enqueue`, `jobs ...`,
// `queues ...`, `workers list`, `status`) and the metrics' gauges. The SQL
// lives here; the CLI (cli/admin_commands.cpp) only parses options and
// prints.
//
// Job args are never read by anything in this file: results carry every
// field of a job except `args` (the rule: never print job args).
//
// Errors: std::invalid_argument for bad input (a usage error, exit 2),
// AdminError for a refusal that depends on the database's contents (unknown
// job, wrong state, duplicate unique_key: exit 1), pg::PgError otherwise.
// Timestamps come back as ISO-8601 UTC text, e.g. "2026-11-30T01:23:05.123456Z".
//
// Thread-safety: functions use the connection they are given, one thread at
// a time; they hold no state of their own.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/job_states.h"
#include "pg/connection.h"
#include "store/job_row.h"

namespace akadzed {

// A refusal the operator can act on; its message is the whole error line.
class AdminError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};


struct EnqueueRequest {
  std::string task;
  std::string args_json = "{}";  // must be a JSON object
  std::string queue = "default";
  std::int64_t priority = 0;     // smallint
  std::optional<std::int64_t> delay_us;  // run_at = now() + delay
  std::optional<std::string> run_at;     // ISO-8601, excludes delay_us
  std::optional<std::string> limit_key;
  std::optional<std::string> unique_key;
  std::int64_t max_attempts = 3;
  std::optional<std::string> expires_at;  // ISO-8601
};

// Jobs come back as JobRow (store/job_row.h) with kJobRowForAdmin's parts:
// every column except args.


// Throws std::invalid_argument when the request is malformed (args not a JSON
// object, empty task or queue, priority outside smallint, max_attempts < 1,
// negative delay, both delay and run_at), before any SQL.
void ValidateEnqueue(const EnqueueRequest& request);

// Enqueues one job through akadze.enqueue (migrations/006_enqueue.sql, with
// on_conflict 'raise': it also sends NOTIFY akadze_jobs when the job is
// ready now) and returns it. Validates first (see ValidateEnqueue); a
// run_at/expires_at PostgreSQL cannot read as timestamptz, or one the
// function refuses (expires_at not after the run time, an infinite run_at),
// is std::invalid_argument. A queued or running job with the same unique_key
// is an AdminError naming that job.
JobRow EnqueueJob(pg::Connection& conn, const EnqueueRequest& request);

// Newest first (id DESC), at most `limit` jobs; filters are optional.
std::vector<JobRow> ListJobs(pg::Connection& conn, const std::optional<std::string>& queue,
                             const std::optional<JobState>& state, std::int64_t limit);

// The job, or AdminError "job N not found".
JobRow ShowJob(pg::Connection& conn, std::int64_t id);

enum class CancelOutcome {
  kCancelled,         // was queued: now cancelled, finished_at = now()
  kCancelRequested,   // was running: cancel_requested_at set, its daemon stops it
  kAlreadyRequested,  // was running with a cancel already requested: unchanged
};

// Cancels a queued job at once, or asks the daemon running it to stop it.
// A finished job is an AdminError "job N is already <state>". One
// transaction, the row locked (FOR UPDATE) while deciding.
CancelOutcome CancelJob(pg::Connection& conn, std::int64_t id);

// Puts a failed job back as akadze's requeue does: state queued, run_at
// now(), attempt kept and max_attempts raised to attempt + 1 when it is not
// above that already (one more attempt; saturates at int4's maximum),
// worker_id, started_at, finished_at and cancel_requested_at NULL; errors,
// result and run_count are kept. Any other state is an AdminError; so is an
// active job holding the same unique_key. Returns the job as it is now.
JobRow RequeueJob(pg::Connection& conn, std::int64_t id);

struct QueueRow {
  std::string queue;
  std::int64_t queued = 0;  // all queued, ready or not
  std::int64_t ready = 0;   // queued and ready (ignoring the pause)
  std::int64_t running = 0; // busy slots
  std::int64_t succeeded = 0;
  std::int64_t failed = 0;
  std::int64_t cancelled = 0;
  double lag_seconds = 0;   // now() - oldest ready run_at; 0 when none is ready
  bool paused = false;
  std::optional<std::string> paused_at;
  std::optional<std::int64_t> max_running;  // the queue's cap (akadze.queue_caps); nullopt: none
};

// Every queue that has jobs, a pause row or a cap, by name. Counts every row of
// akadze.jobs (one aggregate; history included until pruned).
std::vector<QueueRow> ListQueues(pg::Connection& conn);

// Adds / removes the queue's akadze.queue_pauses row. Idempotent; returns
// true when something changed.
bool PauseQueue(pg::Connection& conn, const std::string& queue);
bool ResumeQueue(pg::Connection& conn, const std::string& queue);

// Sets the queue's cluster-wide cap on running jobs (akadze.queue_caps,
// docs/scaling.md): claims take no job of it while max_running of its jobs
// run, across every daemon. `max_running` must be at least 1
// (std::invalid_argument otherwise: a pause stops claims). Returns the cap
// it replaced, if any. Lowering a cap stops no running job: claims wait
// until the queue's running jobs are below it.
std::optional<std::int64_t> SetQueueCap(pg::Connection& conn, const std::string& queue,
                                        std::int64_t max_running);
// Removes the queue's cap; returns the cap removed, if any.
std::optional<std::int64_t> ClearQueueCap(pg::Connection& conn, const std::string& queue);

struct WorkerRow {
  std::string id;
  std::string hostname;
  std::int64_t pid = 0;
  std::vector<std::string> queues;
  std::string started_at;
  double heartbeat_age_seconds = 0;
  std::int64_t running = 0;  // jobs in state running with this worker_id
};

// Every registered worker, oldest first.
std::vector<WorkerRow> ListWorkers(pg::Connection& conn);

struct LimitUse {
  std::string key;
  std::optional<std::string> row;  // the applicable limits row: key, "*", or none (held)
  std::int64_t running = 0;
  std::optional<std::int64_t> max_running;
  std::int64_t starts = 0;  // start marks inside the row's window
  std::optional<std::int64_t> max_starts;
};

// Keys with running jobs or a limits row of their own (not "*"), by key.
std::vector<LimitUse> ListLimitUse(pg::Connection& conn);

}  // namespace akadzed
