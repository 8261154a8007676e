// The jobs this daemon is running right now, with the stop handle of each, so
// that the lease keeper (cancel requests, lost leases) and shutdown can stop
// them.
//
// Thread-safety: all members may be called from any thread.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <map>
#include <utility>
#include <vector>

#include "handlers/job_handler.h"
#include "core/thread_annotations.h"

namespace akadzed {

class RunningJobs {
 public:
  // Registers a run its executor is about to start; `stop` must outlive
  // Remove. Runs are keyed by (job id, run_count): a job rescued from us
  // while its handler still runs may be claimed here again, and both runs
  // must stay stoppable.
  // `progress` (may be null), where its handler's progress reports go, must
  // outlive Remove too.
  void Add(std::int64_t job_id, std::int32_t run_count, JobStop* stop,
           JobProgress* progress = nullptr);
  void Remove(std::int64_t job_id, std::int32_t run_count);

  // Asks the job to stop when it runs with this run_count. True if it did.
  bool RequestStop(std::int64_t job_id, std::int32_t run_count, StopReason reason);
  // Asks every running job to stop; returns how many there were. With
  // `latch`, jobs added later are asked to stop at once too (shutdown).
  int RequestStopAll(StopReason reason, bool latch = false);

  // What running jobs reported and the database has not seen
  // (JobProgress::Peek): the lease keeper's round writes it, then
  // MarkProgressWritten with each version it wrote.
  struct PendingProgress {
    std::int64_t job_id = 0;
    std::int32_t run_count = 0;
    std::string patch_json;
    std::uint64_t version = 0;
  };
  std::vector<PendingProgress> Progress() const;
  // The run is still registered: its progress up to `version` is written.
  void MarkProgressWritten(std::int64_t job_id, std::int32_t run_count, std::uint64_t version);

  // Job ids and run counts now running.
  std::vector<std::pair<std::int64_t, std::int32_t>> Snapshot() const;
  std::size_t size() const;

 private:
  mutable Mutex mu_;
  struct Run {
    JobStop* stop;
    JobProgress* progress;  // may be null
  };
  std::map<std::pair<std::int64_t, std::int32_t>, Run> jobs_ GUARDED_BY(mu_);
  StopReason latched_ GUARDED_BY(mu_) = StopReason::kNone;
};

}  // namespace akadzed
