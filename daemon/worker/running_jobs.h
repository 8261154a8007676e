// The jobs this daemon is running right now, with the stop handle of each, so
// that the lease keeper (cancel requests, lost leases) and shutdown can stop
// them.
//
// Thread-safety: all members may be called from any thread.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "handlers/job_handler.h"

namespace akadzed {

class RunningJobs {
 public:
  struct Entry {
    std::int32_t run_count = 0;
    JobStop* stop = nullptr;
  };

  // Registers a job its executor is about to run; `stop` must outlive Remove.
  void Add(std::int64_t job_id, std::int32_t run_count, JobStop* stop);
  void Remove(std::int64_t job_id);

  // Asks the job to stop when it runs with this run_count. True if it did.
  bool RequestStop(std::int64_t job_id, std::int32_t run_count, StopReason reason);
  // Asks every running job to stop; returns how many there were. With
  // `latch`, jobs added later are asked to stop at once too (shutdown).
  int RequestStopAll(StopReason reason, bool latch = false);

  // Job ids and run counts now running.
  std::vector<std::pair<std::int64_t, std::int32_t>> Snapshot() const;
  std::size_t size() const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::int64_t, Entry> jobs_;  // guarded by mu_
  StopReason latched_ = StopReason::kNone;         // guarded by mu_
};

}  // namespace akadzed
