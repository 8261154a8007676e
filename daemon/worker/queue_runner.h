// One queue's share of the daemon: a claim loop and up to `slots` executor
// threads, started as jobs need them (one at Start, then one whenever a job
// waits and every executor started is busy) and kept until Join: a daemon of
// 1000 slots whose jobs are short starts a few, not 1000 (each costs a
// thread's creation, ~0.2 ms of CPU here, and its stack).
//
// The claim loop claims up to the queue's free slots in one transaction (the
// claim core's RunClaim, with the queue's mode and aging), hands the jobs to
// the executors and claims again at once when the claim came back full;
// otherwise it sleeps poll_interval (±10% jitter) and wakes early when a slot
// frees or Wake() is called. A slot counts as busy from the claim until the
// job's finish is recorded, so per-key counts in the database are never below
// what runs. The free slots are counted again once the claim holds the
// queue's claim lock (ClaimRequest::slots_at_lock): slots that freed while
// it waited are taken by it.
//
// With `prefetch` (docs/configuration.md), the runner holds up to that many
// claimed jobs beyond its slots, each started the moment a slot frees, so a
// slot does not wait for a claim. They are running in the database (their
// keys' and the queue cap's counts include them, and their started_at is the
// claim's). When the daemon stops, a prefetched job that has not started is
// released to queued, no attempt spent; a job with an idle executor, or
// one the slots allow to start, runs.
// With prefetch a claim waits until half of it is free (ClaimWantedLocked),
// so claims come about prefetch/2 jobs at a time, not one per ended job.
//
// An executor runs the job's handler, turns a stop request into the outcome
// it stands for (cancel → cancelled, shutdown → released, lost lease → no
// finish at all) and submits the outcome to the finisher.
//
// A claim whose COMMIT was in doubt (the connection broke while it was in
// flight) may have committed: its jobs would then be running under this
// live worker with nobody running them, and no rescue would ever take them.
// So before its next claim the loop releases, without spending an attempt,
// every job of its queue running under that worker id that it does not hold.
//
// Thread-safety: public members may be called from any thread; Start and
// Join from the owner only.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "claim/claim_transaction.h"
#include "claim/first_window.h"
#include "config/config.h"
#include "metrics/worker_metrics.h"
#include "runtime/db_session.h"
#include "runtime/service_loop.h"
#include "worker/finisher.h"
#include "worker/handler_registry.h"
#include "worker/lease_keeper.h"
#include "worker/running_jobs.h"
#include "core/thread_annotations.h"

namespace akadzed {

class QueueRunner final : private SlotHolder {
 public:
  // `stall_timeout` bounds each claim's transaction (pg::Connection::Open):
  // a claim that waits that long for the queue's claim lock retries.
  QueueRunner(QueueConfig queue, const WorkerConfig& timings, const std::string& conninfo,
              std::chrono::milliseconds stall_timeout, HandlerRegistry& handlers, RunningJobs& running, Finisher& finisher,
              LeaseKeeper& lease, WorkerMetrics& metrics,
              const TransitionHooks* hooks = nullptr);  // run in each claim's transaction
  ~QueueRunner();

  void Start();
  // Stops claiming (without waiting for a claim in flight); executors go on
  // with what they have.
  void StopClaiming();
  // Waits until every claimed job was handed to the finisher (or dropped)
  // and its slot freed, or until `deadline`. True when drained.
  bool WaitDrained(std::chrono::steady_clock::time_point deadline);
  // Stops the claim loop and the executors (after WaitDrained) and joins
  // every thread.
  void Join();
  // Wakes the claim loop now (LISTEN/NOTIFY).
  void Wake();

  const std::string& name() const { return queue_.name; }
  int slots() const { return queue_.slots; }
  // Slots whose job runs or waits for its finish (at most slots(); the
  // prefetched jobs waiting for a slot are not counted).
  int busy_slots() const;
  // The jobs this runner is responsible for: claimed and not yet finished
  // (queued for an executor, running, or waiting for the finisher), and its
  // claim in flight, if any (HeldJobs, for the lease keeper's reconcile).
  // A claim counts as in flight from before its BEGIN until its jobs are in
  // `ids`, or it failed.
  HeldJobs held_jobs() const;
  std::chrono::steady_clock::time_point last_round() const;

