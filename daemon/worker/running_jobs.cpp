#include "worker/running_jobs.h"

namespace akadzed {

void RunningJobs::Add(std::int64_t job_id, std::int32_t run_count, JobStop* stop) {
  std::lock_guard lock(mu_);
  jobs_[job_id] = Entry{run_count, stop};
  stop->Request(latched_);
}

void RunningJobs::Remove(std::int64_t job_id) {
  std::lock_guard lock(mu_);
  jobs_.erase(job_id);
}

bool RunningJobs::RequestStop(std::int64_t job_id, std::int32_t run_count, StopReason reason) {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second.run_count != run_count) return false;
  it->second.stop->Request(reason);
  return true;
}

int RunningJobs::RequestStopAll(StopReason reason, bool latch) {
  std::lock_guard lock(mu_);
  if (latch) latched_ = reason;
  for (auto& [id, entry] : jobs_) entry.stop->Request(reason);
  return static_cast<int>(jobs_.size());
}

std::vector<std::pair<std::int64_t, std::int32_t>> RunningJobs::Snapshot() const {
  std::lock_guard lock(mu_);
  std::vector<std::pair<std::int64_t, std::int32_t>> out;
  out.reserve(jobs_.size());
  for (const auto& [id, entry] : jobs_) out.emplace_back(id, entry.run_count);
  return out;
}

std::size_t RunningJobs::size() const {
  std::lock_guard lock(mu_);
  return jobs_.size();
}

}  // namespace akadzed
