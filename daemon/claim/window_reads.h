// The claim's window reads: the ready rows of one queue, read through
// jobs_claim_idx in windows (the single stream) or per priority level (the
// streams of aging), around skipped groups through jobs_claim_key_idx when
// that is cheaper (keyed_window.h, and the cost model in window_reads.cpp),
// and catch-ups of rows the planner skipped. Each read returns ReadyRows in
// index order, as the planner (claim_planner.h) asks for them.
//
// Thread-safety: reads use the transaction they are given; a WindowReader
// belongs to one claim.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "claim/claim_floor.h"
#include "claim/claim_planner.h"
#include "claim/key_locks.h"
#include "claim/keyed_window.h"
#include "pg/statement.h"
#include "pg/transaction.h"

namespace akadzed {

// What every read of one claim shares.
struct ReadContext {
  std::string queue;
  // The aging interval in seconds as exact decimal text; empty without aging.
  std::string aging_seconds;
};

// The context of a claim of `queue` with the aging interval `aging_us`.
ReadContext MakeReadContext(const std::string& queue, std::optional<std::int64_t> aging_us);

// Counts without locks (key_locks.h) of the keys a read saw that the claim
// did not know: the window statements bring them along, so the claim can
// skip keys at their limit without a round trip of its own.
struct UnlockedCounts {
  const std::unordered_map<std::string, KeyInfo>* known = nullptr;  // the claim's key states: not counted
  std::unordered_map<std::string, KeyInfo> counts;  // filled by reads
  // The keys' running floors the counts read with and record (null: none).
  RunningFloors* running = nullptr;
};

// Reads the windows of the single stream (no aging): through jobs_claim_idx,
// or, when skipped groups would make that walk long, around them through
// jobs_claim_key_idx (KeyedWindow). Both return rows the planner treats the
// same: every ready row of a group not skipped, after the frontier and up to
// the last row returned.
class WindowReader {
 public:
  // `queued_rows`: PostgreSQL's estimate of the queued rows (of every queue),
  // negative when it has none; it bounds the groups worth enumerating.
  // `floor` (nullptr or empty: none): windows of jobs_claim_idx start each
  // floored level past its floor, and `below`, the floor's rows
  // (BelowFloorStatement), are merged into them. Reads around skipped
  // groups and catch-ups read every row of their ranges themselves. The
  // floor must outlive the reader.
  WindowReader(pg::Transaction& tx, const ReadContext& ctx, double queued_rows, const ClaimFloor* floor = nullptr,
               std::vector<ReadyRow> below = {});

  struct Window {
    std::vector<ReadyRow> rows;
    bool exhausted = false;
    bool keyed = false;
  };

  // Reads the window; `counts` gains the keys it saw first.
  Window Read(const WindowRead& read, UnlockedCounts& counts);
  // The claim's first window (read.after unset: through jobs_claim_idx) as
  // a statement, to send along with others.
  static pg::Statement FirstStatement(const ReadContext& ctx, const WindowRead& read, const ClaimFloor* floor,
                                      const UnlockedCounts& counts);
  // The window a filtered walk (FirstStatement's, or Read's when not keyed)
  // returned in `result`; `counts` gains the keys it saw first.
  Window FromResult(const WindowRead& read, const pg::Result& result, UnlockedCounts& counts);

  // The queue's keys, once, when the first keyed read enumerated them (then
  // empty): the claim counts them ahead of their rows.
  std::vector<std::string> TakeEnumeratedKeys() { return std::exchange(enumerated_, {}); }

 private:
  // Whether `read` goes through KeyedWindow (enumerating the keys the first
  // time). Once a claim reads keyed, it stays keyed.
  bool UseKeyed(const WindowRead& read);

  pg::Transaction& tx_;
  const ReadContext& ctx_;
  std::optional<KeyedWindow> keyed_;
  const std::int64_t max_groups_;
  bool keyed_refused_ = false;
  std::vector<std::string> enumerated_;
  std::vector<ReadyRow> last_window_;
  const ClaimFloor* floor_;
  const std::vector<ReadyRow> below_;  // index order
};

// A count that grows by one for each entry of jobs_claim_idx this backend's
// reads returned whose row version was not visible (dead, or not
// committed): index scans count every entry they return and every live row
// they fetch through it, and the claim's window reads are plain index scans
// (they read columns the index lacks). The counts are the backend's pending
// statistics, flushed between transactions, never within one: the
// difference between two reads in one transaction is what the statements
// between them stepped over.
pg::Statement DeadEntriesStatement();
// The snapshot a claim's floor will hold for, the server's start and the
// claim's now() as a run_at (claim_floor.h): sent before the first read.
pg::Statement FloorSnapshotStatement();
// The rows of `floor` that a claim must know (claim_floor.h), in index order.
pg::Statement BelowFloorStatement(const ReadContext& ctx, const ClaimFloor& floor);
// The rows at or below `floor`'s levels of the queue `queue` (a bound
// parameter of `st`) that are pinned or were queued by a transaction its
// snapshot does not see: a SELECT of (id, limit_key, priority, run_at).
// `ready_only`: those ready now (what a claim must know); else every queued
// one (what a count must, queue_counts.h).
std::string BelowFloorRowsSql(pg::Statement& st, const std::string& queue, const ClaimFloor& floor, bool ready_only);
// The rows of a FindLevelsStatement() or a BelowFloorStatement().
std::vector<ReadyRow> RowsFrom(const pg::Result& result);

// The priority levels present among the queue's queued rows, highest first,
// each with its first row in index order (ready or not): the statement, and
// its result read with RowsFrom().
pg::Statement FindLevelsStatement(const ReadContext& ctx);

// Windows of several level streams (aging) in one statement, one per read
// of `reads` (each names its level by index into `heads`).
std::vector<std::vector<ReadyRow>> ReadLevelWindows(pg::Transaction& tx, const ReadContext& ctx,
                                                    const std::vector<ReadyRow>& heads,
                                                    const std::vector<WindowRead>& reads,
                                                    UnlockedCounts& counts);

// The rows of one group the planner skipped and needs after all.
std::vector<ReadyRow> ReadCatchUp(pg::Transaction& tx, const ReadContext& ctx, const CatchUpRead& read);

}  // namespace akadzed
