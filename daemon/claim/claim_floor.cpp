#include "claim/claim_floor.h"

#include <algorithm>
#include <charconv>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

namespace akadzed {

const IndexPosition* ClaimFloor::LevelFloor(std::int32_t priority) const {
  for (const IndexPosition& f : levels) {
    if (f.priority == priority) return &f;
  }
  return nullptr;
}

bool ClaimFloor::Covers(const IndexPosition& p) const {
  const IndexPosition* f = LevelFloor(p.priority);
  return f && !IndexBefore(*f, p);
}

ClaimFloor NextClaimFloor(const ClaimKnowledge& k) {
  // Per level (highest priority first), the floor so far.
  std::map<std::int32_t, IndexPosition, std::greater<>> floors;
  if (k.old_floor) {
    for (const IndexPosition& f : k.old_floor->levels) floors.emplace(f.priority, f);
  }
  auto raise = [&](const IndexPosition& p) {
    auto [it, added] = floors.emplace(p.priority, p);
    if (!added && IndexBefore(it->second, p)) it->second = p;
  };
  // A level above known.through's is known whole (every ready row of it
  // comes before that position), and so is every level once the reads
  // were exhausted: its floor is (now, the largest id). Its rows that are
  // not ready yet have a later run_at, so they stay above the floor.
  // known.through's own level is known up to that position.
  if (k.known.whole || k.known.through) {
    std::set<std::int32_t> levels;
    for (const auto& [priority, f] : floors) levels.insert(priority);
    for (const ReadyRow& r : k.read) levels.insert(r.priority);
    for (std::int32_t priority : levels) {
      if (k.known.whole || priority > k.known.through->priority) {
        raise(IndexPosition{priority, k.now_us, std::numeric_limits<std::int64_t>::max()});
      }
    }
    if (k.known.through) raise(*k.known.through);
  }
  // A level whose first known rows the claim took, then one it did not
  // (the rest of a window it did not need, a key at its limit): its floor
  // goes back to the last row taken before that one, if that is not below
  // the old floor. Nothing at or below it is left to pin; the rows after
  // it are read again from the index, as live rows, next time.
  auto taken = [&](const ReadyRow& r) { return k.taken && k.taken->contains(r.id); };
  std::vector<const ReadyRow*> known_rows;
  for (const ReadyRow& r : k.below) known_rows.push_back(&r);
  for (const ReadyRow& r : k.read) known_rows.push_back(&r);
  std::sort(known_rows.begin(), known_rows.end(), [](const ReadyRow* a, const ReadyRow* b) {
    return IndexBefore(a->index_position(), b->index_position());
  });
  for (auto& [priority, f] : floors) {
    std::optional<IndexPosition> last_taken;
    for (const ReadyRow* r : known_rows) {
      const IndexPosition p = r->index_position();
      if (p.priority != priority || IndexBefore(f, p)) continue;
      if (!taken(*r)) {
        const IndexPosition* old = k.old_floor ? k.old_floor->LevelFloor(priority) : nullptr;
        if (last_taken && (!old || !IndexBefore(*last_taken, *old))) f = *last_taken;
        break;
      }
      last_taken = p;
    }
  }
  ClaimFloor next;
  for (const auto& [priority, f] : floors) {
    if (next.levels.size() == kMaxFloorLevels) break;
    next.levels.push_back(f);
  }
  if (next.levels.empty()) return next;
  std::unordered_set<std::int64_t> pinned;
  auto pin = [&](const ReadyRow& r) {
    if (!taken(r) && next.Covers(r.index_position())) pinned.insert(r.id);
  };
  for (const ReadyRow& r : k.below) pin(r);
  for (const ReadyRow& r : k.read) pin(r);
  if (pinned.size() > kMaxPinned) return ClaimFloor{};
  next.pinned.assign(pinned.begin(), pinned.end());
  std::sort(next.pinned.begin(), next.pinned.end());
  next.snapshot = k.snapshot;
  next.server_started = k.server_started;
  return next;
}

void MergeBelowFloor(const WindowRead& read, std::span<const ReadyRow> below, std::vector<ReadyRow>& rows,
                     bool& exhausted) {
  std::vector<ReadyRow> mine;
  const std::unordered_set<std::string> skipped(read.skip_keys.begin(), read.skip_keys.end());
  for (const ReadyRow& r : below) {
    if (read.after && !IndexBefore(*read.after, r.index_position())) continue;
    if (r.limit_key ? skipped.contains(*r.limit_key) : read.skip_null_key) continue;
    mine.push_back(r);
  }
  if (mine.empty()) return;
  std::vector<ReadyRow> merged;
  merged.reserve(rows.size() + mine.size());
  std::merge(rows.begin(), rows.end(), mine.begin(), mine.end(), std::back_inserter(merged),
             [](const ReadyRow& a, const ReadyRow& b) { return IndexBefore(a.index_position(), b.index_position()); });
  if (static_cast<std::int64_t>(merged.size()) > read.limit) {
    merged.resize(static_cast<std::size_t>(read.limit));
    exhausted = false;
  }
  rows = std::move(merged);
}

std::string StoredFloorJson(const ClaimFloor& floor) {
  nlohmann::json levels = nlohmann::json::array();
  for (const IndexPosition& p : floor.levels) levels.push_back({p.priority, p.run_at_us, p.id});
  nlohmann::json running = nlohmann::json::object();
  for (const auto& [key, f] : floor.running) {
    if (running.size() == kMaxStoredRunningFloorKeys) break;
    if (f.points.size() > kMaxPinned || f.ids.size() > kMaxPinned) continue;
    running[key] = {f.from_xid, f.points, f.ids};
  }
  return nlohmann::json{{"v", 1},
                        {"levels", levels},
                        {"pinned", floor.pinned},
                        {"snapshot", floor.snapshot},
                        {"server", floor.server_started},
                        {"running", running}}
      .dump();
}

namespace {

// The "running" member StoredFloorJson wrote, or nothing when it is missing
// or any part of it is not what StoredFloorJson writes.
RunningFloors StoredRunningFloors(const nlohmann::json& j) {
  const auto running = j.find("running");
  if (running == j.end() || !running->is_object() || running->size() > kMaxStoredRunningFloorKeys) return {};
  auto xid = [](const nlohmann::json& v) -> std::optional<std::uint64_t> {
    if (v.is_number_unsigned()) return v.get<std::uint64_t>();
    if (v.is_number_integer() && v.get<std::int64_t>() >= 0) return static_cast<std::uint64_t>(v.get<std::int64_t>());
    return std::nullopt;
  };
  RunningFloors floors;
  for (const auto& [key, f] : running->items()) {
    if (!f.is_array() || f.size() != 3 || !f[1].is_array() || !f[2].is_array() || f[1].size() > kMaxPinned ||
        f[2].size() > kMaxPinned) {
      return {};
    }
    RunningFloor floor;
    const std::optional<std::uint64_t> from = xid(f[0]);
    if (!from) return {};
    floor.from_xid = *from;
    for (const nlohmann::json& p : f[1]) {
      const std::optional<std::uint64_t> x = xid(p);
      if (!x) return {};
      floor.points.push_back(*x);
    }
    for (const nlohmann::json& id : f[2]) {
      if (!id.is_number_integer() || (id.is_number_unsigned() && id.get<std::uint64_t>() >
                                          static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))) {
        return {};
      }
      floor.ids.push_back(id.get<std::int64_t>());
    }
    floors.emplace(key, std::move(floor));
  }
  return floors;
}

}  // namespace

