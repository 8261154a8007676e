// ClaimFloor (daemon/claim/claim_floor.h): the next floor from what a claim
// knew, by rule, and the snapshot text it holds for. The floor's reads
// against PostgreSQL are checked by differential_tests [floor].
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "claim/claim_floor.h"

namespace akadzed {
namespace {

ReadyRow Row(std::int64_t id, std::int32_t priority, std::int64_t run_at_us,
             std::optional<std::string> key = std::nullopt) {
  ReadyRow r;
  r.id = id;
  r.priority = priority;
  r.run_at_us = run_at_us;
  r.effective = priority;
  r.limit_key = std::move(key);
  return r;
}

IndexPosition At(std::int32_t priority, std::int64_t run_at_us, std::int64_t id) {
  return IndexPosition{priority, run_at_us, id};
}

// The claims' now(): every row below is ready, run_at at or before it.
constexpr std::int64_t kNow = 1000;
constexpr std::int64_t kLastId = std::numeric_limits<std::int64_t>::max();

ClaimFloor Next(const ClaimFloor* old, const std::vector<ReadyRow>& below, const std::vector<ReadyRow>& read,
                KnownPrefix known, const std::unordered_set<std::int64_t>& taken) {
  ClaimKnowledge k;
  k.old_floor = old;
  k.below = below;
  k.read = read;
  k.known = known;
  k.taken = &taken;
  k.snapshot = "10:12:10";
  k.server_started = "s1";
  k.now_us = kNow;
  return NextClaimFloor(k);
}

TEST_CASE("claim floor: a claim that took the head of one level sets the floor at the known prefix",
          "[claim_floor]") {
  const std::vector<ReadyRow> read = {Row(1, 0, 100), Row(2, 0, 200), Row(3, 0, 300), Row(4, 0, 400)};
  // Read up to row 4 and took them all: the floor is the frontier.
  ClaimFloor all = Next(nullptr, {}, read, KnownPrefix{false, At(0, 400, 4)}, {1, 2, 3, 4});
  REQUIRE(all.levels.size() == 1);
  CHECK(all.levels[0] == At(0, 400, 4));
  CHECK(all.pinned.empty());
  CHECK(all.snapshot == "10:12:10");
  CHECK(all.server_started == "s1");
  CHECK(all.Covers(At(0, 400, 4)));
  CHECK_FALSE(all.Covers(At(0, 400, 5)));
  CHECK_FALSE(all.Covers(At(1, 0, 1)));  // another level: none
  // Took 1 and 2 only: the floor goes back to row 2, nothing pinned (3 and
  // 4 are read from the index again).
  ClaimFloor head = Next(nullptr, {}, read, KnownPrefix{false, At(0, 400, 4)}, {1, 2});
  REQUIRE(head.levels.size() == 1);
  CHECK(head.levels[0] == At(0, 200, 2));
  CHECK(head.pinned.empty());
  // Took 1 and 3 (2 passed over: locked elsewhere, a key at its limit):
  // the floor goes back to row 1 only.
  ClaimFloor gap = Next(nullptr, {}, read, KnownPrefix{false, At(0, 400, 4)}, {1, 3});
  CHECK(gap.levels[0] == At(0, 100, 1));
  CHECK(gap.pinned.empty());
  // Took nothing (a dry run): the floor at the frontier, every row pinned.
  ClaimFloor dry = Next(nullptr, {}, read, KnownPrefix{false, At(0, 400, 4)}, {});
  CHECK(dry.levels[0] == At(0, 400, 4));
  CHECK(dry.pinned == std::vector<std::int64_t>{1, 2, 3, 4});
}

TEST_CASE("claim floor: levels wholly known get now; the frontier's level the frontier", "[claim_floor]") {
  const std::vector<ReadyRow> read = {Row(1, 5, 100), Row(2, 5, 900), Row(3, 2, 50), Row(4, 0, 10)};
  // Known up to row 3 (level 2): level 5 wholly (every ready row of it was
  // read: the floor is now), level 2 to row 3; row 4 (level 0) lies after
  // the known prefix and gives no floor.
  ClaimFloor f = Next(nullptr, {}, read, KnownPrefix{false, At(2, 50, 3)}, {1, 2, 3});
  REQUIRE(f.levels.size() == 2);
  CHECK(f.levels[0] == At(5, kNow, kLastId));
  CHECK(f.levels[1] == At(2, 50, 3));
  CHECK(f.pinned.empty());
  // Exhausted: every level known, up to now; level 5 back to row 1, the
  // last taken before row 2; levels 2 and 0 keep now and pin their rows.
  ClaimFloor whole = Next(nullptr, {}, read, KnownPrefix{true, std::nullopt}, {1});
  REQUIRE(whole.levels.size() == 3);
  CHECK(whole.levels[0] == At(5, 100, 1));
  CHECK(whole.levels[1] == At(2, kNow, kLastId));
  CHECK(whole.levels[2] == At(0, kNow, kLastId));
  CHECK(whole.pinned == std::vector<std::int64_t>{3, 4});
  // Exhausted with nothing read (the queue had no ready row): a level with
  // a floor moves up to now, past the jobs claimed since, by anyone.
  ClaimFloor old;
  old.levels = {At(0, 10, 4)};
  ClaimFloor empty = Next(&old, {}, {}, KnownPrefix{true, std::nullopt}, {});
  REQUIRE(empty.levels.size() == 1);
  CHECK(empty.levels[0] == At(0, kNow, kLastId));
  CHECK(empty.pinned.empty());
}

TEST_CASE("claim floor: never lowered, kept for levels not reached, their rows below pinned", "[claim_floor]") {
  ClaimFloor old;
  old.levels = {At(3, 500, 50), At(0, 700, 70)};
  old.snapshot = "1:2:";
  old.server_started = "s1";
  // Rows below the old floors: one released into level 0 (not taken), one
  // into level 3 (taken).
  const std::vector<ReadyRow> below = {Row(40, 3, 100), Row(60, 0, 100)};
  // The claim read level 3 only up to a row before its old floor. Level 0's
  // released row is not taken and lies below the old floor, which is kept:
  // the floor never goes back below an old one.
  const std::vector<ReadyRow> read = {Row(40, 3, 100)};
  ClaimFloor f = Next(&old, below, read, KnownPrefix{false, At(3, 100, 40)}, {40});
  REQUIRE(f.levels.size() == 2);
  CHECK(f.levels[0] == At(3, 500, 50));  // not lowered to row 40
  CHECK(f.levels[1] == At(0, 700, 70));  // not reached: kept
  CHECK(f.pinned == std::vector<std::int64_t>{60});
  CHECK(f.snapshot == "10:12:10");  // now for the new snapshot
}

TEST_CASE("claim floor: nothing known keeps the old floors; no floor from nothing", "[claim_floor]") {
  CHECK(Next(nullptr, {}, {Row(1, 0, 1)}, KnownPrefix{}, {1}).empty());
  ClaimFloor old;
  old.levels = {At(0, 700, 70)};
  ClaimFloor f = Next(&old, {}, {Row(1, 0, 1)}, KnownPrefix{}, {1});
  REQUIRE(f.levels.size() == 1);
  CHECK(f.levels[0] == At(0, 700, 70));
}

TEST_CASE("claim floor: at most 8 levels (the highest), and too many pinned rows drop it", "[claim_floor]") {
  std::vector<ReadyRow> read;
  for (int p = 0; p < 12; ++p) read.push_back(Row(p + 1, p, 100));
  ClaimFloor f = Next(nullptr, {}, read, KnownPrefix{true, std::nullopt}, {});
  REQUIRE(f.levels.size() == kMaxFloorLevels);
  CHECK(f.levels.front().priority == 11);
  CHECK(f.levels.back().priority == 4);
  CHECK(f.pinned.size() == kMaxFloorLevels);  // rows of the dropped levels are not pinned

  std::vector<ReadyRow> many;
  for (std::int64_t i = 1; i <= static_cast<std::int64_t>(kMaxPinned) + 1; ++i) many.push_back(Row(i, 0, 1));
  CHECK(Next(nullptr, {}, many, KnownPrefix{true, std::nullopt}, {}).empty());
  many.pop_back();
  CHECK(Next(nullptr, {}, many, KnownPrefix{true, std::nullopt}, {}).pinned.size() == kMaxPinned);
}

TEST_CASE("claim floor: a stored floor round-trips its levels, pinned rows, snapshot and server", "[claim_floor]") {
  ClaimFloor f;
  f.levels = {At(std::numeric_limits<std::int32_t>::max(), std::numeric_limits<std::int64_t>::min(), 1),
              At(0, 5, std::numeric_limits<std::int64_t>::max()),
              At(std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int64_t>::max(), -3)};
  f.pinned = {7, std::numeric_limits<std::int64_t>::min(), 9};
  f.snapshot = "100:105:101,104";
  f.server_started = "2026-12-07 04:00:00.1+00";
  f.running["k"] = RunningFloor{100, {}, {1, 2}};
  f.running["\"quoted\" key"] = RunningFloor{std::numeric_limits<std::uint64_t>::max(), {101, 104},
                                               {std::numeric_limits<std::int64_t>::min()}};
  const std::optional<ClaimFloor> back = StoredFloorFromJson(StoredFloorJson(f));
  REQUIRE(back);
  CHECK(back->levels == f.levels);
  CHECK(back->pinned == f.pinned);
  CHECK(back->snapshot == f.snapshot);
  CHECK(back->server_started == f.server_started);
  REQUIRE(back->running.size() == 2);
  for (const auto& [key, floor] : f.running) {
    INFO(key);
    REQUIRE(back->running.contains(key));
    CHECK(back->running.at(key).from_xid == floor.from_xid);
    CHECK(back->running.at(key).points == floor.points);
    CHECK(back->running.at(key).ids == floor.ids);
  }
  // At most kMaxStoredRunningFloorKeys keys are stored; a key with more
  // ids than kMaxPinned is not (its first count reads it whole).
  ClaimFloor many_keys = f;
  many_keys.running.clear();
  for (std::size_t i = 0; i < kMaxStoredRunningFloorKeys + 5; ++i) {
    many_keys.running["k" + std::to_string(i)] = RunningFloor{1, {}, {}};
  }
  CHECK(StoredFloorFromJson(StoredFloorJson(many_keys))->running.size() == kMaxStoredRunningFloorKeys);
  ClaimFloor big = f;
  big.running["k"].ids.assign(kMaxPinned + 1, 7);
  CHECK(StoredFloorFromJson(StoredFloorJson(big))->running.size() == 1);
  // Running floors that are not what StoredFloorJson writes are dropped, all
  // of them; the floor is kept. A row of an older akadzed has none.
  const std::string levels = R"({"v": 1, "levels": [[1, 2, 3]], "pinned": [], "snapshot": "1:2:", "server": "s")";
  CHECK(StoredFloorFromJson(levels + "}")->running.empty());
  CHECK(StoredFloorFromJson(levels + R"(, "running": {"a": [5, [6], [7]]}})")->running.size() == 1);
  for (const std::string& bad : {std::string(R"([])"), std::string(R"({"a": [5, [6]]})"),
                                 std::string(R"({"a": [-5, [], []]})"), std::string(R"({"a": ["5", [], []]})"),
                                 std::string(R"({"a": [5, [-1], []]})"), std::string(R"({"a": [5, [], [1.5]]})"),
                                 std::string(R"({"a": [5, [], [9223372036854775808]]})"),
                                 std::string(R"({"a": [5, [], [1]], "b": null})"),
                                 std::string(R"({"a": [18446744073709551616, [], []]})")}) {
    INFO(bad);
    const std::optional<ClaimFloor> got = StoredFloorFromJson(levels + R"(, "running": )" + bad + "}");
    REQUIRE(got);
    CHECK(got->levels.size() == 1);
    CHECK(got->running.empty());
  }
  const std::string ok = R"("pinned": [], "snapshot": "1:2:", "server": "s"})";
  CHECK(StoredFloorFromJson(R"({"v": 1, "levels": [[1, 2, 3]], )" + ok));
  CHECK(StoredFloorFromJson(R"({"v": 1, "levels": [[1, 9223371331199999999, 3]], )" + ok));
  CHECK(StoredFloorFromJson(R"({"v": 1, "levels": [[1, -211813488000000000, 3]], )" + ok));
  for (const std::string& bad : std::vector<std::string>{std::string("not json"), std::string("[]"), std::string("{}"),
        R"({"v": 2, "levels": [[1, 2, 3]], )" + ok,                      // another version
        R"({"v": "1", "levels": [[1, 2, 3]], )" + ok,                    // not a number (threw: review)
        R"({"v": null, "levels": [[1, 2, 3]], )" + ok,
        R"({"v": 1, "levels": [], )" + ok,                               // no level
        R"({"v": 1, "levels": [[1, 2]], )" + ok,                         // a level of two
        R"({"v": 1, "levels": [[2147483648, 2, 3]], )" + ok,             // priority past int4
        R"({"v": 1, "levels": [[1, 2, 9223372036854775808]], )" + ok,    // id past int8
        R"({"v": 1, "levels": [[1, 2.5, 3]], )" + ok,                    // not an integer
        R"({"v": 1, "levels": [[1, 9223371331200000000, 3]], )" + ok,    // past timestamptz (review: every read threw)
        R"({"v": 1, "levels": [[1, -211813488000000001, 3]], )" + ok,    // before it
        R"({"v": 1, "levels": [[1, 2, 3], [1, 4, 5]], )" + ok,           // one level twice
        R"({"v": 1, "levels": [[1, 2, 3], [2, 4, 5]], )" + ok,           // not highest first
        R"({"v": 1, "levels": [[1, 2, 3]], "pinned": ["7"], "snapshot": "1:2:", "server": "s"})",
        R"({"v": 1, "levels": [[1, 2, 3]], "pinned": [], "snapshot": "2:1:", "server": "s"})",
        R"({"v": 1, "levels": [[1, 2, 3]], "pinned": [], "snapshot": "1:2:", "server": ""})",
        R"({"v": 1, "levels": [[1, 2, 3]], "pinned": [], "snapshot": "1:2:"})"}) {
    INFO(bad);
    CHECK_FALSE(StoredFloorFromJson(bad));
  }
  nlohmann::json many = nlohmann::json::parse(R"({"v": 1, "levels": [[1, 2, 3]], )" + ok);
  for (std::size_t i = 0; i <= kMaxPinned; ++i) many["pinned"].push_back(i);
  CHECK_FALSE(StoredFloorFromJson(many.dump()));
}

TEST_CASE("claim floor: pg_snapshot text, and when a floor may serve", "[claim_floor]") {
  auto s = ParseSnapshot("767:770:767,769");
  REQUIRE(s);
  CHECK(s->xmin == 767);
  CHECK(s->xmax == 770);
  CHECK(s->in_progress == std::vector<std::uint64_t>{767, 769});
  auto empty = ParseSnapshot("5:5:");
  REQUIRE(empty);
  CHECK(empty->in_progress.empty());
  for (const char* bad : {"", "5", "5:6", "a:6:", "7:6:", "5:6:x", "5:6:1,", "5:6:,1", "-1:6:"}) {
    INFO(bad);
    CHECK_FALSE(ParseSnapshot(bad));
  }
  ClaimFloor f;
  f.levels = {At(0, 1, 1)};
  f.snapshot = "100:105:101";
  f.server_started = "s1";
  CHECK(FloorUsable(f, "103:110:", "s1"));
  CHECK(FloorUsable(f, "100:105:", "s1"));
  CHECK_FALSE(FloorUsable(f, "103:110:", "s2"));   // another server
  CHECK_FALSE(FloorUsable(f, "90:104:", "s1"));    // transaction ids went back
  CHECK_FALSE(FloorUsable(f, "garbage", "s1"));
  CHECK_FALSE(FloorUsable(ClaimFloor{}, "103:110:", "s1"));
}

}  // namespace
}  // namespace akadzed
