// A queue's claim floor kept in akadze.queue_floors (migration 013), so
// that a process without a floor of its own (a daemon's first claim after a
// restart, `akadzed claim --dry-run`) reads past the dead prefix of the
// queue's levels too, not from the heads (docs/claim.md, "Stored floors").
//
// A floor is a fact about the database for its snapshot (claim_floor.h:
// every queued row at or before it that a later snapshot sees is pinned or
// was written by a transaction the snapshot does not see), not about what
// the claim that set it knew, so a claim of any process may start from it;
// FloorUsable still checks that it is of the same server and that
// transaction ids did not go back. The table is a cache: a row missing or
// unreadable only costs reads.
//
// Thread-safety: uses the connection it is given.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "claim/claim_floor.h"
#include "pg/connection.h"

namespace akadzed {

// Writes `floor` (its levels, pinned rows, snapshot and server, and the
// running floors of at most kMaxStoredRunningFloorKeys keys: claim_floor.h)
// as `queue`'s. Nothing for an empty floor. One statement, autocommit.
void SaveQueueFloor(pg::Connection& conn, const std::string& queue, const ClaimFloor& floor);

// `queue`'s stored floor with its running floors, or an empty one when
// there is none or it is not one SaveQueueFloor wrote.
ClaimFloor LoadQueueFloor(pg::Connection& conn, const std::string& queue);
// The stored floors of `queues` that SaveQueueFloor wrote, by queue, those
// written within `max_age` only (nullopt: any); one statement. An old floor
// is still true, but a read past it also reads every row queued since it
// was written (its snapshot does not see them): a count, read again and
// again, takes only recent ones (queue_counts.h). Their running floors only
// `with_running` (a count has no use for them), and none of a floor whose
// running floors name a transaction id not yet assigned (a hand-written
// row: they would hide the jobs made running from it on).
std::map<std::string, ClaimFloor> LoadQueueFloors(pg::Connection& conn, const std::vector<std::string>& queues,
                                                  std::optional<std::chrono::microseconds> max_age,
                                                  bool with_running = false);

}  // namespace akadzed
