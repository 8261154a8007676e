// The lease keeper: one thread that keeps this daemon's lease (SPEC §4), and
// a timer thread that ends it. Every heartbeat_interval it
//  - heartbeats its akadze.workers row. A row that vanished (a rescue or an
//    operator deleted it) stops every running job without a finish and
//    registers a new id: an old id is never taken again;
//  - reconciles: the jobs the database says it runs that the daemon does not
//    hold are released at once (queued, no attempt spent: their run ended,
//    its finish given up or lost with a failover, or never started); a cancel
//    request stops the job (kCancelRequested), a job no longer ours (rescued
//    while we were slow) stops without a finish (kLeaseLost).
// The other duties of the lease are services of their own, in River's way
// (one service a duty), each on its own thread with its own round and
// RoundGuard: the rescue (worker/job_rescuer.h), the queued sweep
// (worker/queued_sweeper.h), running jobs' progress
// (worker/progress_writer.h) and the finish counts
// (worker/finish_count_writer.h). They share the keeper's connection
// ("akadzed lease", session()), taking it in turn; only the keeper opens it
// (SharedDbSession::RunIfConnected), so a database that is away is waited
// for, and logged, by the heartbeat alone.
//
// The lease lasts lease_span (config.h, LeaseSpanUs: heartbeat_ttl minus the
// largest kill_grace minus kLeaseStopMarginUs) from when the last heartbeat
// that succeeded was SENT. Another daemon rescues heartbeat_ttl after the
// server stamped that heartbeat, which is later. The timer thread wakes at
// the lease's end (steady clock, independent of any statement that hangs on
// a cut network) and stops every running job without a finish: each handler
// gets TERM, then KILL after its kill_grace, so all are dead before the
// first rescue may start. Claiming pauses; the claims' own fence
// (ClaimRequest::lease_span_us) refuses a claim that reaches the server
// after the lease ran out. Once the database answers again the daemon
// registers under a new worker id, so the jobs of the old id are rescued
// like those of any dead worker.
//
// Both threads run on the service kit (runtime/service_loop.h); the clock is
// injected, so a test drives Register, RunRound and ExpireLeaseIfDue with a
// clock it moves by hand, the threads never started.
//
// Thread-safety: worker_id(), held(), heartbeat_failing(), outages_ended(),
// session(), lease_span_us(), SetLeaseSpan() and last_round() may be called
// from any thread; Start/Stop from the owner only;
// Register, RunRound and ExpireLeaseIfDue are what the threads call (tests
// call them with the threads not started).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "hooks/transition_hooks.h"
#include "runtime/db_session.h"
#include "runtime/service_loop.h"
#include "worker/running_jobs.h"
#include "core/thread_annotations.h"
#include "store/worker_lease.h"

namespace akadzed {

// What the daemon's queue runners hold, for the keeper's reconcile.
struct HeldJobs {
  std::vector<std::int64_t> ids;  // claimed and not yet finished (or dropped)
  int claims_in_flight = 0;       // claims between their start and handing their jobs over
  std::uint64_t claims_started = 0;  // claims ever started, summed over the runners
  // When the oldest claim in flight started (none in flight: nullopt).
  std::optional<std::chrono::steady_clock::time_point> oldest_claim_since;
};

class LeaseKeeper {
 public:
  // `hooks` (may be null) run in each orphan release's transaction.
  // `lease_span_us`: see the top of this file; `stall_timeout` bounds its
  // transactions.
  LeaseKeeper(std::string conninfo, WorkerIdentity identity, WorkerConfig timings,
              std::int64_t lease_span_us, std::chrono::milliseconds stall_timeout,
              RunningJobs& running, const TransitionHooks* hooks = nullptr,
              const ServiceClock& clock = SteadyServiceClock());
  ~LeaseKeeper();

  // Register(), then starts the heartbeat thread and the lease timer.
  void Start();
  // Registers the worker; the lease runs from now. Throws pg::PgError.
  void Register();
  // One heartbeat round (heartbeat, reconcile, cancels), its failure logged
  // and counted (heartbeat_failed, heartbeat_recovered).
  void RunRound();
  // The lease timer's decision at the clock's now: when the lease is held
  // and ran out, marks it lost, stops every running job (kLeaseLost) and
  // logs lease_lost; returns true then.
  bool ExpireLeaseIfDue();
  // Stops the thread; with `deregister`, deletes the worker's row.
  void Stop(bool deregister);

