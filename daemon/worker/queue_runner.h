// One queue's share of the daemon: a claim loop and its executor pool
// (worker/executor_pool.h), which runs the jobs the loop claims.
//
// The claim loop is a plain loop around ClaimRound: each round claims up to
// the queue's free slots in one transaction (the claim core's RunClaim, with
// the queue's mode and aging) and hands the jobs to the pool; the loop
// claims again at once when the claim came back full; otherwise it waits
// until poll_interval (80-100% jitter) after the round's start, woken early
// when a slot frees or Wake() is called. The free slots are counted again
// once the claim holds the queue's claim lock (ClaimRequest::slots_at_lock):
// slots that freed while it waited are taken by it.
//
// With `prefetch` (docs/configuration.md), the pool holds up to that many
// claimed jobs beyond its slots, each started the moment a slot frees, so a
// slot does not wait for a claim. They are running in the database (their
// keys' and the queue cap's counts include them, and their started_at is the
// claim's). When the daemon stops, a prefetched job that has not started is
// released to queued, no attempt spent; a job with an idle executor, or
// one the slots allow to start, runs. With prefetch a claim waits until half
// of it is free (ExecutorPool::ClaimWantedLocked), so claims come about
// prefetch/2 jobs at a time, not one per ended job.
//
// A claim whose COMMIT was in doubt is recovered before the next claim
// (worker/in_doubt_claims.h).
//
// Thread-safety: public members may be called from any thread; Start and
// Join from the owner only; ClaimRound from the claim loop's thread, or a
// test's with the loop never started.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "claim/claim_floor.h"
#include "claim/claim_transaction.h"
#include "claim/first_window.h"
#include "config/config.h"
#include "core/thread_annotations.h"
#include "metrics/worker_metrics.h"
#include "runtime/db_session.h"
#include "runtime/service_loop.h"
#include "worker/executor_pool.h"
#include "worker/finisher.h"
#include "worker/handler_registry.h"
#include "worker/in_doubt_claims.h"
#include "worker/job_runner.h"
#include "worker/lease_keeper.h"
#include "worker/running_jobs.h"

namespace akadzed {

// What one claim round did (QueueRunner::ClaimRound).
struct ClaimRoundResult {
  enum class Kind {
    kStopped,      // the stop was requested: no claim, and the loop ends
    kIdle,         // no claim: no free slot wanted one, or the lease is not held
    kClaimed,      // the claim ran (it may have claimed nothing)
    kLockTimeout,  // the claim waited database.stall_timeout for the claim lock
    kFailed,       // the claim failed (claim_failed logged); the next waits the backoff
  };
  Kind kind = Kind::kIdle;
  // The free slots the round saw: at its start, and once the claim held
  // the claim lock (slots_at_lock). A slot freed beyond these wakes the
  // loop early.
  int free_slots = 0;
  std::size_t jobs = 0;           // claimed and handed to the executor pool
  std::size_t unprocessable = 0;  // failed at the claim, not run
  // The claim took every free slot: the next round starts at once.
  bool full = false;
  // When the next round is due, by the clock, unless woken earlier:
  // poll_interval (80-100% jitter) after this round's start; after a
  // failure, the backoff after its end.
  ServiceClock::time_point next_round;
};

class QueueRunner final {
 public:
  // `stall_timeout` bounds each claim's transaction (pg::Connection::Open):
  // a claim that waits that long for the queue's claim lock retries.
  QueueRunner(QueueConfig queue, const WorkerConfig& timings, const std::string& conninfo,
              std::chrono::milliseconds stall_timeout, HandlerRegistry& handlers, RunningJobs& running, Finisher& finisher,
              LeaseKeeper& lease, WorkerMetrics& metrics,
              const TransitionHooks* hooks = nullptr,  // run in each claim's transaction
              const ServiceClock& clock = SteadyServiceClock());
  ~QueueRunner();

  void Start();
  // Stops claiming (without waiting for a claim in flight); executors go on
  // with what they have.
  void StopClaiming();
  // Waits until every claimed job was handed to the finisher (or dropped)
  // and its slot freed, or until `deadline` (by the clock). True when drained.
  bool WaitDrained(ServiceClock::time_point deadline);
  // Stops the claim loop and the executors (after WaitDrained) and joins
  // every thread.
  void Join();
  // Wakes the claim loop now (LISTEN/NOTIFY).
  void Wake();

  // One round of the claim loop: one claim of up to the free slots (when a
  // claim is wanted and the lease held), preceded by the release of an
  // in-doubt claim's jobs, its jobs handed to the executor pool; says what
  // happened and when the next round is due.
  ClaimRoundResult ClaimRound();

