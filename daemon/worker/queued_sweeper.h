// The queued sweep, a service of its own beside the lease keeper: every
// heartbeat_interval it ends queued jobs whose cancel was requested or whose
// expires_at has passed (store/queued_sweep.h), as akadze's workers do, on
// the lease keeper's connection (LeaseKeeper::session()). A backlog (a mass
// cancel, a queue of expired jobs) goes in batches until one comes back
// short: at most 20 batches and half a heartbeat interval per round.
//
// A round finds the connection as the lease keeper left it: while it is not
// open (the database away: the keeper reopens it every heartbeat, and logs
// the outage) the round sends nothing and says nothing.
//
// Logs: swept (each batch; each job at debug), sweep_skipped (a job a hook
// refused, or one whose cancel could not be written: named once; the latter
// is left alone from then on), sweep_failed and sweep_recovered. Counts the
// swept jobs (WorkerMetrics::QueuedJobsSwept).
//
// Its rounds are a PeriodicService's (runtime/periodic_service.h): a round
// every `interval`, guarded, and its thread-safety.
#pragma once

#include <chrono>
#include <cstdint>
#include <set>

#include "hooks/transition_hooks.h"
#include "metrics/worker_metrics.h"
#include "runtime/db_session.h"
#include "runtime/periodic_service.h"

namespace akadzed {

class QueuedSweeper final : public PeriodicService {
 public:
  // `hooks` (may be null) run in each batch's transaction; `metrics` (may be
  // null) counts the swept jobs.
  QueuedSweeper(SharedDbSession& session, std::chrono::microseconds interval,
                const TransitionHooks* hooks = nullptr, WorkerMetrics* metrics = nullptr,
                const ServiceClock& clock = SteadyServiceClock());
  ~QueuedSweeper() override;

 private:
  bool Round() override;

  SharedDbSession& session_;
  const std::chrono::microseconds interval_;
  const TransitionHooks* hooks_;  // may be null
  WorkerMetrics* metrics_;        // may be null
  // The rest: the loop thread only.
  std::set<std::int64_t> skipped_logged_;  // sweep_skipped (refused) jobs named once
  std::set<std::int64_t> unwritable_;      // jobs the sweep could not change: left alone from then on
};

}  // namespace akadzed
