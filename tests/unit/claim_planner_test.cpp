// ClaimPlanner rule by rule (SPEC §2-3): order, limits, held and NULL keys,
// fair turns, the stop rule, each exclusion, windows, removal and catch-up.
// planner_model_test.cpp checks the same planner on random queues.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "claim/claim_planner.h"
#include "claim/key_limits.h"

namespace akadzed {
namespace {

using Ids = std::vector<std::int64_t>;

// A job at claim position `id` (ids ascend with run_at, one priority level).
ReadyRow Job(std::int64_t id, std::optional<std::string> key, std::int32_t priority = 0) {
  ReadyRow r;
  r.id = id;
  r.limit_key = std::move(key);
  r.priority = priority;
  r.effective = priority;
  r.run_at_us = 1000 * id;
  return r;
}

// Serves windows from an in-memory queue (single stream) as the claim
// transaction would, honouring cursors and skip lists.
struct Queue {
  std::vector<ReadyRow> rows;  // in index order

  std::vector<ReadyRow> Read(const WindowRead& w) const {
    std::vector<ReadyRow> out;
    bool past = !w.after.has_value();
    for (const ReadyRow& r : rows) {
      if (!past) {
        if (r.index_position() == *w.after) past = true;
        continue;
      }
      bool skip = r.limit_key ? std::find(w.skip_keys.begin(), w.skip_keys.end(), *r.limit_key) !=
                                    w.skip_keys.end()
                              : w.skip_null_key;
      if (skip) continue;
      if (static_cast<std::int64_t>(out.size()) == w.limit) break;
      out.push_back(r);
    }
    return out;
  }
};

struct Run {
  PlanStep step;
  std::vector<WindowRead> reads;  // every window read, in order
  int catch_ups = 0;
};

// Runs the planner to a settled plan (no lock failures).
Run Drive(ClaimPlanner& planner, const Queue& q, const std::map<std::string, std::int64_t>& allowed,
          std::vector<WindowRead> reads) {
  Run run;
  for (int guard = 0; guard < 1000; ++guard) {
    for (const WindowRead& w : reads) {
      std::vector<ReadyRow> rows = q.Read(w);
      planner.AddWindow(w, rows, static_cast<std::int64_t>(rows.size()) < w.limit);
      run.reads.push_back(w);
    }
    for (const std::string& k : planner.KeysNeedingState()) planner.SetKeyAllowed(k, allowed.at(k));
    run.step = planner.Plan();
    if (run.step.settled) return run;
    for (const CatchUpRead& c : run.step.catch_ups) {
      std::vector<ReadyRow> rows;
      for (const ReadyRow& r : q.rows) {
        if (r.limit_key != c.limit_key) continue;
        ReadyRow after_row, through_row;
        if (c.after) {
          after_row = Job(c.after->id, std::nullopt, c.after->priority);
          after_row.run_at_us = c.after->run_at_us;
          if (!ClaimsBefore(after_row, r)) continue;
        }
        if (c.through) {
          through_row = Job(c.through->id, std::nullopt, c.through->priority);
          through_row.run_at_us = c.through->run_at_us;
          if (ClaimsBefore(through_row, r)) continue;
        }
        rows.push_back(r);
      }
      planner.AddCatchUp(c, rows);
      ++run.catch_ups;
    }
    reads = run.step.reads;
  }
  FAIL("planner did not settle");
  return run;
}

ClaimPlanner Planner(ClaimMode mode, int slots, std::int64_t first_window = 0) {
  ClaimPlannerOptions o;
  o.mode = mode;
  o.slots = slots;
  o.first_window = first_window;
  return ClaimPlanner(o);
}

TEST_CASE("StartsAllowed follows SPEC §2", "[planner][limits]") {
  ApplicableLimits none;  // no own row, no '*' row: held
  CHECK(StartsAllowed(none, {0, 0}) == 0);
  ApplicableLimits uncapped{true, std::nullopt, std::nullopt, std::nullopt};
  CHECK(StartsAllowed(uncapped, {50, 50}) == kUnlimited);
  ApplicableLimits running{true, 3, std::nullopt, std::nullopt};
  CHECK(StartsAllowed(running, {1, 99}) == 2);
  CHECK(StartsAllowed(running, {5, 0}) == 0);  // floor 0
  ApplicableLimits starts{true, std::nullopt, 4, 60'000'000};
  CHECK(StartsAllowed(starts, {99, 1}) == 3);
  ApplicableLimits both{true, 5, 2, 60'000'000};
  CHECK(StartsAllowed(both, {1, 0}) == 2);   // starts bind
  CHECK(StartsAllowed(both, {4, 0}) == 1);   // running binds
}

TEST_CASE("ordered: priority DESC, run_at, id; first window slots x 4", "[planner]") {
  Queue q;
  q.rows = {Job(4, std::nullopt, 5), Job(1, std::nullopt, 1), Job(2, std::nullopt, 1),
            Job(3, std::nullopt, 0)};
  ClaimPlanner p = Planner(ClaimMode::kOrdered, 2);
  auto first = p.FirstReads();
  REQUIRE(first.size() == 1);
  CHECK(first[0].limit == 8);
  CHECK_FALSE(first[0].after.has_value());
  Run run = Drive(p, q, {}, first);
  CHECK(run.step.plan == Ids{4, 1});
  CHECK(run.reads.size() == 1);
}

TEST_CASE("ordered: settles as soon as slots eligible rows are known", "[planner]") {
  Queue q;
  for (int i = 1; i <= 100; ++i) q.rows.push_back(Job(i, std::nullopt));
  ClaimPlanner p = Planner(ClaimMode::kOrdered, 3);
  Run run = Drive(p, q, {}, p.FirstReads());
  CHECK(run.step.plan == Ids{1, 2, 3});
  CHECK(run.reads.size() == 1);
  CHECK(p.rows_known() == 12);
}

TEST_CASE("LowerSlots (a queue cap's room): fewer jobs from the reads already handed out", "[planner]") {
  Queue q;
  for (int i = 1; i <= 100; ++i) q.rows.push_back(Job(i, i % 2 ? std::optional<std::string>("a") : std::nullopt));
  for (ClaimMode mode : {ClaimMode::kOrdered, ClaimMode::kFair}) {
    ClaimPlanner p = Planner(mode, 10);
    auto first = p.FirstReads();
    CHECK(first[0].limit == 40);  // sized for 10 slots
    CHECK_THROWS_AS(p.LowerSlots(0), std::invalid_argument);
    CHECK_THROWS_AS(p.LowerSlots(11), std::invalid_argument);
    p.LowerSlots(3);
    Run run = Drive(p, q, {{"a", 100}}, first);
    CHECK(run.step.plan == Ids{1, 2, 3});
    // Once rows are in, the slots stay as they are.
    CHECK_THROWS_AS(p.LowerSlots(2), std::logic_error);
  }
}

TEST_CASE("windows double and continue after the last row read", "[planner]") {
  Queue q;
  for (int i = 1; i <= 100; ++i) q.rows.push_back(Job(i, "a"));  // a key at its limit
  q.rows.push_back(Job(101, std::nullopt));
  ClaimPlanner p = Planner(ClaimMode::kOrdered, 1, 2);
  // n(a) = 0: 'a' is skipped from the second window on; the first reads 2 rows.
  Run run = Drive(p, q, {{"a", 0}}, p.FirstReads());
  CHECK(run.step.plan == Ids{101});
  REQUIRE(run.reads.size() == 2);
  CHECK(run.reads[0].limit == 2);
  CHECK(run.reads[1].limit == 4);
  REQUIRE(run.reads[1].after.has_value());
  CHECK(run.reads[1].after->id == 2);
  CHECK(run.reads[1].skip_keys == std::vector<std::string>{"a"});
}

TEST_CASE("a key with n left takes its first n rows; the next eligible rows fill in",
          "[planner][limits]") {
  Queue q;
  q.rows = {Job(1, "a"), Job(2, "a"), Job(3, "a"), Job(4, "b"), Job(5, std::nullopt), Job(6, "a")};
  ClaimPlanner p = Planner(ClaimMode::kOrdered, 4);
  Run run = Drive(p, q, {{"a", 1}, {"b", 2}}, p.FirstReads());
  CHECK(run.step.plan == Ids{1, 4, 5});
}

TEST_CASE("a key at its limit is excluded from the next window", "[planner][exclusion]") {
  Queue q;
  for (int i = 1; i <= 10; ++i) q.rows.push_back(Job(i, "a"));
  for (int i = 11; i <= 30; ++i) q.rows.push_back(Job(i, "b"));
  ClaimPlanner p = Planner(ClaimMode::kOrdered, 5, 4);
  Run run = Drive(p, q, {{"a", 2}, {"b", 3}}, p.FirstReads());
  CHECK(run.step.plan == Ids{1, 2, 11, 12, 13});
  REQUIRE(run.reads.size() >= 2);
  // After the first window (rows 1-4), 'a' has taken its 2 and is skipped.
  CHECK(run.reads[1].skip_keys == std::vector<std::string>{"a"});
  // 'b' becomes excluded too once it took its 3.
  bool b_skipped = false;
  for (const auto& w : run.reads) {
    if (std::find(w.skip_keys.begin(), w.skip_keys.end(), "b") != w.skip_keys.end()) b_skipped = true;
  }
  CHECK_FALSE(b_skipped);  // settled before another read was needed
}

TEST_CASE("held keys (no applicable row) are never claimed and skipped at once",
          "[planner][limits][exclusion]") {
  Queue q;
  q.rows = {Job(1, "typo"), Job(2, "typo"), Job(3, std::nullopt), Job(4, "typo"),
            Job(5, std::nullopt)};
  ClaimPlanner p = Planner(ClaimMode::kOrdered, 3, 2);
  Run run = Drive(p, q, {{"typo", 0}}, p.FirstReads());
  CHECK(run.step.plan == Ids{3, 5});
  REQUIRE(run.reads.size() >= 2);
  CHECK(run.reads[1].skip_keys == std::vector<std::string>{"typo"});
}

TEST_CASE("NULL-key jobs are unlimited and never excluded in ordered mode", "[planner]") {
  Queue q;
  for (int i = 1; i <= 50; ++i) q.rows.push_back(Job(i, std::nullopt));
  ClaimPlanner p = Planner(ClaimMode::kOrdered, 50, 4);
  Run run = Drive(p, q, {}, p.FirstReads());
  CHECK(run.step.plan.size() == 50);
  for (const auto& w : run.reads) CHECK_FALSE(w.skip_null_key);
}

TEST_CASE("fair: every group's first job, then every second job", "[planner][fair]") {
  Queue q;
  q.rows = {Job(1, "a"), Job(2, "a"), Job(3, "a"), Job(4, "b"), Job(5, std::nullopt),
            Job(6, "b"), Job(7, std::nullopt)};
  ClaimPlanner p = Planner(ClaimMode::kFair, 6);
  Run run = Drive(p, q, {{"a", kUnlimited}, {"b", kUnlimited}}, p.FirstReads());
  CHECK(run.step.plan == Ids{1, 4, 5, 2, 6, 7});
}

TEST_CASE("fair: settled once slots rows of turn 1 are known", "[planner][fair]") {
  Queue q;
  for (int i = 1; i <= 200; ++i) q.rows.push_back(Job(i, "k" + std::to_string(i % 50)));
  std::map<std::string, std::int64_t> allowed;
  for (int k = 0; k < 50; ++k) allowed["k" + std::to_string(k)] = kUnlimited;
  ClaimPlanner p = Planner(ClaimMode::kFair, 5);
  Run run = Drive(p, q, allowed, p.FirstReads());
  CHECK(run.step.plan == Ids{1, 2, 3, 4, 5});
  CHECK(run.reads.size() == 1);
}

TEST_CASE("fair: one group must be read to its end (an unseen group could come)",
          "[planner][fair][exclusion]") {
  Queue q;
  for (int i = 1; i <= 100; ++i) q.rows.push_back(Job(i, std::nullopt));
  q.rows.push_back(Job(101, "late"));
  ClaimPlanner p = Planner(ClaimMode::kFair, 3, 4);
  Run run = Drive(p, q, {{"late", kUnlimited}}, p.FirstReads());
  // The late key's turn 1 beats the NULL group's turn 2 and 3.
  CHECK(run.step.plan == Ids{1, 101, 2});
  // After the first window the NULL group already has 3 rows (>= slots): skipped.
  REQUIRE(run.reads.size() >= 2);
  CHECK(run.reads[1].skip_null_key);
}

TEST_CASE("fair: a group whose next turn is later than the last turn needed is excluded",
          "[planner][fair][exclusion]") {
  // slots 4: a has 4 rows up front, b and c appear later. After the first
  // window (a1..a4) the plan needs turns up to 4; a has turns 1-4, its next
  // is 5: skipped ("already has slots rows"). Once b shows up the last turn
  // needed drops to 2 and a's next turn (5) stays out.
  Queue q;
  for (int i = 1; i <= 4; ++i) q.rows.push_back(Job(i, "a"));
  for (int i = 5; i <= 20; ++i) q.rows.push_back(Job(i, "a"));
  q.rows.push_back(Job(21, "b"));
  q.rows.push_back(Job(22, "b"));
  q.rows.push_back(Job(23, "c"));
  ClaimPlanner p = Planner(ClaimMode::kFair, 4, 4);
  Run run = Drive(p, q, {{"a", kUnlimited}, {"b", kUnlimited}, {"c", kUnlimited}}, p.FirstReads());
  CHECK(run.step.plan == Ids{1, 21, 23, 2});
  REQUIRE(run.reads.size() >= 2);
  CHECK(run.reads[1].skip_keys == std::vector<std::string>{"a"});
  // a's rows 5..20 were never read.
  CHECK(p.Find(5) == nullptr);
}

TEST_CASE("fair with limits: a key's turns stop at its n", "[planner][fair][limits]") {
  Queue q;
  q.rows = {Job(1, "a"), Job(2, "a"), Job(3, "b"), Job(4, "a"), Job(5, "b")};
  ClaimPlanner p = Planner(ClaimMode::kFair, 5);
  Run run = Drive(p, q, {{"a", 1}, {"b", 2}}, p.FirstReads());
  CHECK(run.step.plan == Ids{1, 3, 5});
}

TEST_CASE("Plan() refuses keys without state", "[planner]") {
  ClaimPlanner p = Planner(ClaimMode::kOrdered, 1);
  auto reads = p.FirstReads();
  std::vector<ReadyRow> rows = {Job(1, "a")};
  p.AddWindow(reads[0], rows, true);
  CHECK(p.KeysNeedingState() == std::vector<std::string>{"a"});
  CHECK_THROWS_AS(p.Plan(), std::logic_error);
  p.SetKeyAllowed("a", 1);
  CHECK(p.KeysNeedingState().empty());
  CHECK(p.Plan().plan == Ids{1});
}

TEST_CASE("rows another claim holds are absent: the next rows take their place",
          "[planner][locks]") {
  Queue q;
  for (int i = 1; i <= 10; ++i) q.rows.push_back(Job(i, std::nullopt));
  ClaimPlanner p = Planner(ClaimMode::kOrdered, 3);
  Run run = Drive(p, q, {}, p.FirstReads());
  REQUIRE(run.step.plan == Ids{1, 2, 3});
  Ids gone = {2};
  p.RemoveRows(gone);
  PlanStep again = p.Plan();
  CHECK(again.settled);
  CHECK(again.plan == Ids{1, 3, 4});
}

TEST_CASE("removing a key's planned row reads back the rows skipped while it was at its limit",
          "[planner][locks][exclusion]") {
  // a may start 1: a1 is planned and a is skipped from then on. a1 turns out
  // to be locked by another claim: a2, skipped in the second window, must be
  // caught up, and it beats the NULL rows behind it.
  Queue q;
  q.rows = {Job(1, "a"), Job(2, std::nullopt), Job(3, "a"), Job(4, std::nullopt),
            Job(5, std::nullopt), Job(6, std::nullopt), Job(7, std::nullopt)};
  ClaimPlanner p = Planner(ClaimMode::kOrdered, 4, 2);
  Run run = Drive(p, q, {{"a", 1}}, p.FirstReads());
  REQUIRE(run.step.plan == Ids{1, 2, 4, 5});
  CHECK(p.Find(3) == nullptr);  // skipped
  Ids gone = {1};
  p.RemoveRows(gone);
  Run after = Drive(p, q, {{"a", 1}}, {});
  CHECK(after.catch_ups == 1);
  CHECK(after.step.plan == Ids{2, 3, 4, 5});
}

TEST_CASE("duplicate rows from overlapping reads are ignored", "[planner]") {
  ClaimPlanner p = Planner(ClaimMode::kOrdered, 2);
  auto reads = p.FirstReads();
  std::vector<ReadyRow> rows = {Job(1, std::nullopt), Job(1, std::nullopt), Job(2, std::nullopt)};
  p.AddWindow(reads[0], rows, true);
  CHECK(p.rows_known() == 2);
  CHECK(p.Plan().plan == Ids{1, 2});
}

TEST_CASE("aged streams merge by effective priority", "[planner][aging]") {
  // Two levels as two streams; level 1's old row is aged to 3.
  ClaimPlannerOptions o;
  o.mode = ClaimMode::kOrdered;
  o.slots = 3;
  o.stream_count = 2;
  ClaimPlanner p(o);
  auto reads = p.FirstReads();
  REQUIRE(reads.size() == 2);
  ReadyRow high = Job(10, std::nullopt, 2);  // effective 2
  ReadyRow old_low = Job(1, std::nullopt, 1);
  old_low.effective = 3;
  ReadyRow new_low = Job(20, std::nullopt, 1);  // effective 1
  std::vector<ReadyRow> level2 = {high};
  std::vector<ReadyRow> level1 = {old_low, new_low};
  p.AddWindow(reads[0], level2, true);
  p.AddWindow(reads[1], level1, true);
  PlanStep step = p.Plan();
  CHECK(step.settled);
  CHECK(step.plan == Ids{1, 10, 20});
}

}  // namespace
}  // namespace akadzed