std::optional<ClaimFloor> StoredFloorFromJson(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  const auto version = j.find("v");
  if (version == j.end() || !version->is_number_integer() || version->get<std::int64_t>() != 1) return std::nullopt;
  const auto levels = j.find("levels");
  const auto pinned = j.find("pinned");
  const auto snapshot = j.find("snapshot");
  const auto server = j.find("server");
  if (levels == j.end() || !levels->is_array() || levels->empty() || levels->size() > kMaxFloorLevels ||
      pinned == j.end() || !pinned->is_array() || pinned->size() > kMaxPinned || snapshot == j.end() ||
      !snapshot->is_string() || server == j.end() || !server->is_string()) {
    return std::nullopt;
  }
  auto integer = [](const nlohmann::json& v, std::int64_t lo, std::int64_t hi) -> std::optional<std::int64_t> {
    if (v.is_number_integer() && !v.is_number_unsigned()) {
      const std::int64_t x = v.get<std::int64_t>();
      if (x >= lo && x <= hi) return x;
    } else if (v.is_number_unsigned() && v.get<std::uint64_t>() <= static_cast<std::uint64_t>(hi) && lo <= 0) {
      return static_cast<std::int64_t>(v.get<std::uint64_t>());
    }
    return std::nullopt;
  };
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  ClaimFloor floor;
  for (const nlohmann::json& l : *levels) {
    if (!l.is_array() || l.size() != 3) return std::nullopt;
    const auto priority = integer(l[0], std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max());
    const auto run_at = integer(l[1], kMin, kMax);
    const auto id = integer(l[2], kMin, kMax);
    if (!priority || !run_at || !id) return std::nullopt;
    // A run_at PostgreSQL has no timestamptz for would fail every statement
    // that reads with the floor (TimestampFromMicrosSql): only its range
    // (4714 BC to 294276 AD) and the two infinities.
    constexpr std::int64_t kFirstTimestamp = -211813488000000000;  // 4714-11-24 00:00 BC
    constexpr std::int64_t kEndTimestamp = 9223371331200000000;    // 294277-01-01 00:00, excluded
    if (*run_at != kMin && *run_at != kMax && (*run_at < kFirstTimestamp || *run_at >= kEndTimestamp)) {
      return std::nullopt;
    }
    // Highest priority first, one position a level.
    if (!floor.levels.empty() && floor.levels.back().priority <= *priority) return std::nullopt;
    floor.levels.push_back({static_cast<std::int32_t>(*priority), *run_at, *id});
  }
  for (const nlohmann::json& p : *pinned) {
    const auto id = integer(p, kMin, kMax);
    if (!id) return std::nullopt;
    floor.pinned.push_back(*id);
  }
  floor.snapshot = snapshot->get<std::string>();
  floor.server_started = server->get<std::string>();
  if (!ParseSnapshot(floor.snapshot) || floor.server_started.empty()) return std::nullopt;
  floor.running = StoredRunningFloors(j);
  return floor;
}

