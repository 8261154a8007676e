// The lease keeper: one thread and one connection that keep this daemon's
// lease (SPEC §4). Every heartbeat_interval it
//  - heartbeats its akadze.workers row (re-registering if the row vanished);
//  - compares the jobs the database says it runs with the jobs it runs:
//    a cancel request stops the job (kCancelRequested), a job no longer ours
//    (rescued while we were slow) stops without a finish (kLeaseLost);
//  - rescues jobs of workers whose heartbeat is older than heartbeat_ttl.
// When no heartbeat has succeeded for heartbeat_ttl - heartbeat_interval (a
// margin before other daemons, which wait heartbeat_ttl, start rescuing) the
// lease is lost: every running job is stopped without a finish and claiming
// pauses. The check runs on the main thread's timer (CheckExpiry), so a
// statement that hangs cannot delay it. Once the
// database answers again the daemon registers under a new worker id, so the
// jobs of the old id are rescued like those of any dead worker.
//
// Thread-safety: worker_id(), held() and last_round() may be called from any
// thread; Start/Stop from the owner only.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "config/config.h"
#include "worker/db_session.h"
#include "worker/running_jobs.h"
#include "worker/worker_lease.h"

namespace akadzed {

class LeaseKeeper {
 public:
  // `hooks` (may be null) run in each rescue's transaction.
  LeaseKeeper(std::string conninfo, WorkerIdentity identity, WorkerConfig timings,
              RunningJobs& running, const TransitionHooks* hooks = nullptr);
  ~LeaseKeeper();

  // Registers the worker (throws pg::PgError when it cannot) and starts the thread.
  void Start();
  // Stops the thread; with `deregister`, deletes the worker's row.
  void Stop(bool deregister);

  // Declares the lease lost when the last heartbeat is too old. Called
  // about once a second by the daemon's main thread, and after each round.
  void CheckExpiry();

  // Tells the keeper which jobs the daemon holds (claimed and not yet
  // finished). A job the database says this worker runs, claimed over
  // heartbeat_ttl ago, that the daemon does not hold, in two rounds in a row
  // (its finish was given up, or lost with a failover) is released: queued
  // again, no attempt spent. Set once, after the runners exist; until then nothing is released.
  void SetHeldJobs(std::function<std::vector<std::int64_t>()> held_jobs);

  std::string worker_id() const;
  // False while the lease is lost (no heartbeat for heartbeat_ttl).
  bool held() const { return held_.load(std::memory_order_acquire); }
  // When the thread last finished a round (for the watchdog).
  std::chrono::steady_clock::time_point last_round() const;

 private:
  void Loop();
  void Round();
  // Releases `owned` jobs that are settled and not held (SetHeldJobs).
  void ReleaseOrphans(const std::string& worker_id, const std::vector<OwnedJob>& owned);

  DbSession session_;
  WorkerConfig timings_;
  const TransitionHooks* hooks_;  // may be null
  RunningJobs& running_;
  // Held while the function is called (it reads the runners), so that
  // SetHeldJobs(nullptr) waits for a call in flight; taken before any
  // runner's mutex, never the other way round.
  std::mutex held_jobs_mu_;
  std::function<std::vector<std::int64_t>()> held_jobs_;  // guarded by held_jobs_mu_
  // Orphans the last round saw (id, run_count); the loop thread only.
  std::set<std::pair<std::int64_t, std::int32_t>> orphan_candidates_;
  std::set<std::int64_t> skipped_logged_;  // rescue_skipped jobs named once; the loop thread only
  bool round_failed_ = false;                  // the last round failed; the loop thread only
  std::chrono::steady_clock::time_point rescue_after_{};  // no rescue before; the loop thread only
  std::atomic<bool> held_{true};
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  WorkerIdentity identity_;                                  // guarded by mu_
  bool stopping_ = false;                                    // guarded by mu_
  std::chrono::steady_clock::time_point last_heartbeat_;     // guarded by mu_
  std::chrono::steady_clock::time_point last_round_;         // guarded by mu_
  bool reregister_ = false;  // lease was lost: take a new id; guarded by mu_
};

}  // namespace akadzed
