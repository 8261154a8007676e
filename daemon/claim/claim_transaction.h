// The claim transaction: the I/O around ClaimPlanner (SPEC §3). The window
// reads are claim/window_reads.h, the key locks and recounts
// claim/key_locks.h; this file runs the claim.
//
// One call claims from one queue in one transaction: read ready rows through
// jobs_claim_idx in windows (slots * 4 or as the request says, doubling), lock and count newly seen
// limit keys, let the planner decide, lock the plan with FOR UPDATE SKIP
// LOCKED (reading on when rows were taken by someone else), mark the jobs
// running and record their starts, commit.
//
// RunClaim's claims of one queue run one at a time: each first waits for the
// queue's claim lock (a transaction-level advisory lock), holding nothing
// else. ClaimInTransaction does not take it.
//
// A queue with a cap (akadze.queue_caps, docs/scaling.md) is claimed only
// up to its room: the cap minus the queue's running jobs, counted in a
// statement that starts after the claim holds the queue's claim lock. Jobs
// become running only by claims, and RunClaim's claims of the queue take
// turns, so the count cannot grow between that statement and the claim's
// COMMIT: the cap is never exceeded by RunClaim's claims. (ClaimInTransaction
// does not take the lock; its claims respect the cap only as they see it.)
//
// Per-key locks are transaction-level advisory locks on the key's name (a key
// that falls back to the '*' row has no row of its own to lock). The first
// lock a claim takes may wait; every later one is a try-lock, and a key whose
// lock another claim holds is not claimed this time. So two claims meeting
// keys in different orders never deadlock, and no two claims see the same
// free slot of a key.
//
// Thread-safety: RunClaim uses the connection it is given; one claim per
// connection at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "claim/claim_floor.h"
#include "claim/claim_planner.h"
#include "core/claimed_job.h"
#include "core/uuid.h"
#include "pg/connection.h"
#include "pg/transaction.h"

