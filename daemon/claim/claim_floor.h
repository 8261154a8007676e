// ClaimFloor: where a queue's next claim starts reading each priority level
// of jobs_claim_idx, past the index entries its last claim found dead
// (docs/claim.md, "Floors").
//
// Every job a claim takes leaves a dead entry at the head of its queue's
// level in jobs_claim_idx. VACUUM removes them, but not while another
// session holds the MVCC horizon back (a long report, pg_dump, an idle
// transaction, a replica's hot_standby_feedback): a read from the head then
// steps over every one of them, a heap visit each, and claims grow linearly
// slower. A floor lets the next claim read each level after the place where
// the last claim knew every row version to be dead or listed.
//
// The invariant. A floor F holds, for the snapshot S it names: every row
// version of the queue that is queued, at a position at or before its
// level's floor in index order, and that any later snapshot sees, is either
//   (a) one of `pinned` (queued and ready in S, not taken by the claim), or
//   (b) written by a transaction S does not see: its queued_xid (migration
//       009: the transaction that last made the row queued, kept by a
//       default and triggers whoever writes it) is in S's in-progress list
//       or at or past S's xmax.
// Rows at or before a floor that S saw queued but not ready are not pinned:
// their run_at is at or before the floor's (which a claim had read as
// ready), so only a cancel request or an expiry keeps them from being ready,
// and neither ends without an UPDATE, which rewrites queued_xid.
//
// So the rows at or below the floors that the next claim must know are (a)
// and (b), found by id and through jobs_queued_xid_idx: a few rows, not the
// dead prefix. The claim reads them in the same round trip as its first
// window (WindowReader), merges them into its windows, and computes the
// next floor from what it read (NextClaimFloor). Any doubt resets the floor
// (the next claim reads from the heads): a failed claim, another server
// behind the connection (a failover: its transaction ids are another
// history), or more pinned rows than kMaxPinned.
//
// Pure: no libpq, no clock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "claim/claim_planner.h"
#include "core/running_floor.h"

namespace akadzed {

// The running floors of limit keys (docs/claim.md, "Running floors"): per
// key, what its last count of running(K) knew (core/running_floor.h), read
// through jobs_running_key_xid_idx (limit_key, running_xid).
using RunningFloors = std::unordered_map<std::string, RunningFloor>;
// At most this many keys keep a running floor; a count past it starts the
// set again (the next counts of the others read their keys whole).
inline constexpr std::size_t kMaxRunningFloorKeys = 10000;

// Records `floor` for `key` in `floors`, bounded by kMaxRunningFloorKeys.
void RecordRunningFloor(RunningFloors& floors, const std::string& key, RunningFloor floor);
// The running floors of `keys` (all of them when `keys` is null; none when
// `floors` is null) as the counts read them (claim/key_locks.h,
// KeyCountsSql): `floors`, a jsonb object {key: {"x": from_xid, "i": [ids]}}
// (flat, so that a count takes out only its key's), and `points`, those
// floors' points as xid8 text.
struct RunningFloorArgs {
  std::string floors = "{}";
  std::vector<std::string> points;
};
RunningFloorArgs RunningFloorsArgs(const RunningFloors* floors, const std::vector<std::string>* keys = nullptr);

// What the last count of a capped queue's running jobs knew, for that
// count's snapshot (store/job_sql.h, QueueRunningJobsSql), and whether that
// count's role could read akadze.worker_stops (a count that reads them is
// another statement).
struct QueueRunningFloor {
  RunningFloor running;
  bool reads_stops = false;
};

struct ClaimFloor {
  // One position per priority level, highest priority first: that level's
  // floor (its `priority` is the level's). Levels without one are read from
  // their head.
  std::vector<IndexPosition> levels;
  // (a) above, in no order.
  std::vector<std::int64_t> pinned;
  // S, as pg_snapshot text ("xmin:xmax:xip,..."); empty with no levels.
  std::string snapshot;
  // pg_postmaster_start_time() of the server S was taken on: a floor is
  // used only on the same server (a promoted standby or a restored backup
  // has transaction ids of another history).
  std::string server_started;
  // The connection (pg::Connection::serial) the floor was set or loaded
  // through: RunClaim uses it only through the same one, since a new
  // connection may reach a server that lost transactions since (a crash
  // with synchronous_commit off keeps pg_postmaster_start_time() and hands
  // their ids out again). Not stored (claim/stored_floor.h).
  std::uint64_t connection = 0;
  // The limit keys' running floors, each for its own count's snapshot
  // (earlier or later than S: a key not counted again keeps an older one),
  // all on the same server. They are kept with an empty `levels` too, and
  // then S is still set.
  RunningFloors running;
  // The queue's running floor, kept by the claims of a capped queue
  // (akadze.queue_caps).
  std::optional<QueueRunningFloor> queue_running;

