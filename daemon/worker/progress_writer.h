// Running jobs' progress, a service of its own beside the lease keeper:
// every heartbeat_interval it writes what running jobs reported of their
// progress (RunningJobs::Progress, handlers/job_progress.h) into their meta,
// at most once per job per round, fenced by the worker id and run
// (store/worker_lease.h, WriteJobProgress), on the lease keeper's connection
// (LeaseKeeper::session()). Nothing is written while the lease is lost: the
// jobs of the old id are being stopped.
//
// A round finds the connection as the lease keeper left it: while it is not
// open (the database away: the keeper reopens it every heartbeat, and logs
// the outage) the round sends nothing and says nothing.
//
// Logs: progress_dropped (a report the database refused: dropped, the run
// goes on), progress_failed (left pending: the next round or the run's
// finish writes it) and progress_recovered.
//
// Its rounds are a PeriodicService's (runtime/periodic_service.h): a round
// every `interval`, guarded (a failure at warn at most: what failed is left
// pending), and its thread-safety.
#pragma once

#include <chrono>

#include "config/config.h"
#include "runtime/db_session.h"
#include "runtime/periodic_service.h"
#include "worker/lease_keeper.h"
#include "worker/running_jobs.h"

namespace akadzed {

class ProgressWriter final : public PeriodicService {
 public:
  // `session` is the lease keeper's; `lease` and `running` must outlive the
  // writer.
  ProgressWriter(SharedDbSession& session, const LeaseKeeper& lease, RunningJobs& running,
                 std::chrono::microseconds interval, const ServiceClock& clock = SteadyServiceClock());
  ~ProgressWriter() override;

 private:
  bool Round() override;

  SharedDbSession& session_;
  const LeaseKeeper& lease_;
  RunningJobs& running_;
};

}  // namespace akadzed