  // A reload changed the largest kill_grace: leases last `lease_span_us`
  // from now on; a shorter span also shortens the running lease.
  void SetLeaseSpan(std::int64_t lease_span_us);
  std::int64_t lease_span_us() const { return lease_span_us_.load(std::memory_order_relaxed); }

  // Tells the keeper which jobs the daemon holds (claimed and not yet
  // finished) and which claims are in flight (HeldJobs). A job the database
  // says this worker runs that the daemon does not hold is released at once
  // (queued again, no attempt spent) when no claim was in flight across the
  // keeper's read; otherwise when two rounds in a row saw it, claimed over
  // heartbeat_ttl ago. Set once, after the runners exist; until then nothing
  // is released.
  void SetHeldJobs(std::function<HeldJobs()> held_jobs);
  std::string worker_id() const;
  // held() under the worker id `id` (a claim's): what an executor asks before
  // and after registering a job, without copying the id.
  bool HeldAs(const std::string& id) const;
  // False while the lease is lost (no heartbeat for heartbeat_ttl).
  bool held() const { return held_.load(std::memory_order_acquire); }
  // When the thread last finished a round (for the watchdog).
  std::chrono::steady_clock::time_point last_round() const;
  // True while the last heartbeat round failed; and how many times a failed
  // round was followed by one that worked: the rescue holds off after each
  // (worker/job_rescuer.h).
  bool heartbeat_failing() const { return heartbeat_failing_.load(std::memory_order_acquire); }
  std::uint64_t outages_ended() const { return outages_ended_.load(std::memory_order_acquire); }
  // The lease's connection, which the services beside the keeper share.
  SharedDbSession& session() { return session_; }

 private:
  void TimerLoop();
  // Renew, then Reconcile under the id it returns.
  void Round();
  // Heartbeats (or registers a new id); extends the lease. Returns the
  // worker id the lease is held under now, or nothing when the lease ran out
  // while the heartbeat was in flight (the next round registers a new id).
  std::optional<std::string> Renew();
  // The jobs the database says `worker_id` runs against those held here:
  // orphans released, cancels and lost jobs stopped.
  void Reconcile(const std::string& worker_id);
  WorkerIdentity worker_identity() const;
  std::optional<HeldJobs> ReadHeldJobs();
  // Releases `owned` jobs the daemon does not hold (SetHeldJobs); `before`:
  // what the runners held before `owned` was read. A release refused for the
  // job's sake (pg::RowFaultError, a hook's refusal) is logged once
  // (orphan_release_failed) and tried again each round; other errors fail
  // the round.
  void ReleaseOrphans(const std::string& worker_id, const std::vector<OwnedJob>& owned,
                      const std::optional<HeldJobs>& before);

  SharedDbSession session_;
  WorkerConfig timings_;
  const TransitionHooks* hooks_;  // may be null
  RunningJobs& running_;
  // Held while the function is called (it reads the runners), so that
  // SetHeldJobs(nullptr) waits for a call in flight; taken before any
  // runner's mutex, never the other way round.
  Mutex held_jobs_mu_;
  std::function<HeldJobs()> held_jobs_ GUARDED_BY(held_jobs_mu_);
  // Orphans the last round saw (id, run_count); the loop thread only.
  std::set<std::pair<std::int64_t, std::int32_t>> orphan_candidates_;
  // orphan_release_failed jobs named once; the loop thread only.
  std::set<std::int64_t> release_failed_logged_;
  // What the last reconcile read knew, so that the next reads past the
  // dead index entries a held horizon keeps (store/worker_lease.h); the
  // loop thread only.
  OwnedJobsFloor owned_floor_;
  std::atomic<bool> heartbeat_failing_{false};
  std::atomic<std::uint64_t> outages_ended_{0};
  std::atomic<bool> held_{true};
  std::atomic<std::int64_t> lease_span_us_;
  // The database being away is logged once per outage; other errors each
  // time. The loop thread only.
  RoundGuard guard_;
  // The heartbeat thread and the timer, their stop, and the mutex
  // (loop_.mu()) guarding:
  ServiceLoop loop_;
  WorkerIdentity identity_ GUARDED_BY(loop_.mu());
  std::chrono::steady_clock::time_point lease_until_ GUARDED_BY(loop_.mu());
  bool reregister_ GUARDED_BY(loop_.mu()) = false;  // lease was lost: take a new id
};

}  // namespace akadzed
