#include "worker/lease_keeper.h"

#include <set>

#include <spdlog/spdlog.h>

#include "claim/claim_transaction.h"
#include "core/duration.h"
#include "core/redact.h"
#include "pg/pg_error.h"
#include "worker/log_line.h"
#include "worker/outage_log.h"

namespace akadzed {

using Clock = std::chrono::steady_clock;

LeaseKeeper::LeaseKeeper(std::string conninfo, WorkerIdentity identity, WorkerConfig timings,
                         RunningJobs& running, const TransitionHooks* hooks)
    : session_(std::move(conninfo), "akadzed lease"),
      timings_(timings),
      hooks_(hooks),
      running_(running),
      identity_(std::move(identity)) {}

LeaseKeeper::~LeaseKeeper() {
  if (thread_.joinable()) Stop(false);
}

void LeaseKeeper::Start() {
  WorkerIdentity identity = identity_;
  session_.Run([&](pg::Connection& c) { RegisterWorker(c, identity); });
  {
    std::lock_guard lock(mu_);
    last_heartbeat_ = last_round_ = Clock::now();
  }
  spdlog::info("registered worker={} host={} pid={}", identity.id, LogValue(identity.hostname),
               identity.pid);
  thread_ = std::thread([this] { Loop(); });
}

void LeaseKeeper::Stop(bool deregister) {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (!deregister) return;
  try {
    std::string id = worker_id();
    session_.Run([&](pg::Connection& c) { DeregisterWorker(c, id); });
  } catch (const pg::PgError& e) {
    spdlog::warn("deregister_failed | {} (the row is removed by the next rescue)", OneLine(e.what()));
  }
}

std::string LeaseKeeper::worker_id() const {
  std::lock_guard lock(mu_);
  return identity_.id;
}

Clock::time_point LeaseKeeper::last_round() const {
  std::lock_guard lock(mu_);
  return last_round_;
}

void LeaseKeeper::Loop() {
  const auto interval = std::chrono::microseconds(timings_.heartbeat_interval_us);
  // The database being away is logged once per outage; other errors each time.
  OutageLog outage;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      if (cv_.wait_for(lock, interval, [&] { return stopping_; })) return;
    }
    try {
      Round();
      if (auto ended = outage.Success()) {
        spdlog::info("heartbeat_recovered failures={} outage_ms={}", ended->failures, ended->ms);
      }
    } catch (const pg::ConnectionError& e) {
      spdlog::log(outage.Failure(), "heartbeat_failed | {}", OneLine(e.what()));
    } catch (const std::exception& e) {
      spdlog::error("heartbeat_failed | {}", OneLine(e.what()));
    }
    {
      std::lock_guard lock(mu_);
      last_round_ = Clock::now();
    }
    CheckExpiry();
  }
}

void LeaseKeeper::CheckExpiry() {
  const auto expiry = std::chrono::microseconds(timings_.heartbeat_ttl_us - timings_.heartbeat_interval_us);
  std::lock_guard lock(mu_);
  if (!held_.load() || Clock::now() - last_heartbeat_ <= expiry) return;
  held_.store(false, std::memory_order_release);
  reregister_ = true;
  int stopped = running_.RequestStopAll(StopReason::kLeaseLost);
  spdlog::error(
      "lease_lost worker={} stopped_jobs={} | no heartbeat for {}; claiming paused until the "
      "database answers",
      identity_.id, stopped, FormatDuration(expiry.count()));
}

void LeaseKeeper::Round() {
  WorkerIdentity identity;
  bool reregister;
  {
    std::lock_guard lock(mu_);
    identity = identity_;
    reregister = reregister_;
  }
  if (reregister) {
    // Our jobs were stopped without finishes: let the rescue take the old id.
    identity.id = RandomUuid();
    session_.Run([&](pg::Connection& c) { RegisterWorker(c, identity); });
    spdlog::warn("registered worker={} host={} pid={} | new id after a lost lease", identity.id,
                 LogValue(identity.hostname), identity.pid);
  } else if (!session_.Run([&](pg::Connection& c) { return Heartbeat(c, identity.id); })) {
    session_.Run([&](pg::Connection& c) { RegisterWorker(c, identity); });
    spdlog::warn("registered worker={} | the worker row had vanished", identity.id);
  }
  {
    std::lock_guard lock(mu_);
    // The lease expired while this heartbeat was in flight: its jobs are
    // already stopped; the next round registers a new id.
    if (reregister_ && !reregister) return;
    identity_.id = identity.id;
    reregister_ = false;
    last_heartbeat_ = Clock::now();
  }
  if (!held_.exchange(true)) spdlog::info("lease_regained worker={}", identity.id);

  // Jobs running here that the database no longer gives us, and cancels.
  auto before = running_.Snapshot();
  auto owned = session_.Run([&](pg::Connection& c) { return OwnedRunningJobs(c, identity.id); });
  std::set<std::pair<std::int64_t, std::int32_t>> ours;
  for (const OwnedJob& job : owned) {
    ours.emplace(job.id, job.run_count);
    if (job.cancel_requested &&
        running_.RequestStop(job.id, job.run_count, StopReason::kCancelRequested)) {
      spdlog::info("cancel_requested job={} | stopping its handler", job.id);
    }
  }
  for (const auto& [id, run_count] : before) {
    if (!ours.count({id, run_count}) &&
        running_.RequestStop(id, run_count, StopReason::kLeaseLost)) {
      spdlog::warn("job_lost job={} run={} | no longer running under this worker; handler stopped",
                   id, run_count);
    }
  }

  auto rescued = session_.Run(
      [&](pg::Connection& c) { return RescueLostJobs(c, timings_.heartbeat_ttl_us, hooks_); });
  for (const RescuedJob& job : rescued) {
    spdlog::warn("rescue job={} lost_worker={} state={}", job.id,
                 LogValue(job.worker_id.empty() ? "none" : job.worker_id), job.state);
  }
}

}  // namespace akadzed
