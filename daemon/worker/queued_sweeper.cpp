#include "worker/queued_sweeper.h"

#include <vector>

#include <spdlog/spdlog.h>

#include "runtime/job_traces.h"
#include "store/queued_sweep.h"

namespace akadzed {

QueuedSweeper::QueuedSweeper(SharedDbSession& session, std::chrono::microseconds interval,
                             const TransitionHooks* hooks, WorkerMetrics* metrics, const ServiceClock& clock)
    : PeriodicService({.name = "sweep", .thread = "sweep", .interval = interval}, clock),
      session_(session),
      interval_(interval),
      hooks_(hooks),
      metrics_(metrics) {}

QueuedSweeper::~QueuedSweeper() { Stop(); }

bool QueuedSweeper::Round() {
  // Batches until one comes back short: a backlog (a mass cancel, a queue
  // of expired jobs) ends within a few rounds, each batch one short
  // statement on rows nothing else wants.
  // At most 20 batches and half an interval per round, so a backlog never
  // holds the lease's connection long.
  constexpr int kBatch = 500;
  constexpr int kMaxBatchesPerRound = 20;
  const auto until = clock().Now() + interval_ / 2;
  const std::vector<std::int64_t> exclude(unwritable_.begin(), unwritable_.end());
  bool ran = false;
  for (int i = 0; i < kMaxBatchesPerRound && (i == 0 || clock().Now() < until); ++i) {
    SweepSkips skips;
    std::vector<SweptJob> swept;
    if (!session_.RunIfConnected(
            [&](pg::Connection& c) { swept = SweepQueuedJobs(c, kBatch, hooks_, exclude, &skips); })) {
      break;  // the lease keeper reopens it
    }
    ran = true;
    std::int64_t counts[2] = {0, 0};
    for (const SweptJob& job : swept) {
      ++counts[job.reason == SweepReason::kExpired ? 1 : 0];
      const JobTraceScope trace(job.id, job.traceparent ? ParseTraceparent(*job.traceparent) : std::nullopt);
      spdlog::debug("swept job={} reason={} state=cancelled", job.id, SweepReasonName(job.reason));
    }
    if (!swept.empty()) {
      spdlog::info("swept cancel_requested={} expired={} | queued jobs ended cancelled", counts[0],
                   counts[1]);
    }
    if (metrics_) {
      if (counts[0] > 0) metrics_->QueuedJobsSwept(SweepReasonName(SweepReason::kCancelRequested), counts[0]);
      if (counts[1] > 0) metrics_->QueuedJobsSwept(SweepReasonName(SweepReason::kExpired), counts[1]);
    }
    for (std::int64_t id : skips.refused) {
      if (skipped_logged_.insert(id).second) {
        spdlog::error("sweep_skipped job={} | a hook refused its cancel; left queued (never claimed) and "
                      "tried again each round",
                      id);
      }
    }
    for (std::int64_t id : skips.unwritable) {
      if (unwritable_.insert(id).second) {
        spdlog::error("sweep_skipped job={} | its cancel could not be written (an application's trigger or "
                      "constraint); left queued (never claimed), not tried again by this daemon",
                      id);
      }
    }
    if (counts[0] < kBatch && counts[1] < kBatch) break;
  }
  return ran;
}

}  // namespace akadzed