 private:
  struct Claimed {
    ClaimedJob job;
    std::string worker_id;
  };
  // An executor's place to wait for a job: its own condition, so a wake-up
  // goes to the executor chosen and is never taken by another (see
  // ExecutorLoop). Owned by the runner, so a wake-up sent after the lock is
  // let go never outlives it.
  struct ExecutorSeat {
    CondVar cv;
    bool woken = false;  // guarded by claim_loop_.mu()
    // The executor's stop handle, made (by the executor's thread) for its
    // first job and reset for each next one; other threads reach it only
    // through RunningJobs while a job is registered. One eventfd per
    // executor that has run a job: at most the queue's slots, as at its
    // busiest moment before.
    std::optional<JobStop> stop;
    // Where its handler's progress reports go; emptied for each job.
    JobProgress progress;
  };
  void ClaimLoop();
  void Execute(Claimed claimed, ExecutorSeat& seat);
  // Frees the slots of jobs whose finish is recorded (the finisher, once per
  // statement) or that were dropped (FreeSlot): one lock and one wake-up of
  // the claim loop for the lot.
  void FreeSlots(std::span<const std::int64_t> job_ids) override;
  void FreeSlot(std::int64_t job_id) { FreeSlots({&job_id, 1}); }
  // Picks the executor to wake for the jobs in ready_ (the one idle the
  // shortest time) when no wake-up is on its way already; the caller
  // notifies its cv after unlocking. Null when there is none to wake. With
  // none idle, starts one more executor if the slots allow (it is on its way
  // as one woken is, and needs no notify). Jobs that must go back to
  // queued because it could not start are moved to `shed` (ReleaseShed).
  ExecutorSeat* WakeExecutorLocked(std::vector<Claimed>& shed) REQUIRES(claim_loop_.mu());
  // Starts an executor thread and its seat, under the lock; null once
  // executors_stop_ is set, at executor_limit_, or when no thread can be
  // started: then it is logged, executor_limit_ becomes the executors there
  // are, and ShedExcessLocked.
  ExecutorSeat* StartExecutorLocked(std::vector<Claimed>& shed) REQUIRES(claim_loop_.mu());
  // Moves the jobs in ready_ beyond capacity() (busy_ counts them), the
  // last claimed first, to `shed`, which the caller releases after
  // unlocking (ReleaseShed): after an executor could not start, the jobs
  // claimed for it go back to queued (no attempt spent), for this daemon's
  // next claim or another daemon, rather than wait for a running job to
  // end. busy_ also counts jobs whose finish is on its way: it may give
  // back a job an executor would have taken soon, never hold too many.
  void ShedExcessLocked(std::vector<Claimed>& shed) REQUIRES(claim_loop_.mu());
  // Moves the `n` jobs last claimed in ready_ (all, when fewer) to `out`:
  // all of them or, without memory to list them, none.
  void TakeNewestReadyLocked(std::size_t n, std::vector<Claimed>& out) REQUIRES(claim_loop_.mu());
  // At the start of a claim round, kExecutorRetry after an executor could
  // not start: tries to start one, idle, with no job claimed for it. If it
  // starts the queue has all its slots again (executor_start_recovered);
  // if not, the next try is kExecutorRetry later.
  void RetryExecutorsLocked(std::vector<Claimed>& shed) REQUIRES(claim_loop_.mu());
  // Back to queued through the finisher, no attempt spent, each logged as
  // `release` with `why`; not under the lock.
  void ReleaseUnstarted(std::vector<Claimed>& jobs, std::string_view why) EXCLUDES(claim_loop_.mu());
  void ReleaseShed(std::vector<Claimed>& shed) EXCLUDES(claim_loop_.mu());
  void RunExecutor(ExecutorSeat& seat);
  void ExecutorLoop(ExecutorSeat& seat);
  // When the claim loop stops: the jobs waiting for an executor beyond those
  // idle or still to start (prefetched ones) go back to queued through the finisher, no
  // attempt spent, rather than start during the shutdown.
  void ReleaseWaitingJobs();
  // The most jobs the runner holds: its slots (fewer once an executor
  // could not start) and the prefetched jobs waiting for one.
  int capacity() const REQUIRES(claim_loop_.mu()) {
    return static_cast<int>(executor_limit_) + queue_.prefetch;
  }
  // Whether a claim is worth its round trips with `free` of capacity()
  // free. Without prefetch: any free slot. With it: once half the prefetch
  // (at least 1) is free, or when an executor has nothing to run. A claim
  // for every slot that frees costs a claim's statements per job; waiting
  // for half the prefetch costs nothing while the other half lasts, which
  // covers the claim's own time when jobs are short.
  bool ClaimWantedLocked(int free) const REQUIRES(claim_loop_.mu());
  // Releases jobs an in-doubt claim under `worker_id` may have committed (see
  // the header comment); returns how many. Throws pg::PgError.
  int ReleaseInDoubtClaim(const std::string& worker_id);

