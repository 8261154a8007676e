// The finisher: one thread and one connection that record job outcomes in
// batches. Everything submitted while a batch is in flight goes out in the
// next statement, so a burst of short jobs costs few round trips. With a
// batch delay (worker.finish_batch_delay) a batch also waits that long from
// its first finish for more, up to kMaxBatch: fewer statements per job,
// each job's finish (and its slot) that much later. A finish
// that could not be written because the database is away is retried until
// shutdown; one that stays unwritten is recovered by the rescue after
// heartbeat_ttl (the job is still `running` under a worker that stops
// heartbeating), so no job is lost.
//
// Thread-safety: Submit may be called from any thread; Start/Stop from the
// owner only.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <mutex>
#include <string>

#include "claim/claim_transaction.h"
#include "hooks/transition_hooks.h"
#include "runtime/db_session.h"
#include "metrics/worker_metrics.h"
#include "core/thread_annotations.h"
#include "runtime/service_loop.h"
#include "store/job_finish.h"
#include "worker/finish_tally.h"

namespace akadzed {

// What holds the slot a job's finish frees (a queue runner). The finisher
// calls FreeSlots on its own thread once per statement, with every job of
// that holder whose finish the statement recorded, found stale or gave up
// on: one hand-off per batch, not one wake-up per job.
class SlotHolder {
 public:
  virtual void FreeSlots(std::span<const std::int64_t> job_ids) = 0;

 protected:
  ~SlotHolder() = default;
};

struct FinishItem {
  ClaimedJob job;         // args_json is dropped on submit
  std::string worker_id;  // the worker that claimed it (the fence)
  JobOutcome outcome;
  double duration_ms = 0;
  SlotHolder* slot = nullptr;  // told when the finish ends; must outlive the finisher's Stop
  bool keep_succeeded = true;  // false: deleted if it succeeds (FinishRequest)
};

// What a finisher may be given beyond its connection and metrics.
struct FinisherOptions {
  // Run in each finish's transaction (may be null); a finish they refuse is
  // retried with backoff (the job stays running and its slot busy meanwhile).
  const TransitionHooks* hooks = nullptr;
  // How its statements are planned (FinishPlanFor the daemon's slots,
  // store/job_finish.h).
  FinishPlan plan = FinishPlan::kPerBatch;
  // Counts each applied finish by queue (may be null).
  FinishTally* tally = nullptr;
  // How long a batch waits from its first finish for more (0: it goes out
  // at once); a stop ends the wait.
  std::chrono::microseconds batch_delay{};
};

// What one round of the finisher did (Finisher::Round).
struct FinisherRound {
  // Finishes that ended: recorded, found stale or given up (their slots
  // freed), or, past the stop's deadline, left unrecorded.
  std::size_t ended = 0;
  // Finishes kept for the next try: the database was away, or a hook
  // refused them.
  std::size_t kept = 0;
  // When the next round is due, by the clock: the end of the batch delay of
  // what is pending (kept == 0), or the retry after a failure (kept > 0).
  // None: when a finish is submitted.
  std::optional<ServiceClock::time_point> next_round;
  // The stop was requested and nothing is left to write (or the stop's
  // deadline passed with the database away): the loop ends.
  bool done = false;
};

class Finisher {
 public:
  // Job outcomes and durations are counted in `metrics` as finishes are
  // recorded (or found stale, or given up on). `stall_timeout` bounds its
  // transactions (pg::Connection::Open).
  Finisher(std::string conninfo, std::chrono::milliseconds stall_timeout, WorkerMetrics& metrics,
           FinisherOptions options = {}, const ServiceClock& clock = SteadyServiceClock());
  ~Finisher();

  void Start();
  void Submit(FinishItem item);
  // Writes what is pending, retrying until `deadline` (by the clock), then
  // stops the thread.
  void Stop(ServiceClock::time_point deadline);
  // One round, on the finisher's thread (or a test's, with the thread never
  // started): when what is pending is due (its batch delay passed by the
  // clock, a full batch, a stop, or a batch kept from a failed try), writes
  // up to kMaxBatch of it in one statement per worker id; after a failure,
  // says when to try again; past the stop's deadline with the database
  // away, gives the rest up (finish_unrecorded).
  FinisherRound Round();

  // Statements issued and finishes recorded so far (for logs and tests).
  std::int64_t statements() const;

 private:
  void Loop();
  // Round's write of batch_ and what follows from it.
  FinisherRound WriteBatch();
  // Records `batch`; returns false if the database could not be reached or
  // a hook refused some finishes (those stay in `batch`, to be tried again).
  bool Write(std::deque<FinishItem>& batch);
  // Frees the slots of `ended` (FinishItem::slot), one call per holder.
  static void FreeSlots(const std::vector<const FinishItem*>& ended);
  // Write's work: records what it can of `batch`, moving refused finishes
  // to `refused`.
  bool WriteGroups(std::deque<FinishItem>& batch, std::deque<FinishItem>& refused);
  // What became of one request of a group.
  enum class RowFate { kWritten, kRefused, kGivenUp };
  // Records `requests` (one worker id's) in one statement; if that fails
  // for one row (pg::RowFaultError) or a hook's refusal, one at a time
  // (store/poison_rows.h). A success of a queue that keeps none whose row
  // the database will not delete is kept as succeeded (logged
  // delete_refused). A request the database still refuses becomes a failed
  // run (retry, "BadResult"), then a permanent failure ("Unprocessable");
  // one refused even so is given up (kGivenUp: logged, its slot freed, the
  // job left running until the lease keeper releases it as an orphan). A
  // hook's refusal is kRefused. So one row never keeps the others of its
  // batch, or the batch, from being recorded (docs/reliability.md). Other
  // errors (the server away, its state) propagate. `trace_ids`: each
  // request's job's trace id (or none), for the lines about it. Returns one
  // result per request.
  std::vector<FinishResult> FinishGroup(const std::string& worker_id,
                                        std::vector<FinishRequest>& requests,
                                        const std::vector<std::optional<std::string>>& trace_ids,
                                        std::vector<RowFate>& fates);

  DbSession session_;
  // Retries double from 100 ms up to 500 ms, jittered: finishes pending
  // through an outage are written within half a second of its end, before
  // any daemon may rescue their jobs (the rescue holds off for heartbeat_ttl
  // after an outage: lease_keeper.cpp). A retry against a server that is
  // down costs a refused connect; against an unreachable one, the connect
  // timeout paces it. The database being away is logged once per outage.
  // Used on the finisher thread only.
  RoundGuard guard_;
  std::chrono::microseconds retry_in_{0};  // the last failure's wait; finisher thread only
  WorkerMetrics& metrics_;
  const TransitionHooks* hooks_;  // may be null
  const FinishPlan plan_;
  FinishTally* const tally_;  // may be null: counts each applied finish by queue
  const std::chrono::microseconds batch_delay_;
  // What the round writes, taken from pending_; kept here when it could not
  // be written. The finisher thread only.
  std::deque<FinishItem> batch_;
  // The thread, its stop, and the mutex (loop_.mu()) guarding:
  ServiceLoop loop_;
  std::deque<FinishItem> pending_ GUARDED_BY(loop_.mu());
  // When the oldest of pending_ was submitted (batch_delay_ counts from it).
  ServiceClock::time_point pending_since_ GUARDED_BY(loop_.mu()) = {};
  ServiceClock::time_point deadline_ GUARDED_BY(loop_.mu()) = {};
  std::int64_t statements_ GUARDED_BY(loop_.mu()) = 0;
};

}  // namespace akadzed