  const std::string& name() const { return queue_.name; }
  int slots() const { return queue_.slots; }
  // Slots whose job runs or waits for its finish (at most slots(); the
  // prefetched jobs waiting for a slot are not counted).
  int busy_slots() const;
  // The jobs this runner is responsible for: claimed and not yet finished
  // (queued for an executor, running, or waiting for the finisher), and its
  // claim in flight, if any (HeldJobs, for the lease keeper's reconcile).
  // A claim counts as in flight from before its BEGIN until its jobs are in
  // the pool, or it failed.
  HeldJobs held_jobs() const;
  ServiceClock::time_point last_round() const;

 private:
  void ClaimLoop();
  // The round's start, under the lock: the free slots and whether a claim
  // is wanted; jobs to shed go to `shed`. False when stopping.
  bool BeginRound(ClaimRoundResult& round, int& capacity, bool& wanted, std::vector<JobClaim>& shed);
  // The claim of up to `capacity` jobs; `free_slots` is updated once the
  // claim holds the claim lock.
  ClaimRequest MakeRequest(int capacity, int& free_slots);
  // The ids of the jobs the pool holds.
  std::vector<std::int64_t> held_ids() const;
  // Marks a claim in flight (held_jobs()); false when stopping (no claim
  // then). EndClaim ends it, once its jobs are in the pool or it failed.
  bool BeginClaim();
  void EndClaim();
  // Runs the claim, passing over jobs a transition hook refuses.
  ClaimResult Claim(ClaimRequest& request);
  // Without a floor of its own (a first claim, or after one that failed),
  // the queue's stored floor, read at most every kStoredFloorReadEvery;
  // after a claim, floor_ written there at most every kStoredFloorWriteEvery
  // (claim/stored_floor.h). Neither with aging (a claim ignores floors).
  void ReadStoredFloor(pg::Connection& conn);
  void WriteStoredFloor();
  // Logs and counts what the claim returned.
  void Observe(const ClaimResult& result, const std::string& worker_id, int free_slots);
  // Sorts a failed claim and paces the next round.
  void Failed(const std::exception_ptr& error, const std::string& worker_id, ClaimRoundResult& round);
  void SlotsFreed(bool none_busy);

  QueueConfig queue_;
  WorkerConfig timings_;
  DbSession session_;
  LeaseKeeper& lease_;
  WorkerMetrics& metrics_;
  const TransitionHooks* hooks_;  // may be null

  // After an error the wait doubles from poll_interval up to 30 s,
  // jittered; the database being away is logged once per outage. The claim
  // thread only.
  RoundGuard guard_;
  // The claim loop's thread, its stop (StopClaiming), its wake-ups
  // (claim_loop_.Notify()) and the mutex (claim_loop_.mu()) guarding the
  // members marked so below and the executor pool.
  ServiceLoop claim_loop_;
  JobRunner job_runner_;
  ExecutorPool pool_;
  InDoubtClaims in_doubt_;  // the claim thread only
  CondVar drained_cv_;  // the pool's busy slots reached 0, or a claim ended
  // Jobs a transition hook refused at the claim, passed over until then;
  // the claim thread only.
  std::unordered_map<std::int64_t, ServiceClock::time_point> refused_;
  // The size of the next claim's first window; the claim thread only.
  FirstWindowSizer first_window_;
  // Where the next claim reads each priority level from (claim/claim_floor.h):
  // kept from claim to claim, read and written by the claim loop only.
  ClaimFloor floor_;
  // When floor_ was last written to akadze.queue_floors and last read from
  // it (claim/stored_floor.h), and whether a failed write was logged since
  // the last one that worked; the claim thread only.
  ServiceClock::time_point floor_saved_{};
  ServiceClock::time_point floor_loaded_{};
  bool floor_save_failing_ = false;
  std::mt19937_64 rng_{std::random_device{}()};  // the poll's jitter; the claim thread only
  bool fenced_logged_ = false;  // claim_fenced is logged once until a claim passes the fence
  bool capped_logged_ = false;  // claim_capped is logged once until a claim is not capped
  bool wake_ GUARDED_BY(claim_loop_.mu()) = false;
  bool claim_in_flight_ GUARDED_BY(claim_loop_.mu()) = false;
  ServiceClock::time_point claim_since_ GUARDED_BY(claim_loop_.mu());  // when the claim in flight began
  std::uint64_t claims_started_ GUARDED_BY(claim_loop_.mu()) = 0;
};

}  // namespace akadzed
