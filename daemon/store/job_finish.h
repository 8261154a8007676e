// Recording what became of claimed jobs (SPEC §4, akadze's rules): the one
// statement that turns handler outcomes into next states, fenced so that only
// the claim that still owns a job can finish it.
//
// Thread-safety: functions use the connection they are given; one call per
// connection at a time.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/job_outcome.h"
#include "core/job_states.h"
#include "pg/connection.h"
#include "store/transition_listener.h"

namespace akadzed {

// Retry backoff in seconds after a failed run that brought the job to
// `attempt` failed runs: min(2^(attempt-1), 300).
std::int64_t RetryBackoffSeconds(std::int32_t attempt);

struct FinishRequest {
  std::int64_t job_id = 0;
  std::int32_t run_count = 0;  // the claim's fencing token
  JobOutcome outcome;
  // false: a job this request brings to `succeeded` is deleted instead of
  // kept (its queue's keep_succeeded; docs/configuration.md).
  bool keep_succeeded = true;

  // Whether applying this request deletes its job.
  bool DeletesJob() const { return !keep_succeeded && outcome.kind == OutcomeKind::kSuccess; }
};

struct FinishResult {
  std::int64_t job_id = 0;
  bool applied = false;      // false: stale (no longer ours); nothing changed
  JobState state = JobState::kRunning;  // the job's new state when applied
  std::int32_t attempt = 0;  // failed runs after this finish
  double run_in_s = 0;       // queued: seconds until run_at
};

// Applies `requests` in one statement (one round trip) as worker `worker_id`.
// An outcome's meta_patch (the run's last progress report) is merged into the
// job's meta (left alone when an application stored a non-object there).
// A request is applied only when its job is still `running` with this
// worker_id and run_count; others come back with applied = false. A job
// with cancel_requested_at set that would go back to `queued` (retry,
// snooze, release) is `cancelled` instead. Error
// messages are redacted and cut to 500 characters; `errors` keeps the last
// 10 entries. Results are in request order. Throws pg::PgError; a SqlError
// for a batch means one of its rows is unstorable (e.g. a result jsonb
// rejects): callers retry rows one by one.
//
// A request with keep_succeeded = false whose job succeeds is deleted by the
// same statement (fenced alike) and comes back applied with state
// kSucceeded; other outcomes of such requests are written as usual.
//
// With `hooks` (the transition hooks) that fire from `running`, the statement and the hooks run in
// one transaction: a HookError rolls every request back (callers retry rows
// one by one to find the refused one, which stays running). Jobs to be
// deleted are then written `succeeded`, shown to the hooks, and deleted
// after them in that transaction.
//
// `plan`: kPerBatch plans the statement for each batch's values (the
// default: a generic plan walks every running job of the worker through
// jobs_running_worker_idx and hashes them, whatever the batch's size);
// kPrepared runs it as a prepared statement, whose generic plan spares the
// planning (~0.16 ms of server CPU a statement) where the worker runs few
// jobs (the finisher of a daemon with few slots, FinishPlanFor).
enum class FinishPlan { kPerBatch, kPrepared };
std::vector<FinishResult> FinishJobs(pg::Connection& conn, const std::string& worker_id,
                                     const std::vector<FinishRequest>& requests,
                                     const TransitionListener* hooks = nullptr,
                                     FinishPlan plan = FinishPlan::kPerBatch);
// The plan for the finishes of a daemon with `slots` slots in all: kPrepared
// up to kPreparedFinishMaxSlots, where the generic plan's walk of the
// worker's running jobs costs less than planning each statement.
inline constexpr int kPreparedFinishMaxSlots = 64;
inline FinishPlan FinishPlanFor(int slots) {
  return slots <= kPreparedFinishMaxSlots ? FinishPlan::kPrepared : FinishPlan::kPerBatch;
}

// SQL for the state a finish of outcome `kind` (an SQL expression giving an
// OutcomeKindName) leads to, from the job's row `j` before the finish:
// akadze's rules, plus "a job whose cancel was requested is never queued
// again". Shared by the finish and the rescue (a retry by another name).
std::string NextStateSql(std::string_view kind);

}  // namespace akadzed
