#include "claim/stored_floor.h"

#include "pg/params.h"
#include "pg/result.h"

namespace akadzed {

void SaveQueueFloor(pg::Connection& conn, const std::string& queue, const ClaimFloor& floor) {
  if (floor.empty() || floor.snapshot.empty()) return;
  conn.exec("INSERT INTO akadze.queue_floors AS f (queue, floor) VALUES ($1, $2::jsonb)"
            " ON CONFLICT (queue) DO UPDATE SET floor = EXCLUDED.floor, set_at = now()",
            pg::Params().add(queue).add(StoredFloorJson(floor)));
}

ClaimFloor LoadQueueFloor(pg::Connection& conn, const std::string& queue) {
  pg::Result r = conn.exec("SELECT floor::text FROM akadze.queue_floors WHERE queue = $1", pg::Params().add(queue));
  if (r.rows() != 1) return {};
  // A stored row is as durable as the claims its snapshot saw (they were
  // committed before it was written): true on whatever server has it.
  ClaimFloor floor = StoredFloorFromJson(r.text(0, 0)).value_or(ClaimFloor{});
  if (!floor.empty()) floor.connection = conn.serial();
  return floor;
}

}  // namespace akadzed
