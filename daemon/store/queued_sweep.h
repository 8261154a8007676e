// The sweep of dead queued jobs, as akadze's own workers do it where the two
// share a schema (SPEC §6, "Shared-schema semantics"): a queued job whose
// cancel was requested, or whose expires_at has passed, is never claimed
// (it is not ready), so without the sweep it would stay queued for ever,
// holding its unique_key and never pruned. The sweep ends it `cancelled`
// with finished_at now():
//  - a cancel request: no error entry, as `akadzed jobs cancel` of a queued
//    job writes none;
//  - an expiry: an errors entry {"error": "Expired", "message": "expires_at
//    <time> passed before the job ran"}.
// A job with both counts as cancelled.
//
// The lease keeper (worker/lease_keeper.h) runs it every heartbeat round, in
// every daemon: batches of rows locked with FOR UPDATE SKIP LOCKED, so two
// daemons never wait on each other or end a job twice. The partial indexes
// jobs_queued_cancel_idx and jobs_queued_expires_idx (migration
// 006_enqueue) hold only such rows, so a batch reads no other queued job.
//
// Thread-safety: SweepQueuedJobs uses the connection it is given.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pg/connection.h"
#include "store/transition_listener.h"

namespace akadzed {

enum class SweepReason { kCancelRequested, kExpired };

struct SweptJob {
  std::int64_t id = 0;
  SweepReason reason = SweepReason::kCancelRequested;
  std::optional<std::string> traceparent;  // the job's meta.traceparent as stored (unchecked)
};

// "cancel_requested" or "expired", for logs and the metric's label.
const char* SweepReasonName(SweepReason reason);

// Jobs a sweep left queued: those a hook refused (worth another try next
// round) and those no statement could change (an application's trigger or
// constraint: a caller passes them as `exclude` from then on).
struct SweepSkips {
  std::vector<std::int64_t> refused;
  std::vector<std::int64_t> unwritable;
};

// Ends at most `batch` cancel-requested and at most `batch` expired queued
// jobs (oldest first), in one statement; returns them in id order. Jobs in
// `exclude` are left alone, and so are rows another transaction holds (a
// claim, another daemon's sweep: left for the next call). With `hooks`, the
// batch and its queued -> cancelled hooks share a transaction; a job a hook
// refuses stays queued (in skips->refused) and the others are ended
// without it.
//
// One row never fails the batch for the others (docs/reliability.md, "Rows
// that cannot be processed"): if the statement fails with a row's SQL
// error, each job is swept alone, and one that still fails stays queued
// (it is not ready: it is never claimed), in skips->unwritable. Throws
// pg::ConnectionError and pg::TransientError, and pg::SqlError for the
// server's state (a timeout, a read-only server).
std::vector<SweptJob> SweepQueuedJobs(pg::Connection& conn, int batch,
                                      const TransitionListener* hooks = nullptr,
                                      const std::vector<std::int64_t>& exclude = {},
                                      SweepSkips* skips = nullptr);

}  // namespace akadzed
