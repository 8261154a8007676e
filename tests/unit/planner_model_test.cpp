// ClaimPlanner against an in-memory model of the reference claim (SPEC §2) on
// many random queues: a simulated claim transaction feeds the planner windows,
// catch-ups and lock failures exactly as daemon/claim/claim_transaction.cpp
// does, and the settled plan must equal the model, job for job and in order.
//
// Covers one stream (no aging) and one stream per priority level with aged
// effective priorities, ordered and fair, limits, held keys, NULL keys and
// rows another claim holds. AKADZED_MODEL_CASES sets the number of cases
// (default 100,000 per configuration); AKADZED_MODEL_SEED replays one case.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <unordered_set>
#include <vector>

#include "claim/claim_floor.h"
#include "claim/claim_planner.h"

namespace akadzed {
namespace {

struct ModelRow {
  ReadyRow row;
  bool absent = false;  // locked by another transaction: fails at lock time
};

struct ModelCase {
  ClaimMode mode = ClaimMode::kOrdered;
  int slots = 1;
  bool aging = false;
  std::vector<ModelRow> rows;
  std::map<std::string, std::int64_t> allowed;  // per key
  std::int64_t first_window = 0;
  bool stream_starts = false;  // start from SetStreamStart() + Plan(), as aged claims do
};

bool IndexBefore(const ReadyRow& a, const ReadyRow& b) {
  if (a.priority != b.priority) return a.priority > b.priority;
  if (a.run_at_us != b.run_at_us) return a.run_at_us < b.run_at_us;
  return a.id < b.id;
}

bool IndexAfter(const ReadyRow& r, const IndexPosition& p) {
  ReadyRow q;
  q.priority = p.priority;
  q.run_at_us = p.run_at_us;
  q.id = p.id;
  return IndexBefore(q, r);
}

// The reference of SPEC §2 over the rows that are present.
std::vector<std::int64_t> ModelClaim(const ModelCase& c) {
  std::vector<ReadyRow> present;
  for (const auto& m : c.rows) {
    if (!m.absent) present.push_back(m.row);
  }
  std::sort(present.begin(), present.end(), ClaimsBefore);
  std::map<std::optional<std::string>, std::int64_t> turn;
  struct Cand {
    std::int64_t turn;
    std::size_t pos;
    std::int64_t id;
  };
  std::vector<Cand> cands;
  for (std::size_t i = 0; i < present.size(); ++i) {
    const ReadyRow& r = present[i];
    std::int64_t t = ++turn[r.limit_key];
    std::int64_t n = r.limit_key ? c.allowed.at(*r.limit_key) : kUnlimited;
    if (t > n) continue;
    cands.push_back({c.mode == ClaimMode::kFair ? t : 0, i, r.id});
  }
  std::stable_sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& b) {
    return a.turn != b.turn ? a.turn < b.turn : a.pos < b.pos;
  });
  std::vector<std::int64_t> ids;
  for (std::size_t i = 0; i < cands.size() && i < static_cast<std::size_t>(c.slots); ++i) {
    ids.push_back(cands[i].id);
  }
  return ids;
}

struct Stats {
  std::int64_t rows_read = 0;
  int windows = 0;
  int catch_ups = 0;
  int lock_rounds = 0;
};

// A claim with a floor (claim/claim_floor.h), one stream: its windows skip
// the rows at or below the floors and merge in `below`, the rows below them
// the floor names, as WindowReader does. After the claim, what it knew.
struct FloorRead {
  const ClaimFloor* floor = nullptr;
  std::vector<ReadyRow> below;  // index order
  KnownPrefix known;            // out
  std::vector<ReadyRow> read;   // out: the planner's rows
};

