#include "worker/job_runner.h"

#include <chrono>
#include <memory>
#include <utility>

#include <spdlog/spdlog.h>

#include "runtime/job_traces.h"
#include "runtime/log_line.h"
#include "store/job_finish.h"

namespace akadzed {

JobRunner::JobRunner(HandlerRegistry& handlers, RunningJobs& running, Finisher& finisher, LeaseKeeper& lease,
                     WorkerMetrics& metrics, bool keep_succeeded, const ServiceClock& clock)
    : handlers_(handlers),
      running_(running),
      finisher_(finisher),
      lease_(lease),
      metrics_(metrics),
      keep_succeeded_(keep_succeeded),
      clock_(clock) {}

void JobRunner::Run(JobClaim claim, std::optional<JobStop>& stop, JobProgress& progress, SlotHolder& slot) {
  const ClaimedJob& job = claim.job;
  // Every line about the job while it runs here carries its trace id (the
  // log formatter reads it); the finisher's lines add it themselves.
  const JobTraceScope trace(job.id, job.trace_id);
  if (!lease_.HeldAs(claim.worker_id)) {
    // Claimed under a lease lost since: the job is being rescued.
    spdlog::warn("drop job={} task={} queue={} | lease lost before it started: not run", job.id,
                 LogValue(job.task), LogValue(job.queue));
    metrics_.JobEnded(job.task, "lost", std::nullopt);
    slot.FreeSlots({&job.id, 1});
    return;
  }
  std::shared_ptr<JobHandler> handler = handlers_.Find(job.task);
  const auto started = clock_.Now();
  spdlog::info("start job={} task={} queue={} attempt={}/{} run={} handler={}", job.id,
               LogValue(job.task), LogValue(job.queue), job.run_attempt(), job.max_attempts, job.run_count,
               handler ? handler->kind() : "none");
  JobOutcome outcome;
  StopReason stopped = StopReason::kNone;
  try {
    if (!stop) stop.emplace();  // throws without a free fd
    outcome = RunHandler(claim, handler.get(), *stop, progress, stopped);
  } catch (const std::exception& e) {  // no JobStop (out of fds): nothing ran
    outcome = RetryOutcome("HandlerError", std::string("cannot start: ") + e.what());
  }
  const double ms = std::chrono::duration<double, std::milli>(clock_.Now() - started).count();
  switch (stopped) {
    case StopReason::kNone:
      break;
    case StopReason::kCancelRequested:
      outcome = JobOutcome{OutcomeKind::kCancel, std::nullopt, std::nullopt, "Cancelled",
                           "cancel requested while running"};
      break;
    case StopReason::kShutdown:
      outcome = ReleaseOutcome();
      break;
    case StopReason::kLeaseLost:
      spdlog::warn("drop job={} task={} queue={} duration_ms={:.0f} | lease lost: no finish recorded",
                   job.id, LogValue(job.task), LogValue(job.queue), ms);
      metrics_.JobEnded(job.task, "lost", ms / 1000);
      slot.FreeSlots({&job.id, 1});
      return;
  }
  // The run is unregistered: the lease keeper no longer writes its progress,
  // and what it had not written (or wrote in a round still in flight) goes
  // with the finish.
  outcome.meta_patch = progress.TakeForFinish();
  finisher_.Submit(FinishItem{std::move(claim.job), std::move(claim.worker_id), std::move(outcome), ms, &slot,
                              keep_succeeded_});
}

JobOutcome JobRunner::RunHandler(const JobClaim& claim, JobHandler* handler, JobStop& stop, JobProgress& progress,
                                 StopReason& stopped) {
  const ClaimedJob& job = claim.job;
  stop.Reset();
  progress.Reset();
  running_.Add(job.id, job.run_count, &stop, &progress);
  struct Registration {  // removed on every path, before `stop` is reset
    RunningJobs& running;
    const ClaimedJob& job;
    ~Registration() { running.Remove(job.id, job.run_count); }
  } registration{running_, job};
  // The lease may have ended between the check before and Add: a stop of
  // every running job then missed this one.
  if (!lease_.HeldAs(claim.worker_id)) {
    running_.RequestStop(job.id, job.run_count, StopReason::kLeaseLost);
  }
  JobOutcome outcome;
  if (!handler) {
    outcome = RetryOutcome("UnknownTask", "no handler for task '" + job.task + "' in this daemon's config");
  } else {
    try {
      outcome = handler->Run(job, stop, &progress);
    } catch (const std::exception& e) {
      outcome = RetryOutcome("HandlerError", e.what());
    }
  }
  if (outcome.interrupted) stopped = stop.reason();
  return outcome;
}

void JobRunner::Release(std::vector<JobClaim>& claims, std::string_view why, SlotHolder& slot) {
  for (JobClaim& claim : claims) {
    spdlog::info("release job={} task={} queue={} | {}", claim.job.id, LogValue(claim.job.task),
                 LogValue(claim.job.queue), why);
    finisher_.Submit(FinishItem{std::move(claim.job), std::move(claim.worker_id), ReleaseOutcome(), 0, &slot});
  }
}

}  // namespace akadzed