namespace akadzed {

struct ClaimRequest {
  std::string queue = "default";
  // The most jobs the claim takes.
  int slots = 1;
  // The jobs the claim expects to take, 1..slots (0: slots). It sizes the
  // claim's first window read (slots * 4 rows), so a request whose slots
  // may free while it waits (slots_at_lock) reads no more rows at first
  // than the slots free when it was sent need.
  int expected_slots = 0;
  // Rows a slot the first window reads without aging: expected_slots times
  // this. 0: 4 (FirstWindowSizer::kMaxPerSlot); else 1 to 64. A smaller
  // window costs a claim that needs more rows further reads (windows double
  // from it), never a different plan. With aging each level's first window is expected_slots
  // rows, whatever this says.
  double first_window_per_slot = 0;
  // Asked once per try of the claim, after its first round trip (RunClaim:
  // once it holds the queue's claim lock), how many jobs the caller can take
  // now; the claim takes at most min(slots, that), and nothing when that is
  // below 1. A caller whose slots free while its claim waits for the claim
  // lock takes them in this claim rather than in a claim of its own that
  // waits again (docs/claim.md, "Slots counted at the lock"). Called on the
  // claiming thread. Empty: `slots`.
  std::function<int()> slots_at_lock;
  ClaimMode mode = ClaimMode::kOrdered;
  // Worker uuid written to claimed jobs; empty: a random one is made.
  std::string worker_id;
  // Plan and lock exactly as a real claim, then roll back (RunClaim only).
  bool dry_run = false;
  // Priority aging interval (SPEC §2): effective priority = priority +
  // floor((now() - run_at) / interval), at least priority. nullopt: no aging.
  std::optional<std::int64_t> aging_us;
  // Called by RunClaim inside the claim's transaction with the claimed jobs'
  // ids, just before the commit (the transition hooks'
  // queued -> running); whatever it throws rolls the claim back and
  // propagates. Not called for dry runs or empty claims.
  // Called with every job the claim changed: those it claimed and those it
  // failed as Unprocessable (ClaimResult::unprocessable).
  std::function<void(pg::Connection&, const std::vector<std::int64_t>&)> before_commit;
  // Jobs this claim must not take, though ready (a transition hook refused
  // them in an earlier try of this round): they are passed over like rows
  // another claim locked, and the claim reads on.
  std::vector<std::int64_t> exclude_ids;
  // The lease fence: when set, the claim takes no job unless akadze.workers
  // has worker_id with a heartbeat younger than this (by the server's
  // clock_timestamp(), so a statement that reaches the server late is judged
  // when it runs). Checked first and again in the statement that claims.
  // A worker whose lease ran out, or whose row a rescue deleted, claims
  // nothing (ClaimResult::fenced).
  std::optional<std::int64_t> lease_span_us;
  // The queue's floor (claim_floor.h), kept by the caller from one claim of
  // the queue to the next: RunClaim without aging reads each floored level
  // past its floor, and leaves here the floor for the next claim. It is
  // cleared first, so a claim that throws leaves none (the next reads from
  // the heads). nullptr: no floor (every read from the heads); ignored
  // with aging and by ClaimInTransaction. One floor serves one queue.
  ClaimFloor* floor = nullptr;
};

struct ClaimResult {
  std::vector<ClaimedJob> jobs;  // in claim order
  // Planned jobs whose run_count is at int4's maximum: failed as
  // Unprocessable in the claim's transaction instead of run (id, task,
  // queue and limit_key set). docs/reliability.md, "Rows that cannot be
  // processed".
  std::vector<ClaimedJob> unprocessable;
  int windows = 0;               // window reads issued (one per stream read)
  int keyed_windows = 0;         // of those, read around skipped groups (keyed_window.h)
  int streams = 1;               // 1, or the priority levels read with aging
  std::int64_t rows_read = 0;    // rows those reads (and catch-ups) returned
  // Of the rows read, those at or before the last planned row in claim
  // order: the rows a first window needs to hold this plan (FirstWindowSizer);
  // a lower bound of what settles it in one read (a fair plan with rows of
  // a later turn, or one shorter than its slots, settles only when the
  // queue is read to its end). Known when something was planned and its last
  // row lies in the reads' plain prefix: windows of jobs_claim_idx that
  // neither skip nor read around groups (later windows that do start after
  // it). nullopt otherwise, and always with aging or after a catch-up read.
  // RunClaim: of its last try.
  std::optional<std::int64_t> rows_needed;
  int lock_rounds = 0;           // claiming statements (FOR UPDATE SKIP LOCKED rounds)
  // With a floor (ClaimRequest::floor): the levels the reads started past
  // their floor, and the rows read below them (pinned, or queued since).
  int floor_levels = 0;
  std::int64_t rows_below_floor = 0;
  // Entries of jobs_claim_idx the claim's reads stepped over whose row
  // version was dead (or not committed): what a held MVCC horizon costs it
  // (DeadEntriesStatement). Counted when the claim ends its transaction
  // (RunClaim), 0 otherwise.
  std::int64_t dead_index_entries = 0;
  int keys_locked_elsewhere = 0; // keys skipped because another claim held them
  // RunClaim: claims that ended without a job because a key planned on its
  // count without locks was taken meanwhile, and ran again (docs/claim.md,
  // "Speculative key locks").
  int speculation_failures = 0;
  bool paused = false;           // the queue is paused: nothing claimed
  // The queue's cap (akadze.queue_caps) and its running jobs when the claim
  // held the claim lock; nullopt: the queue has no cap.
  std::optional<std::int64_t> queue_cap;
  std::int64_t queue_running = 0;
  bool capped = false;           // the queue's running jobs are at its cap: nothing claimed
  bool fenced = false;           // the lease fence held: nothing claimed (ClaimRequest::lease_span_us)
  std::string worker_id;
  double elapsed_ms = 0;
  // Round trips to the server from BEGIN to COMMIT (docs/claim.md, "Round
  // trips"); RunClaim's are all of them, COMMIT included.
  int round_trips = 0;
};

// Claims up to request.slots ready jobs of request.queue in its own
// transaction. Commits (or, for a dry run, rolls back) before returning.
// Throws pg::PgError on database errors (the transaction is rolled back) and
// std::invalid_argument for a bad request (slots < 1, malformed worker id,
// aging interval not positive).
ClaimResult RunClaim(pg::Connection& conn, const ClaimRequest& request);

// The same claim inside a transaction the caller owns and ends (dry_run is
// ignored: the caller commits or rolls back), without the queue's claim
// lock: it runs side by side with other claims of the queue. Ready and aged
// priorities are judged at that transaction's now(). Only the claim's first
// key lock may wait, so a caller that already holds row or advisory locks can
// deadlock with another claim; keep the transaction to this claim.
ClaimResult ClaimInTransaction(pg::Transaction& tx, const ClaimRequest& request);

// Throws std::invalid_argument when the request is malformed.
void ValidateClaimRequest(const ClaimRequest& request);

}  // namespace akadzed
