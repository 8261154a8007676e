#include "worker/queue_runner.h"

#include <algorithm>
#include <optional>

#include <spdlog/spdlog.h>

#include "core/redact.h"
#include "claim/stored_floor.h"
#include "pg/pg_error.h"
#include "runtime/log_line.h"

namespace akadzed {

namespace {

// New refusals of a transition hook one claim round takes before it ends
// without a claim, and how long a refused job is passed over.
constexpr int kMaxRefusedPerRound = 16;
// How often a queue's stored floor is written, and read while the runner has
// none of its own (claim/stored_floor.h).
// Every 10 s, not more: while a horizon is held each write leaves a version
// of the row that every later write and read steps over.
constexpr auto kStoredFloorWriteEvery = std::chrono::seconds(10);
constexpr auto kStoredFloorReadEvery = std::chrono::seconds(10);
constexpr std::chrono::seconds kRefusalHold{10};

}  // namespace

QueueRunner::QueueRunner(QueueConfig queue, const WorkerConfig& timings, const std::string& conninfo,
                         std::chrono::milliseconds stall_timeout, HandlerRegistry& handlers,
                         RunningJobs& running, Finisher& finisher, LeaseKeeper& lease,
                         WorkerMetrics& metrics, const TransitionHooks* hooks, const ServiceClock& clock)
    : queue_(std::move(queue)),
      timings_(timings),
      session_(conninfo, "akadzed claim " + queue_.name, stall_timeout),
      lease_(lease),
      metrics_(metrics),
      hooks_(hooks),
      guard_(clock,
             LoopBackoff(std::chrono::microseconds(timings.poll_interval_us),
                          std::max<std::chrono::microseconds>(std::chrono::microseconds(timings.poll_interval_us),
                                                              std::chrono::seconds(30)))),
      claim_loop_(clock),
      job_runner_(handlers, running, finisher, lease, metrics, queue_.keep_succeeded, clock),
      pool_(queue_, claim_loop_.mu(), job_runner_,
            {.claim_wanted =
                 [this] {
                   claim_loop_.AssertHeld();  // the pool calls it under the lock
                   wake_ = true;
                   claim_loop_.Notify();
                 },
             .slots_freed = [this](bool none_busy) { SlotsFreed(none_busy); }},
            clock),
      in_doubt_(queue_.name, lease, hooks) {}

QueueRunner::~QueueRunner() {
  StopClaiming();
  Join();
}

void QueueRunner::Start() {
  pool_.Start();
  claim_loop_.Start("claim " + queue_.name, [this] { ClaimLoop(); });
}

void QueueRunner::StopClaiming() { claim_loop_.RequestStop(); }

bool QueueRunner::WaitDrained(ServiceClock::time_point deadline) {
  MutexLock lock(claim_loop_.mu());
  // A claim in flight may still bring jobs: they must run (or be released)
  // before the executors stop.
  return drained_cv_.wait_for(lock, deadline - claim_loop_.clock().Now(), [&]() REQUIRES(claim_loop_.mu()) {
    pool_.AssertHeld();
    return pool_.busy() == 0 && !claim_in_flight_;
  });
}

void QueueRunner::Join() {
  pool_.RequestStop();
  claim_loop_.Stop();
  pool_.Stop();
}

void QueueRunner::Wake() {
  {
    MutexLock lock(claim_loop_.mu());
    wake_ = true;
  }
  claim_loop_.Notify();
}

int QueueRunner::busy_slots() const {
  MutexLock lock(claim_loop_.mu());
  pool_.AssertHeld();
  return pool_.busy_slots();
}

HeldJobs QueueRunner::held_jobs() const {
  MutexLock lock(claim_loop_.mu());
  pool_.AssertHeld();
  HeldJobs held{pool_.held_ids(), claim_in_flight_ ? 1 : 0, claims_started_, std::nullopt};
  if (claim_in_flight_) held.oldest_claim_since = claim_since_;
  return held;
}

ServiceClock::time_point QueueRunner::last_round() const { return claim_loop_.last_round(); }

void QueueRunner::SlotsFreed(bool none_busy) {
  if (none_busy) drained_cv_.notify_all();
  claim_loop_.Notify();
}

void QueueRunner::ClaimLoop() {
  for (;;) {
    const ClaimRoundResult round = ClaimRound();
    if (round.kind == ClaimRoundResult::Kind::kStopped) break;
    claim_loop_.MarkRound();
    if (round.full) continue;
    MutexLock lock(claim_loop_.mu());
    // A slot freed since the claim counts as a wake-up, once a claim is
    // wanted. The wait ends at next_round: the claim's own time is part of
    // the interval.
    claim_loop_.WaitUntil(lock, round.next_round, [&]() REQUIRES(claim_loop_.mu()) {
      pool_.AssertHeld();
      const int free = pool_.free_slots();
      return wake_ || (free > round.free_slots && pool_.ClaimWantedLocked(free) && lease_.held());
    });
  }
  pool_.ReleaseWaiting();
  std::vector<std::int64_t> held;
  {
    MutexLock lock(claim_loop_.mu());
    pool_.AssertHeld();
    held = pool_.held_ids();
  }
  in_doubt_.ReleaseAtStop(session_, held);
}

ClaimRoundResult QueueRunner::ClaimRound() {
  ClaimRoundResult round;
  int capacity = 0;
  bool wanted = false;
  std::vector<JobClaim> shed;
  const bool go = BeginRound(round, capacity, wanted, shed);
  pool_.Shed(shed);
  if (!go || !wanted || !lease_.held()) return round;
  ClaimRequest request = MakeRequest(capacity, round.free_slots);
  // In flight for the lease keeper's reconcile (held_jobs()) until its jobs
  // are in the pool, or it failed.
  struct InFlight {
    QueueRunner* runner = nullptr;
    ~InFlight() {
      if (runner != nullptr) runner->EndClaim();
    }
  } in_flight;
  try {
    if (in_doubt_.pending()) in_doubt_.ReleaseBeforeClaim(session_, held_ids());
    if (!BeginClaim()) {
      round.kind = ClaimRoundResult::Kind::kStopped;
      return round;
    }
    in_flight.runner = this;
    ClaimResult result = Claim(request);
    round.kind = ClaimRoundResult::Kind::kClaimed;
    Observe(result, request.worker_id, round.free_slots);
    round.jobs = result.jobs.size();
    round.unprocessable = result.unprocessable.size();
    round.full = static_cast<int>(round.jobs + round.unprocessable) == round.free_slots;
    if (!result.jobs.empty()) {
      spdlog::info("claim queue={} jobs={} free_slots={} ms={:.1f}", LogValue(queue_.name), result.jobs.size(),
                   round.free_slots, result.elapsed_ms);
      pool_.Run(result.jobs, request.worker_id);
    }
  } catch (const std::exception&) {
    Failed(std::current_exception(), request.worker_id, round);
    return round;
  }
  WriteStoredFloor();
  return round;
}

void QueueRunner::ReadStoredFloor(pg::Connection& conn) {
  // A floor of another connection (the session reconnected) is one RunClaim
  // would drop: load the stored one instead of claiming from the heads.
  if (!floor_.empty() && floor_.connection != conn.serial()) {
    floor_.clear();
    floor_loaded_ = {};
  }
  if (queue_.aging_us || !floor_.empty()) return;
  const auto now = claim_loop_.clock().Now();
  if (floor_loaded_ != ServiceClock::time_point{} && now - floor_loaded_ < kStoredFloorReadEvery) return;
  floor_loaded_ = now;
  try {
    ClaimFloor loaded = LoadQueueFloor(conn, queue_.name);
    // A floor of this connection's own claims with no level floor (the
    // queue drained, or at its cap) still holds its counts' running
    // floors: kept when nothing with levels is stored, and carried into
    // a stored floor of the same server (each holds for its own count's
    // snapshot there), so the next counts need not read whole.
    if (!floor_.snapshot.empty()) {
      if (loaded.empty()) return;
      if (loaded.server_started == floor_.server_started) {
        for (auto& [key, running] : floor_.running) RecordRunningFloor(loaded.running, key, std::move(running));
        loaded.queue_running = std::move(floor_.queue_running);
      }
    }
    floor_ = std::move(loaded);
  } catch (const pg::SqlError& e) {
    // The role may not read it (docs/security.md): the claim reads from the
    // heads, as without a stored floor.
    spdlog::debug("stored_floor_unread queue={} | {}", LogValue(queue_.name), OneLine(e.what()));
  }
}

void QueueRunner::WriteStoredFloor() {
  if (queue_.aging_us || floor_.empty()) return;
  const auto now = claim_loop_.clock().Now();
  if (now - floor_saved_ < kStoredFloorWriteEvery) return;
  floor_saved_ = now;
  try {
    session_.Run([&](pg::Connection& c) { SaveQueueFloor(c, queue_.name, floor_); });
    if (floor_save_failing_) spdlog::info("stored_floor_written queue={}", LogValue(queue_.name));
    floor_save_failing_ = false;
  } catch (const std::exception& e) {
    // Claims go on without it; the database being away is the next
    // claim's to report. Logged once until a write works.
    if (!floor_save_failing_) {
      spdlog::warn("stored_floor_failed queue={} | {} (claims go on; a restarted daemon's first claim "
                   "reads from the heads)",
                   LogValue(queue_.name), OneLine(e.what()));
    }
    floor_save_failing_ = true;
  }
}

bool QueueRunner::BeginRound(ClaimRoundResult& round, int& capacity, bool& wanted, std::vector<JobClaim>& shed) {
  ServiceClock::time_point start;
  {
    MutexLock lock(claim_loop_.mu());
    pool_.AssertHeld();
    if (claim_loop_.stop_requested_locked()) {
      round.kind = ClaimRoundResult::Kind::kStopped;
      return false;
    }
    start = claim_loop_.clock().Now();
    pool_.RetryExecutorsLocked(shed);
    capacity = pool_.capacity();
    round.free_slots = capacity - pool_.busy();
    wanted = pool_.ClaimWantedLocked(round.free_slots);
    wake_ = false;
  }
  // Rounds start at most poll_interval apart, timed from each round's start
  // (not from the claim's end), jittered down to 80% so that daemons started
  // together drift apart: a job that nothing wakes for waits at most
  // poll_interval plus one claim for its round.
  std::uniform_real_distribution<double> jitter(0.8, 1.0);
  const auto poll = std::chrono::microseconds(timings_.poll_interval_us);
  round.next_round = start + std::chrono::duration_cast<std::chrono::microseconds>(poll * jitter(rng_));
  return true;
}

ClaimRequest QueueRunner::MakeRequest(int capacity, int& free_slots) {
  ClaimRequest request;
  request.queue = queue_.name;
  // Up to every slot: those that free while the claim waits for the
  // queue's claim lock are counted when it holds it (slots_at_lock).
  // With many daemons on one queue the wait grows with the claims
  // queued before this one, and so does what each claim takes.
  request.slots = capacity;
  // The slots its first window is read for (claim/first_window.h).
  request.expected_slots = first_window_.ExpectedSlots(free_slots, capacity);
  // Rows a slot as the last claim of this queue needed (claim/first_window.h).
  request.first_window_per_slot = first_window_.per_slot();
  // Past the dead entries the last claims of this queue left (a held
  // horizon keeps them): claim/claim_floor.h.
  request.floor = &floor_;
  request.slots_at_lock = [this, &free_slots] {
    MutexLock lock(claim_loop_.mu());
    pool_.AssertHeld();
    free_slots = pool_.free_slots();
    return free_slots;
  };
  request.mode = queue_.mode;
  request.aging_us = queue_.aging_us;
  request.worker_id = lease_.worker_id();
  request.lease_span_us = lease_.lease_span_us();
  if (MayFire(hooks_, JobState::kQueued)) {
    request.before_commit = [this](pg::Connection& c, const std::vector<std::int64_t>& ids) {
      hooks_->Fire(c, JobState::kQueued, ids);
    };
  }
  // A job a transition hook refuses (logged by the hook runner) is left
  // queued and passed over for kRefusalHold, so a refused job never stops
  // the queue; the hook is asked again after that.
  const auto now = claim_loop_.clock().Now();
  std::erase_if(refused_, [&](const auto& r) { return r.second <= now; });
  for (const auto& [id, until] : refused_) request.exclude_ids.push_back(id);
  return request;
}

std::vector<std::int64_t> QueueRunner::held_ids() const {
  // Only the claim thread adds to the pool's held jobs, so every job this
  // runner holds is in the copy; a job leaving them meanwhile has had its
  // finish recorded and is no longer running under us.
  MutexLock lock(claim_loop_.mu());
  pool_.AssertHeld();
  return pool_.held_ids();
}

bool QueueRunner::BeginClaim() {
  // Under the lock that StopClaiming takes: a claim either counts as in
  // flight before the stop (WaitDrained waits for its jobs) or does not
  // start.
  MutexLock lock(claim_loop_.mu());
  if (claim_loop_.stop_requested_locked()) return false;
  claim_in_flight_ = true;
  claim_since_ = claim_loop_.clock().Now();
  ++claims_started_;
  return true;
}

void QueueRunner::EndClaim() {
  MutexLock lock(claim_loop_.mu());
  pool_.AssertHeld();
  claim_in_flight_ = false;
  if (pool_.busy() == 0) drained_cv_.notify_all();
}

ClaimResult QueueRunner::Claim(ClaimRequest& request) {
  // At most kMaxRefusedPerRound new refusals a round: then the round claims
  // nothing and the next one goes on with the ones collected.
  ClaimResult result;
  for (int refusals = 0;;) {
    try {
      return session_.Run([&](pg::Connection& c) {
        ReadStoredFloor(c);
        return RunClaim(c, request);
      });
    } catch (const HookError& e) {
      refused_[e.job_id()] = claim_loop_.clock().Now() + kRefusalHold;
      request.exclude_ids.push_back(e.job_id());
      if (++refusals == kMaxRefusedPerRound) return result;
    }
  }
}

void QueueRunner::Observe(const ClaimResult& result, const std::string& worker_id, int free_slots) {
  for (const ClaimedJob& job : result.unprocessable) {
    spdlog::error("unprocessable job={} task={} queue={} | run_count or attempt is at its maximum "
                  "(2147483647): failed at the claim, not run",
                  job.id, LogValue(job.task), LogValue(job.queue));
    metrics_.JobEnded(job.task, "unprocessable", std::nullopt);
  }
  if (auto ended = guard_.Succeeded()) {
    spdlog::info("claim_recovered queue={} failures={} outage_ms={}", LogValue(queue_.name), ended->failures,
                 ended->ms);
  }
  if (result.fenced && !fenced_logged_) {
    spdlog::warn("claim_fenced queue={} worker={} | the lease ran out (or the worker row is gone) "
                 "before the claim ran: nothing claimed",
                 LogValue(queue_.name), worker_id);
  }
  fenced_logged_ = result.fenced;
  if (result.capped && !capped_logged_) {
    spdlog::info("claim_capped queue={} max_running={} running={} | the queue's running jobs are at its "
                 "cluster-wide cap: nothing claimed until they are below it",
                 LogValue(queue_.name), result.queue_cap.value_or(0), result.queue_running);
  }
  capped_logged_ = result.capped;
  first_window_.ObserveSlotsAtLock(free_slots);  // slots_at_lock counted them again
  metrics_.Claimed(queue_.name, result);
  first_window_.Observe(static_cast<std::int64_t>(result.jobs.size() + result.unprocessable.size()),
                        result.rows_needed);
}

void QueueRunner::Failed(const std::exception_ptr& error, const std::string& worker_id, ClaimRoundResult& round) {
  if (pg::ErrorKindOf(error) == pg::ErrorKind::kTransient && pg::SqlStateOf(error) == "55P03") {
    // lock_timeout (database.stall_timeout) on the queue's claim lock: a
    // claim of another daemon holds it that long, cut off mid-flight; the
    // server ends that session within the same bound. Try again at the next
    // round, without backing off.
    spdlog::warn("claim_lock_timeout queue={} | waited database.stall_timeout for a claim lock (a "
                 "claim cut off mid-flight holds it until the server ends it); trying again",
                 LogValue(queue_.name));
    round.kind = ClaimRoundResult::Kind::kLockTimeout;
    return;
  }
  // The database is away (logged once per outage), the claim's COMMIT was
  // in doubt (its jobs are released before the next claim), an SQL error,
  // or anything else a claim may throw.
  if (pg::ErrorKindOf(error) == pg::ErrorKind::kInDoubt) in_doubt_.Note(worker_id);
  const RoundFailure f = guard_.Failed(error);
  spdlog::log(f.level, "claim_failed queue={} | {}", LogValue(queue_.name), f.message);
  round.kind = ClaimRoundResult::Kind::kFailed;
  // The backoff counts from now: a claim that failed after a long connect
  // timeout still waits the whole backoff.
  round.next_round = claim_loop_.clock().Now() + f.retry_in;
}

}  // namespace akadzed
