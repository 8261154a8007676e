// Runs one claimed job to its outcome, on the calling thread (an executor's,
// worker/executor_pool.h): finds the job's handler, registers the run with
// RunningJobs (so the lease keeper can stop it), runs the handler, turns a
// stop request into the outcome it stands for (cancel -> cancelled,
// shutdown -> released, lost lease -> no finish at all) and submits the
// outcome to the finisher. A job claimed under a lease lost since is not run.
//
// Thread-safety: Run and Release may be called from any thread; one job per
// call.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "claim/claim_transaction.h"
#include "handlers/job_handler.h"
#include "metrics/worker_metrics.h"
#include "runtime/service_clock.h"
#include "worker/finisher.h"
#include "worker/handler_registry.h"
#include "worker/lease_keeper.h"
#include "worker/running_jobs.h"

namespace akadzed {

// A job as its claim handed it over: the row, and the worker id it was
// claimed under (the finish's fence).
struct JobClaim {
  ClaimedJob job;
  std::string worker_id;
};

class JobRunner {
 public:
  // `keep_succeeded`: the queue's (FinishItem::keep_succeeded).
  JobRunner(HandlerRegistry& handlers, RunningJobs& running, Finisher& finisher, LeaseKeeper& lease,
            WorkerMetrics& metrics, bool keep_succeeded, const ServiceClock& clock);

  // Runs `claim` to its outcome and submits it to the finisher, whose
  // finish frees the job's slot in `slot`; a job with no finish (the lease
  // lost) frees it at once. `stop`: the executor's stop handle, made here
  // for its first job (nothing runs without a free fd) and reset for each;
  // `progress`: where the handler's progress reports go, emptied for each.
  void Run(JobClaim claim, std::optional<JobStop>& stop, JobProgress& progress, SlotHolder& slot);
  // Back to queued through the finisher, no attempt spent, each logged as
  // `release` with `why`: jobs claimed that will not start here.
  void Release(std::vector<JobClaim>& claims, std::string_view why, SlotHolder& slot);

 private:
  // `handler`'s outcome (null: none for the task), with the run registered
  // in RunningJobs meanwhile, and the stop that interrupted it, if any.
  JobOutcome RunHandler(const JobClaim& claim, JobHandler* handler, JobStop& stop, JobProgress& progress,
                        StopReason& stopped);

  HandlerRegistry& handlers_;
  RunningJobs& running_;
  Finisher& finisher_;
  LeaseKeeper& lease_;
  WorkerMetrics& metrics_;
  const bool keep_succeeded_;
  const ServiceClock& clock_;
};

}  // namespace akadzed
