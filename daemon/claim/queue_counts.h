// Counts of a queue's queued jobs that read past its stored claim floor
// (docs/claim.md, "Counts past the floors"), for the status report, the
// status page, `akadzed status` and the /metrics gauges.
//
// A count of a queue's queued jobs read from the head of each priority
// level of jobs_claim_idx steps over every entry a claim made dead, and
// under a held MVCC horizon none of them goes (the status report took 57 ms
// after 60 s at 1,000 jobs/s and ran past its statement timeout at 20
// minutes). The queue's stored floor (stored_floor.h) says where the dead
// prefix of each level it names ends for its snapshot S: every row queued
// at or before a level's floor that a later snapshot sees is pinned or was
// written by a transaction S does not see (claim_floor.h). So a count reads
//   - each floored level after its floor (a range of jobs_claim_idx);
//   - the levels between floored ones, from their heads (ranges that stop
//     at the floored levels' bounds: they never enter their entries);
//   - the floor's own rows at or below the levels' floors
//     (BelowFloorRowsSql: the pinned ids and jobs_queued_xid_idx from S's
//     xmax on and at its in-progress transactions), whether ready or not.
// The one kind of queued job it leaves out: one S saw at or below a floor
// but not ready (cancel requested, expired): the queued sweep ends it
// within a heartbeat round. Without a usable floor (none stored, another
// server's, transaction ids that went back) the count reads every level
// from its head, as before floors.
//
// The oldest ready job: the first rows of the floored levels (their rows at
// or below the floor come first and are all read), and one probe per level
// between them (the first run_at of each, at most 100 such levels).
//
// Thread-safety: uses the connection it is given.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "claim/claim_floor.h"
#include "pg/connection.h"
#include "pg/statement.h"
#include "store/status_report.h"

namespace akadzed {

// The count of `queue` with `floor` (empty: from the heads), each read up
// to `cap` + 1 rows (0: no bound): one row of total, ready and the oldest
// ready job's age in seconds (NULL: none ready).
pg::Statement QueueCountStatement(const std::string& queue, const ClaimFloor& floor, std::int64_t cap);

// A count uses a stored floor written at most this long ago (a serving
// daemon writes its queue's every 10 s): below a floor it also reads every
// row queued since the floor was written, so an old floor (a paused queue's,
// one whose daemons stopped) would make each count read every job enqueued
// since. Without one it reads from the heads, up to the cap.
inline constexpr std::chrono::microseconds kCountFloorMaxAge = std::chrono::seconds(30);

// A QueuedCounter (store/status_report.h): loads the queues' stored floors
// (when the role may read akadze.queue_floors), keeps those usable on this
// server now, and counts every queue in one round trip.
std::vector<QueuedCount> CountQueuedJobs(pg::Connection& conn, const std::vector<std::string>& queues,
                                         std::int64_t cap);

}  // namespace akadzed
