// One queue's executors and the slots they run its jobs in: up to `slots`
// executor threads (on a ServiceLoop: its threads, its stop and its join),
// started as jobs need them (one at Start, then one whenever a job waits and
// every executor started is busy) and kept until Stop: a daemon of 1000
// slots whose jobs are short starts a few, not 1000 (each costs a thread's
// creation, ~0.2 ms of CPU here, and its stack).
//
// The claim loop hands the pool its claimed jobs (Run); they wait in the
// pool until an executor takes them, and each runs to its outcome
// (worker/job_runner.h). A slot counts as busy from the claim until the
// job's finish is recorded (the finisher calls FreeSlots), so per-key counts
// in the database are never below what runs. With `prefetch`, the pool holds
// up to that many jobs beyond its slots, each started the moment a slot
// frees.
//
// Shedding: when an executor thread cannot start (ulimit -u, TasksMax), the
// pool runs with the executors it has, and the jobs claimed for the ones
// that did not start go back to queued (no attempt spent); kExecutorRetry
// later a claim round tries one more (RetryExecutorsLocked).
//
// The pool's state is guarded by its owner's mutex (the queue's claim loop's,
// given at construction and shared by the pool's ServiceLoop): the claim
// loop reads the slots and the executors in the same critical section as
// its own state, as one did before the two were cut apart.
//
// Thread-safety: the *Locked functions require mu(); the others must be
// called without it, from any thread; Start and Stop from the owner only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "config/config.h"
#include "core/thread_annotations.h"
#include "runtime/service_loop.h"
#include "worker/finisher.h"
#include "worker/job_runner.h"

namespace akadzed {

class ExecutorPool final : public SlotHolder {
 public:
  // What the pool tells its claim loop: `claim_wanted` (called with mu()
  // held) when the first executor to go idle finds a claim wanted (with
  // prefetch: a freed slot alone might not wake the claim loop for a while,
  // its finish still gathering with others); `slots_freed(none_busy)`
  // (without mu()) after slots freed.
  struct Signals {
    std::function<void()> claim_wanted;
    std::function<void(bool none_busy)> slots_freed;
  };

  // `mu`: the owner's mutex, which guards the pool (it must outlive it).
  ExecutorPool(const QueueConfig& queue, Mutex& mu, JobRunner& runner, Signals signals,
               const ServiceClock& clock = SteadyServiceClock());
  // Stop().
  ~ExecutorPool();
  ExecutorPool(const ExecutorPool&) = delete;
  ExecutorPool& operator=(const ExecutorPool&) = delete;

  // Starts one executor now, so a daemon that cannot start a thread says so
  // at its start; the others as jobs need them. Without Start the pool
  // starts its first executor with its first job.
  void Start() EXCLUDES(mu());
  // Requests the stop: idle executors end, busy ones once no job waits;
  // none starts any more. Stop also joins them.
  void RequestStop() EXCLUDES(mu());
  void Stop() EXCLUDES(mu());

  Mutex& mu() const RETURN_CAPABILITY(threads_.mu()) { return threads_.mu(); }
  // Tells clang's analysis that the owner, holding its mutex by its own
  // name, holds mu() (the two names are one mutex).
  void AssertHeld() const ASSERT_CAPABILITY(threads_.mu()) {}

  // The most jobs the pool holds: its slots (fewer once an executor could
  // not start) and the prefetched jobs waiting for one.
  int capacity() const REQUIRES(mu()) { return static_cast<int>(executor_limit_) + prefetch_; }
  // Slots claimed whose finish is not recorded (with the prefetched jobs).
  int busy() const REQUIRES(mu()) { return busy_; }
  int free_slots() const REQUIRES(mu()) { return capacity() - busy_; }
  // Slots whose job runs or waits for its finish (at most the executors).
  int busy_slots() const REQUIRES(mu());
  // The ids of the jobs of the busy slots.
  std::vector<std::int64_t> held_ids() const REQUIRES(mu());
  // Whether a claim is worth its round trips with `free` of capacity()
  // free. Without prefetch: any free slot. With it: once half the prefetch
  // (at least 1) is free, or when an executor has nothing to run. A claim
  // for every slot that frees costs a claim's statements per job; waiting
  // for half the prefetch costs nothing while the other half lasts, which
  // covers the claim's own time when jobs are short.
  bool ClaimWantedLocked(int free) const REQUIRES(mu());
  // At the start of a claim round, kExecutorRetry after an executor could
  // not start: tries to start one, idle, with no job claimed for it. If it
  // starts the queue has all its slots again (executor_start_recovered);
  // if not, the next try is kExecutorRetry later. Jobs that must go back to
  // queued are moved to `shed` (Shed them after unlocking).
  void RetryExecutorsLocked(std::vector<JobClaim>& shed) REQUIRES(mu());

