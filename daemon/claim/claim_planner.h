// ClaimPlanner: decides which ready jobs a claim takes, from windows of rows
// read in claim order, without ever seeing the whole queue (SPEC §2-3).
//
// The planner is pure: no libpq, no clock, no I/O. The claim transaction
// (claim_transaction.h) reads rows and per-key state from PostgreSQL and feeds
// them in; the planner answers with the plan, whether it is settled, what to
// read next and which keys and fair groups the next window may skip.
//
// Rows come in *streams*: each stream is a run of jobs_claim_idx whose index
// order is also claim order. Without aging there is one stream (the queue);
// with aging there is one per priority level (within a level, effective
// priority never increases as run_at grows), and claim order is their merge.
//
// Exactness. The settled plan equals the reference of SPEC §2 (rank the whole
// queue, drop jobs past their key's n, order by (turn if fair), claim order,
// take `slots`) over every ready row minus the rows the claim could not lock.
// The argument, in brief (docs/claim.md has it in full):
//  * B = the smallest frontier over unexhausted streams. Every unread row sits
//    after B in claim order, so a row at or before B has an exact turn.
//  * Ordered: the plan is settled once `slots` eligible rows at or before B
//    are known, or nothing is left unread.
//  * Fair: an unread row may belong to an unseen group, whose turn is 1; so
//    the plan is settled once it holds `slots` exact rows of turn 1, or
//    nothing is left unread.
//  * A group is skipped in a stream read up to c once, with L its live rows
//    at or before c: L >= n (its key's allowance), or in fair mode L >= T
//    (T: the turn of the slots-th exact candidate, the cut), or L >= T - 1
//    with the cut row at or before c. Every later row of the group is then
//    past its key's n or behind the cut, so it can never enter the plan.
//  * RemoveRows() (rows another claim locked) can make a skipped group
//    relevant again; the planner then asks for a catch-up read of exactly the
//    rows it skipped. Removing a planned row never evicts another planned row
//    (see the doc), so rows already locked stay in the plan.
//
// Thread-safety: none; one planner belongs to one claim on one thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "claim/key_limits.h"

namespace akadzed {

enum class ClaimMode { kOrdered, kFair };

// A row's place in jobs_claim_idx: (priority DESC, run_at, id). Used as a
// read cursor and as the bounds of catch-up reads.
struct IndexPosition {
  std::int32_t priority = 0;
  std::int64_t run_at_us = 0;  // microseconds since 2000-01-01 UTC; INT64_MIN/MAX: -infinity/infinity
  std::int64_t id = 0;
  friend bool operator==(const IndexPosition&, const IndexPosition&) = default;
};

// Index order of jobs_claim_idx (and of one group in jobs_claim_key_idx):
// priority DESC, run_at, id. True when a comes before b.
bool IndexBefore(const IndexPosition& a, const IndexPosition& b);

// One ready job as read from the queue.
struct ReadyRow {
  std::int64_t id = 0;
  std::optional<std::string> limit_key;  // nullopt: SQL NULL
  std::int32_t priority = 0;             // as stored
  std::int64_t run_at_us = 0;
  std::int64_t effective = 0;  // claim priority: `priority`, or the aged value
  IndexPosition index_position() const { return {priority, run_at_us, id}; }
};

// Claim order: effective DESC, run_at, id. True when a is claimed before b.
bool ClaimsBefore(const ReadyRow& a, const ReadyRow& b);

// The next window to read from one stream.
struct WindowRead {
  int stream = 0;
  // Read rows strictly after this position (nullopt: from the stream's start).
  std::optional<IndexPosition> after;
  std::int64_t limit = 0;
  // Skip rows whose limit_key is one of these / NULL.
  std::vector<std::string> skip_keys;
  bool skip_null_key = false;
};

// Rows of one group the planner skipped and needs after all: every ready row
// of that group in `stream` strictly after `after` (nullopt: from the start)
// and up to and including `through` (nullopt: to the end of the stream).
struct CatchUpRead {
  int stream = 0;
  std::optional<std::string> limit_key;  // nullopt: the NULL-key group
  std::optional<IndexPosition> after;
  std::optional<IndexPosition> through;
};

// How far a claim's reads know a stream: every ready row of it, of every
// group, at or before `through` (or all of them, `whole`) was added to the
// planner. Neither: nothing is known that way (a group skipped before any
// of its rows was read).
struct KnownPrefix {
  bool whole = false;
  std::optional<IndexPosition> through;
};

struct PlanStep {
  // True when no unread row can change `plan`.
  bool settled = false;
  // Job ids in claim order (the order the claim returns them).
  std::vector<std::int64_t> plan;
  // When not settled: catch-ups first, then windows, then Plan() again.
  std::vector<CatchUpRead> catch_ups;
  std::vector<WindowRead> reads;
};

struct ClaimPlannerOptions {
  ClaimMode mode = ClaimMode::kOrdered;
  int slots = 1;
  int stream_count = 1;
  // First window of each stream; each further window of a stream doubles.
  // 0 means slots * 4.
  std::int64_t first_window = 0;
};

class ClaimPlanner {
 public:
  explicit ClaimPlanner(const ClaimPlannerOptions& options);