  bool empty() const { return levels.empty(); }
  void clear() { *this = ClaimFloor{}; }
  // The floor of `priority`'s level, if it has one.
  const IndexPosition* LevelFloor(std::int32_t priority) const;
  // True when `p` is at or before its level's floor.
  bool Covers(const IndexPosition& p) const;
};

// At most this many levels keep a floor (the highest), and a floor with more
// pinned rows than kMaxPinned is dropped: each level costs the window reads
// an index range of their own, and pinned rows are read by id every claim.
inline constexpr std::size_t kMaxFloorLevels = 8;
inline constexpr std::size_t kMaxPinned = 1024;

// What one claim learnt, for the next floor.
struct ClaimKnowledge {
  // The floor the claim read with (empty: it read from the heads).
  const ClaimFloor* old_floor = nullptr;
  // Every queued, ready row at or below old_floor that the claim read with
  // it: the rows of (a) and (b).
  std::span<const ReadyRow> below;
  // Every row the claim's reads returned (the planner's rows, those it
  // passed over included).
  std::span<const ReadyRow> read;
  // How far the reads knew the queue (ClaimPlanner::Known).
  KnownPrefix known;
  // Rows the claim took out of the queue (claimed or failed, committed);
  // none for a dry run.
  const std::unordered_set<std::int64_t>* taken = nullptr;
  // The snapshot taken before the claim's first read and the server's start.
  std::string snapshot;
  std::string server_started;
  // The claim's now() as a run_at (microseconds since 2000-01-01 UTC): a
  // row queued and ready in a level has run_at at or before it.
  std::int64_t now_us = 0;
};

// The floor after a claim. A level whose every ready row the claim knew
// (one before known.through's, or every level when the reads were
// exhausted) and that has a floor or a known row gets (now_us, the largest
// id): every row it holds queued and ready was read, and a row with a later
// run_at is not ready, so the dead entries of the jobs claimed since, by
// anyone, lie below the new floor even when the claim found nothing. The
// level of known.through gets that position. A floor is never lowered
// below the old one; levels the claim did not reach keep theirs, now for
// the new snapshot (their rows of (a) and (b) were read as `below`). Then a
// level whose first known rows the claim took, up to one it did not, goes
// back to the last row taken before it (when that is not below its old
// floor): nothing at or below it is left to pin. Pinned: every known row
// at or below the new floors that the claim did not take. Empty when that
// would be more than kMaxPinned rows.
ClaimFloor NextClaimFloor(const ClaimKnowledge& k);

// A window read past the floors (`rows`, in index order, at most
// read.limit, `exhausted` when fewer came back), with the rows below the
// floors (`below`, in index order) that belong in it: after read.after, of a
// group the read does not skip. What comes out is the window a read from
// the heads returns: below the floors every queued, ready row is one of
// `below`, and above them the read is the same.
void MergeBelowFloor(const WindowRead& read, std::span<const ReadyRow> below, std::vector<ReadyRow>& rows,
                     bool& exhausted);

// A floor as kept in akadze.queue_floors (claim/stored_floor.h): its levels,
// pinned rows, snapshot and server, and the running floors of at most
// kMaxStoredRunningFloorKeys keys (any of them, when it has more; none with
// more than kMaxPinned ids or points), as JSON. A claim that starts from a
// stored floor counts the keys it holds no running floor of whole, once:
// under a held horizon, every entry the key's jobs left in
// jobs_running_key_xid_idx (1,800 a key after 30 minutes of 1,000 jobs/s
// over 1,000 keys; a new process's first claim went 11 -> 30 ms).
inline constexpr std::size_t kMaxStoredRunningFloorKeys = 1000;
std::string StoredFloorJson(const ClaimFloor& floor);
// The floor in `json`; nullopt when it is not one StoredFloorJson wrote (a
// level out of range, a snapshot that is not pg_snapshot text, more pinned
// rows than kMaxPinned, ...). Its running floors are dropped, all of them,
// when any is not one StoredFloorJson writes (the floor is kept: counting
// keys whole is only slower); a row of an older akadzed has none.
std::optional<ClaimFloor> StoredFloorFromJson(std::string_view json);

// Whether `floor`, set on an earlier claim, may serve a claim whose first
// statement ran on the server started at `server_started` with the snapshot
// `snapshot`: the same server, and transaction ids that did not go back.
// False for a floor that has no snapshot.
bool FloorUsable(const ClaimFloor& floor, std::string_view snapshot, std::string_view server_started);

}  // namespace akadzed
