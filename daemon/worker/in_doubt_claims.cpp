#include "worker/in_doubt_claims.h"

#include <utility>

#include <spdlog/spdlog.h>

#include "core/redact.h"
#include "pg/pg_error.h"
#include "runtime/log_line.h"
#include "store/job_finish.h"
#include "store/worker_lease.h"

namespace akadzed {

InDoubtClaims::InDoubtClaims(std::string queue, LeaseKeeper& lease, const TransitionHooks* hooks)
    : queue_(std::move(queue)), lease_(lease), hooks_(hooks) {}

void InDoubtClaims::Note(const std::string& worker_id) {
  if (!worker_id_) worker_id_ = worker_id;
}

void InDoubtClaims::ReleaseBeforeClaim(DbSession& session, const std::vector<std::int64_t>& held) {
  if (!worker_id_) return;
  try {
    Release(session, held);
  } catch (const pg::ConnectionError&) {
    throw;
  } catch (const std::exception& e) {
    spdlog::warn("release_failed queue={} | {}; the lease keeper releases them after heartbeat_ttl",
                 LogValue(queue_), OneLine(e.what()));
  }
  worker_id_.reset();
}

void InDoubtClaims::ReleaseAtStop(DbSession& session, const std::vector<std::int64_t>& held) {
  if (!worker_id_) return;
  try {
    Release(session, held);
  } catch (const std::exception& e) {
    spdlog::warn("release_failed queue={} | {}; the rescue recovers them after heartbeat_ttl",
                 LogValue(queue_), OneLine(e.what()));
  }
}

int InDoubtClaims::Release(DbSession& session, const std::vector<std::int64_t>& held) {
  const std::string& worker_id = *worker_id_;
  // A lease lost since the claim hands every job of the old id to the
  // rescue, which records what happened: some ran here and were dropped
  // (WorkerLost, an attempt spent). Releasing them would say they never ran.
  if (!lease_.HeldAs(worker_id)) {
    spdlog::info("release_skipped queue={} | the lease was lost since the in-doubt claim; the rescue "
                 "takes its jobs",
                 LogValue(queue_));
    return 0;
  }
  return session.Run([&](pg::Connection& c) {
    std::vector<FinishRequest> requests;
    for (const OwnedJob& job : OwnedRunningJobsOfQueue(c, worker_id, queue_, held)) {
      requests.push_back({job.id, job.run_count, ReleaseOutcome()});
    }
    int released = 0;
    if (requests.empty()) return released;
    // Fenced like any finish (worker id, run_count, still running).
    std::vector<FinishResult> results = FinishJobs(c, worker_id, requests, hooks_);
    for (std::size_t k = 0; k < results.size(); ++k) {
      if (!results[k].applied) continue;
      ++released;
      spdlog::warn("release job={} run={} queue={} state={} | its claim's COMMIT was in doubt and "
                   "it never ran here; no attempt spent",
                   results[k].job_id, requests[k].run_count, LogValue(queue_), results[k].state);
    }
    return released;
  });
}

}  // namespace akadzed
