// The finish counts, a service of their own beside the lease keeper: every
// heartbeat_interval the finisher's counts of finished jobs by queue
// (worker/finish_tally.h) are added to akadze.queue_minutes (the status
// page's chart; store/status_report.h, AddQueueMinutes), on the lease
// keeper's connection (LeaseKeeper::session()). Counts whose write fails are
// put back for a later round (and minute).
//
// A round finds the connection as the lease keeper left it: while it is not
// open (the database away: the keeper reopens it every heartbeat, and logs
// the outage) the round sends nothing and says nothing.
//
// Logs: finish_counts_failed and finish_counts_recovered.
//
// Its rounds are a PeriodicService's (runtime/periodic_service.h): a round
// every `interval`, guarded (a failure at warn at most: the counts are put
// back), and its thread-safety.
#pragma once

#include <chrono>

#include "runtime/db_session.h"
#include "runtime/periodic_service.h"
#include "worker/finish_tally.h"

namespace akadzed {

class FinishCountWriter final : public PeriodicService {
 public:
  // `session` is the lease keeper's; `tally` must outlive the writer.
  FinishCountWriter(SharedDbSession& session, FinishTally& tally, std::chrono::microseconds interval,
                    const ServiceClock& clock = SteadyServiceClock());
  ~FinishCountWriter() override;

 private:
  bool Round() override;

  SharedDbSession& session_;
  FinishTally& tally_;
};

}  // namespace akadzed
