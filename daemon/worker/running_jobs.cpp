#include "worker/running_jobs.h"

namespace akadzed {

void RunningJobs::Add(std::int64_t job_id, std::int32_t run_count, JobStop* stop,
                      JobProgress* progress) {
  MutexLock lock(mu_);
  jobs_[{job_id, run_count}] = Run{stop, progress};
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
  it->second.stop->Request(reason);
  return true;
}

int RunningJobs::RequestStopAll(StopReason reason, bool latch) {
  MutexLock lock(mu_);
  if (latch) latched_ = reason;
  for (auto& [key, run] : jobs_) run.stop->Request(reason);
  return static_cast<int>(jobs_.size());
}

std::vector<std::pair<std::int64_t, std::int32_t>> RunningJobs::Snapshot() const {
  MutexLock lock(mu_);
  std::vector<std::pair<std::int64_t, std::int32_t>> out;
  out.reserve(jobs_.size());
  for (const auto& [key, run] : jobs_) out.push_back(key);
  return out;
}

std::vector<RunningJobs::PendingProgress> RunningJobs::Progress() const {
  MutexLock lock(mu_);
  std::vector<PendingProgress> out;
  for (const auto& [key, run] : jobs_) {
    if (run.progress == nullptr) continue;
    if (std::optional<JobProgress::Pending> p = run.progress->Peek()) {
      out.push_back({key.first, key.second, std::move(p->patch_json), p->version});
    }
  }
  return out;
}

void RunningJobs::MarkProgressWritten(std::int64_t job_id, std::int32_t run_count,
                                      std::uint64_t version) {
  MutexLock lock(mu_);
  auto it = jobs_.find({job_id, run_count});
  if (it != jobs_.end() && it->second.progress != nullptr) it->second.progress->MarkWritten(version);
}

std::size_t RunningJobs::size() const {
  MutexLock lock(mu_);
  return jobs_.size();
}

}  // namespace akadzed
