#include "worker/lease_keeper.h"

#include <algorithm>
#include <set>

#include <spdlog/spdlog.h>

#include "core/duration.h"
#include "core/redact.h"
#include "core/uuid.h"
#include "pg/pg_error.h"
#include "store/job_finish.h"
#include "runtime/log_line.h"

namespace akadzed {

LeaseKeeper::LeaseKeeper(std::string conninfo, WorkerIdentity identity, WorkerConfig timings,
                         std::int64_t lease_span_us, std::chrono::milliseconds stall_timeout,
                         RunningJobs& running, const TransitionHooks* hooks,
                         const ServiceClock& clock)
    : session_(std::move(conninfo), "akadzed lease", stall_timeout),
      timings_(timings),
      hooks_(hooks),
      running_(running),
      lease_span_us_(lease_span_us),
      guard_(clock, LoopBackoff(std::chrono::microseconds(timings.heartbeat_interval_us),
                                 std::chrono::microseconds(timings.heartbeat_interval_us))),
      loop_(clock),
      identity_(std::move(identity)) {}

LeaseKeeper::~LeaseKeeper() {
  if (loop_.started()) Stop(false);
}

void LeaseKeeper::Register() {
  WorkerIdentity identity = worker_identity();
  const auto sent = loop_.clock().Now();
  session_.Run([&](pg::Connection& c) { RegisterWorker(c, identity); });
  {
    MutexLock lock(loop_.mu());
    lease_until_ = sent + std::chrono::microseconds(lease_span_us());
  }
  loop_.MarkRound();
  spdlog::info("registered worker={} host={} pid={}", identity.id, LogValue(identity.hostname),
               identity.pid);
}

void LeaseKeeper::Start() {
  Register();
  const auto interval = std::chrono::microseconds(timings_.heartbeat_interval_us);
  loop_.Start("lease", [this, interval] {
    while (!loop_.Sleep(interval)) RunRound();
  });
  loop_.Start("lease timer", [this] { TimerLoop(); });
}

void LeaseKeeper::RunRound() {
  try {
    Round();
    if (heartbeat_failing_.exchange(false, std::memory_order_acq_rel)) {
      outages_ended_.fetch_add(1, std::memory_order_acq_rel);
    }
    if (auto ended = guard_.Succeeded()) {
      spdlog::info("heartbeat_recovered failures={} outage_ms={}", ended->failures, ended->ms);
    }
  } catch (const std::exception&) {
    heartbeat_failing_.store(true, std::memory_order_release);
    const RoundFailure f = guard_.Failed(std::current_exception());
    spdlog::log(f.level, "heartbeat_failed | {}", f.message);
  }
  loop_.MarkRound();
}

void LeaseKeeper::SetLeaseSpan(std::int64_t lease_span_us) {
  {
    MutexLock lock(loop_.mu());
    // A shorter span shortens the running lease too.
    const std::int64_t shorter_by = lease_span_us_.load(std::memory_order_relaxed) - lease_span_us;
    if (shorter_by > 0) lease_until_ -= std::chrono::microseconds(shorter_by);
    lease_span_us_.store(lease_span_us, std::memory_order_relaxed);
  }
  loop_.Notify();
}

void LeaseKeeper::Stop(bool deregister) {
  loop_.Stop();
  if (!deregister) return;
  try {
    std::string id = worker_id();
    // The loop is stopped: its reconcile floor is this thread's now.
    session_.Run([&](pg::Connection& c) { DeregisterWorker(c, id, &owned_floor_); });
  } catch (const pg::PgError& e) {
    spdlog::warn("deregister_failed | {} (the row is removed by the next rescue)", OneLine(e.what()));
  }
}

void LeaseKeeper::SetHeldJobs(std::function<HeldJobs()> held_jobs) {
  // Waits for a call in flight: after SetHeldJobs(nullptr) returns, what the
  // old function reads may go.
  MutexLock lock(held_jobs_mu_);
  held_jobs_ = std::move(held_jobs);
}

std::optional<HeldJobs> LeaseKeeper::ReadHeldJobs() {
  MutexLock lock(held_jobs_mu_);
  if (!held_jobs_) return std::nullopt;
  return held_jobs_();
}

bool LeaseKeeper::HeldAs(const std::string& id) const {
  if (!held()) return false;
  MutexLock lock(loop_.mu());
  return identity_.id == id;
}

std::string LeaseKeeper::worker_id() const {
  MutexLock lock(loop_.mu());
  return identity_.id;
}

WorkerIdentity LeaseKeeper::worker_identity() const {
  MutexLock lock(loop_.mu());
  return identity_;
}

std::chrono::steady_clock::time_point LeaseKeeper::last_round() const { return loop_.last_round(); }

void LeaseKeeper::TimerLoop() {
  MutexLock lock(loop_.mu());
  while (!loop_.stop_requested_locked()) {
    if (!held_.load(std::memory_order_acquire)) {
      loop_.Wait(lock, [&] { return held_.load(std::memory_order_acquire); });  // a round regains it
      continue;
    }
    if (loop_.clock().Now() < lease_until_) {
      // A heartbeat moves it on (and notifies); looked at again then.
      loop_.WaitUntil(lock, lease_until_, [&, until = lease_until_]() REQUIRES(loop_.mu()) { return lease_until_ != until; });
      continue;
    }
    lock.unlock();
    ExpireLeaseIfDue();
    lock.lock();
  }
}

bool LeaseKeeper::ExpireLeaseIfDue() {
  std::string id;
  int stopped = 0;
  {
    MutexLock lock(loop_.mu());
    if (!held_.load(std::memory_order_acquire) || loop_.clock().Now() < lease_until_) return false;
    held_.store(false, std::memory_order_release);
    reregister_ = true;
    stopped = running_.RequestStopAll(StopReason::kLeaseLost);
    id = identity_.id;
  }
  spdlog::error(
      "lease_lost worker={} stopped_jobs={} | no heartbeat sent in the last {} succeeded; handlers "
      "stopped (TERM, KILL after kill_grace) before any rescue; claiming paused until the database "
      "answers",
      id, stopped, FormatDuration(lease_span_us()));
  return true;
}

void LeaseKeeper::ReleaseOrphans(const std::string& worker_id, const std::vector<OwnedJob>& owned,
                                 const std::optional<HeldJobs>& before) {
  // Read after the database. A claim commits, then its runner adds the jobs
  // to its held set (microseconds later): a job claimed before the database
  // read is in this set unless a claim was in flight across the read. Then
  // the runners' counts say so, and such jobs are only released once two
  // rounds in a row saw them, claimed over heartbeat_ttl ago (a claim that
  // waited on a lock commits with an old started_at).
  const std::optional<HeldJobs> after = ReadHeldJobs();
  if (!before || !after) return;
  const bool quiet = before->claims_in_flight == 0 && after->claims_started == before->claims_started;
  // A claim in flight for heartbeat_ttl or more (its COMMIT's reply held on
  // a cut network, say) may have committed jobs it is yet to hold: nothing
  // is released until it ends (its jobs are then held, or it failed and the
  // quiet path, or its in-doubt release, takes them).
  const auto ttl = std::chrono::microseconds(timings_.heartbeat_ttl_us);
  if (!quiet && before->oldest_claim_since &&
      loop_.clock().Now() - *before->oldest_claim_since >= ttl) {
    orphan_candidates_.clear();
    return;
  }
  const std::set<std::int64_t> held(after->ids.begin(), after->ids.end());
  std::set<std::pair<std::int64_t, std::int32_t>> seen;
  std::vector<FinishRequest> orphans;
  for (const OwnedJob& job : owned) {
    if (held.contains(job.id)) continue;
    if (!quiet) {
      if (!job.settled) continue;
      seen.emplace(job.id, job.run_count);
      if (!orphan_candidates_.contains({job.id, job.run_count})) continue;
    }
    orphans.push_back({job.id, job.run_count, ReleaseOutcome()});
  }
  orphan_candidates_ = std::move(seen);
  // Named once per job; tried again each round.
  auto LogReleaseFailed = [&](std::int64_t id, const std::exception& e) {
    if (release_failed_logged_.insert(id).second) {
      spdlog::error("orphan_release_failed job={} | {}; tried again each round", id, OneLine(e.what()));
    }
  };
  for (const FinishRequest& orphan : orphans) {
    try {
      // Fenced like any finish (worker id, run_count, still running).
      FinishResult r = session_.Run([&](pg::Connection& c) {
        return FinishJobs(c, worker_id, {orphan}, hooks_).front();
      });
      if (r.applied) {
        spdlog::warn("orphan_released job={} run={} state={} | running under this worker in the database "
                     "but not held here (its finish was given up or lost, or it never started); no attempt "
                     "spent",
                     orphan.job_id, orphan.run_count, r.state);
      }
    } catch (const pg::RowFaultError& e) {  // an application's trigger or constraint
      LogReleaseFailed(orphan.job_id, e);
    } catch (const HookError& e) {
      LogReleaseFailed(orphan.job_id, e);
    }
  }
}

void LeaseKeeper::Round() {
  if (const std::optional<std::string> id = Renew()) Reconcile(*id);
}

std::optional<std::string> LeaseKeeper::Renew() {
  WorkerIdentity identity;
  bool reregister;
  {
    MutexLock lock(loop_.mu());
    identity = identity_;
    reregister = reregister_;
  }
  // The lease runs from when the heartbeat that renews it was sent: the
  // server stamps it later, and rescues heartbeat_ttl after that stamp.
  auto sent = loop_.clock().Now();
  if (reregister) {
    // Our jobs were stopped without finishes: let the rescue take the old id.
    identity.id = RandomUuid();
    session_.Run([&](pg::Connection& c) { RegisterWorker(c, identity); });
    spdlog::warn("registered worker={} host={} pid={} | new id after a lost lease", identity.id,
                 LogValue(identity.hostname), identity.pid);
  } else if (!session_.Run([&](pg::Connection& c) { return Heartbeat(c, identity.id, lease_span_us(), &owned_floor_); })) {
    // A rescue (or an operator) deleted the row, or this heartbeat reached
    // the server after the lease ran out: its jobs are, or will be, someone
    // else's. The old id is never taken again, so a claim or finish under
    // it that reaches the server late finds no lease.
    int stopped;
    {
      // Lost first, so that an executor about to start a job of the old
      // id sees it (QueueRunner::Execute) and the timer does not stop twice.
      MutexLock lock(loop_.mu());
      held_.store(false, std::memory_order_release);
      reregister_ = true;
      stopped = running_.RequestStopAll(StopReason::kLeaseLost);
    }
    const std::string old_id = identity.id;
    identity.id = RandomUuid();
    sent = loop_.clock().Now();
    session_.Run([&](pg::Connection& c) { RegisterWorker(c, identity); });
    spdlog::warn("registered worker={} old_worker={} stopped_jobs={} | new id: the worker row had vanished, "
                 "or this heartbeat reached the server after the lease ran out",
                 identity.id, old_id, stopped);
    // Also the re-registration a lease that ran out meanwhile asks for (the
    // heartbeat was held on a cut network): one new id, not two.
    reregister = true;
  }
  bool regained = false;
  {
    MutexLock lock(loop_.mu());
    // The lease expired while this heartbeat was in flight: its jobs are
    // already stopped; the next round registers a new id.
    if (reregister_ && !reregister) return std::nullopt;
    identity_.id = identity.id;
    reregister_ = false;
    lease_until_ = std::max(lease_until_, sent + std::chrono::microseconds(lease_span_us()));
    // Under loop_.mu(), as the timer reads it: a wake-up cannot be lost between
    // its look at held_ and its wait.
    if (loop_.clock().Now() < lease_until_ && !held_.load(std::memory_order_acquire)) {
      held_.store(true, std::memory_order_release);
      regained = true;
    }
  }
  if (regained) {
    loop_.Notify();  // the timer waits for the lease to be held again
    spdlog::info("lease_regained worker={}", identity.id);
  }
  return identity.id;
}

void LeaseKeeper::Reconcile(const std::string& worker_id) {
  // Jobs running here that the database no longer gives us, and cancels.
  auto before = running_.Snapshot();
  const std::optional<HeldJobs> held_before = ReadHeldJobs();
  auto owned = session_.Run(
      [&](pg::Connection& c) { return OwnedRunningJobs(c, worker_id, timings_.heartbeat_ttl_us, &owned_floor_); });
  ReleaseOrphans(worker_id, owned, held_before);
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
}

}  // namespace akadzed
