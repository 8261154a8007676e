// FirstWindowSizer: how many rows a slot a queue's next claim reads in its
// first window, from what its last claim needed.
//
// A claim reads ready rows in windows, the first of expected_slots * 4 rows
// (ClaimRequest::first_window_per_slot): 4 rows a slot leave room for rows
// the claim cannot take (keys at their limits, rows other claims hold)
// without a second read, a round trip while the queue's claim lock is held.
// A queue whose claims take the rows at its head (no limit keys at their
// limits, no other claimer) still read 4 rows for each job: the window read
// was a fifth of the server's CPU in the no-op burn-down (docs/benchmarks.md).
//
// The rule: after a claim that planned P jobs and needed R rows of its
// windows (ClaimResult::rows_needed: the rows read up to its last planned
// row), the next first window reads kMargin * R / P rows a slot, at least
// kMargin, at most kMaxPerSlot (the fixed size it replaces). A claim whose
// rows_needed is unknown (aging, a catch-up, or a plan that reaches into a
// window that skipped or read around groups) puts it back to kMaxPerSlot;
// a claim that planned nothing leaves it. A window too small for the claim
// costs further reads, never a different plan: the planner reads until its
// plan is settled (claim/claim_planner.h). Windows double from the smaller
// start (1.15, 2.3, 4.6, 9.2 rows a slot against 4, 8, 16), so a claim that needs
// many rows a slot may take one or two reads more than with the fixed size,
// each maybe with a key-lock round trip, while the claim lock is held; the
// next claim then reads 4 rows a slot again.
//
// The slots it is read for (ClaimRequest::expected_slots), ExpectedSlots:
// every slot of a queue of at most kWholeWindowSlots (slots and prefetch);
// beyond that the slots free when the claim is sent, or, when more, those
// the last claim counted at the claim lock. A window of 4 rows a slot for
// slots that will not free would cost more than it saves; but with other
// daemons' claims queued on the claim lock the slots free there are about
// twice those free at the send (two daemons of no-op jobs: 2,000 against
// 1,000), and a window sized for the send took a second read, under the
// lock, in most claims.
//
// Thread-safety: none; one sizer belongs to one queue's claim loop.
#pragma once

#include <cstdint>
#include <optional>

namespace akadzed {

class FirstWindowSizer {
 public:
  // The fixed size before sizing, and the most it reads.
  static constexpr double kMaxPerSlot = 4.0;
  // Room above the last claim's need: for slots that free while the claim
  // waits for the claim lock beyond those ExpectedSlots counts, and rows
  // taken by then. 1.5 before ExpectedSlots took the slots counted at the
  // lock; 1.15 reads a fifth fewer rows with no further read in the
  // 100,000-job burn-downs, 1 and 2 daemons (docs/benchmarks.md, "seventh
  // step").
  static constexpr double kMargin = 1.15;

  // Up to this many slots (and prefetched jobs), a claim's first window is
  // read for all of them.
  static constexpr int kWholeWindowSlots = 64;

  // Rows a slot for the next claim's first window.
  double per_slot() const { return per_slot_; }

  // The slots the next claim's first window is read for, with `free_now` of
  // the queue's `capacity` (slots and prefetch) free when it is sent.
  int ExpectedSlots(int free_now, int capacity) const;
  // The slots the last claim counted at the claim lock
  // (ClaimRequest::slots_at_lock).
  void ObserveSlotsAtLock(int free_at_lock) { free_at_lock_ = free_at_lock; }

  // What the last claim planned (jobs claimed and failed as Unprocessable)
  // and the rows it needed (nullopt: not known).
  void Observe(std::int64_t planned, std::optional<std::int64_t> rows_needed);

 private:
  double per_slot_ = kMaxPerSlot;
  int free_at_lock_ = 0;
};

}  // namespace akadzed