  // Adds the rows that the WindowRead `read` (taken from the last PlanStep, or
  // FirstReads()) returned, in index order. `exhausted`: the stream has no
  // further rows that the read did not skip (fewer rows came back than
  // `read.limit`). Rows already known (by id) are ignored.
  void AddWindow(const WindowRead& read, std::span<const ReadyRow> rows, bool exhausted);
  // Adds the rows a CatchUpRead returned, in index order.
  void AddCatchUp(const CatchUpRead& read, std::span<const ReadyRow> rows);

  // Keys seen in added rows whose state was not set yet, in order of first
  // appearance. Plan() needs all of them set.
  std::vector<std::string> KeysNeedingState() const;
  // Sets how many more jobs `key` may start in this claim (StartsAllowed();
  // 0 for a held key or one whose lock another claim holds).
  void SetKeyAllowed(const std::string& key, std::int64_t allowed);

  // Marks rows as absent (the claim could not lock them, or they are no
  // longer ready). They never come back in this claim.
  void RemoveRows(std::span<const std::int64_t> ids);

  // Lowers the slots to `slots` (1 <= slots <= the current slots): a queue
  // cap's room, or the caller's free slots counted once the claim holds the
  // claim lock, known only once the claim's first read is under way. Only
  // before any rows are added and before Plan() (std::logic_error
  // otherwise). Reads already handed out keep their size: a window larger
  // than slots * 4 reads rows the plan may not need, which is all it costs
  // (no rule below depends on a window's size).
  void LowerSlots(int slots);

  // The reads to start a claim with: one window per stream.
  std::vector<WindowRead> FirstReads();
  // Alternatively, before any read: `first_row` is the stream's first row in
  // index order (ready or not), with its effective priority. Every row of the
  // stream claims at or after it, so the planner can tell which streams it
  // needs to read at all; start with Plan() instead of FirstReads().
  void SetStreamStart(int stream, const ReadyRow& first_row);
  // Recomputes the plan from everything added so far. Throws std::logic_error
  // if a key has no state.
  PlanStep Plan();

  // The row with this id, if known.
  const ReadyRow* Find(std::int64_t id) const;
  // Every row added so far (those removed included), in no order.
  std::vector<ReadyRow> KnownRows() const;
  // How far the reads of `stream` so far know it: up to its frontier (all
  // of it once exhausted), and no further than the point up to which each
  // group skipped in it was read (claim order is index order within a
  // stream, so positions are index positions).
  KnownPrefix Known(int stream) const;
  std::int64_t rows_known() const { return static_cast<std::int64_t>(rows_.size()); }

 private:
  struct Row {
    ReadyRow data;
    int group = 0;
    bool removed = false;
  };
  struct Group {
    std::optional<std::string> key;
    bool has_state = false;
    std::int64_t allowed = kUnlimited;  // valid once has_state
  };
  struct Stream {
    std::optional<ReadyRow> frontier;  // last row read; nullopt: none yet
    bool exhausted = false;
    std::int64_t next_window = 0;
  };
  // A group skipped in a stream: every row of it up to `complete_through`
  // (nullopt: none) is known.
  struct Skip {
    int group = 0;
    int stream = 0;
    std::optional<ReadyRow> complete_through;
  };

  int GroupFor(const std::optional<std::string>& key);
  // Stores rows not known yet (by id) and merges them into claim order.
  void AddRows(std::span<const ReadyRow> rows);
  void MergeNewRows(std::size_t first_new);
  // True when group g may be skipped in a stream whose rows of g are all
  // known up to c (see the header comment). Valid after Plan().
  bool SkipSafe(std::size_t g, const std::optional<ReadyRow>& c) const;
  // Row index of g's k-th live row in claim order, or -1 (not known/kept).
  int KthLiveRow(std::size_t g, std::int64_t k) const;
  // The next window of `stream`, skipping every group SkipSafe() allows.
  WindowRead MakeRead(int stream);
  // True when row index `r` is at or before `bound` in claim order
  // (nullopt bound: before everything).
  bool AtOrBefore(int r, const std::optional<ReadyRow>& bound) const;

  ClaimPlannerOptions options_;
  std::vector<Row> rows_;                  // append-only
  std::vector<int> order_;                 // indices into rows_, claim order
  std::unordered_map<std::int64_t, int> row_by_id_;
  std::vector<Group> groups_;              // [0] is the NULL-key group
  std::unordered_map<std::string, int> group_by_key_;
  std::vector<Stream> streams_;
  std::vector<Skip> skips_;
  std::size_t read_width_ = 1;  // streams to read when more candidates are needed
  std::vector<char> skipped_;              // [group * stream_count + stream]
  // Computed by Plan(), used by SkipSafe(): per group, the row index of its
  // rank-n live row (n = its key's allowance) and of its first slots + 1 live
  // rows (fair); the fair cut: the turn and row of the slots-th exact
  // candidate (slots + 1 and -1 when there are fewer).
  bool planned_ = false;
  std::vector<int> kth_allowed_;
  std::vector<std::vector<int>> first_rows_;
  std::int64_t t_cut_ = 0;
  int cut_row_ = -1;
};

}  // namespace akadzed
