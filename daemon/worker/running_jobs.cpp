#include "worker/running_jobs.h"

namespace akadzed {

void RunningJobs::Add(std::int64_t job_id, std::int32_t run_count, JobStop* stop) {
  MutexLock lock(mu_);
  jobs_[{job_id, run_count}] = stop;
  stop->Request(latched_);
}

void RunningJobs::Remove(std::int64_t job_id, std::int32_t run_count) {
  MutexLock lock(mu_);
  jobs_.erase({job_id, run_count});
}

bool RunningJobs::RequestStop(std::int64_t job_id, std::int32_t run_count, StopReason reason) {
  MutexLock lock(mu_);
  auto it = jobs_.find({job_id, run_count});
  if (it == jobs_.end()) return false;
  it->second->Request(reason);
  return true;
}

int RunningJobs::RequestStopAll(StopReason reason, bool latch) {
  MutexLock lock(mu_);
  if (latch) latched_ = reason;
  for (auto& [run, stop] : jobs_) stop->Request(reason);
  return static_cast<int>(jobs_.size());
}

std::vector<std::pair<std::int64_t, std::int32_t>> RunningJobs::Snapshot() const {
  MutexLock lock(mu_);
  std::vector<std::pair<std::int64_t, std::int32_t>> out;
  out.reserve(jobs_.size());
  for (const auto& [run, stop] : jobs_) out.push_back(run);
  return out;
}

std::size_t RunningJobs::size() const {
  MutexLock lock(mu_);
  return jobs_.size();
}

}  // namespace akadzed
