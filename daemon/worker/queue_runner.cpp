#include "worker/queue_runner.h"

#include <algorithm>
#include <optional>
#include <random>
#include <system_error>

#include <spdlog/spdlog.h>

#include "core/redact.h"
#include "pg/params.h"
#include "pg/pg_error.h"
#include "store/job_finish.h"
#include "runtime/job_traces.h"
#include "runtime/log_line.h"

namespace akadzed {

namespace {

// New refusals of a transition hook one claim round takes before it ends
// without a claim, and how long a refused job is passed over.
constexpr int kMaxRefusedPerRound = 16;
constexpr std::chrono::seconds kRefusalHold{10};
// How long after an executor could not start the queue runs with the
// executors it has before it tries again for all its slots.
constexpr std::chrono::seconds kExecutorRetry{10};

}  // namespace

using Clock = std::chrono::steady_clock;

QueueRunner::QueueRunner(QueueConfig queue, const WorkerConfig& timings, const std::string& conninfo,
                         std::chrono::milliseconds stall_timeout, HandlerRegistry& handlers,
                         RunningJobs& running, Finisher& finisher, LeaseKeeper& lease,
                         WorkerMetrics& metrics, const TransitionHooks* hooks)
    : queue_(std::move(queue)),
      timings_(timings),
      session_(conninfo, "akadzed claim " + queue_.name, stall_timeout),
      handlers_(handlers),
      running_(running),
      finisher_(finisher),
      lease_(lease),
      metrics_(metrics),
      hooks_(hooks),
      guard_(SteadyServiceClock(),
             RetryBackoff(std::chrono::microseconds(timings.poll_interval_us),
                          std::max<std::chrono::microseconds>(std::chrono::microseconds(timings.poll_interval_us),
                                                              std::chrono::seconds(30)))) {}

QueueRunner::~QueueRunner() {
  StopClaiming();
  Join();
}

void QueueRunner::Start() {
  {
    MutexLock lock(claim_loop_.mu());
    // Reserved for every slot, so that starting an executor under the lock
    // (StartExecutorLocked) cannot fail half-way: the seat and the thread
    // are its only allocations, and a failure of either leaves these as
    // they were.
    idle_.reserve(static_cast<std::size_t>(queue_.slots));
    seats_.reserve(static_cast<std::size_t>(queue_.slots));
    executors_.reserve(static_cast<std::size_t>(queue_.slots));
    executor_limit_ = static_cast<std::size_t>(queue_.slots);
    // One executor now, so a daemon that cannot start a thread says so at
    // its start; the others as jobs need them (StartExecutorLocked).
    ExecutorSeat& seat = *seats_.emplace_back(std::make_unique<ExecutorSeat>());
    executors_.emplace_back([this, &seat] { RunExecutor(seat); });
  }
  claim_loop_.Start("claim " + queue_.name, [this] { ClaimLoop(); });
}

void QueueRunner::RunExecutor(ExecutorSeat& seat) {
  NameCurrentThread("exec " + queue_.name);
  ExecutorLoop(seat);
}

QueueRunner::ExecutorSeat* QueueRunner::StartExecutorLocked(std::vector<Claimed>& shed) {
  if (executors_stop_ || seats_.size() >= executor_limit_) return nullptr;
  try {
    auto seat = std::make_unique<ExecutorSeat>();
    ExecutorSeat& ref = *seat;
    executors_.emplace_back([this, &ref] { RunExecutor(ref); });
    seats_.push_back(std::move(seat));  // reserved at Start: does not throw
    if (executor_start_failing_) {
      executor_start_failing_ = false;
      spdlog::info("executor_start_recovered queue={} executors={} slots={}", LogValue(queue_.name),
                   seats_.size(), queue_.slots);
    }
    return &ref;
  } catch (const std::exception& e) {
    // Out of threads (ulimit -u, systemd's TasksMax, memory): the queue goes
    // on with the executors it has and claims no more than they can run
    // (capacity()), so no job it holds waits for an executor that never
    // comes. The limit may be passing (a burst of a shell handler's
    // children counts against TasksMax too): kExecutorRetry later the claim
    // loop tries one more (RetryExecutorsLocked). Logged as an error once,
    // tries that fail again at debug.
    executor_limit_ = seats_.size();
    executor_retry_at_ = claim_loop_.clock().Now() + kExecutorRetry;
    spdlog::log(executor_start_failing_ ? spdlog::level::debug : spdlog::level::err,
                "executor_start_failed queue={} executors={} slots={} | {}; the queue runs at most {} jobs at "
                "once, and tries to start one more in {} s",
                LogValue(queue_.name), seats_.size(), queue_.slots, OneLine(e.what()), seats_.size(),
                kExecutorRetry.count());
    executor_start_failing_ = true;
    ShedExcessLocked(shed);
    return nullptr;
  }
}

void QueueRunner::ShedExcessLocked(std::vector<Claimed>& shed) {
  const int excess = busy_ - static_cast<int>(shed.size()) - capacity();
  if (excess > 0) TakeNewestReadyLocked(static_cast<std::size_t>(excess), shed);
}

void QueueRunner::TakeNewestReadyLocked(std::size_t n, std::vector<Claimed>& out) {
  n = std::min(n, ready_.size());
  if (n == 0) return;
  try {
    out.reserve(out.size() + n);
  } catch (const std::bad_alloc&) {
    return;  // they stay in ready_ and run when executors free
  }
  // Moving does not throw once reserved.
  for (std::size_t k = 0; k < n; ++k) {
    out.push_back(std::move(ready_.back()));
    ready_.pop_back();
  }
}

void QueueRunner::StopClaiming() { claim_loop_.RequestStop(); }

bool QueueRunner::WaitDrained(Clock::time_point deadline) {
  MutexLock lock(claim_loop_.mu());
  // A claim in flight may still bring jobs: they must run (or be released)
  // before the executors stop.
  return drained_cv_.wait_until(lock, deadline,
                                [&]() REQUIRES(claim_loop_.mu()) { return busy_ == 0 && !claim_in_flight_; });
}

void QueueRunner::Join() {
  {
    MutexLock lock(claim_loop_.mu());
    executors_stop_ = true;
    for (ExecutorSeat* seat : idle_) {
      seat->woken = true;
      seat->cv.notify_one();
    }
    idle_.clear();
  }
  claim_loop_.Stop();
  // No executor starts once executors_stop_ is set (StartExecutorLocked).
  std::vector<std::thread> executors;
  {
    MutexLock lock(claim_loop_.mu());
    executors.swap(executors_);
  }
  for (auto& t : executors) {
    if (t.joinable()) t.join();
  }
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
  return std::min(busy_, static_cast<int>(executor_limit_));
}

HeldJobs QueueRunner::held_jobs() const {
  MutexLock lock(claim_loop_.mu());
  HeldJobs held{{held_.begin(), held_.end()}, claim_in_flight_ ? 1 : 0, claims_started_, std::nullopt};
  if (claim_in_flight_) held.oldest_claim_since = claim_since_;
  return held;
}

Clock::time_point QueueRunner::last_round() const { return claim_loop_.last_round(); }

void QueueRunner::ClaimLoop() {
  std::mt19937_64 rng(std::random_device{}());
  // Rounds start at most poll_interval apart, timed from each round's start
  // (not from the claim's end), jittered down to 80% so that daemons started
  // together drift apart: a job that nothing wakes for waits at most
  // poll_interval plus one claim for its round.
  std::uniform_real_distribution<double> jitter(0.8, 1.0);
  const auto poll = std::chrono::microseconds(timings_.poll_interval_us);
  // The worker id of a claim whose COMMIT was in doubt, until its jobs are
  // released (see the header comment).
  std::optional<std::string> in_doubt_worker;
  bool fenced_logged = false;  // claim_fenced is logged once until a claim passes the fence
  bool capped_logged = false;  // claim_capped is logged once until a claim is not capped
  for (;;) {
    int free_slots;
    int capacity_now;
    bool wanted;
    Clock::time_point round_start;
    std::vector<Claimed> round_shed;
    {
      MutexLock lock(claim_loop_.mu());
      if (claim_loop_.stop_requested_locked()) break;
      round_start = claim_loop_.clock().Now();
      RetryExecutorsLocked(round_shed);
      capacity_now = capacity();
      free_slots = capacity_now - busy_;
      wanted = ClaimWantedLocked(free_slots);
      wake_ = false;
    }
    ReleaseShed(round_shed);
    bool full = false;
    auto delay = std::chrono::duration_cast<std::chrono::microseconds>(poll * jitter(rng));
    if (wanted && lease_.held()) {
      ClaimRequest request;
      request.queue = queue_.name;
      // Up to every slot: those that free while the claim waits for the
      // queue's claim lock are counted when it holds it (slots_at_lock).
      // With many daemons on one queue the wait grows with the claims
      // queued before this one, and so does what each claim takes.
      request.slots = capacity_now;
      // The slots its first window is read for (claim/first_window.h).
      request.expected_slots = first_window_.ExpectedSlots(free_slots, capacity_now);
      // Rows a slot as the last claim of this queue needed (claim/first_window.h).
      request.first_window_per_slot = first_window_.per_slot();
      // Past the dead entries the last claims of this queue left (a held
      // horizon keeps them): claim/claim_floor.h.
      request.floor = &floor_;
      request.slots_at_lock = [this, &free_slots] {
        MutexLock lock(claim_loop_.mu());
        free_slots = capacity() - busy_;
        return free_slots;
      };
      request.mode = queue_.mode;
      request.aging_us = queue_.aging_us;
      request.worker_id = lease_.worker_id();
      request.lease_span_us = lease_.lease_span_us();
      if (hooks_ && hooks_->AnyFrom(JobState::kQueued)) {
        request.before_commit = [this](pg::Connection& c, const std::vector<std::int64_t>& ids) {
          hooks_->Fire(c, JobState::kQueued, ids);
        };
      }
      // After a failure the backoff counts from now: a claim that failed after
      // a long connect timeout still waits the whole backoff.
      auto back_off = [&](std::chrono::microseconds wait) {
        delay = wait;
        round_start = claim_loop_.clock().Now();
      };
      try {
        if (in_doubt_worker) {
          // A connection error keeps it for the next round; an SQL error (a
          // row the release cannot write) must not stop this queue's claims:
          // the lease keeper releases such jobs once they are heartbeat_ttl
          // old and no runner holds them.
          try {
            ReleaseInDoubtClaim(*in_doubt_worker);
          } catch (const pg::ConnectionError&) {
            throw;
          } catch (const std::exception& e) {
            spdlog::warn("release_failed queue={} | {}; the lease keeper releases them after heartbeat_ttl",
                         LogValue(queue_.name), OneLine(e.what()));
          }
          in_doubt_worker.reset();
        }
        // A job a transition hook refuses (logged by the hook runner) is left
        // queued and passed over for kRefusalHold, so a refused job never
        // stops the queue; the hook is asked again after that. At most
        // kMaxRefusedPerRound new refusals a round: then the round claims
        // nothing and the next one goes on with the ones collected.
        const auto now = Clock::now();
        std::erase_if(refused_, [&](const auto& r) { return r.second <= now; });
        for (const auto& [id, until] : refused_) request.exclude_ids.push_back(id);
        // In flight for the lease keeper's reconcile (held_jobs()) until its
        // jobs are in held_ below, or it failed.
        // Under the lock that StopClaiming takes: a claim either counts as
        // in flight before the stop (WaitDrained waits for its jobs) or does
        // not start.
        {
          MutexLock lock(claim_loop_.mu());
          if (claim_loop_.stop_requested_locked()) break;
          claim_in_flight_ = true;
          claim_since_ = Clock::now();
          ++claims_started_;
        }
        struct InFlight {
          QueueRunner& runner;
          ~InFlight() {
            MutexLock lock(runner.claim_loop_.mu());
            runner.claim_in_flight_ = false;
            if (runner.busy_ == 0) runner.drained_cv_.notify_all();
          }
        } in_flight{*this};
        ClaimResult result;
        for (int refusals = 0;;) {
          try {
            result = session_.Run([&](pg::Connection& c) { return RunClaim(c, request); });
            break;
          } catch (const HookError& e) {
            refused_[e.job_id()] = Clock::now() + kRefusalHold;
            request.exclude_ids.push_back(e.job_id());
            if (++refusals == kMaxRefusedPerRound) break;
          }
        }
        for (const ClaimedJob& job : result.unprocessable) {
          spdlog::error("unprocessable job={} task={} queue={} | run_count or attempt is at its maximum "
                        "(2147483647): failed at the claim, not run",
                        job.id, LogValue(job.task), LogValue(job.queue));
          metrics_.JobEnded(job.task, "unprocessable", std::nullopt);
        }
        if (auto ended = guard_.Succeeded()) {
          spdlog::info("claim_recovered queue={} failures={} outage_ms={}", LogValue(queue_.name),
                       ended->failures, ended->ms);
        }
        if (result.fenced) {
          if (!fenced_logged) {
            spdlog::warn("claim_fenced queue={} worker={} | the lease ran out (or the worker row is gone) "
                         "before the claim ran: nothing claimed",
                         LogValue(queue_.name), request.worker_id);
          }
          fenced_logged = true;
        } else {
          fenced_logged = false;
        }
        if (result.capped && !capped_logged) {
          spdlog::info("claim_capped queue={} max_running={} running={} | the queue's running jobs are at its "
                       "cluster-wide cap: nothing claimed until they are below it",
                       LogValue(queue_.name), result.queue_cap.value_or(0), result.queue_running);
        }
        capped_logged = result.capped;
        first_window_.ObserveSlotsAtLock(free_slots);  // slots_at_lock counted them again
        metrics_.Claimed(queue_.name, result);
        first_window_.Observe(static_cast<std::int64_t>(result.jobs.size() + result.unprocessable.size()),
                              result.rows_needed);
        full = static_cast<int>(result.jobs.size() + result.unprocessable.size()) == free_slots;
        if (!result.jobs.empty()) {
          spdlog::info("claim queue={} jobs={} free_slots={} ms={:.1f}", LogValue(queue_.name),
                       result.jobs.size(), free_slots, result.elapsed_ms);
          ExecutorSeat* wake = nullptr;
          std::vector<Claimed> shed;
          {
            MutexLock lock(claim_loop_.mu());
            busy_ += static_cast<int>(result.jobs.size());
            for (ClaimedJob& job : result.jobs) {
              held_.insert(job.id);
              ready_.push_back({std::move(job), request.worker_id});
            }
            // An executor that could not start while the claim ran lowered
            // the capacity it was sized for.
            ShedExcessLocked(shed);
            wake = WakeExecutorLocked(shed);
          }
          // One executor wakes; the others follow one at a time (ExecutorLoop).
          if (wake) wake->cv.notify_one();
          ReleaseShed(shed);
        }
      } catch (const std::exception& e) {
        const auto* pg_error = dynamic_cast<const pg::PgError*>(&e);
        if (pg_error != nullptr && pg_error->transient() && pg_error->sqlstate() == "55P03") {
          // lock_timeout (database.stall_timeout) on the queue's claim lock: a
          // claim of another daemon holds it that long, cut off mid-flight;
          // the server ends that session within the same bound. Try again at
          // the next round, without backing off.
          spdlog::warn("claim_lock_timeout queue={} | waited database.stall_timeout for a claim lock (a "
                       "claim cut off mid-flight holds it until the server ends it); trying again",
                       LogValue(queue_.name));
        } else {
          // The database is away (logged once per outage), the claim's
          // COMMIT was in doubt (its jobs are released before the next
          // claim), an SQL error, or anything else a claim may throw.
          if (dynamic_cast<const pg::InDoubtError*>(&e) && !in_doubt_worker) {
            in_doubt_worker = request.worker_id;
          }
          const RoundFailure f = guard_.Failed(std::current_exception());
          spdlog::log(f.level, "claim_failed queue={} | {}", LogValue(queue_.name), f.message);
          back_off(f.retry_in);
        }
      }
    }
    claim_loop_.MarkRound();
    if (full) continue;
    MutexLock lock(claim_loop_.mu());
    // A slot freed since the claim counts as a wake-up, once a claim is
    // wanted. The wait ends `delay` after the round started: the claim's own
    // time is part of the interval.
    claim_loop_.WaitUntil(lock, round_start + delay, [&]() REQUIRES(claim_loop_.mu()) {
      const int free = capacity() - busy_;
      return wake_ || (free > free_slots && ClaimWantedLocked(free) && lease_.held());
    });
  }
  ReleaseWaitingJobs();
  // Stopping right after an in-doubt claim: one try to release its jobs now,
  // so they need not wait heartbeat_ttl for the rescue, which spends an attempt.
  if (in_doubt_worker) {
    try {
      ReleaseInDoubtClaim(*in_doubt_worker);
    } catch (const std::exception& e) {
      spdlog::warn("release_failed queue={} | {}; the rescue recovers them after heartbeat_ttl",
                   LogValue(queue_.name), OneLine(e.what()));
    }
  }
}

void QueueRunner::RetryExecutorsLocked(std::vector<Claimed>& shed) {
  if (executor_limit_ >= static_cast<std::size_t>(queue_.slots) || executors_stop_ ||
      claim_loop_.clock().Now() < executor_retry_at_) {
    return;
  }
  // One executor, with no job for it yet: if it starts, it waits idle and
  // the queue has all its slots again; if not, StartExecutorLocked puts the
  // limit back and sets the next try. No job is claimed for a try.
  executor_limit_ = static_cast<std::size_t>(queue_.slots);
  StartExecutorLocked(shed);
}

bool QueueRunner::ClaimWantedLocked(int free) const {
  if (free <= 0) return false;
  if (free >= std::max(1, (queue_.prefetch + 1) / 2)) return true;
  return ready_.empty() && (!idle_.empty() || seats_.size() < executor_limit_);
}

void QueueRunner::ReleaseWaitingJobs() {
  std::vector<Claimed> waiting;
  {
    MutexLock lock(claim_loop_.mu());
    // Executors idle, on their way to a job or not started yet take one
    // each now; the jobs beyond them would wait for a running job to end.
    const std::size_t takers = idle_.size() + (waking_ != nullptr ? 1 : 0) +
                               (executors_stop_ ? 0 : executor_limit_ - std::min(executor_limit_, seats_.size()));
    if (ready_.size() > takers) TakeNewestReadyLocked(ready_.size() - takers, waiting);
  }
  ReleaseUnstarted(waiting, "prefetched, not started, and the daemon is stopping");
}

void QueueRunner::ReleaseShed(std::vector<Claimed>& shed) {
  ReleaseUnstarted(shed, "claimed for an executor that could not start; not started");
}

void QueueRunner::ReleaseUnstarted(std::vector<Claimed>& jobs, std::string_view why) {
  for (Claimed& claimed : jobs) {
    spdlog::info("release job={} task={} queue={} | {}", claimed.job.id, LogValue(claimed.job.task),
                 LogValue(claimed.job.queue), why);
    finisher_.Submit(FinishItem{std::move(claimed.job), std::move(claimed.worker_id),
                                ReleaseOutcome(), 0, this});
  }
}

QueueRunner::ExecutorSeat* QueueRunner::WakeExecutorLocked(std::vector<Claimed>& shed) {
  if (ready_.empty() || waking_ != nullptr) return nullptr;
  if (idle_.empty()) {
    // Every executor started is busy: one more, if the slots allow. It
    // takes the lock as soon as it runs, as one woken would.
    ExecutorSeat* started = StartExecutorLocked(shed);
    if (started != nullptr) {
      started->woken = true;
      waking_ = started;
    }
    return nullptr;
  }
  ExecutorSeat* seat = idle_.back();
  idle_.pop_back();
  seat->woken = true;
  waking_ = seat;
  return seat;
}

// Jobs reach the executors by a chain of single wake-ups: the claim loop
// wakes one idle executor, and each executor that takes a job while more are
// left wakes the next, so jobs that run long start one wake-up apart.
// Waking every idle executor for each claim cost a full core at 1000 slots
// and 200 claims/s of a few jobs, and 4x the enqueue-to-start latency
// (docs/benchmarks.md, End-to-end). At most one wake-up is on its way: an
// executor that comes back for more while the woken one has not yet taken
// the lock takes the next job itself, so short jobs cost about one wake-up
// per wake-up's latency rather than one per job (a wake-up is several µs of
// CPU on each side: most of the daemon's CPU per no-op job, issue 18).
// Each executor waits on its own seat and is woken by name, the one idle
// the shortest time first: a wake-up cannot be taken by another waiter or
// lost among many on one condition, which the one-on-its-way rule could not
// survive.
void QueueRunner::ExecutorLoop(ExecutorSeat& seat) {
  for (;;) {
    Claimed claimed;
    ExecutorSeat* wake = nullptr;
    std::vector<Claimed> shed;  // allocates only when an executor could not start
    {
      MutexLock lock(claim_loop_.mu());
      // An executor just started (WakeExecutorLocked) is on its way to a job.
      if (waking_ == &seat) waking_ = nullptr;
      while (!executors_stop_ && ready_.empty()) {
        seat.woken = false;
        idle_.push_back(&seat);
        // With prefetch the claim loop waits for half of it to be free, or
        // for an executor with nothing to run: the first one to go idle
        // says so (a freed slot alone might not wake it for a while, its
        // finish still gathering with others).
        if (queue_.prefetch > 0 && idle_.size() == 1 && ClaimWantedLocked(capacity() - busy_)) {
          wake_ = true;
          claim_loop_.Notify();
        }
        seat.cv.wait(lock, [&]() REQUIRES(claim_loop_.mu()) { return seat.woken; });
        if (waking_ == &seat) waking_ = nullptr;
      }
      if (ready_.empty()) return;
      claimed = std::move(ready_.front());
      ready_.pop_front();
      wake = WakeExecutorLocked(shed);
    }
    if (wake) wake->cv.notify_one();
    ReleaseShed(shed);
    Execute(std::move(claimed), seat);
  }
}

void QueueRunner::Execute(Claimed claimed, ExecutorSeat& seat) {
  const ClaimedJob& job = claimed.job;
  // Every line about the job while it runs here carries its trace id (the
  // log formatter reads it); the finisher's lines add it themselves.
  const JobTraceScope trace(job.id, job.trace_id);
  if (!lease_.HeldAs(claimed.worker_id)) {
    // Claimed under a lease lost since: the job is being rescued.
    spdlog::warn("drop job={} task={} queue={} | lease lost before it started: not run", job.id,
                 LogValue(job.task), LogValue(job.queue));
    metrics_.JobEnded(job.task, "lost", std::nullopt);
    FreeSlot(job.id);
    return;
  }
  std::shared_ptr<JobHandler> handler = handlers_.Find(job.task);
  auto started = Clock::now();
  spdlog::info("start job={} task={} queue={} attempt={}/{} run={} handler={}", job.id,
               LogValue(job.task), LogValue(job.queue), job.attempt + 1, job.max_attempts, job.run_count,
               handler ? handler->kind() : "none");
  JobOutcome outcome;
  StopReason stopped = StopReason::kNone;
  try {
    if (!seat.stop) seat.stop.emplace();  // throws without a free fd
    JobStop& stop = *seat.stop;
    stop.Reset();
    seat.progress.Reset();
    running_.Add(job.id, job.run_count, &stop, &seat.progress);
    struct Registration {  // removed on every path, before `stop` is reset
      RunningJobs& running;
      const ClaimedJob& job;
      ~Registration() { running.Remove(job.id, job.run_count); }
    } registration{running_, job};
    // The lease may have ended between the check above and Add: a stop of
    // every running job then missed this one.
    if (!lease_.HeldAs(claimed.worker_id)) {
      running_.RequestStop(job.id, job.run_count, StopReason::kLeaseLost);
    }
    if (!handler) {
      outcome = RetryOutcome("UnknownTask", "no handler for task '" + job.task + "' in this daemon's config");
    } else {
      try {
        outcome = handler->Run(job, stop, &seat.progress);
      } catch (const std::exception& e) {
        outcome = RetryOutcome("HandlerError", e.what());
      }
    }
    if (outcome.interrupted) stopped = stop.reason();
  } catch (const std::exception& e) {  // no JobStop (out of fds): nothing ran
    outcome = RetryOutcome("HandlerError", std::string("cannot start: ") + e.what());
  }
  double ms = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
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
      FreeSlot(job.id);
      return;
  }
  // The run is unregistered: the lease keeper no longer writes its progress,
  // and what it had not written (or wrote in a round still in flight) goes
  // with the finish.
  outcome.meta_patch = seat.progress.TakeForFinish();
  finisher_.Submit(FinishItem{std::move(claimed.job), std::move(claimed.worker_id),
                              std::move(outcome), ms, this, queue_.keep_succeeded});
}

