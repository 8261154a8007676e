// The metric families the daemon's threads record into: claims per queue
// (duration, rows read, jobs claimed) and how each claimed job ended per
// task (outcome counter, duration histogram). They live in a MetricsRegistry
// that /metrics renders; the runners and the finisher get a reference (no
// global registry). Database errors are counted apart, where the pg layer
// raises them (database_error_counter.h).
//
// Job outcomes (label `outcome`): what the handler reported and the finisher
// recorded (success, retry, snooze, fail, cancel, release), or: stale (the
// finish lost its fence and was discarded), lost (the lease was lost: no
// finish written), unrecorded (the database stayed away until shutdown).
// Every claimed job ends in exactly one of them; the duration histogram gets
// every job whose handler ran.
//
// Thread-safety: every member may be called from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "claim/claim_transaction.h"
#include "metrics/metrics_registry.h"

namespace akadzed {

class WorkerMetrics {
 public:
  // Creates the families in `registry`, with zero series for `queues`.
  WorkerMetrics(MetricsRegistry& registry, const std::vector<std::string>& queues);

  // A claim on `queue` returned `result`.
  void Claimed(const std::string& queue, const ClaimResult& result);
  // A claimed job of `task` ended with `outcome` after its handler ran for
  // `seconds` (nullopt: the handler never ran).
  void JobEnded(const std::string& task, const std::string& outcome,
                std::optional<double> seconds);
  // The lease keeper's sweep (store/queued_sweep.h) ended `count` queued
  // jobs for `reason` ("cancel_requested" or "expired").
  void QueuedJobsSwept(const std::string& reason, std::int64_t count);

  const CounterFamily& job_outcomes() const { return job_outcomes_; }
  const HistogramFamily& job_duration() const { return job_duration_; }

 private:
  HistogramFamily& claim_duration_;
  CounterFamily& claim_rows_read_;
  CounterFamily& claim_dead_entries_;
  CounterFamily& jobs_claimed_;
  CounterFamily& claims_capped_;
  CounterFamily& job_outcomes_;
  HistogramFamily& job_duration_;
  CounterFamily& queued_jobs_swept_;
};

}  // namespace akadzed