// Drives the planner the way RunClaim does, over in-memory streams.
std::vector<std::int64_t> PlannerClaim(const ModelCase& c, Stats* stats, FloorRead* floor = nullptr) {
  // Streams: one per priority level with aging, else one.
  std::vector<std::int32_t> levels;
  for (const auto& m : c.rows) levels.push_back(m.row.priority);
  std::sort(levels.begin(), levels.end(), std::greater<>());
  levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
  const int stream_count = c.aging ? std::max<int>(1, static_cast<int>(levels.size())) : 1;
  std::vector<std::vector<ReadyRow>> streams(static_cast<std::size_t>(stream_count));
  std::set<std::int64_t> absent;
  for (const auto& m : c.rows) {
    std::size_t s = 0;
    if (c.aging) {
      s = static_cast<std::size_t>(std::find(levels.begin(), levels.end(), m.row.priority) -
                                   levels.begin());
    }
    streams[s].push_back(m.row);
    if (m.absent) absent.insert(m.row.id);
  }
  for (auto& s : streams) std::sort(s.begin(), s.end(), IndexBefore);

  ClaimPlannerOptions options;
  options.mode = c.mode;
  options.slots = c.slots;
  options.stream_count = stream_count;
  options.first_window = c.first_window;
  ClaimPlanner planner(options);
  auto skipped = [](const ReadyRow& r, const WindowRead& w) {
    if (!r.limit_key) return w.skip_null_key;
    return std::find(w.skip_keys.begin(), w.skip_keys.end(), *r.limit_key) != w.skip_keys.end();
  };

  std::vector<WindowRead> reads;
  if (c.stream_starts && !c.rows.empty()) {
    // Streams come from the levels present, so each has a first row.
    for (std::size_t s = 0; s < streams.size(); ++s) {
      planner.SetStreamStart(static_cast<int>(s), streams[s].front());
    }
    PlanStep first = planner.Plan();
    if (first.settled) return first.plan;
    reads = first.reads;
  } else {
    reads = planner.FirstReads();
  }
  std::vector<CatchUpRead> catch_ups;
  std::set<std::int64_t> locked;
  PlanStep step;
  for (int guard = 0;; ++guard) {
    REQUIRE(guard < 100000);
    for (const CatchUpRead& cu : catch_ups) {
      std::vector<ReadyRow> rows;
      for (const ReadyRow& r : streams[static_cast<std::size_t>(cu.stream)]) {
        if (r.limit_key != cu.limit_key) continue;
        if (cu.after && !IndexAfter(r, *cu.after)) continue;
        if (cu.through && IndexAfter(r, *cu.through)) continue;
        rows.push_back(r);
      }
      ++stats->catch_ups;
      stats->rows_read += static_cast<std::int64_t>(rows.size());
      planner.AddCatchUp(cu, rows);
    }
    for (const WindowRead& w : reads) {
      std::vector<ReadyRow> rows;
      for (const ReadyRow& r : streams[static_cast<std::size_t>(w.stream)]) {
        if (w.after && !IndexAfter(r, *w.after)) continue;
        if (skipped(r, w)) continue;
        if (floor && floor->floor->Covers(r.index_position())) continue;
        if (static_cast<std::int64_t>(rows.size()) == w.limit) break;
        rows.push_back(r);
      }
      bool exhausted = static_cast<std::int64_t>(rows.size()) < w.limit;
      if (floor) MergeBelowFloor(w, floor->below, rows, exhausted);
      ++stats->windows;
      stats->rows_read += static_cast<std::int64_t>(rows.size());
      planner.AddWindow(w, rows, exhausted);
    }
    for (const std::string& key : planner.KeysNeedingState()) {
      planner.SetKeyAllowed(key, c.allowed.at(key));
    }
    step = planner.Plan();
    if (!step.settled) {
      reads = step.reads;
      catch_ups = step.catch_ups;
      continue;
    }
    std::vector<std::int64_t> missing;
    bool any_new = false;
    for (std::int64_t id : step.plan) {
      if (locked.contains(id)) continue;
      any_new = true;
      if (absent.contains(id)) {
        missing.push_back(id);
      } else {
        locked.insert(id);
      }
    }
    if (any_new) ++stats->lock_rounds;
    if (missing.empty()) break;
    planner.RemoveRows(missing);
    reads.clear();
    catch_ups.clear();
  }
  // Every locked row is in the final plan.
  for (std::int64_t id : locked) {
    REQUIRE(std::find(step.plan.begin(), step.plan.end(), id) != step.plan.end());
  }
  if (floor) {
    floor->known = planner.Known(0);
    floor->read = planner.KnownRows();
  }
  return step.plan;
}

