#include "metrics/worker_metrics.h"

namespace akadzed {

namespace {

// Claims take milliseconds; a slow one tens of milliseconds or more.
const std::vector<double> kClaimBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                          0.1,   0.25,   0.5,   1,    2.5,   5,   10};
// Jobs run from milliseconds (plugins) to an hour.
const std::vector<double> kJobBounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                        2.5,   5,    10,    30,   60,  300, 900, 3600};

}  // namespace

WorkerMetrics::WorkerMetrics(MetricsRegistry& registry, const std::vector<std::string>& queues)
    : claim_duration_(registry.AddHistogram("akadzed_claim_duration_seconds",
                                            "Duration of claims that reached the database, per queue",
                                            {"queue"}, kClaimBounds)),
      claim_rows_read_(registry.AddCounter("akadzed_claim_rows_read_total",
                                           "Ready rows the claims' window reads returned, per queue",
                                           {"queue"})),
      claim_dead_entries_(registry.AddCounter(
          "akadzed_claim_dead_index_entries_total",
          "Dead entries of jobs_claim_idx the claims' reads stepped over (versions a held MVCC horizon "
          "keeps from vacuum), per queue",
          {"queue"})),
      jobs_claimed_(registry.AddCounter("akadzed_jobs_claimed_total",
                                        "Jobs claimed by this daemon, per queue", {"queue"})),
      claims_capped_(registry.AddCounter(
          "akadzed_claims_capped_total",
          "Claims that took nothing because the queue's running jobs were at its cluster-wide cap "
          "(akadze.queue_caps), per queue",
          {"queue"})),
      job_outcomes_(registry.AddCounter(
          "akadzed_job_outcomes_total",
          "Claimed jobs by how they ended, per task: success, retry, snooze, fail, cancel, "
          "release (recorded), stale (finish discarded), lost (lease lost), unrecorded, "
          "unprocessable (failed by the claim or the finisher: docs/reliability.md)",
          {"task", "outcome"})),
      job_duration_(registry.AddHistogram("akadzed_job_duration_seconds",
                                          "Handler run time of claimed jobs, per task", {"task"},
                                          kJobBounds)),
      queued_jobs_swept_(registry.AddCounter(
          "akadzed_queued_jobs_swept_total",
          "Queued jobs this daemon ended cancelled, by reason: cancel_requested, expired "
          "(past expires_at)",
          {"reason"})) {
  queued_jobs_swept_.Init({"cancel_requested"});
  queued_jobs_swept_.Init({"expired"});
  for (const std::string& queue : queues) {
    claim_duration_.Init({queue});
    claim_rows_read_.Init({queue});
    claim_dead_entries_.Init({queue});
    jobs_claimed_.Init({queue});
    claims_capped_.Init({queue});
  }
}

void WorkerMetrics::Claimed(const std::string& queue, const ClaimResult& result) {
  claim_duration_.Observe({queue}, result.elapsed_ms / 1000.0);
  claim_rows_read_.Add({queue}, static_cast<double>(result.rows_read));
  claim_dead_entries_.Add({queue}, static_cast<double>(result.dead_index_entries));
  jobs_claimed_.Add({queue}, static_cast<double>(result.jobs.size()));
  if (result.capped) claims_capped_.Add({queue});
}

void WorkerMetrics::JobEnded(const std::string& task, const std::string& outcome,
                             std::optional<double> seconds) {
  job_outcomes_.Add({task, outcome});
  if (seconds) job_duration_.Observe({task}, *seconds);
}

void WorkerMetrics::QueuedJobsSwept(const std::string& reason, std::int64_t count) {
  queued_jobs_swept_.Add({reason}, static_cast<double>(count));
}

}  // namespace akadzed
