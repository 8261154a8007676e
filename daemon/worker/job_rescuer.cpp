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
    : PeriodicService({.name = "rescue",
                       .thread = "rescue",
                       .interval = std::chrono::microseconds(timings.heartbeat_interval_us),
                       .on_failure =
                           [this](const RoundFailure& f) {
                             // Held off after it, as after an outage of the heartbeat.
                             if (f.kind == RoundFailureKind::kOutage || f.kind == RoundFailureKind::kInDoubt) {
                               own_outage_ = true;
                             }
                           }},
                      clock),
      session_(session),
      lease_(lease),
      timings_(timings),
      hooks_(hooks),
      outages_seen_(lease.outages_ended()) {}

JobRescuer::~JobRescuer() { Stop(); }

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
    rescue_after_ = clock().Now() + std::chrono::microseconds(timings_.heartbeat_ttl_us);
    spdlog::info("rescue_held ms={} | the database is back after an outage; live daemons get "
                 "heartbeat_ttl to heartbeat and write their finishes first",
                 timings_.heartbeat_ttl_us / 1000);
  }
  if (clock().Now() < rescue_after_) return false;
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