ModelCase RandomCase(std::uint64_t seed, bool aging) {
  std::mt19937_64 rng(seed);
  auto uni = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  ModelCase c;
  c.aging = aging;
  c.mode = uni(0, 1) ? ClaimMode::kFair : ClaimMode::kOrdered;
  c.slots = static_cast<int>(uni(0, 3) == 0 ? uni(1, 3) : uni(1, 12));
  c.first_window = uni(0, 2) == 0 ? uni(1, 5) : 0;  // tiny windows stress the stop rule
  c.stream_starts = aging && uni(0, 1) == 1;
  const int n_rows = static_cast<int>(uni(0, 3) == 0 ? uni(0, 8) : uni(0, 120));
  const int n_keys = static_cast<int>(uni(1, 12));
  const int n_levels = static_cast<int>(uni(1, 5));
  const double null_share = uni(0, 3) == 0 ? 0.0 : 0.25;
  const double absent_share = uni(0, 2) == 0 ? 0.0 : 0.15;
  const std::int64_t now = 10'000'000'000;
  const std::int64_t interval = uni(1, 20) * 1000;
  for (int k = 0; k < n_keys; ++k) {
    std::int64_t allowed;
    switch (uni(0, 5)) {
      case 0: allowed = 0; break;             // held, or locked by another claim
      case 1: allowed = kUnlimited; break;    // no caps
      default: allowed = uni(1, 6); break;
    }
    c.allowed["k" + std::to_string(k)] = allowed;
  }
  std::bernoulli_distribution is_null(null_share);
  std::bernoulli_distribution is_absent(absent_share);
  for (int i = 0; i < n_rows; ++i) {
    ModelRow m;
    m.row.id = i + 1;
    m.row.priority = static_cast<std::int32_t>(uni(0, n_levels - 1));
    // Coarse run_at values: many ties, and (with aging) rows exactly on an
    // interval boundary.
    m.row.run_at_us = now - uni(0, 40) * (interval / 4) - (uni(0, 3) == 0 ? uni(0, 2) : 0);
    if (!is_null(rng)) m.row.limit_key = "k" + std::to_string(uni(0, n_keys - 1));
    m.row.effective = m.row.priority;
    if (aging) {
      std::int64_t age = now - m.row.run_at_us;
      m.row.effective += std::max<std::int64_t>(0, age / interval);
    }
    m.absent = is_absent(rng);
    c.rows.push_back(m);
  }
  return c;
}

std::string Describe(const ModelCase& c, std::uint64_t seed) {
  std::ostringstream out;
  out << "seed=" << seed << " mode=" << (c.mode == ClaimMode::kFair ? "fair" : "ordered")
      << " slots=" << c.slots << " aging=" << c.aging << " rows=" << c.rows.size()
      << " first_window=" << c.first_window << " stream_starts=" << c.stream_starts;
  return out.str();
}

void RunModelCases(bool aging) {
  std::int64_t cases = 100000;
  if (const char* env = std::getenv("AKADZED_MODEL_CASES")) cases = std::atoll(env);
  std::uint64_t base = aging ? 0xA61A6000000ULL : 0x5EED0000000ULL;
  std::optional<std::uint64_t> only;
  if (const char* env = std::getenv("AKADZED_MODEL_SEED")) only = std::strtoull(env, nullptr, 0);
  Stats total;
  for (std::int64_t i = 0; i < cases; ++i) {
    std::uint64_t seed = only ? *only : base + static_cast<std::uint64_t>(i);
    ModelCase c = RandomCase(seed, aging);
    Stats stats;
    std::vector<std::int64_t> want = ModelClaim(c);
    std::vector<std::int64_t> got = PlannerClaim(c, &stats);
    if (got != want && only) {
      for (const auto& m : c.rows) {
        std::printf("row id=%lld key=%s prio=%d run_at=%lld eff=%lld absent=%d\n",
                    static_cast<long long>(m.row.id), m.row.limit_key.value_or("NULL").c_str(),
                    m.row.priority, static_cast<long long>(m.row.run_at_us),
                    static_cast<long long>(m.row.effective), m.absent ? 1 : 0);
      }
      for (const auto& [k, n] : c.allowed) std::printf("key %s allowed %lld\n", k.c_str(), static_cast<long long>(n));
    }
    if (got != want) {
      INFO(Describe(c, seed) << " (replay with AKADZED_MODEL_SEED=" << seed << ")");
      REQUIRE(got == want);
    }
    total.rows_read += stats.rows_read;
    total.catch_ups += stats.catch_ups;
    total.lock_rounds += stats.lock_rounds;
    if (only) break;
  }
  // The simulated claims did exercise the paths this test is about.
  if (!only && cases >= 10000) {
    CHECK(total.catch_ups > 0);
    CHECK(total.lock_rounds > cases);
  }
}

