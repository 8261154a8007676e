// The rescue (SPEC §4), a service of its own beside the lease keeper: every
// heartbeat_interval it returns the jobs of workers whose heartbeat is older
// than heartbeat_ttl to queued (WorkerLost, attempt+1), or fails them when
// their attempts are spent (store/worker_lease.h, RescueLostJobs), on the
// lease keeper's connection (LeaseKeeper::session()).
//
// It rescues only while this daemon's own heartbeat works: a daemon whose
// heartbeat fails may be the one cut off. And after an outage every worker's
// heartbeat looks old: the first daemon back would rescue the jobs of the
// others, whose finishes are waiting to be written, and run them again. So
// the rescue holds off for heartbeat_ttl after an outage of this daemon's
// heartbeat (LeaseKeeper::outages_ended) or of its own rounds ends
// (rescue_held): by then each daemon that is alive has heartbeaten and
// written its pending finishes (the finisher retries every 500 ms at most);
// a worker still silent then is dead.
//
// A round finds the connection as the lease keeper left it: while it is not
// open (the database away: the keeper reopens it every heartbeat, and logs
// the outage) the round sends nothing and says nothing.
//
// Logs: rescue (each job), rescue_held, rescue_skipped (a row no statement
// could change, named once), rescue_failed and rescue_recovered.
//
// Its rounds are a PeriodicService's (runtime/periodic_service.h): a round
// every heartbeat_interval, guarded, and its thread-safety.
#pragma once

#include <chrono>
#include <cstdint>
#include <set>

#include "config/config.h"
#include "hooks/transition_hooks.h"
#include "runtime/db_session.h"
#include "runtime/periodic_service.h"
#include "worker/lease_keeper.h"

namespace akadzed {

class JobRescuer final : public PeriodicService {
 public:
  // `hooks` (may be null) run in each rescue's transaction. `session` is
  // the lease keeper's; `lease` must outlive the rescuer.
  JobRescuer(SharedDbSession& session, const LeaseKeeper& lease, WorkerConfig timings,
             const TransitionHooks* hooks = nullptr, const ServiceClock& clock = SteadyServiceClock());
  ~JobRescuer() override;

 private:
  bool Round() override;

  SharedDbSession& session_;
  const LeaseKeeper& lease_;
  const WorkerConfig timings_;
  const TransitionHooks* hooks_;  // may be null
  // The rest: the loop thread only.
  std::set<std::int64_t> skipped_logged_;  // rescue_skipped jobs named once
  std::uint64_t outages_seen_;             // the keeper's outages_ended() when last looked at
  bool own_outage_ = false;                // a round of this service failed for an outage
  std::chrono::steady_clock::time_point rescue_after_{};  // no rescue before
};

}  // namespace akadzed
