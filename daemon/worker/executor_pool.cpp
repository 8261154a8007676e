#include "worker/executor_pool.h"

#include <algorithm>
#include <chrono>
#include <new>
#include <utility>

#include <spdlog/spdlog.h>

#include "core/redact.h"
#include "runtime/log_line.h"

namespace akadzed {

namespace {

// How long after an executor could not start the queue runs with the
// executors it has before it tries again for all its slots.
constexpr std::chrono::seconds kExecutorRetry{10};

}  // namespace

ExecutorPool::ExecutorPool(const QueueConfig& queue, Mutex& mu, JobRunner& runner, Signals signals,
                           const ServiceClock& clock)
    : queue_(queue.name),
      slots_(queue.slots),
      prefetch_(queue.prefetch),
      runner_(runner),
      signals_(std::move(signals)),
      threads_(clock, mu) {
  MutexLock lock(threads_.mu());
  // Reserved for every slot, so that starting an executor under the lock
  // (StartExecutorLocked) cannot fail half-way: the seat and the thread
  // are its only allocations, and a failure of either leaves these as
  // they were.
  idle_.reserve(static_cast<std::size_t>(slots_));
  seats_.reserve(static_cast<std::size_t>(slots_));
  executor_limit_ = static_cast<std::size_t>(slots_);
}

ExecutorPool::~ExecutorPool() { Stop(); }

void ExecutorPool::Start() {
  MutexLock lock(mu());
  if (!seats_.empty()) return;
  Seat& seat = *seats_.emplace_back(std::make_unique<Seat>());
  try {
    threads_.StartLocked("exec " + queue_, [this, &seat] { ExecutorLoop(seat); });
  } catch (...) {
    seats_.pop_back();
    throw;
  }
}

void ExecutorPool::RequestStop() {
  threads_.RequestStop();
  MutexLock lock(mu());
  // Executors woken now see the stop; those busy see it when they come back.
  for (Seat* seat : idle_) {
    seat->woken = true;
    seat->cv.notify_one();
  }
  idle_.clear();
}

void ExecutorPool::Stop() {
  RequestStop();
  threads_.Stop();
}

int ExecutorPool::busy_slots() const { return std::min(busy_, static_cast<int>(executor_limit_)); }

std::vector<std::int64_t> ExecutorPool::held_ids() const { return {held_.begin(), held_.end()}; }

bool ExecutorPool::ClaimWantedLocked(int free) const {
  if (free <= 0) return false;
  if (free >= std::max(1, (prefetch_ + 1) / 2)) return true;
  return ready_.empty() && (!idle_.empty() || seats_.size() < executor_limit_);
}

void ExecutorPool::RetryExecutorsLocked(std::vector<JobClaim>& shed) {
  if (executor_limit_ >= static_cast<std::size_t>(slots_) || threads_.stop_requested_locked() ||
      threads_.clock().Now() < retry_at_) {
    return;
  }
  // One executor, with no job for it yet: if it starts, it waits idle and
  // the queue has all its slots again; if not, StartExecutorLocked puts the
  // limit back and sets the next try. No job is claimed for a try.
  executor_limit_ = static_cast<std::size_t>(slots_);
  StartExecutorLocked(shed);
}

void ExecutorPool::Run(std::vector<ClaimedJob>& jobs, const std::string& worker_id) {
  Seat* wake = nullptr;
  std::vector<JobClaim> shed;
  {
    MutexLock lock(mu());
    busy_ += static_cast<int>(jobs.size());
    for (ClaimedJob& job : jobs) {
      held_.insert(job.id);
      ready_.push_back({std::move(job), worker_id});
    }
    // An executor that could not start while the claim ran lowered the
    // capacity it was sized for.
    ShedExcessLocked(shed);
    wake = WakeExecutorLocked(shed);
  }
  // One executor wakes; the others follow one at a time (ExecutorLoop).
  if (wake) wake->cv.notify_one();
  Shed(shed);
}

void ExecutorPool::Shed(std::vector<JobClaim>& shed) {
  runner_.Release(shed, "claimed for an executor that could not start; not started", *this);
}

void ExecutorPool::ReleaseWaiting() {
  std::vector<JobClaim> waiting;
  {
    MutexLock lock(mu());
    // Executors idle, on their way to a job or not started yet take one
    // each now; the jobs beyond them would wait for a running job to end.
    const std::size_t to_start = threads_.stop_requested_locked()
                                     ? 0
                                     : executor_limit_ - std::min(executor_limit_, seats_.size());
    const std::size_t takers = idle_.size() + (waking_ != nullptr ? 1 : 0) + to_start;
    if (ready_.size() > takers) TakeNewestReadyLocked(ready_.size() - takers, waiting);
  }
  runner_.Release(waiting, "prefetched, not started, and the daemon is stopping", *this);
}

void ExecutorPool::FreeSlots(std::span<const std::int64_t> job_ids) {
  if (job_ids.empty()) return;
  bool none_busy;
  {
    MutexLock lock(mu());
    for (const std::int64_t id : job_ids) {
      if (auto it = held_.find(id); it != held_.end()) held_.erase(it);
    }
    busy_ -= static_cast<int>(job_ids.size());
    none_busy = busy_ == 0;
  }
  signals_.slots_freed(none_busy);
}

ExecutorPool::Seat* ExecutorPool::StartExecutorLocked(std::vector<JobClaim>& shed) {
  if (threads_.stop_requested_locked() || seats_.size() >= executor_limit_) return nullptr;
  try {
    auto seat = std::make_unique<Seat>();
    Seat& ref = *seat;
    threads_.StartLocked("exec " + queue_, [this, &ref] { ExecutorLoop(ref); });
    seats_.push_back(std::move(seat));  // reserved: does not throw
    if (start_failing_) {
      start_failing_ = false;
      spdlog::info("executor_start_recovered queue={} executors={} slots={}", LogValue(queue_), seats_.size(),
                   slots_);
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
    retry_at_ = threads_.clock().Now() + kExecutorRetry;
    spdlog::log(start_failing_ ? spdlog::level::debug : spdlog::level::err,
                "executor_start_failed queue={} executors={} slots={} | {}; the queue runs at most {} jobs at "
                "once, and tries to start one more in {} s",
                LogValue(queue_), seats_.size(), slots_, OneLine(e.what()), seats_.size(), kExecutorRetry.count());
    start_failing_ = true;
    ShedExcessLocked(shed);
    return nullptr;
  }
}

void ExecutorPool::ShedExcessLocked(std::vector<JobClaim>& shed) {
  const int excess = busy_ - static_cast<int>(shed.size()) - capacity();
  if (excess > 0) TakeNewestReadyLocked(static_cast<std::size_t>(excess), shed);
}

void ExecutorPool::TakeNewestReadyLocked(std::size_t n, std::vector<JobClaim>& out) {
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

ExecutorPool::Seat* ExecutorPool::WakeExecutorLocked(std::vector<JobClaim>& shed) {
  if (ready_.empty() || waking_ != nullptr) return nullptr;
  if (idle_.empty()) {
    // Every executor started is busy: one more, if the slots allow. It
    // takes the lock as soon as it runs, as one woken would.
    Seat* started = StartExecutorLocked(shed);
    if (started != nullptr) {
      started->woken = true;
      waking_ = started;
    }
    return nullptr;
  }
  Seat* seat = idle_.back();
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
void ExecutorPool::ExecutorLoop(Seat& seat) {
  for (;;) {
    JobClaim claim;
    Seat* wake = nullptr;
    std::vector<JobClaim> shed;  // allocates only when an executor could not start
    {
      MutexLock lock(mu());
      // An executor just started (WakeExecutorLocked) is on its way to a job.
      if (waking_ == &seat) waking_ = nullptr;
      while (!threads_.stop_requested_locked() && ready_.empty()) {
        seat.woken = false;
        idle_.push_back(&seat);
        // With prefetch the claim loop waits for half of it to be free, or
        // for an executor with nothing to run: the first one to go idle
        // says so.
        if (prefetch_ > 0 && idle_.size() == 1 && ClaimWantedLocked(free_slots())) signals_.claim_wanted();
        seat.cv.wait(lock, [&]() REQUIRES(mu()) { return seat.woken; });
        if (waking_ == &seat) waking_ = nullptr;
      }
      if (ready_.empty()) return;
      claim = std::move(ready_.front());
      ready_.pop_front();
      wake = WakeExecutorLocked(shed);
    }
    if (wake) wake->cv.notify_one();
    Shed(shed);
    runner_.Run(std::move(claim), seat.stop, seat.progress, *this);
  }
}

}  // namespace akadzed