bool FloorUsable(const ClaimFloor& floor, std::string_view snapshot, std::string_view server_started) {
  if (floor.snapshot.empty() || floor.server_started != server_started) return false;
  const std::optional<SnapshotXids> then = ParseSnapshot(floor.snapshot);
  const std::optional<SnapshotXids> now = ParseSnapshot(snapshot);
  return then && now && now->xmax >= then->xmax;
}

void RecordRunningFloor(RunningFloors& floors, const std::string& key, RunningFloor floor) {
  if (floors.size() >= kMaxRunningFloorKeys && !floors.contains(key)) floors.clear();
  floors[key] = std::move(floor);
}

RunningFloorArgs RunningFloorsArgs(const RunningFloors* floors, const std::vector<std::string>* keys) {
  RunningFloorArgs out;
  if (floors == nullptr || floors->empty()) return out;
  nlohmann::json k = nlohmann::json::object();
  std::set<std::uint64_t> points;
  auto add = [&](const std::string& key, const RunningFloor& f) {
    k[key] = {{"x", f.from_xid}, {"i", f.ids}};
    points.insert(f.points.begin(), f.points.end());
  };
  if (keys) {
    for (const std::string& key : *keys) {
      if (auto it = floors->find(key); it != floors->end()) add(key, it->second);
    }
  } else {
    for (const auto& [key, f] : *floors) add(key, f);
  }
  out.floors = k.dump();
  out.points = XidTexts(std::vector<std::uint64_t>(points.begin(), points.end()));
  return out;
}

}  // namespace akadzed
