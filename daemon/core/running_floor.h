// RunningFloor: what a read of some set of running jobs (a limit key's, a
// worker's) knew, so that the next read of the set steps over none of the
// dead index entries a held MVCC horizon keeps (docs/claim.md, "Running
// floors", the reconcile).
//
// Such a set is read through an index whose entries are ordered, within the
// set, by running_xid (migration 010: the transaction that last wrote the
// row running; the claim writes it, triggers keep it true for any other
// writer). Every job of the set that ran while the horizon is held keeps an
// entry there. With a floor, the next read reads instead
//   - `ids` by id: the rows the last read found running, and
//   - the rows whose running_xid its snapshot S did not see: from
//     `from_xid` on, and `points`;
// the union is every row of the set running now. A row running now whose
// version S saw was running in S, so the last read found it; any other
// version was written, with its running_xid, by a transaction S does not
// see: one in progress in S or from S's xmax on. `from_xid` is the oldest
// of S's in-progress transactions that began at most kRunningRangeSlack
// transactions before xmax (else xmax); `points` are the older ones still
// in progress, usually none: a range from S's xmin would re-read everything
// a long-open writer's transaction keeps behind it.
//
// S must be taken by the reading statement and list the reading
// transaction's own id among those in progress when it has one
// (store/job_sql.h, kFloorSnapshotSql): a snapshot never lists its own
// transaction.
//
// Pure: no libpq, no clock.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace akadzed {

// pg_snapshot text ("xmin:xmax:xip,..."): the transactions it does not see
// are those in progress (xip) and those from xmax on.
struct SnapshotXids {
  std::uint64_t xmin = 0;
  std::uint64_t xmax = 0;
  std::vector<std::uint64_t> in_progress;
};

// nullopt when `snapshot` is not pg_snapshot text.
std::optional<SnapshotXids> ParseSnapshot(std::string_view snapshot);

struct RunningFloor {
  std::uint64_t from_xid = 0;
  std::vector<std::uint64_t> points;
  std::vector<std::int64_t> ids;
};
inline constexpr std::uint64_t kRunningRangeSlack = 1000;

// The floor a read that found `ids` running in snapshot `s` leaves.
RunningFloor RunningFloorAfter(const SnapshotXids& s, std::vector<std::int64_t> ids);

// Transaction ids as the text an `xid8[]` parameter takes (xid8 has no
// int8 form: ids past 2^63 would not fit).
std::vector<std::string> XidTexts(const std::vector<std::uint64_t>& xids);

}  // namespace akadzed
