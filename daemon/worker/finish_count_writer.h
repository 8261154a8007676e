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
// Thread-safety: Start/Stop from the owner only; RunRound is what the thread
// calls (tests call it with the thread not started); last_round() from any
// thread.
#pragma once

#include <chrono>

#include "runtime/db_session.h"
#include "runtime/service_loop.h"
#include "worker/finish_tally.h"

namespace akadzed {

class FinishCountWriter {
 public:
  // `session` is the lease keeper's; `tally` must outlive the writer.
  FinishCountWriter(SharedDbSession& session, FinishTally& tally, std::chrono::microseconds interval,
                    const ServiceClock& clock = SteadyServiceClock());
  ~FinishCountWriter();

  // Starts the thread: a round every `interval`.
  void Start();
  void Stop();
  // One round, its failure logged (finish_counts_failed, finish_counts_recovered).
  void RunRound();
  std::chrono::steady_clock::time_point last_round() const { return loop_.last_round(); }

 private:
  // True when it sent its statements (and they worked); false when it had
  // none to send or skipped them (the connection not open, ...).
  bool Round();

  SharedDbSession& session_;
  FinishTally& tally_;
  const std::chrono::microseconds interval_;
  RoundGuard guard_;  // the loop thread only
  ServiceLoop loop_;
};

}  // namespace akadzed
