// Jobs this daemon finished since the lease keeper last wrote them to
// akadze.queue_minutes (store/status_report.h, AddQueueMinutes), per queue:
// the status page's "finished per minute" chart. The finisher adds each job
// whose finish it wrote; the heartbeat round takes the counts, writes them,
// and puts them back when the write fails (they go into a later minute).
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/job_states.h"
#include "core/thread_annotations.h"
#include "store/status_report.h"

namespace akadzed {

class FinishTally {
 public:
  // Counts a job of `queue` that now is `state` (succeeded, failed or
  // cancelled; other states, a retry's queued, are not counted).
  void Add(const std::string& queue, JobState state) EXCLUDES(mu_);
  // The counts so far, emptied.
  std::vector<QueueFinishCount> Take() EXCLUDES(mu_);
  // Adds `counts` (a Take whose write failed) back.
  void PutBack(const std::vector<QueueFinishCount>& counts) EXCLUDES(mu_);

 private:
  Mutex mu_;
  std::map<std::string, QueueFinishCount> counts_ GUARDED_BY(mu_);
};

}  // namespace akadzed