  QueueConfig queue_;
  WorkerConfig timings_;
  DbSession session_;
  HandlerRegistry& handlers_;
  RunningJobs& running_;
  Finisher& finisher_;
  LeaseKeeper& lease_;
  WorkerMetrics& metrics_;
  const TransitionHooks* hooks_;  // may be null

  // After an error the wait doubles from poll_interval up to 30 s,
  // jittered; the database being away is logged once per outage. The claim
  // thread only.
  RoundGuard guard_;
  // The claim loop's thread, its stop (StopClaiming), its wake-ups
  // (claim_loop_.Notify()) and the mutex (claim_loop_.mu()) guarding the
  // members marked so below, which the executors share.
  ServiceLoop claim_loop_;
  // The executors started and their seats, one each (StartExecutorLocked).
  std::vector<std::thread> executors_ GUARDED_BY(claim_loop_.mu());
  std::vector<std::unique_ptr<ExecutorSeat>> seats_ GUARDED_BY(claim_loop_.mu());
  // The most executors: the slots, or fewer once a thread could not start,
  // until executor_retry_at_ (RetryExecutorsLocked); and whether the last
  // start failed (executor_start_failed is logged once until one starts).
  std::size_t executor_limit_ GUARDED_BY(claim_loop_.mu()) = 0;
  ServiceClock::time_point executor_retry_at_ GUARDED_BY(claim_loop_.mu());
  bool executor_start_failing_ GUARDED_BY(claim_loop_.mu()) = false;
  // Executors waiting for a job, the last to wait at the back, and the one
  // woken that has not taken the lock since (ExecutorLoop).
  std::vector<ExecutorSeat*> idle_ GUARDED_BY(claim_loop_.mu());
  ExecutorSeat* waking_ GUARDED_BY(claim_loop_.mu()) = nullptr;
  CondVar drained_cv_;   // busy_ reached 0
  std::deque<Claimed> ready_ GUARDED_BY(claim_loop_.mu());
  int busy_ GUARDED_BY(claim_loop_.mu()) = 0;  // claimed, finish not recorded
  std::unordered_multiset<std::int64_t> held_ GUARDED_BY(claim_loop_.mu());  // ids of those busy slots
  // Jobs a transition hook refused at the claim, passed over until then;
  // the claim thread only.
  std::unordered_map<std::int64_t, std::chrono::steady_clock::time_point> refused_;
  // The size of the next claim's first window; the claim thread only.
  FirstWindowSizer first_window_;
  // Where the next claim reads each priority level from (claim/claim_floor.h):
  // kept from claim to claim, read and written by the claim loop only.
  ClaimFloor floor_;
  bool executors_stop_ GUARDED_BY(claim_loop_.mu()) = false;
  bool wake_ GUARDED_BY(claim_loop_.mu()) = false;
  bool claim_in_flight_ GUARDED_BY(claim_loop_.mu()) = false;
  std::chrono::steady_clock::time_point claim_since_ GUARDED_BY(claim_loop_.mu());  // when the claim in flight began
  std::uint64_t claims_started_ GUARDED_BY(claim_loop_.mu()) = 0;
};

}  // namespace akadzed
