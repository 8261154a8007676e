// KeyedWindow (daemon/claim/keyed_window.h) against the filtered walk it
// replaces, on random queues: every window it builds from per-group reads
// must be a prefix, at most `limit` long, of the rows a filtered
// walk of jobs_claim_idx would return (the ready rows after the frontier
// whose group the read does not skip), and it is exhausted exactly when that
// walk has nothing left. The skip set changes between windows (groups are
// skipped and un-skipped), as the planner's skips and catch-ups make it.
// AKADZED_MODEL_CASES sets the number of cases (default 20,000).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "claim/keyed_window.h"

namespace akadzed {
namespace {

bool InIndexOrder(const ReadyRow& a, const ReadyRow& b) {
  return IndexBefore(a.index_position(), b.index_position());
}

bool After(const ReadyRow& r, const IndexPosition& p) { return IndexBefore(p, r.index_position()); }

bool Skipped(const WindowRead& read, const GroupKey& key) {
  if (!key) return read.skip_null_key;
  return std::find(read.skip_keys.begin(), read.skip_keys.end(), *key) != read.skip_keys.end();
}

// The queue in index order (queued rows, some not ready: effective = -1
// marks them), and the reads the claim transaction would issue.
struct Queue {
  std::vector<ReadyRow> rows;

  static bool Ready(const ReadyRow& r) { return r.effective >= 0; }
  std::vector<ReadyRow> Filtered(const WindowRead& read) const {
    std::vector<ReadyRow> out;
    for (const ReadyRow& r : rows) {
      if (Ready(r) && After(r, *read.after) && !Skipped(read, r.limit_key)) out.push_back(r);
    }
    return out;
  }
  // Each group's first queued row, ready or not (EnumerateGroups).
  std::vector<ReadyRow> GroupStarts() const {
    std::vector<ReadyRow> out;
    for (const ReadyRow& r : rows) {
      auto same = [&](const ReadyRow& s) { return s.limit_key == r.limit_key; };
      if (std::find_if(out.begin(), out.end(), same) == out.end()) out.push_back(r);
    }
    return out;
  }
  // One group's ready rows after `after`, up to `through` if set, at most `limit`.
  std::vector<ReadyRow> Group(const GroupKey& key, const IndexPosition& after,
                              const std::optional<IndexPosition>& through, std::int64_t limit) const {
    std::vector<ReadyRow> out;
    for (const ReadyRow& r : rows) {
      if (static_cast<std::int64_t>(out.size()) >= limit) break;
      if (!Ready(r) || r.limit_key != key || !After(r, after)) continue;
      if (through && After(r, *through)) break;
      out.push_back(r);
    }
    return out;
  }
};

TEST_CASE("KeyedWindow: every window is a prefix of the filtered walk", "[keyed_window]") {
  int cases = 20000;
  if (const char* env = std::getenv("AKADZED_MODEL_CASES")) cases = std::max(1, std::atoi(env) / 10);
  std::mt19937_64 rng(7);
  for (int c = 0; c < cases; ++c) {
    std::uniform_int_distribution<int> n_rows(1, 60), n_keys(1, 6), n_levels(1, 3);
    const int keys = n_keys(rng);
    const int levels = n_levels(rng);
    Queue q;
    const int rows = n_rows(rng);
    std::vector<std::string> key_names;
    for (int k = 0; k < keys; ++k) {
      std::string name = "k";
      name += std::to_string(k);
      key_names.push_back(std::move(name));
    }
    for (int i = 1; i <= rows; ++i) {
      ReadyRow r;
      r.id = i;
      const int k = std::uniform_int_distribution<int>(0, keys)(rng);  // keys: NULL
      if (k < keys) r.limit_key = key_names[static_cast<std::size_t>(k)];
      r.priority = std::uniform_int_distribution<int>(0, levels - 1)(rng);
      r.run_at_us = std::uniform_int_distribution<int>(0, 20)(rng);  // ties broken by id
      r.effective = rng() % 5 == 0 ? -1 : r.priority;  // one in five not ready
      q.rows.push_back(r);
    }
    std::sort(q.rows.begin(), q.rows.end(), InIndexOrder);

    KeyedWindow keyed(q.GroupStarts());
    // Start after a random row, as a keyed read always follows a window.
    IndexPosition frontier = q.rows[std::uniform_int_distribution<std::size_t>(0, q.rows.size() - 1)(rng)]
                                 .index_position();
    int empty_in_a_row = 0;
    for (int w = 0; w < 200; ++w) {
      WindowRead read;
      read.after = frontier;
      read.limit = std::uniform_int_distribution<int>(1, 8)(rng);
      for (const std::string& k : key_names) {
        if (rng() % 3 == 0) read.skip_keys.push_back(k);
      }
      read.skip_null_key = rng() % 3 == 0;
      const std::vector<ReadyRow> expected = q.Filtered(read);

      for (const GroupKey& g : keyed.GroupsNeedingHead(read)) {
        std::vector<ReadyRow> head = q.Group(g, frontier, std::nullopt, 1);
        keyed.SetHead(g, head.empty() ? std::nullopt : std::optional<ReadyRow>(head.front()));
      }
      std::optional<KeyedRowsPlan> plan = keyed.PlanRows(read);
      INFO("case " << c << ", window " << w);
      if (!plan) {
        CHECK(expected.empty());
        break;
      }
      std::vector<std::vector<ReadyRow>> got;
      for (const GroupRowsRead& g : plan->groups) got.push_back(q.Group(g.key, frontier, plan->through, g.limit));
      std::vector<ReadyRow> window = keyed.Merge(*plan, got);
      // Empty only when every head read was a group start that is not ready;
      // the heads read next are ready rows.
      if (window.empty()) {
        REQUIRE(++empty_in_a_row <= keys + 1);  // each empty window turns starts into ready heads
        continue;
      }
      empty_in_a_row = 0;
      REQUIRE(static_cast<std::int64_t>(window.size()) <= read.limit);
      REQUIRE(window.size() <= expected.size());
      for (std::size_t i = 0; i < window.size(); ++i) REQUIRE(window[i].id == expected[i].id);
      frontier = window.back().index_position();
    }
  }
}

}  // namespace
}  // namespace akadzed
