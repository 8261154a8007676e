#include "worker/lease_keeper.h"

#include <set>

#include <spdlog/spdlog.h>

#include "claim/claim_transaction.h"
#include "core/duration.h"
#include "core/redact.h"
#include "pg/pg_error.h"
#include "worker/job_finish.h"
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

void LeaseKeeper::SetHeldJobs(std::function<std::vector<std::int64_t>()> held_jobs) {
  // Waits for a call in flight: after SetHeldJobs(nullptr) returns, what the
  // old function reads may go.
  std::lock_guard lock(held_jobs_mu_);
  held_jobs_ = std::move(held_jobs);
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
      round_failed_ = false;
      if (auto ended = outage.Success()) {
        spdlog::info("heartbeat_recovered failures={} outage_ms={}", ended->failures, ended->ms);
      }
    } catch (const pg::ConnectionError& e) {
      round_failed_ = true;
      spdlog::log(outage.Failure(), "heartbeat_failed | {}", OneLine(e.what()));
    } catch (const std::exception& e) {
      round_failed_ = true;
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

void LeaseKeeper::ReleaseOrphans(const std::string& worker_id, const std::vector<OwnedJob>& owned) {
  // Read after the database: a job claimed before that read was added to
  // its runner's held set microseconds after its commit, and it is settled
  // only heartbeat_ttl later.
  std::set<std::int64_t> held;
  {
    std::lock_guard lock(held_jobs_mu_);
    if (!held_jobs_) return;
    for (std::int64_t id : held_jobs_()) held.insert(id);
  }
  // An orphan is released when two rounds in a row saw it: a claim that
  // waited on a lock longer than heartbeat_ttl commits with an old
  // started_at (its transaction's now()), and one round's read may fall
  // between its commit and its runner taking the jobs, microseconds later.
  std::set<std::pair<std::int64_t, std::int32_t>> seen;
  std::vector<FinishRequest> orphans;
  for (const OwnedJob& job : owned) {
    if (!job.settled || held.contains(job.id)) continue;
    seen.emplace(job.id, job.run_count);
    if (orphan_candidates_.contains({job.id, job.run_count})) {
      orphans.push_back({job.id, job.run_count, JobOutcome{OutcomeKind::kRelease, std::nullopt, std::nullopt, "", ""}});
    }
  }
  orphan_candidates_ = std::move(seen);
  for (const FinishRequest& orphan : orphans) {
    try {
      // Fenced like any finish (worker id, run_count, still running).
      FinishResult r = session_.Run([&](pg::Connection& c) {
        return FinishJobs(c, worker_id, {orphan}, hooks_).front();
      });
      if (r.applied) {
        spdlog::warn("orphan_released job={} run={} state={} | running under this worker in the database "
                     "but not held here (its finish was given up or lost); no attempt spent",
                     orphan.job_id, orphan.run_count, r.state);
      }
    } catch (const pg::ConnectionError&) {
      throw;
    } catch (const std::exception& e) {  // an SQL error or a hook's refusal: next round
      if (skipped_logged_.insert(orphan.job_id).second) {
        spdlog::error("orphan_release_failed job={} | {}; tried again each round", orphan.job_id,
                      OneLine(e.what()));
      }
    }
  }
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
  auto owned = session_.Run(
      [&](pg::Connection& c) { return OwnedRunningJobs(c, identity.id, timings_.heartbeat_ttl_us); });
  ReleaseOrphans(identity.id, owned);
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

  // After an outage every worker's heartbeat looks old: the first daemon
  // back would rescue the jobs of the others, whose finishes are waiting to
  // be written, and run them again. So the rescue holds off for heartbeat_ttl
  // after this daemon's own outage ends: by then each daemon that is alive
  // has heartbeaten and written its pending finishes (the finisher retries
  // every 500 ms at most); a worker still silent then is dead.
  if (round_failed_) {
    rescue_after_ = Clock::now() + std::chrono::microseconds(timings_.heartbeat_ttl_us);
    spdlog::info("rescue_held ms={} | the database is back after an outage; live daemons get "
                 "heartbeat_ttl to heartbeat and write their finishes first",
                 timings_.heartbeat_ttl_us / 1000);
  }
  if (Clock::now() < rescue_after_) return;
  // The rescue's failures are its own (rescue_failed): the heartbeat above
  // worked, and the lease holds.
  std::vector<std::int64_t> skipped;
  std::vector<RescuedJob> rescued;
  try {
    rescued = session_.Run(
        [&](pg::Connection& c) { return RescueLostJobs(c, timings_.heartbeat_ttl_us, hooks_, &skipped); });
  } catch (const pg::ConnectionError&) {
    throw;
  } catch (const pg::PgError& e) {
    spdlog::error("rescue_failed | {}", OneLine(e.what()));
  }
  for (const RescuedJob& job : rescued) {
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
}

}  // namespace akadzed
