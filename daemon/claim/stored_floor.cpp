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

std::map<std::string, ClaimFloor> LoadQueueFloors(pg::Connection& conn, const std::vector<std::string>& queues,
                                                  std::optional<std::chrono::microseconds> max_age) {
  std::map<std::string, ClaimFloor> floors;
  if (queues.empty()) return floors;
  std::optional<std::int64_t> age_us;
  if (max_age) age_us = max_age->count();
  pg::Result r = conn.exec("SELECT queue, floor::text FROM akadze.queue_floors WHERE queue = ANY($1::text[])"
                           " AND ($2::int8 IS NULL OR set_at >= now() - $2::int8 * interval '1 microsecond')",
                           pg::Params().add_array(queues).add(age_us));
  for (int i = 0; i < r.rows(); ++i) {
    // A stored row is as durable as the claims its snapshot saw (they were
    // committed before it was written): true on whatever server has it.
    ClaimFloor floor = StoredFloorFromJson(r.text(i, 1)).value_or(ClaimFloor{});
    if (floor.empty()) continue;
    floor.connection = conn.serial();
    floors.emplace(std::string(r.text(i, 0)), std::move(floor));
  }
  return floors;
}

ClaimFloor LoadQueueFloor(pg::Connection& conn, const std::string& queue) {
  std::map<std::string, ClaimFloor> floors = LoadQueueFloors(conn, {queue}, std::nullopt);
  auto it = floors.find(queue);
  return it == floors.end() ? ClaimFloor{} : std::move(it->second);
}

}  // namespace akadzed
