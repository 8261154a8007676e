#include "worker/finish_tally.h"

namespace akadzed {

void FinishTally::Add(const std::string& queue, JobState state) {
  if (state != JobState::kSucceeded && state != JobState::kFailed && state != JobState::kCancelled) return;
  MutexLock lock(mu_);
  QueueFinishCount& c = counts_[queue];
  c.queue = queue;
  (state == JobState::kSucceeded ? c.succeeded : state == JobState::kFailed ? c.failed : c.cancelled) += 1;
}

std::vector<QueueFinishCount> FinishTally::Take() {
  MutexLock lock(mu_);
  std::vector<QueueFinishCount> out;
  out.reserve(counts_.size());
  for (auto& [queue, c] : counts_) out.push_back(std::move(c));
  counts_.clear();
  return out;
}

void FinishTally::PutBack(const std::vector<QueueFinishCount>& counts) {
  MutexLock lock(mu_);
  for (const QueueFinishCount& back : counts) {
    QueueFinishCount& c = counts_[back.queue];
    c.queue = back.queue;
    c.succeeded += back.succeeded;
    c.failed += back.failed;
    c.cancelled += back.cancelled;
  }
}

}  // namespace akadzed