  // Takes the jobs of a claim under `worker_id` (their slots busy from now)
  // and wakes an executor for them.
  void Run(std::vector<ClaimedJob>& jobs, const std::string& worker_id) EXCLUDES(mu());
  // Back to queued: jobs claimed for an executor that could not start.
  void Shed(std::vector<JobClaim>& shed) EXCLUDES(mu());
  // When the claim loop stops: the jobs waiting for an executor beyond those
  // idle or still to start (prefetched ones) go back to queued through the
  // finisher, no attempt spent, rather than start during the shutdown.
  void ReleaseWaiting() EXCLUDES(mu());

  // Frees the slots of jobs whose finish is recorded (the finisher, once per
  // statement) or that were dropped: one lock and one signal for the lot.
  void FreeSlots(std::span<const std::int64_t> job_ids) override EXCLUDES(mu());

 private:
  // An executor's place to wait for a job: its own condition, so a wake-up
  // goes to the executor chosen and is never taken by another (see
  // ExecutorLoop). Owned by the pool, so a wake-up sent after the lock is
  // let go never outlives it.
  struct Seat {
    CondVar cv;
    bool woken = false;  // guarded by mu()
    // The executor's stop handle (JobRunner::Run): one eventfd per executor
    // that has run a job, at most the queue's slots.
    std::optional<JobStop> stop;
    // Where its handler's progress reports go; emptied for each job.
    JobProgress progress;
  };

  void ExecutorLoop(Seat& seat) EXCLUDES(mu());
  // Picks the executor to wake for the jobs in ready_ (the one idle the
  // shortest time) when no wake-up is on its way already; the caller
  // notifies its cv after unlocking. Null when there is none to wake. With
  // none idle, starts one more executor if the slots allow (it is on its way
  // as one woken is, and needs no notify). Jobs that must go back to
  // queued because it could not start are moved to `shed`.
  Seat* WakeExecutorLocked(std::vector<JobClaim>& shed) REQUIRES(mu());
  // Starts an executor thread and its seat, under the lock; null once
  // stopping, at executor_limit_, or when no thread can be started: then
  // it is logged, executor_limit_ becomes the executors there are, and
  // ShedExcessLocked.
  Seat* StartExecutorLocked(std::vector<JobClaim>& shed) REQUIRES(mu());
  // Moves the jobs in ready_ beyond capacity() (busy_ counts them), the
  // last claimed first, to `shed`: after an executor could not start, the
  // jobs claimed for it go back to queued (no attempt spent), for this
  // daemon's next claim or another daemon, rather than wait for a running
  // job to end. busy_ also counts jobs whose finish is on its way: it may
  // give back a job an executor would have taken soon, never hold too many.
  void ShedExcessLocked(std::vector<JobClaim>& shed) REQUIRES(mu());
  // Moves the `n` jobs last claimed in ready_ (all, when fewer) to `out`:
  // all of them or, without memory to list them, none.
  void TakeNewestReadyLocked(std::size_t n, std::vector<JobClaim>& out) REQUIRES(mu());

  const std::string queue_;
  const int slots_;
  const int prefetch_;
  JobRunner& runner_;
  const Signals signals_;
  // The executor threads and their stop, on the owner's mutex.
  ServiceLoop threads_;
  // The seats of the executors started, one each (StartExecutorLocked).
  std::vector<std::unique_ptr<Seat>> seats_ GUARDED_BY(mu());
  // The most executors: the slots, or fewer once a thread could not start,
  // until retry_at_ (RetryExecutorsLocked); and whether the last start
  // failed (executor_start_failed is logged once until one starts).
  std::size_t executor_limit_ GUARDED_BY(mu()) = 0;
  ServiceClock::time_point retry_at_ GUARDED_BY(mu());
  bool start_failing_ GUARDED_BY(mu()) = false;
  // Executors waiting for a job, the last to wait at the back, and the one
  // woken that has not taken the lock since (ExecutorLoop).
  std::vector<Seat*> idle_ GUARDED_BY(mu());
  Seat* waking_ GUARDED_BY(mu()) = nullptr;
  std::deque<JobClaim> ready_ GUARDED_BY(mu());
  int busy_ GUARDED_BY(mu()) = 0;                              // claimed, finish not recorded
  std::unordered_multiset<std::int64_t> held_ GUARDED_BY(mu());  // ids of those busy slots
};

}  // namespace akadzed
