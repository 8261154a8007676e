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
                                                  std::optional<std::chrono::microseconds> max_age,
                                                  bool with_running) {
  std::map<std::string, ClaimFloor> floors;
  if (queues.empty()) return floors;
  std::optional<std::int64_t> age_us;
  if (max_age) age_us = max_age->count();
  pg::Result r = conn.exec(
      "SELECT queue, CASE WHEN $3 OR jsonb_typeof(floor) <> 'object' THEN floor ELSE floor - 'running' END::text,"
      " pg_current_snapshot()::text FROM akadze.queue_floors WHERE queue = ANY($1::text[])"
      " AND ($2::int8 IS NULL OR set_at >= now() - $2::int8 * interval '1 microsecond')",
      pg::Params().add_array(queues).add(age_us).add(with_running));
  for (int i = 0; i < r.rows(); ++i) {
    // A stored row is as durable as the claims its snapshot saw (they were
    // committed before it was written): true on whatever server has it.
    ClaimFloor floor = StoredFloorFromJson(r.text(i, 1)).value_or(ClaimFloor{});
    if (floor.empty()) continue;
    // A running floor past the transactions there are (only a hand-written
    // row) would hide the jobs made running from it on: none is used.
    const std::optional<SnapshotXids> now = ParseSnapshot(r.text(i, 2));
    for (const auto& [key, f] : floor.running) {
      bool past = !now || f.from_xid > now->xmax;
      for (std::uint64_t p : f.points) past = past || p >= now->xmax;
      if (past) {
        floor.running.clear();
        break;
      }
    }
    floor.connection = conn.serial();
    floors.emplace(std::string(r.text(i, 0)), std::move(floor));
  }
  return floors;
}

ClaimFloor LoadQueueFloor(pg::Connection& conn, const std::string& queue) {
  std::map<std::string, ClaimFloor> floors = LoadQueueFloors(conn, {queue}, std::nullopt, /*with_running=*/true);
  auto it = floors.find(queue);
  return it == floors.end() ? ClaimFloor{} : std::move(it->second);
}

}  // namespace akadzed