// ---- Floors: one queue claimed again and again ----
//
// Each transaction that writes the queue has an id, as in PostgreSQL; a
// claim's snapshot sees those below its xmax that are not in progress.
// Between claims rows land anywhere, below the floor included: new rows
// (some written by a transaction still in progress at the next claim,
// visible only after it, or never), rows a claim took released with their
// place, queued rows moved; rows locked by another transaction during a
// claim; keys' allowances changed. Each claim reads with the floor the one
// before left (the rows below it: pinned, or written by a transaction its
// snapshot does not see) and must equal the model over what it sees.
struct SeqRow {
  ReadyRow row;
  bool queued = true;
  std::int64_t xid = 0;
};

void RunFloorSequence(std::uint64_t seed, std::int64_t* claims_with_below) {
  std::mt19937_64 rng(seed);
  auto uni = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  const ClaimMode mode = uni(0, 1) ? ClaimMode::kFair : ClaimMode::kOrdered;
  const int slots = static_cast<int>(uni(1, 8));
  const std::int64_t first_window = uni(0, 2) == 0 ? uni(1, 5) : 0;
  const int n_levels = static_cast<int>(uni(1, 3));
  const int n_keys = static_cast<int>(uni(0, 4));
  const std::int64_t now = 10'000'000'000;
  std::map<std::string, std::int64_t> allowed;
  auto draw_allowed = [&] {
    for (int k = 0; k < n_keys; ++k) {
      allowed["k" + std::to_string(k)] = uni(0, 3) == 0 ? kUnlimited : uni(0, 4);
    }
  };
  draw_allowed();
  std::vector<SeqRow> rows;
  std::int64_t next_id = 1;
  std::int64_t next_xid = 1;
  auto place = [&](ReadyRow& r) {
    r.priority = static_cast<std::int32_t>(uni(0, n_levels - 1));
    r.run_at_us = now - uni(0, 60) * 1000;
    r.effective = r.priority;
  };
  auto add_rows = [&](int n, std::int64_t xid) {
    for (int i = 0; i < n; ++i) {
      SeqRow m;
      m.row.id = next_id++;
      place(m.row);
      if (n_keys > 0 && chance(0.5)) m.row.limit_key = "k" + std::to_string(uni(0, n_keys - 1));
      m.xid = xid;
      rows.push_back(m);
    }
  };
  add_rows(static_cast<int>(uni(0, 60)), next_xid++);
  ClaimFloor floor;
  std::optional<std::int64_t> in_flight;  // a transaction in progress during the next claim
  for (int step = 0; step < 16; ++step) {
    // Landings, each by a transaction of its own, committed before the claim.
    if (chance(0.3)) in_flight = next_xid++, add_rows(static_cast<int>(uni(1, 3)), *in_flight);
    if (chance(0.5)) add_rows(static_cast<int>(uni(1, 4)), next_xid++);
    if (chance(0.3)) {
      const std::int64_t xid = next_xid++;
      for (SeqRow& m : rows) {
        if (!m.queued && chance(0.2)) m.queued = true, m.xid = xid;
      }
    }
    if (chance(0.3)) {
      const std::int64_t xid = next_xid++;
      for (SeqRow& m : rows) {
        if (m.queued && m.xid != in_flight && chance(0.05)) place(m.row), m.xid = xid;
      }
    }
    if (chance(0.3)) draw_allowed();
    // The claim's snapshot: xmax past every transaction so far, the one in
    // flight (if any) in progress.
    const std::string snapshot = std::to_string(in_flight.value_or(next_xid)) + ":" + std::to_string(next_xid) +
                                 ":" + (in_flight ? std::to_string(*in_flight) : "");
    ModelCase c;
    c.mode = mode;
    c.slots = slots;
    c.first_window = first_window;
    c.allowed = allowed;
    for (const SeqRow& m : rows) {
      if (!m.queued || m.xid == in_flight) continue;
      c.rows.push_back(ModelRow{m.row, chance(0.05)});
    }
    // What the claim reads below the floor: queued rows it sees there that
    // are pinned or written by a transaction the floor's snapshot does not.
    FloorRead read;
    read.floor = &floor;
    const std::optional<SnapshotXids> since = ParseSnapshot(floor.snapshot);
    for (const ModelRow& m : c.rows) {
      if (!floor.Covers(m.row.index_position())) continue;
      const std::int64_t xid = std::find_if(rows.begin(), rows.end(), [&](const SeqRow& r) {
                                 return r.row.id == m.row.id;
                               })->xid;
      const bool pinned = std::find(floor.pinned.begin(), floor.pinned.end(), m.row.id) != floor.pinned.end();
      const bool unseen =
          since && (static_cast<std::uint64_t>(xid) >= since->xmax ||
                    std::find(since->in_progress.begin(), since->in_progress.end(), static_cast<std::uint64_t>(xid)) !=
                        since->in_progress.end());
      if (pinned || unseen) read.below.push_back(m.row);
    }
    std::sort(read.below.begin(), read.below.end(), IndexBefore);
    if (!read.below.empty()) ++*claims_with_below;
    Stats stats;
    const std::vector<std::int64_t> want = ModelClaim(c);
    const std::vector<std::int64_t> got = PlannerClaim(c, &stats, &read);
    if (got != want) {
      INFO("floor sequence seed=" << seed << " step=" << step << " mode="
                                  << (mode == ClaimMode::kFair ? "fair" : "ordered") << " slots=" << slots
                                  << " below=" << read.below.size() << " (replay with AKADZED_MODEL_SEED=" << seed
                                  << ")");
      REQUIRE(got == want);
    }
    const bool dry_run = chance(0.3);
    std::unordered_set<std::int64_t> taken;
    if (!dry_run) {
      taken.insert(got.begin(), got.end());
      for (SeqRow& m : rows) {
        if (taken.contains(m.row.id)) m.queued = false;
      }
    }
    ClaimKnowledge k;
    k.old_floor = &floor;
    k.below = read.below;
    k.read = read.read;
    k.known = read.known;
    k.taken = &taken;
    k.snapshot = snapshot;
    k.server_started = "model";
    k.now_us = now;
    floor = NextClaimFloor(k);
    // The transaction in flight ends after the claim: committed, or rolled
    // back (its rows gone).
    if (in_flight) {
      if (chance(0.3)) std::erase_if(rows, [&](const SeqRow& m) { return m.xid == *in_flight; });
      in_flight.reset();
    }
  }
}

TEST_CASE("claims past a floor equal the reference model, whatever lands below it", "[planner][model][floor]") {
  std::int64_t cases = 20000;
  if (const char* env = std::getenv("AKADZED_MODEL_CASES")) cases = std::max<std::int64_t>(1, std::atoll(env) / 5);
  std::optional<std::uint64_t> only;
  if (const char* env = std::getenv("AKADZED_MODEL_SEED")) only = std::strtoull(env, nullptr, 0);
  std::int64_t claims_with_below = 0;
  for (std::int64_t i = 0; i < cases; ++i) {
    RunFloorSequence(only ? *only : 0xF100'0000ULL + static_cast<std::uint64_t>(i), &claims_with_below);
    if (only) break;
  }
  // The sequences did read rows below their floors.
  if (!only) CHECK(claims_with_below > cases);
}

TEST_CASE("planner equals the reference model on random queues (one stream)", "[planner][model]") {
  RunModelCases(false);
}

TEST_CASE("planner equals the reference model on random aged queues (stream per level)",
          "[planner][model]") {
  RunModelCases(true);
}

}  // namespace
}  // namespace akadzed
