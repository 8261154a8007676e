#include "worker/job_rescuer.h"

#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "runtime/job_traces.h"
#include "runtime/log_line.h"
#include "store/worker_lease.h"

namespace akadzed {

JobRescuer::JobRescuer(SharedDbSession& session, const LeaseKeeper& lease, WorkerConfig timings,
                       const TransitionHooks* hooks, const ServiceClock& clock)
    : session_(session),
      lease_(lease),
      timings_(timings),
      hooks_(hooks),
      outages_seen_(lease.outages_ended()),
      guard_(clock, RetryBackoff(std::chrono::microseconds(timings.heartbeat_interval_us),
                                 std::chrono::microseconds(timings.heartbeat_interval_us))),
      loop_(clock) {}

JobRescuer::~JobRescuer() { Stop(); }

void JobRescuer::Start() {
  const auto interval = std::chrono::microseconds(timings_.heartbeat_interval_us);
  loop_.Start("rescue", [this, interval] {
    while (!loop_.Sleep(interval)) RunRound();
  });
}

void JobRescuer::Stop() { loop_.Stop(); }

void JobRescuer::RunRound() {
  try {
    // A round that sent nothing says nothing of the database.
    if (!Round()) {
      loop_.MarkRound();
      return;
    }
    if (auto ended = guard_.Succeeded()) {
      spdlog::info("rescue_recovered failures={} outage_ms={}", ended->failures, ended->ms);
    }
  } catch (const std::exception&) {
    const RoundFailure f = guard_.Failed(std::current_exception());
    if (f.kind == RoundFailureKind::kOutage || f.kind == RoundFailureKind::kInDoubt) own_outage_ = true;
    spdlog::log(f.level, "rescue_failed | {}", f.message);
  }
  loop_.MarkRound();
}

bool JobRescuer::Round() {
  // This daemon's heartbeat fails (logged by the lease keeper): it may be
  // the one cut off.
  if (lease_.heartbeat_failing() || !lease_.held()) return false;
  // The database is away (the keeper reopens the connection once it answers).
  if (!session_.connected()) return false;
  const std::uint64_t outages = lease_.outages_ended();
  if (own_outage_ || outages != outages_seen_) {
    outages_seen_ = outages;
    own_outage_ = false;
    rescue_after_ = loop_.clock().Now() + std::chrono::microseconds(timings_.heartbeat_ttl_us);
    spdlog::info("rescue_held ms={} | the database is back after an outage; live daemons get "
                 "heartbeat_ttl to heartbeat and write their finishes first",
                 timings_.heartbeat_ttl_us / 1000);
  }
  if (loop_.clock().Now() < rescue_after_) return false;
  std::vector<std::int64_t> skipped;
  std::vector<RescuedJob> rescued;
  if (!session_.RunIfConnected(
          [&](pg::Connection& c) { rescued = RescueLostJobs(c, timings_.heartbeat_ttl_us, hooks_, &skipped); })) {
    return false;  // the lease keeper reopens it
  }
  for (const RescuedJob& job : rescued) {
    const JobTraceScope trace(job.id, job.traceparent ? ParseTraceparent(*job.traceparent) : std::nullopt);
    if (job.error == "Unprocessable") {
      spdlog::error("rescue job={} lost_worker={} state={} error=Unprocessable | its rescue could not be "
                    "written; failed instead",
                    job.id, LogValue(job.worker_id.empty() ? "none" : job.worker_id), job.state);
    } else {
      spdlog::warn("rescue job={} lost_worker={} state={}", job.id,
                   LogValue(job.worker_id.empty() ? "none" : job.worker_id), job.state);
    }
  }
  // A row no statement could change is named once per daemon, not every round.
  for (std::int64_t id : skipped) {
    if (skipped_logged_.insert(id).second) {
      spdlog::error("rescue_skipped job={} | neither its rescue nor its failure could be written; left "
                    "running and tried again each round",
                    id);
    }
  }
  return true;
}

}  // namespace akadzed