void QueueRunner::FreeSlots(std::span<const std::int64_t> job_ids) {
  if (job_ids.empty()) return;
  {
    MutexLock lock(claim_loop_.mu());
    for (const std::int64_t id : job_ids) {
      if (auto it = held_.find(id); it != held_.end()) held_.erase(it);
    }
    busy_ -= static_cast<int>(job_ids.size());
    if (busy_ == 0) drained_cv_.notify_all();
  }
  claim_loop_.Notify();
}

int QueueRunner::ReleaseInDoubtClaim(const std::string& worker_id) {
  // A lease lost since the claim hands every job of the old id to the
  // rescue, which records what happened: some ran here and were dropped
  // (WorkerLost, an attempt spent). Releasing them would say they never ran.
  if (!lease_.HeldAs(worker_id)) {
    spdlog::info("release_skipped queue={} | the lease was lost since the in-doubt claim; the rescue "
                 "takes its jobs",
                 LogValue(queue_.name));
    return 0;
  }
  // Only this thread adds to held_, so every job this runner holds under
  // worker_id is in the copy; a job leaving held_ meanwhile has had its
  // finish recorded and is no longer running under us.
  std::vector<std::int64_t> held;
  {
    MutexLock lock(claim_loop_.mu());
    held.assign(held_.begin(), held_.end());
  }
  return session_.Run([&](pg::Connection& c) {
    std::vector<FinishRequest> requests;
    for (const OwnedJob& job : OwnedRunningJobsOfQueue(c, worker_id, queue_.name, held)) {
      requests.push_back({job.id, job.run_count,
                          ReleaseOutcome()});
    }
    int released = 0;
    if (requests.empty()) return released;
    // Fenced like any finish (worker id, run_count, still running).
    std::vector<FinishResult> results = FinishJobs(c, worker_id, requests, hooks_);
    for (std::size_t k = 0; k < results.size(); ++k) {
      if (!results[k].applied) continue;
      ++released;
      spdlog::warn("release job={} run={} queue={} state={} | its claim's COMMIT was in doubt and "
                   "it never ran here; no attempt spent",
                   results[k].job_id, requests[k].run_count, LogValue(queue_.name),
                   results[k].state);
    }
    return released;
  });
}

}  // namespace akadzed
