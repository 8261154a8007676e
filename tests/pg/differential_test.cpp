// The differential test of SPEC §2: akadzed's windowed claim against the
// reference full-scan ranking (tests/support/reference_claim.cpp), job for job
// and in order, on thousands of random queues per mode.
//
// Each case builds a fresh queue with random sizes, priorities, run_at in the
// past and future, cancelled, expired and finished rows, NULL keys, keys with
// and without their own limits row, a '*' row or none, running jobs and start
// marks per key, sometimes a paused queue, and sometimes rows locked by
// another transaction (absent for both). Real claims and dry runs alternate.
//
// AKADZED_DIFF_CASES sets the cases per mode (default 3,600 >= the seed's
// 3,520); AKADZED_DIFF_SEED replays a single case.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "claim/claim_transaction.h"
#include "pg/transaction.h"
#include "support/reference_claim.h"
#include "support/test_cluster.h"

namespace akadzed {
namespace {

struct CaseReport {
  std::string description;
  std::vector<std::int64_t> want;
  std::vector<std::int64_t> got;
  std::int64_t rows_read = 0;
  int windows = 0;
  std::optional<std::int64_t> rows_needed;
  bool aging = false;
};

std::string Join(const std::vector<std::int64_t>& ids) {
  std::ostringstream out;
  for (std::size_t i = 0; i < ids.size(); ++i) out << (i ? "," : "") << ids[i];
  return out.str();
}

// Builds case `seed` in queue "c<seed>" and compares both claims. With
// `aging`, most cases run entirely inside one transaction, so that rows placed
// exactly on an interval boundary relative to that transaction's now() are
// on it for both the reference and the claim; the others are committed and
// may have rows locked by another transaction, with run_at kept away from
// boundaries.
CaseReport RunCase(pg::Connection& conn, pg::Connection& holder_conn, std::uint64_t seed, bool fair,
                   bool aging) {
  std::mt19937_64 rng(seed);
  auto uni = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  const std::string queue = "c" + std::to_string(seed);
  const std::string key_prefix = queue + "_k";
  std::ostringstream desc;

  const int slots = static_cast<int>(chance(0.3) ? uni(1, 3) : uni(1, 25));
  const int n_rows = static_cast<int>(chance(0.15) ? uni(200, 700) : chance(0.2) ? uni(0, 5) : uni(5, 150));
  const int n_keys = static_cast<int>(uni(1, 15));
  const int n_levels = static_cast<int>(chance(0.2) ? uni(5, 40) : uni(1, 4));
  const double null_share = chance(0.25) ? 0.0 : chance(0.2) ? 0.9 : 0.3;
  desc << "seed=" << seed << " mode=" << (fair ? "fair" : "ordered") << " slots=" << slots
       << " rows=" << n_rows << " keys=" << n_keys << " levels=" << n_levels;
  std::optional<std::int64_t> aging_us;
  const bool in_transaction = aging && chance(0.7);
  if (aging) {
    static const std::int64_t kIntervals[] = {1'000'000, 10'000'000, 60'000'000, 300'000'000};
    aging_us = kIntervals[uni(in_transaction ? 0 : 1, 3)];
    desc << " aging_us=" << *aging_us << (in_transaction ? " in_transaction" : "");
  }
  std::optional<pg::Transaction> tx;
  if (in_transaction) tx.emplace(conn);

  // The '*' row: absent, or with random caps.
  conn.exec("DELETE FROM akadze.limits WHERE key = '*'");
  if (chance(0.6)) {
    std::optional<std::int64_t> mr, ms;
    if (chance(0.7)) mr = uni(1, 4);
    if (chance(0.4)) ms = uni(1, 4);
    conn.exec("INSERT INTO akadze.limits VALUES ('*', $1::int, $2::int, CASE WHEN $2::int IS NULL"
              " THEN NULL ELSE interval '1 hour' END)",
              pg::Params().add(mr).add(ms));
    desc << " star=(" << (mr ? std::to_string(*mr) : "-") << "," << (ms ? std::to_string(*ms) : "-") << ")";
  } else {
    desc << " star=none";
  }

  // Keys: own row or not; running jobs; start marks inside and outside the window.
  std::vector<std::string> keys, own_keys;
  std::vector<std::optional<std::int64_t>> own_mr, own_ms;
  std::vector<std::string> running_keys, mark_keys;
  std::vector<std::int64_t> mark_ages_s;
  for (int k = 0; k < n_keys; ++k) {
    std::string key = key_prefix + std::to_string(k);
    keys.push_back(key);
    if (chance(0.5)) {
      own_keys.push_back(key);
      own_mr.push_back(chance(0.7) ? std::optional<std::int64_t>(uni(1, 5)) : std::nullopt);
      own_ms.push_back(chance(0.4) ? std::optional<std::int64_t>(uni(1, 5)) : std::nullopt);
    }
    for (std::int64_t r = uni(0, 3) - 1; r > 0; --r) running_keys.push_back(key);
    for (std::int64_t m = uni(0, 4) - 1; m > 0; --m) {
      mark_keys.push_back(key);
      mark_ages_s.push_back(chance(0.7) ? uni(1, 3000) : uni(4000, 9000));  // window is 1 hour
    }
  }
  conn.exec(
      "INSERT INTO akadze.limits (key, max_running, max_starts, starts_window)"
      " SELECT k, mr, ms, CASE WHEN ms IS NULL THEN NULL ELSE interval '1 hour' END"
      " FROM unnest($1::text[], $2::int[], $3::int[]) AS u(k, mr, ms)",
      pg::Params().add_array(own_keys).add_array(own_mr).add_array(own_ms));
  conn.exec(
      "INSERT INTO akadze.limit_starts (key, started_at)"
      " SELECT k, now() - s * interval '1 second' FROM unnest($1::text[], $2::int8[]) AS u(k, s)",
      pg::Params().add_array(mark_keys).add_array(mark_ages_s));
  // Running jobs, half in this queue and half elsewhere: all count.
  conn.exec(
      "INSERT INTO akadze.jobs (task, queue, state, limit_key, run_count, started_at)"
      " SELECT 't', CASE WHEN n % 2 = 0 THEN $2 ELSE $2 || '_elsewhere' END, 'running', k, 1, now()"
      " FROM unnest($1::text[]) WITH ORDINALITY AS u(k, n)",
      pg::Params().add_array(running_keys).add(queue));

  // The queue's rows.
  std::vector<std::int64_t> priorities, run_at_us, expires_ms;
  std::vector<std::optional<std::string>> row_keys;
  std::vector<std::string> states;
  std::vector<std::optional<std::int64_t>> expires;
  std::vector<std::string> cancelled;
  const std::int64_t spread_ms = chance(0.3) ? 50 : 3'600'000;  // many run_at ties, or few
  for (int i = 0; i < n_rows; ++i) {
    priorities.push_back(uni(0, n_levels - 1) - (n_levels > 3 ? 2 : 0));
    row_keys.push_back(chance(null_share) ? std::nullopt
                                          : std::optional<std::string>(keys[static_cast<std::size_t>(uni(0, n_keys - 1))]));
    // Past rows are at least 2 s old, future ones at least a minute ahead, so
    // that the claim and the reference agree on readiness.
    if (chance(0.1)) {
      run_at_us.push_back(-uni(60'000, 3'600'000) * 1000);  // future
    } else if (aging_us && in_transaction) {
      // k full intervals ago, exactly on the boundary or a microsecond off it.
      std::int64_t k = uni(0, 30);
      std::int64_t off = std::array<std::int64_t, 4>{0, 1, -1, uni(0, *aging_us - 1)}[uni(0, 3)];
      run_at_us.push_back(std::max<std::int64_t>(0, k * *aging_us + off));
    } else if (aging_us) {
      // Mid-interval: no row crosses a boundary between the two statements.
      run_at_us.push_back(uni(1, 30) * *aging_us + uni(*aging_us / 4, 3 * *aging_us / 4));
    } else {
      run_at_us.push_back(uni(2000, 2000 + spread_ms) * 1000);
    }
    double roll = std::uniform_real_distribution<double>(0, 1)(rng);
    states.push_back(roll < 0.03 ? "succeeded" : roll < 0.05 ? "failed" : roll < 0.07 ? "running" : "queued");
    expires.push_back(chance(0.06) ? std::optional<std::int64_t>(chance(0.5) ? -60'000 : 60'000)
                                   : std::nullopt);
    cancelled.push_back(chance(0.05) ? "t" : "f");
  }
  std::vector<std::optional<std::string>> state_opt(states.begin(), states.end());
  std::vector<std::optional<std::string>> cancelled_opt(cancelled.begin(), cancelled.end());
  pg::Result inserted = conn.exec(
      "INSERT INTO akadze.jobs (task, queue, priority, limit_key, run_at, state, run_count,"
      "                         expires_at, cancel_requested_at)"
      " SELECT 't', $1, p, k, now() - us * interval '1 microsecond', s,"
      "        CASE WHEN s = 'queued' THEN 0 ELSE 1 END,"
      "        CASE WHEN e IS NULL THEN NULL ELSE now() + e * interval '1 millisecond' END,"
      "        CASE WHEN c THEN now() END"
      " FROM unnest($2::int[], $3::text[], $4::int8[], $5::text[], $6::int8[], $7::bool[])"
      "      WITH ORDINALITY AS u(p, k, us, s, e, c, n)"
      " ORDER BY n RETURNING id",
      pg::Params()
          .add(queue)
          .add_array(priorities)
          .add_array(row_keys)
          .add_array(run_at_us)
          .add_array(state_opt)
          .add_array(expires)
          .add_array(cancelled_opt));
  std::vector<std::int64_t> ids;
  for (int i = 0; i < inserted.rows(); ++i) ids.push_back(inserted.int64(i, 0));

  const bool paused = chance(0.03);
  if (paused) {
    conn.exec("INSERT INTO akadze.queue_pauses (queue) VALUES ($1)", pg::Params().add(queue));
    desc << " paused";
  }

  // Rows another transaction holds.
  std::vector<std::int64_t> locked;
  std::optional<pg::Transaction> holder;
  if (!in_transaction && chance(0.25) && !ids.empty()) {
    for (std::int64_t id : ids) {
      if (chance(0.15)) locked.push_back(id);
    }
    holder.emplace(holder_conn);
    holder->exec("SELECT id FROM akadze.jobs WHERE id = ANY($1::int8[]) FOR UPDATE",
                 pg::Params().add_array(locked));
    desc << " locked=" << locked.size();
  }

  const bool dry_run = chance(0.5);
  desc << (dry_run ? " dry_run" : " real");
  test::ReferenceClaimRequest ref;
  ref.queue = queue;
  ref.slots = slots;
  ref.fair = fair;
  ref.absent_ids = locked;
  ref.aging_us = aging_us;
  CaseReport report;
  report.want = test::ReferenceClaim(conn, ref);

  // The first window as the daemon may size it (FirstWindowSizer): the
  // default 4 rows a slot, or fewer, so that more claims need further reads.
  // Drawn last: the cases' queues stay what they were.
  const double per_slot[] = {0, 1, 1.5, 2.5};
  const double first_window_per_slot = per_slot[uni(0, 3)];
  desc << " first_window_per_slot=" << first_window_per_slot;

  ClaimRequest request;
  request.queue = queue;
  request.slots = slots;
  request.mode = fair ? ClaimMode::kFair : ClaimMode::kOrdered;
  request.dry_run = dry_run;
  request.aging_us = aging_us;
  request.first_window_per_slot = first_window_per_slot;
  ClaimResult result = tx ? ClaimInTransaction(*tx, request) : RunClaim(conn, request);
  if (tx) tx->rollback();
  for (const ClaimedJob& j : result.jobs) report.got.push_back(j.id);
  report.rows_read = result.rows_read;
  report.windows = result.windows;
  report.rows_needed = result.rows_needed;
  report.aging = aging_us.has_value();
  if (holder) holder->rollback();
  report.description = desc.str();
  return report;
}

void RunCases(bool fair, bool aging) {
  std::int64_t cases = 3600;
  if (const char* env = std::getenv("AKADZED_DIFF_CASES")) cases = std::atoll(env);
  std::optional<std::uint64_t> only;
  if (const char* env = std::getenv("AKADZED_DIFF_SEED")) only = std::strtoull(env, nullptr, 0);
  std::string db = test::FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  pg::Connection holder = pg::Connection::Open(db);
  std::int64_t nonempty = 0, multi_window = 0, compared = 0, rows_needed_known = 0;
  const std::uint64_t base = (fair ? 2'000'000 : 1'000'000) + (aging ? 10'000'000 : 0);
  for (std::int64_t i = 0; i < cases; ++i) {
    std::uint64_t seed = only ? *only : base + static_cast<std::uint64_t>(i);
    if (only && (((*only % 10'000'000) >= 2'000'000) != fair || (*only >= 10'000'000) != aging)) return;
    CaseReport r = RunCase(conn, holder, seed, fair, aging);
    ++compared;
    if (r.got != r.want) {
      INFO(r.description << "\n  reference: [" << Join(r.want) << "]\n  akadzed:   [" << Join(r.got)
                         << "]\n  replay with AKADZED_DIFF_SEED=" << seed);
      REQUIRE(r.got == r.want);
    }
    if (r.rows_needed) {
      // What the plan needed: each job it took, at most what was read.
      INFO(r.description << "\n  rows_needed " << *r.rows_needed << ", rows_read " << r.rows_read
                         << "\n  replay with AKADZED_DIFF_SEED=" << seed);
      REQUIRE(!r.aging);
      REQUIRE(*r.rows_needed >= static_cast<std::int64_t>(r.got.size()));
      REQUIRE(*r.rows_needed <= r.rows_read);
      ++rows_needed_known;
    }
    if (!r.want.empty()) ++nonempty;
    if (r.windows > 1) ++multi_window;
    if (only) break;
  }
  // The random queues did exercise non-trivial claims.
  if (!only) {
    CHECK(compared == cases);
    CHECK(nonempty > cases / 2);
    CHECK(multi_window > cases / 50);
    if (!aging) CHECK(rows_needed_known > cases / 4);
  }
}

TEST_CASE("windowed claim equals the full-scan reference: ordered", "[differential]") {
  RunCases(false, false);
}

TEST_CASE("windowed claim equals the full-scan reference: fair", "[differential]") {
  RunCases(true, false);
}

TEST_CASE("aged windowed claim equals the full-scan reference: ordered", "[differential][aging]") {
  RunCases(false, true);
}

TEST_CASE("aged windowed claim equals the full-scan reference: fair", "[differential][aging]") {
  RunCases(true, true);
}

// ---- Floors (claim/claim_floor.h) ----
//
// A queue claimed again and again with the floor each claim leaves, while
// rows land below the floor in every way the schema allows between claims:
// inserts with an old run_at or a higher priority, running jobs released
// to queued with their run_at, queued rows moved (priority, run_at),
// cancel requests set and cleared, inserts by a transaction still open
// during a claim (committed after it) or rolled back, inserts in a
// subtransaction, rows another transaction locks during a claim, jobs
// finishing (a key's room freed). Every claim must equal the full-scan
// reference over the same rows; dry runs and real claims alternate.
//
// AKADZED_FLOOR_CASES sets the cases per mode (default 200, each a
// sequence of 12 claims); AKADZED_FLOOR_SEED replays one.
struct FloorCaseStats {
  std::int64_t claims = 0;
  std::int64_t floored = 0;       // claims that read past a floor
  std::int64_t below_rows = 0;    // claims that found rows below it
  std::int64_t nonempty = 0;
  std::int64_t running_floors = 0;  // keys' running floors the claims left
};

void RunFloorCase(pg::Connection& conn, pg::Connection& holder_conn, std::uint64_t seed, bool fair,
                  FloorCaseStats& stats) {
  std::mt19937_64 rng(seed);
  auto uni = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  const std::string queue = "f" + std::to_string(seed);
  const int slots = static_cast<int>(uni(1, 8));
  const int n_levels = static_cast<int>(uni(1, 3));
  const int n_keys = static_cast<int>(uni(0, 4));
  std::ostringstream desc;
  desc << "seed=" << seed << " mode=" << (fair ? "fair" : "ordered") << " slots=" << slots
       << " levels=" << n_levels << " keys=" << n_keys;
  conn.exec("DELETE FROM akadze.limits WHERE key = '*'");
  std::vector<std::string> keys;
  for (int k = 0; k < n_keys; ++k) {
    keys.push_back(queue + "_k" + std::to_string(k));
    conn.exec("INSERT INTO akadze.limits (key, max_running) VALUES ($1, $2::int)",
              pg::Params().add(keys.back()).add(chance(0.5) ? std::optional<std::int64_t>(uni(1, 3)) : std::nullopt));
  }
  auto random_key = [&]() -> std::optional<std::string> {
    if (keys.empty() || chance(0.5)) return std::nullopt;
    return keys[static_cast<std::size_t>(uni(0, n_keys - 1))];
  };
  // Rows as the generator of RunCase makes them: past run_at at least 2 s
  // old, future ones at least a minute ahead. Half of the rows landing
  // later are older than every first row (600 s to an hour old), so that
  // they land below the floor, at the head, where a claim must take them.
  auto insert_rows = [&](pg::Connection& c, int n, bool first) {
    std::vector<std::int64_t> priorities, ages_ms;
    std::vector<std::optional<std::string>> row_keys;
    for (int i = 0; i < n; ++i) {
      priorities.push_back(uni(0, n_levels - 1));
      ages_ms.push_back(chance(0.08)           ? -uni(60'000, 600'000)
                        : first                   ? uni(600'000, 3600'000)
                        : chance(0.5)             ? uni(2'000, 3600'000)
                                                  : uni(3600'000, 7200'000));
      row_keys.push_back(random_key());
    }
    c.exec("INSERT INTO akadze.jobs (task, queue, priority, limit_key, run_at)"
           " SELECT 't', $1, p, k, now() - ms * interval '1 millisecond'"
           " FROM unnest($2::int[], $3::text[], $4::int8[]) AS u(p, k, ms)",
           pg::Params().add(queue).add_array(priorities).add_array(row_keys).add_array(ages_ms));
  };
  insert_rows(conn, static_cast<int>(uni(0, 120)), true);

  ClaimFloor floor;
  const std::string worker = "00000000-0000-4000-8000-000000000001";
  for (int step = 0; step < 12; ++step) {
    std::ostringstream what;
    // During the claim: an insert not committed yet (begun before the
    // landings below commit, so that a snapshot lists it as in progress,
    // not past its xmax), or rows locked.
    std::optional<pg::Transaction> holder;
    std::vector<std::int64_t> locked;
    const double roll = std::uniform_real_distribution<double>(0, 1)(rng);
    bool commit_after = false;
    // Running rows of the keys outside this queue (limit keys count across
    // queues), made and ended by other transactions: what a key's running
    // floor (core/running_floor.h) must see, below it or past it.
    const std::string other = queue + "_other";
    auto insert_running = [&](pg::Connection& c, int n) {
      for (int i = 0; i < n && !keys.empty(); ++i) {
        c.exec("INSERT INTO akadze.jobs (task, queue, state, limit_key, run_count, started_at)"
               " VALUES ('t', $1, 'running', $2, 1, now())",
               pg::Params().add(other).add(keys[static_cast<std::size_t>(uni(0, n_keys - 1))]));
      }
    };
    if (roll < 0.25) {
      holder.emplace(holder_conn);
      insert_rows(holder_conn, static_cast<int>(uni(1, 3)), false);
      const bool long_in_flight = chance(0.3);
      if (long_in_flight || chance(0.5)) insert_running(holder_conn, 1);
      if (long_in_flight) {
        // The open transaction falls more than kRunningRangeSlack
        // transactions behind: a running floor lists it as a point.
        conn.exec("DO $$ BEGIN FOR i IN 1..1100 LOOP PERFORM pg_current_xact_id(); COMMIT; END LOOP; END $$");
        what << " long_in_flight";
      }
      commit_after = chance(0.7);
      what << (commit_after ? " in_flight_insert" : " aborted_insert");
      conn.exec("SELECT pg_current_xact_id()");  // a transaction that ends after it began
    }
    // Landings below the floor, committed before the claim.
    if (chance(0.4)) {
      const int n = static_cast<int>(uni(1, 6));
      insert_rows(conn, n, false);
      what << " insert=" << n;
    }
    if (chance(0.3)) {
      pg::Result r = conn.exec(
          "UPDATE akadze.jobs SET state = 'queued', worker_id = NULL WHERE id IN (SELECT id FROM akadze.jobs"
          " WHERE queue = $1 AND state = 'running' ORDER BY random() LIMIT $2::int) RETURNING id",
          pg::Params().add(queue).add(uni(1, 3)));
      what << " released=" << r.rows();
    }
    if (chance(0.25)) {
      conn.exec("UPDATE akadze.jobs SET priority = $2::int, run_at = now() - $3::int8 * interval '1 millisecond'"
                " WHERE id IN (SELECT id FROM akadze.jobs WHERE queue = $1 AND state = 'queued'"
                " ORDER BY random() LIMIT 2)",
                pg::Params().add(queue).add(uni(0, n_levels - 1)).add(uni(2000, 4'000'000)));
      what << " moved";
    }
    if (chance(0.2)) {
      conn.exec("UPDATE akadze.jobs SET cancel_requested_at = CASE WHEN cancel_requested_at IS NULL THEN now() END"
                " WHERE id IN (SELECT id FROM akadze.jobs WHERE queue = $1 AND state = 'queued'"
                " ORDER BY random() LIMIT 2)",
                pg::Params().add(queue));
      what << " cancel_toggled";
    }
    if (chance(0.25)) {
      conn.exec("UPDATE akadze.jobs SET state = 'succeeded', finished_at = now() WHERE id IN (SELECT id"
                " FROM akadze.jobs WHERE queue = $1 AND state = 'running' ORDER BY random() LIMIT 2)",
                pg::Params().add(queue));
      what << " finished";
    }
    if (!keys.empty() && chance(0.3)) {
      const int n = static_cast<int>(uni(1, 2));
      insert_running(conn, n);
      what << " running_elsewhere=" << n;
    }
    if (!keys.empty() && chance(0.2)) {
      // A queued row of the other queue made running by an UPDATE (as
      // another worker's claim would), or one running there ended.
      conn.exec("INSERT INTO akadze.jobs (task, queue, limit_key) VALUES ('t', $1, $2)",
                pg::Params().add(other).add(keys[static_cast<std::size_t>(uni(0, n_keys - 1))]));
      conn.exec("UPDATE akadze.jobs SET state = 'running', run_count = run_count + 1, started_at = now()"
                " WHERE id = (SELECT max(id) FROM akadze.jobs WHERE queue = $1 AND state = 'queued')",
                pg::Params().add(other));
      what << " claimed_elsewhere";
    }
    if (chance(0.2)) {
      pg::Result r = conn.exec("UPDATE akadze.jobs SET state = 'succeeded', finished_at = now() WHERE id IN (SELECT id"
                               " FROM akadze.jobs WHERE queue = $1 AND state = 'running' ORDER BY random() LIMIT 2)"
                               " RETURNING id",
                               pg::Params().add(other));
      what << " finished_elsewhere=" << r.rows();
    }
    if (chance(0.15)) {
      pg::Transaction sub(conn);
      sub.exec("SAVEPOINT s");
      insert_rows(conn, 2, false);
      if (chance(0.5)) {
        sub.exec("RELEASE SAVEPOINT s");
        what << " savepoint_insert";
      } else {
        sub.exec("ROLLBACK TO SAVEPOINT s");
        insert_rows(conn, 1, false);
        what << " savepoint_rolled_back";
      }
      sub.commit();
    }
    if (roll >= 0.25 && roll < 0.45) {
      holder.emplace(holder_conn);
      pg::Result r = holder->exec(
          "SELECT id FROM akadze.jobs WHERE queue = $1 AND state = 'queued' ORDER BY random() LIMIT $2::int"
          " FOR UPDATE",
          pg::Params().add(queue).add(uni(1, 3)));
      for (int i = 0; i < r.rows(); ++i) locked.push_back(r.int64(i, 0));
      what << " locked=" << locked.size();
    }
    test::ReferenceClaimRequest ref;
    ref.queue = queue;
    ref.slots = slots;
    ref.fair = fair;
    ref.absent_ids = locked;
    const std::vector<std::int64_t> want = test::ReferenceClaim(conn, ref);
    ClaimRequest request;
    request.queue = queue;
    request.slots = slots;
    request.mode = fair ? ClaimMode::kFair : ClaimMode::kOrdered;
    request.dry_run = chance(0.3);
    request.worker_id = worker;
    request.first_window_per_slot = chance(0.5) ? 0 : 1;
    request.floor = &floor;
    const ClaimResult result = RunClaim(conn, request);
    std::vector<std::int64_t> got;
    for (const ClaimedJob& j : result.jobs) got.push_back(j.id);
    if (holder) {
      if (commit_after) {
        holder->commit();
      } else {
        holder->rollback();
      }
    }
    ++stats.claims;
    if (result.floor_levels > 0) ++stats.floored;
    if (result.rows_below_floor > 0) ++stats.below_rows;
    stats.running_floors += static_cast<std::int64_t>(floor.running.size());
    if (!want.empty()) ++stats.nonempty;
    if (got != want) {
      INFO(desc.str() << " step=" << step << what.str() << (request.dry_run ? " dry_run" : " real")
                      << " floor_levels=" << result.floor_levels << " rows_below_floor=" << result.rows_below_floor
                      << "\n  reference: [" << Join(want) << "]\n  akadzed:   [" << Join(got)
                      << "]\n  replay with AKADZED_FLOOR_SEED=" << seed);
      REQUIRE(got == want);
    }
  }
}

void RunFloorCases(bool fair) {
  std::int64_t cases = 200;
  if (const char* env = std::getenv("AKADZED_FLOOR_CASES")) cases = std::atoll(env);
  std::optional<std::uint64_t> only;
  if (const char* env = std::getenv("AKADZED_FLOOR_SEED")) only = std::strtoull(env, nullptr, 0);
  std::string db = test::FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  pg::Connection holder = pg::Connection::Open(db);
  FloorCaseStats stats;
  const std::uint64_t base = fair ? 6'000'000 : 5'000'000;
  for (std::int64_t i = 0; i < cases; ++i) {
    const std::uint64_t seed = only ? *only : base + static_cast<std::uint64_t>(i);
    if (only && (*only >= 6'000'000) != fair) return;
    RunFloorCase(conn, holder, seed, fair, stats);
    if (only) break;
  }
  if (!only) {
    // The sequences did read past floors, and found rows below them.
    CHECK(stats.floored > stats.claims / 2);
    CHECK(stats.below_rows > stats.claims / 20);
    CHECK(stats.nonempty > stats.claims / 3);
    // Keys were counted from running floors.
    CHECK(stats.running_floors > stats.claims / 4);
  }
}

TEST_CASE("claims past a floor equal the full-scan reference, whatever lands below it: ordered",
          "[differential][floor]") {
  RunFloorCases(false);
}

TEST_CASE("claims past a floor equal the full-scan reference, whatever lands below it: fair",
          "[differential][floor]") {
  RunFloorCases(true);
}

}  // namespace
}  // namespace akadzed
