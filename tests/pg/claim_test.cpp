// The claim transaction against a real PostgreSQL: akadze's done-criteria for
// limits, readiness, pauses, '*' rows, held keys, key locks held by another
// claim, rows locked by another transaction, dry runs, windows.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <chrono>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "store/limits_table.h"
#include "store/worker_lease.h"
#include "claim/claim_transaction.h"
#include "claim/stored_floor.h"
#include "claim/key_locks.h"
#include "pg/transaction.h"
#include "support/daemon_process.h"
#include "support/held_horizon.h"
#include "support/index_stats.h"
#include "support/reference_claim.h"
#include "support/test_cluster.h"

namespace akadzed {
namespace {

using Ids = std::vector<std::int64_t>;

std::int64_t Enqueue(pg::Connection& conn, std::optional<std::string> key, int priority = 0,
                     const std::string& queue = "q", const std::string& run_at = "now() - interval '1 minute'") {
  return conn
      .exec("INSERT INTO akadze.jobs (task, queue, priority, limit_key, run_at) VALUES ('t', $1, $2, $3, " +
                run_at + ") RETURNING id",
            pg::Params().add(queue).add(priority).add(key))
      .int64(0, 0);
}

// The ids of a claim's jobs, in its order.
Ids JobIds(const ClaimResult& result) {
  Ids ids;
  for (const ClaimedJob& j : result.jobs) ids.push_back(j.id);
  return ids;
}

Ids ClaimIds(pg::Connection& conn, int slots, ClaimMode mode = ClaimMode::kOrdered,
             const std::string& queue = "q", bool dry_run = false) {
  ClaimRequest r;
  r.queue = queue;
  r.slots = slots;
  r.mode = mode;
  r.dry_run = dry_run;
  return JobIds(RunClaim(conn, r));
}

void Finish(pg::Connection& conn, std::int64_t id) {
  conn.exec("UPDATE akadze.jobs SET state = 'succeeded', finished_at = now() WHERE id = $1",
            pg::Params().add(id));
}

std::string State(pg::Connection& conn, std::int64_t id) {
  return std::string(
      conn.exec("SELECT state FROM akadze.jobs WHERE id = $1", pg::Params().add(id)).text(0, 0));
}

TEST_CASE("while a snapshot holds the horizon, a claim with its queue's floor steps over no dead entry",
          "[claim][floor]") {
  const std::string db = test::FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  pg::Connection report = pg::Connection::Open(db);
  conn.exec("INSERT INTO akadze.jobs (task, queue, run_at) SELECT 't', 'q', now() - interval '1 hour' +"
            " g * interval '1 millisecond' FROM generate_series(1, 3000) g");
  // Another session holds the horizon: no dead version can be removed.
  test::HeldHorizon held(report);
  ClaimFloor floor;
  ClaimRequest r;
  r.queue = "q";
  r.slots = 100;
  r.floor = &floor;
  std::int64_t first_id = 0;
  for (int i = 0; i < 20; ++i) {
    ClaimResult got = RunClaim(conn, r);
    REQUIRE(got.jobs.size() == 100);
    if (i == 0) first_id = got.jobs.front().id;
    // Each claim starts past the last one's jobs: it steps over none of
    // their dead entries.
    INFO("claim " << i << ": dead entries " << got.dead_index_entries);
    CHECK(got.dead_index_entries == 0);
    if (i > 0) CHECK(got.floor_levels == 1);
  }
  REQUIRE_FALSE(floor.empty());
  // Without the floor, a claim steps over all 2,000 the claims left.
  ClaimRequest plain = r;
  plain.floor = nullptr;
  plain.dry_run = true;
  ClaimResult head = RunClaim(conn, plain);
  CHECK(head.dead_index_entries >= 2000);
  // Released back with its run_at, the first job lands below the floor and
  // is the next claim's first, as a read from the head finds it.
  conn.exec("UPDATE akadze.jobs SET state = 'queued', worker_id = NULL WHERE id = $1", pg::Params().add(first_id));
  ClaimResult next = RunClaim(conn, r);
  REQUIRE_FALSE(next.jobs.empty());
  CHECK(next.jobs.front().id == first_id);
  CHECK(next.rows_below_floor == 1);
  CHECK(next.dead_index_entries == 0);
  held.release();
}

// A queue's floor stored by one claimer (akadze.queue_floors, migration
// 013) serves a claim of another process: a dry run, a restarted daemon's
// first claim. It plans what a claim from the heads plans, past the dead
// entries instead of over them; a floor of another server, or not one a
// daemon wrote, is not used.
TEST_CASE("a stored floor serves another process's claim past the dead entries", "[claim][floor]") {
  const std::string db = test::FreshDatabase();
  pg::Connection daemon = pg::Connection::Open(db);
  pg::Connection other = pg::Connection::Open(db);
  pg::Connection report = pg::Connection::Open(db);
  test::ClaimedPastTwoLevels held(daemon, report);
  const ClaimFloor& floor = held.floor;
  ClaimRequest r;
  r.queue = "q";
  r.slots = 100;
  // Jobs that land below the stored floor after it was written: released
  // (in its priority's dead prefix) and new ones of a higher priority.
  const std::int64_t released =
      daemon.exec("UPDATE akadze.jobs SET state = 'queued', worker_id = NULL WHERE id ="
                  " (SELECT min(id) FROM akadze.jobs WHERE (state = 'running') IS NOT FALSE) RETURNING id")
          .int64(0, 0);
  daemon.exec("INSERT INTO akadze.jobs (task, queue, priority, run_at) VALUES ('t', 'q', 5, now() - interval '2 hours')");

  ClaimFloor stored = LoadQueueFloor(other, "q");
  REQUIRE(stored.levels == floor.levels);
  CHECK(stored.pinned == floor.pinned);
  CHECK(stored.snapshot == floor.snapshot);
  CHECK(stored.running.empty());  // no limit key was counted
  ClaimRequest dry = r;
  dry.dry_run = true;
  dry.floor = &stored;
  ClaimResult from_stored = RunClaim(other, dry);
  ClaimRequest heads = dry;
  heads.floor = nullptr;
  ClaimResult from_heads = RunClaim(other, heads);
  auto ids = [](const ClaimResult& c) {
    std::vector<std::int64_t> out;
    for (const ClaimedJob& j : c.jobs) out.push_back(j.id);
    return out;
  };
  REQUIRE(from_heads.jobs.size() == 100);
  const std::vector<std::int64_t> planned = ids(from_heads);
  CHECK(ids(from_stored) == planned);
  CHECK(std::count(planned.begin(), planned.end(), released) == 1);
  CHECK(from_stored.floor_levels == 2);
  CHECK(from_stored.dead_index_entries == 0);
  CHECK(from_heads.dead_index_entries >= 1900);

  // Not used: a floor of another server, and rows no daemon wrote.
  ClaimFloor elsewhere = floor;
  elsewhere.server_started = "another server";
  SaveQueueFloor(daemon, "q", elsewhere);
  ClaimFloor loaded = LoadQueueFloor(other, "q");
  dry.floor = &loaded;
  ClaimResult not_used = RunClaim(other, dry);
  CHECK(not_used.floor_levels == 0);
  CHECK(ids(not_used) == planned);
  for (const char* bad : {"{}", "[]", "{\"v\": 2}", "{\"v\": 1, \"levels\": [[1, 2]], \"pinned\": [],"
                          " \"snapshot\": \"1:1:\", \"server\": \"s\"}"}) {
    daemon.exec("UPDATE akadze.queue_floors SET floor = $1::jsonb WHERE queue = 'q'", pg::Params().add(bad));
    CHECK(LoadQueueFloor(other, "q").empty());
  }
  CHECK(LoadQueueFloor(other, "no such queue").empty());
  held.release();
}

// The stored floor carries the keys' running floors too, so another
// process's first claim counts a key's running jobs past the entries of the
// jobs it ran during a held horizon (jobs_running_key_xid_idx keeps one for
// each, dead) instead of reading them all: a new process's first claim
// under 1,000 keys went 11 -> 30 ms over a 30-minute hold. What it plans is
// what a count from the key's first entry plans, including a job made
// running under the key after the floor was stored.
// [direct]: the reads are the server's statistics of each backend, which
// PgBouncer's pooling would mix.
TEST_CASE("a stored floor's running floors serve another process's first count of a key",
          "[claim][floor][limits][direct]") {
  const std::string db = test::FreshDatabase();
  pg::Connection daemon = pg::Connection::Open(db);
  pg::Connection other = pg::Connection::Open(db);
  pg::Connection report = pg::Connection::Open(db);
  pg::Connection stats = pg::Connection::Open(db);
  SetLimit(daemon, LimitRow{"k", 5, std::nullopt, std::nullopt});
  daemon.exec("INSERT INTO akadze.jobs (task, queue, state, limit_key, run_count, started_at)"
              " SELECT 't', 'elsewhere', 'running', 'k', 1, now() FROM generate_series(1, 2)");
  test::HeldHorizon held(report);
  // 3,000 jobs of the key ran and finished during the hold.
  daemon.exec("INSERT INTO akadze.jobs (task, queue, state, limit_key, run_count, started_at)"
              " SELECT 't', 'elsewhere', 'running', 'k', 1, now() FROM generate_series(1, 3000)");
  daemon.exec("UPDATE akadze.jobs SET state = 'succeeded', finished_at = now()"
              " WHERE id > (SELECT min(id) + 1 FROM akadze.jobs)");
  const std::int64_t first = Enqueue(daemon, "k", 0, "q", "now() - interval '2 hours'");
  for (int i = 0; i < 50; ++i) Enqueue(daemon, std::nullopt);
  ClaimFloor floor;
  ClaimRequest r;
  r.queue = "q";
  r.slots = 10;
  r.mode = ClaimMode::kFair;
  r.floor = &floor;
  const Ids claimed = JobIds(RunClaim(daemon, r));
  REQUIRE(std::count(claimed.begin(), claimed.end(), first) == 1);
  REQUIRE(floor.running.contains("k"));
  SaveQueueFloor(daemon, "q", floor);
  // Queued after the store, and one made running under the key by hand:
  // 2 + 1 + 1 running, room for 1 of the three.
  for (int i = 0; i < 3; ++i) Enqueue(daemon, "k", 0, "q", "now() - interval '90 minutes'");
  daemon.exec("INSERT INTO akadze.jobs (task, queue, state, limit_key, run_count, started_at)"
              " VALUES ('t', 'elsewhere', 'running', 'k', 1, now())");

  ClaimFloor stored = LoadQueueFloor(other, "q");
  REQUIRE(stored.running.contains("k"));
  ClaimFloor without_running = stored;
  without_running.running.clear();
  ClaimRequest dry = r;
  dry.dry_run = true;
  dry.slots = 20;
  auto reads = [&](ClaimFloor& f, ClaimResult& out) {
    const std::int64_t scans = test::Scans(stats, "akadze.jobs_running_key_xid_idx");
    const std::int64_t before = test::IndexTuplesRead(stats, "akadze.jobs_running_key_xid_idx");
    ClaimFloor copy = f;
    dry.floor = &copy;
    out = RunClaim(other, dry);
    test::AwaitStatistics(other, [&] { return test::Scans(stats, "akadze.jobs_running_key_xid_idx") > scans; });
    return test::IndexTuplesRead(stats, "akadze.jobs_running_key_xid_idx") - before;
  };
  ClaimResult from_stored, counted_whole;
  const std::int64_t stored_reads = reads(stored, from_stored);
  const std::int64_t whole_reads = reads(without_running, counted_whole);
  CHECK(JobIds(from_stored) == JobIds(counted_whole));
  const Ids keyed = [&] {
    Ids out;
    for (const ClaimedJob& j : from_stored.jobs) {
      if (j.limit_key == std::optional<std::string>("k")) out.push_back(j.id);
    }
    return out;
  }();
  CHECK(keyed.size() == 1);
  CHECK(whole_reads >= 3000);
  CHECK(stored_reads <= 20);
  // A running floor past every transaction there is (only a hand-written
  // row) is not used: the key is counted whole.
  daemon.exec("UPDATE akadze.queue_floors SET floor = jsonb_set(floor, '{running,k,0}', '18446744073709551615')"
              " WHERE queue = 'q'");
  CHECK(LoadQueueFloor(other, "q").running.empty());
  CHECK_FALSE(LoadQueueFloor(other, "q").empty());
  held.release();
}

// A running floor (docs/claim.md, "Running floors") recorded by a count in
// a transaction that already has its own id: rows that transaction makes
// running after the count carry its id, which its snapshot never lists
// (and whose xmax may be past it). The next count must still find them.
// Reached by a claim planned again in its transaction after it locked
// rows, and by a before-commit hook; found in review.
TEST_CASE("a running floor recorded in a transaction with an id counts what it makes running after",
          "[claim][floor][limits]") {
  const std::string db = test::FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  pg::Connection other = pg::Connection::Open(db);
  SetLimit(conn, LimitRow{"k", 5, std::nullopt, std::nullopt});
  conn.exec("INSERT INTO akadze.jobs (task, queue, state, limit_key, run_count, started_at)"
            " VALUES ('t', 'q', 'running', 'k', 1, now())");
  const std::int64_t queued = Enqueue(conn, "k");
  RunningFloors floors;
  {
    pg::Transaction tx(conn);
    tx.exec("SELECT pg_current_xact_id()");
    // Transactions that end after this one took its id: the count's
    // snapshot's xmax goes past it.
    for (int i = 0; i < 3; ++i) other.exec("SELECT pg_current_xact_id()");
    CHECK(CountKeys(tx, {"k"}, &floors).at("k").allowed == 4);
    REQUIRE(floors.contains("k"));
    tx.exec("UPDATE akadze.jobs SET state = 'running', run_count = 1, started_at = now() WHERE id = $1",
            pg::Params().add(queued));
    tx.commit();
  }
  pg::Transaction tx(conn);
  CHECK(CountKeys(tx, {"k"}, &floors).at("k").allowed == 3);
  CHECK(CountKeys(tx, {"k"}, nullptr).at("k").allowed == 3);
}

TEST_CASE("max_running=1: one running, the second waits, a keyless job is claimed",
          "[claim][limits]") {
  pg::Connection conn = pg::Connection::Open(test::FreshDatabase());
  SetLimit(conn, LimitRow{"acct", 1, std::nullopt, std::nullopt});
  std::int64_t first = Enqueue(conn, "acct");
  std::int64_t second = Enqueue(conn, "acct");
  std::int64_t free_job = Enqueue(conn, std::nullopt);

  CHECK(ClaimIds(conn, 10) == Ids{first, free_job});
  CHECK(State(conn, second) == "queued");
  CHECK(ClaimIds(conn, 10).empty());  // acct is at its limit
  Finish(conn, first);
  CHECK(ClaimIds(conn, 10) == Ids{second});
}

TEST_CASE("max_starts=1 per window: a second start waits for the window, other keys go on",
          "[claim][limits]") {
  pg::Connection conn = pg::Connection::Open(test::FreshDatabase());
  // A short window stands in for akadze's one minute.
  SetLimit(conn, LimitRow{"mail", std::nullopt, 1, 1'000'000});
  SetLimit(conn, LimitRow{"other", std::nullopt, std::nullopt, std::nullopt});
  std::int64_t m1 = Enqueue(conn, "mail");
  std::int64_t m2 = Enqueue(conn, "mail");
  std::int64_t o1 = Enqueue(conn, "other");

  auto started = std::chrono::steady_clock::now();
  CHECK(ClaimIds(conn, 10) == Ids{m1, o1});
  Finish(conn, m1);  // not running any more, but its start still counts
  std::int64_t o2 = Enqueue(conn, "other");
  CHECK(ClaimIds(conn, 10) == Ids{o2});
  CHECK(conn.exec("SELECT count(*) FROM akadze.limit_starts WHERE key = 'mail'").int64(0, 0) == 1);
  CHECK(conn.exec("SELECT count(*) FROM akadze.limit_starts WHERE key = 'other'").int64(0, 0) == 0);

  // Claim until the window has passed (polling a condition, not sleeping a guess).
  Ids got;
  auto deadline = started + std::chrono::seconds(20);
  while (got.empty() && std::chrono::steady_clock::now() < deadline) {
    got = ClaimIds(conn, 10);
    if (got.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(got == Ids{m2});
  CHECK(std::chrono::steady_clock::now() - started >= std::chrono::milliseconds(900));
  // The old mark outside the window no longer counts, but stays until a
  // minute past its window (a claim that began earlier may still count it);
  // the new start left one more. A mark older than that is deleted when the
  // key is counted.
  CHECK(conn.exec("SELECT count(*) FROM akadze.limit_starts WHERE key = 'mail'").int64(0, 0) == 2);
  conn.exec("INSERT INTO akadze.limit_starts (key, started_at) VALUES ('mail', now() - interval '62 seconds')");
  std::int64_t m3 = Enqueue(conn, "mail");
  // Once m2's start has left the window, a claim locks and counts 'mail'.
  got.clear();
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (got.empty() && std::chrono::steady_clock::now() < deadline) {
    got = ClaimIds(conn, 10);
    if (got.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(got == Ids{m3});
  CHECK(conn.exec("SELECT count(*) FROM akadze.limit_starts WHERE key = 'mail'"
                  " AND started_at < now() - interval '61 seconds'").int64(0, 0) == 0);
}

TEST_CASE("a claim that began earlier still counts the marks a later claim could have purged",
          "[claim][limits]") {
  // Found by the fault suite's load test (docs/reliability.md). Claim L
  // begins at T0 and counts starts after T0 - 1 s; claim P begins later,
  // takes the key's lock first and purges old marks; then L counts. A mark
  // at T0 - 0.9 s is in L's window but was past P's: purged at P's
  // now() - window, L missed it and started a third job within 1 s.
  const std::string db = test::FreshDatabase();
  pg::Connection setup = pg::Connection::Open(db);
  pg::Connection early = pg::Connection::Open(db);
  pg::Connection late = pg::Connection::Open(db);
  SetLimit(setup, LimitRow{"rate", std::nullopt, 2, 1'000'000});
  pg::Transaction tx(early);
  const std::string t0(tx.exec("SELECT now()::text").text(0, 0));
  setup.exec("INSERT INTO akadze.limit_starts (key, started_at)"
             " VALUES ('rate', $1::timestamptz - interval '900 ms')", pg::Params().add(t0));
  Enqueue(setup, "rate");
  Enqueue(setup, "rate");
  // P's now() must be past T0 + 0.1 s, so that the mark is outside its window.
  while (!setup.exec("SELECT clock_timestamp() > $1::timestamptz + interval '150 ms'",
                     pg::Params().add(t0)).boolean(0, 0)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(ClaimIds(late, 1).size() == 1);  // P: no mark in its window; takes one, purges
  ClaimRequest r;
  r.queue = "q";
  r.slots = 5;
  // L: the old mark and P's are in its window: the key is full.
  CHECK(ClaimInTransaction(tx, r).jobs.empty());
  tx.rollback();
}

TEST_CASE("the '*' row applies per key; a key with no applicable row is held", "[claim][limits]") {
  pg::Connection conn = pg::Connection::Open(test::FreshDatabase());
  std::int64_t typo = Enqueue(conn, "typo");
  CHECK(ClaimIds(conn, 10).empty());  // no row, no '*': held

  SetLimit(conn, LimitRow{"*", 1, std::nullopt, std::nullopt});
  std::int64_t a1 = Enqueue(conn, "a");
  std::int64_t a2 = Enqueue(conn, "a");
  std::int64_t b1 = Enqueue(conn, "b");
  // Each key gets its own max_running = 1 from '*'.
  CHECK(ClaimIds(conn, 10) == Ids{typo, a1, b1});
  CHECK(State(conn, a2) == "queued");

  // A key's own row wins over '*'.
  SetLimit(conn, LimitRow{"a", 3, std::nullopt, std::nullopt});
  CHECK(ClaimIds(conn, 10) == Ids{a2});
}

TEST_CASE("running jobs of a key in any queue count against it", "[claim][limits]") {
  pg::Connection conn = pg::Connection::Open(test::FreshDatabase());
  SetLimit(conn, LimitRow{"k", 2, std::nullopt, std::nullopt});
  Enqueue(conn, "k", 0, "elsewhere");
  REQUIRE(ClaimIds(conn, 1, ClaimMode::kOrdered, "elsewhere").size() == 1);
  std::int64_t q1 = Enqueue(conn, "k");
  Enqueue(conn, "k");
  CHECK(ClaimIds(conn, 10) == Ids{q1});
}

TEST_CASE("only ready jobs are claimed, and none from a paused queue", "[claim]") {
  pg::Connection conn = pg::Connection::Open(test::FreshDatabase());
  std::int64_t ready = Enqueue(conn, std::nullopt);
  Enqueue(conn, std::nullopt, 0, "q", "now() + interval '1 hour'");  // future
  std::int64_t cancelled = Enqueue(conn, std::nullopt);
  std::int64_t expired = Enqueue(conn, std::nullopt);
  std::int64_t done = Enqueue(conn, std::nullopt);
  conn.exec("UPDATE akadze.jobs SET cancel_requested_at = now() WHERE id = $1", pg::Params().add(cancelled));
  conn.exec("UPDATE akadze.jobs SET expires_at = now() - interval '1 second' WHERE id = $1",
            pg::Params().add(expired));
  Finish(conn, done);
  Enqueue(conn, std::nullopt, 0, "other-queue");

  conn.exec("INSERT INTO akadze.queue_pauses (queue) VALUES ('q')");
  ClaimRequest r;
  r.queue = "q";
  r.slots = 10;
  ClaimResult paused = RunClaim(conn, r);
  CHECK(paused.paused);
  CHECK(paused.jobs.empty());
  conn.exec("DELETE FROM akadze.queue_pauses WHERE queue = 'q'");
  CHECK(ClaimIds(conn, 10) == Ids{ready});
}

TEST_CASE("a queue cap: a claim takes at most the cap minus the queue's running jobs", "[claim][queue_cap]") {
  pg::Connection conn = pg::Connection::Open(test::FreshDatabase());
  Ids queued;
  for (int i = 0; i < 8; ++i) queued.push_back(Enqueue(conn, std::nullopt));
  Enqueue(conn, std::nullopt, 0, "other");
  conn.exec("INSERT INTO akadze.queue_caps (queue, max_running) VALUES ('q', 3)");
  // A running job of the queue counts, whoever runs it; one of another queue does not.
  conn.exec("INSERT INTO akadze.jobs (task, queue, state, run_count, started_at) VALUES"
            " ('t', 'q', 'running', 1, now()), ('t', 'other', 'running', 1, now())");

  ClaimRequest r;
  r.queue = "q";
  r.slots = 10;
  ClaimResult first = RunClaim(conn, r);
  CHECK(first.queue_cap == 3);
  CHECK(first.queue_running == 1);
  CHECK_FALSE(first.capped);
  REQUIRE(first.jobs.size() == 2);
  CHECK(first.jobs[0].id == queued[0]);
  CHECK(first.jobs[1].id == queued[1]);

  ClaimResult full = RunClaim(conn, r);
  CHECK(full.capped);
  CHECK(full.queue_running == 3);
  CHECK(full.jobs.empty());
  CHECK(ClaimIds(conn, 10, ClaimMode::kFair) == Ids{});
  // Aging reads the queue another way; the cap holds there too.
  r.aging_us = 1'000'000;
  CHECK(RunClaim(conn, r).capped);
  r.aging_us.reset();
  // Another queue is not capped by it.
  CHECK(ClaimIds(conn, 10, ClaimMode::kOrdered, "other").size() == 1);

  Finish(conn, first.jobs[0].id);
  CHECK(ClaimIds(conn, 10) == Ids{queued[2]});
  // Raising the cap lets the next claim take the difference; removing it,
  // the slots.
  conn.exec("UPDATE akadze.queue_caps SET max_running = 5 WHERE queue = 'q'");
  CHECK(ClaimIds(conn, 10) == Ids{queued[3], queued[4]});
  conn.exec("DELETE FROM akadze.queue_caps");
  ClaimResult uncapped = RunClaim(conn, r);
  CHECK_FALSE(uncapped.queue_cap);
  CHECK(uncapped.jobs.size() == 3);
}

TEST_CASE("a queue cap is counted after the claim lock: a claim waiting behind another sees its jobs",
          "[claim][queue_cap]") {
  const std::string db = test::FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  pg::Connection holder = pg::Connection::Open(db);
  for (int i = 0; i < 6; ++i) Enqueue(conn, std::nullopt);
  conn.exec("INSERT INTO akadze.queue_caps (queue, max_running) VALUES ('q', 4)");
  // Another claim of the queue holds the claim lock and has claimed 3 jobs,
  // not yet committed.
  pg::Transaction tx(holder);
  tx.exec("SELECT pg_advisory_xact_lock(hashtextextended('akadze.claim_queue:q', 0))");
  tx.exec("UPDATE akadze.jobs SET state = 'running', run_count = 1, started_at = now()"
          " WHERE id IN (SELECT id FROM akadze.jobs WHERE queue = 'q' ORDER BY id LIMIT 3)");
  std::future<ClaimResult> waiting = std::async(std::launch::async, [&] {
    pg::Connection c = pg::Connection::Open(db);
    ClaimRequest r;
    r.queue = "q";
    r.slots = 10;
    return RunClaim(c, r);
  });
  // It waits for the lock ...
  REQUIRE(test::WaitUntil([&] {
    return test::AdvisoryLockWaiters(conn) == 1;
  }));
  tx.commit();
  // ... and then counts the 3: one more, not four.
  ClaimResult got = waiting.get();
  CHECK(got.queue_running == 3);
  CHECK(got.jobs.size() == 1);
  CHECK(test::JobsInState(conn, "running") == 4);
}

// Under a held horizon jobs_running_worker_idx keeps an entry for every job
// the cluster ran since, dead: a capped queue's claim that counted the
// queue's running jobs by reading it whole stepped over all of them. With
// the queue's running floor (ClaimFloor::queue_running) a claim reads the
// jobs the last count found and the entries made running since, per range
// of worker ids. The count stays exact whoever makes a job of the queue
// running between claims: a registered worker's claims, an UPDATE by hand
// under a stopped worker's id, under an id no worker has, without a
// worker, an INSERT; and it does not read the entries of a worker that
// stopped (its stop recorded) during the hold.
// [direct]: the reads are the server's statistics of each backend, which
// PgBouncer's pooling would mix.
TEST_CASE("under a held horizon a capped queue's claims count its running jobs exactly past the dead entries",
          "[claim][queue_cap][floor][direct]") {
  const std::string db = test::FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  pg::Connection writer = pg::Connection::Open(db);
  pg::Connection report = pg::Connection::Open(db);
  pg::Connection stats = pg::Connection::Open(db);
  const std::string worker = "00000000-0000-4000-8000-00000000000a";
  const std::string left = "00000000-0000-4000-8000-00000000000b";     // stops during the hold
  const std::string unknown = "00000000-0000-4000-8000-00000000000c";  // never registered
  const std::string below = "00000000-0000-4000-8000-000000000009";    // never registered, below every bound
  RegisterWorker(conn, {worker, "h", 1, {"q"}});
  RegisterWorker(conn, {left, "h", 2, {"q"}});
  conn.exec("INSERT INTO akadze.jobs (task, queue, run_at) SELECT 't', 'q', now() - interval '1 hour' +"
            " g * interval '1 millisecond' FROM generate_series(1, 3000) g");
  conn.exec("INSERT INTO akadze.queue_caps (queue, max_running) VALUES ('q', 40)");
  const auto running = [&] {
    return writer.exec("SELECT count(*) FROM akadze.jobs WHERE state = 'running' AND queue = 'q'").int64(0, 0);
  };
  // Makes `n` queued jobs of the queue running by hand, as `as` (NULL: no worker).
  const auto by_hand = [&](int n, std::optional<std::string> as) {
    writer.exec("UPDATE akadze.jobs SET state = 'running', worker_id = $2::uuid, run_count = 1, started_at = now()"
                " WHERE id IN (SELECT id FROM akadze.jobs WHERE state = 'queued' AND queue = 'q'"
                "   ORDER BY id DESC LIMIT $1)",
                pg::Params().add(n).add(as));
  };
  const auto finish = [&](const std::string& where) {
    writer.exec("UPDATE akadze.jobs SET state = 'succeeded', finished_at = now() WHERE state = 'running' AND " + where);
  };
  test::HeldHorizon held(report);
  // The worker that leaves runs 500 jobs during the hold, then stops.
  for (int i = 0; i < 5; ++i) {
    by_hand(100, left);
    finish("worker_id = '" + left + "'");
  }
  DeregisterWorker(conn, left);

  ClaimFloor floor;
  ClaimRequest r;
  r.queue = "q";
  r.slots = 50;
  r.worker_id = worker;
  r.floor = &floor;
  // A transaction that makes a job running, in flight across a claim and
  // more than 1,000 transactions back at it (a point of the floor, not its
  // range), committed before the next.
  pg::Connection slow = pg::Connection::Open(db);
  std::optional<pg::Transaction> in_flight;
  for (int i = 0; i < 36; ++i) {
    if (i == 14) in_flight->commit();
    switch (i % 6) {
      case 0: by_hand(1, std::nullopt); break;
      case 1: by_hand(2, left); break;
      case 2: by_hand(1, i % 4 == 0 ? unknown : below); break;
      case 3:
        writer.exec("INSERT INTO akadze.jobs (task, queue, state, run_count, started_at, worker_id) VALUES"
                    " ('t', 'q', 'running', 1, now(), $1::uuid), ('t', 'other', 'running', 1, now(), $1::uuid)",
                    pg::Params().add(worker));
        break;
      case 4: finish("queue = 'q' AND worker_id IS DISTINCT FROM '" + worker + "'"); break;
      default: {
        // The queue at its cap: the claim takes nothing and keeps its floor.
        const std::int64_t room = 40 - running();
        if (room > 0) by_hand(static_cast<int>(room), unknown);
        break;
      }
    }
    if (i == 13) {
      in_flight.emplace(slow);
      in_flight->exec("UPDATE akadze.jobs SET state = 'running', worker_id = $1::uuid, run_count = 1"
                      " WHERE id = (SELECT max(id) FROM akadze.jobs WHERE state = 'queued' AND queue = 'q')",
                      pg::Params().add(unknown));
      for (int x = 0; x < 1100; ++x) writer.exec("SELECT pg_current_xact_id()");
    }
    const std::int64_t expected = running();
    ClaimResult got = RunClaim(conn, r);
    INFO("claim " << i);
    if (i == 13) CHECK_FALSE(floor.queue_running->running.points.empty());
    CHECK(got.queue_cap == 40);
    CHECK(got.queue_running == expected);
    CHECK(static_cast<std::int64_t>(got.jobs.size()) == std::max<std::int64_t>(0, 40 - expected));
    CHECK(running() == std::max<std::int64_t>(expected, 40));
    REQUIRE(floor.queue_running);
    CHECK(floor.queue_running->reads_stops);
    // The worker's jobs of the queue finish, but for one.
    finish("queue = 'q' AND worker_id = '" + worker + "' AND id <> (SELECT min(id) FROM akadze.jobs"
           " WHERE state = 'running' AND queue = 'q' AND worker_id = '" + worker + "')");
  }
  // A first claim that finds the queue at its cap leaves a floor of its
  // count alone, which the next count reads with.
  finish("queue = 'q' AND worker_id IS DISTINCT FROM '" + worker + "'");
  by_hand(static_cast<int>(40 - running()), below);
  ClaimFloor first;
  ClaimRequest fresh = r;
  fresh.floor = &first;
  CHECK(RunClaim(conn, fresh).capped);
  CHECK(first.empty());
  REQUIRE(first.queue_running);
  finish("queue = 'q' AND worker_id = '" + below + "' AND id % 2 = 0");
  by_hand(1, std::nullopt);
  const std::int64_t now_running = running();
  CHECK(RunClaim(conn, fresh).queue_running == now_running);
  // The entries of jobs_running_worker_idx one claim reads: with the floor,
  // those made running since the last claim; without it (a dry run, no
  // stored worker floor), every job the cluster ran during the hold.
  // (Each backend reports its counts as it goes idle after a statement
  // that forces it: none of another statement's reads is counted.)
  const auto entries_read = [&](const ClaimRequest& c) {
    const std::int64_t expected = running();
    writer.exec("SELECT pg_stat_force_next_flush()");
    conn.exec("SELECT pg_stat_force_next_flush()");
    const std::int64_t before = test::IndexTuplesRead(stats, "akadze.jobs_running_worker_idx");
    ClaimResult got = RunClaim(conn, c);
    CHECK(got.queue_running == expected);
    conn.exec("SELECT pg_stat_force_next_flush()");
    return test::IndexTuplesRead(stats, "akadze.jobs_running_worker_idx") - before;
  };
  const std::int64_t with_floor = entries_read(r);
  ClaimRequest whole = r;
  whole.floor = nullptr;
  whole.dry_run = true;
  const std::int64_t without = entries_read(whole);
  INFO("entries read: with the floor " << with_floor << ", without " << without);
  CHECK(without >= 1000);
  CHECK(with_floor <= 100);
  held.release();
}

TEST_CASE("slots counted at the lock: a claim takes what its caller freed while it waited for the claim lock",
          "[claim][slots_at_lock]") {
  const std::string db = test::FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  pg::Connection holder = pg::Connection::Open(db);
  Ids queued;
  for (int i = 0; i < 8; ++i) queued.push_back(Enqueue(conn, std::nullopt));
  // Another claim of the queue holds the claim lock.
  pg::Transaction tx(holder);
  tx.exec("SELECT pg_advisory_xact_lock(hashtextextended('akadze.claim_queue:q', 0))");
  std::atomic<int> asked{0};
  std::atomic<int> free_now{1};
  std::future<ClaimResult> waiting = std::async(std::launch::async, [&] {
    pg::Connection c = pg::Connection::Open(db);
    ClaimRequest r;
    r.queue = "q";
    r.slots = 6;
    r.expected_slots = 1;  // one slot free when it was sent
    r.slots_at_lock = [&] {
      ++asked;
      return free_now.load();
    };
    return RunClaim(c, r);
  });
  REQUIRE(test::WaitUntil([&] {
    return test::AdvisoryLockWaiters(conn) == 1;
  }));
  // Not asked while it waits; three more slots free meanwhile.
  CHECK(asked == 0);
  free_now = 4;
  tx.commit();
  ClaimResult got = waiting.get();
  CHECK(asked == 1);
  // Four, in order: more than its first window of 4 rows would have needed
  // for the one slot, never more than `slots`.
  CHECK(got.jobs.size() == 4);
  for (std::size_t i = 0; i < got.jobs.size() && i < 4; ++i) CHECK(got.jobs[i].id == queued[i]);

  // At most `slots`, whatever the caller says; nothing when it says none.
  ClaimRequest r;
  r.queue = "q";
  r.slots = 2;
  r.slots_at_lock = [] { return 100; };
  CHECK(RunClaim(conn, r).jobs.size() == 2);
  r.slots_at_lock = [] { return 0; };
  ClaimResult none = RunClaim(conn, r);
  CHECK(none.jobs.empty());
  CHECK(test::JobsInState(conn, "queued") == 2);
  // expected_slots beyond slots is a bad request.
  r.expected_slots = 3;
  CHECK_THROWS_AS(RunClaim(conn, r), std::invalid_argument);
}

TEST_CASE("a claim marks jobs running, fenced, and records starts of rate-limited keys",
          "[claim]") {
  pg::Connection conn = pg::Connection::Open(test::FreshDatabase());
  SetLimit(conn, LimitRow{"rated", std::nullopt, 5, 60'000'000});
  SetLimit(conn, LimitRow{"capped", 5, std::nullopt, std::nullopt});
  std::int64_t a = Enqueue(conn, "rated", 1);
  std::int64_t b = Enqueue(conn, "capped");
  ClaimRequest r;
  r.queue = "q";
  r.slots = 5;
  r.worker_id = "11111111-2222-4333-8444-555555555555";
  ClaimResult res = RunClaim(conn, r);
  REQUIRE(res.jobs.size() == 2);
  CHECK(res.jobs[0].id == a);
  CHECK(res.jobs[0].run_count == 1);
  CHECK(res.jobs[0].limit_key == std::optional<std::string>("rated"));
  pg::Result row = conn.exec(
      "SELECT state, run_count, worker_id::text, started_at IS NOT NULL, attempt FROM akadze.jobs"
      " WHERE id = $1",
      pg::Params().add(b));
  CHECK(row.text(0, 0) == "running");
  CHECK(row.int64(0, 1) == 1);
  CHECK(row.text(0, 2) == r.worker_id);
  CHECK(row.boolean(0, 3));
  CHECK(row.int64(0, 4) == 0);
  CHECK(conn.exec("SELECT array_agg(key) FROM akadze.limit_starts").text(0, 0) == "{rated}");
}

TEST_CASE("a dry run plans and locks like a claim and changes nothing", "[claim]") {
  pg::Connection conn = pg::Connection::Open(test::FreshDatabase());
  SetLimit(conn, LimitRow{"*", 1, 2, 60'000'000});
  for (int i = 0; i < 20; ++i) Enqueue(conn, "k" + std::to_string(i % 4), i % 3);
  Ids dry = ClaimIds(conn, 5, ClaimMode::kFair, "q", true);
  Ids dry_again = ClaimIds(conn, 5, ClaimMode::kFair, "q", true);
  CHECK(dry == dry_again);
  CHECK(conn.exec("SELECT count(*) FROM akadze.jobs WHERE state <> 'queued' OR run_count <> 0")
            .int64(0, 0) == 0);
  CHECK(conn.exec("SELECT count(*) FROM akadze.limit_starts").int64(0, 0) == 0);
  CHECK(ClaimIds(conn, 5, ClaimMode::kFair) == dry);
}

TEST_CASE("the first window is slots x 4 rows", "[claim]") {
  pg::Connection conn = pg::Connection::Open(test::FreshDatabase());
  conn.exec("INSERT INTO akadze.jobs (task, queue, run_at) SELECT 't', 'q', now() - i * interval '1 ms'"
            " FROM generate_series(1, 1000) i");
  ClaimRequest r;
  r.queue = "q";
  r.slots = 3;
  r.dry_run = true;
  ClaimResult res = RunClaim(conn, r);
  CHECK(res.jobs.size() == 3);
  CHECK(res.windows == 1);
  CHECK(res.rows_read == 12);
  // The head of the queue was all the plan needed.
  CHECK(res.rows_needed == 3);
}

// FirstWindowSizer's input and output: rows_needed counts the rows up to
// the plan's last one; a smaller first window reads that much, and one too
// small for the plan reads on to the same jobs.
TEST_CASE("the first window as the request sizes it: rows needed, and reading on when too small",
          "[claim][first_window]") {
  pg::Connection conn = pg::Connection::Open(test::FreshDatabase());
  SetLimit(conn, LimitRow{"a", 1, std::nullopt, std::nullopt});
  // a, free, a, free, ... in claim order: 40 rows, 20 of key a.
  conn.exec("INSERT INTO akadze.jobs (task, queue, limit_key, run_at)"
            " SELECT 't', 'q', CASE WHEN i % 2 = 1 THEN 'a' END, now() - interval '1 day' + i * interval '1 ms'"
            " FROM generate_series(1, 40) i");
  ClaimRequest r;
  r.queue = "q";
  r.slots = 4;
  r.dry_run = true;
  test::ReferenceClaimRequest ref{"q", 4, false, {}, std::nullopt};
  const Ids want = test::ReferenceClaim(conn, ref);
  REQUIRE(want.size() == 4);
  // The plan (a's first job and three free ones) ends at the sixth row. The
  // default window (0: 4 rows a slot) reads 16 rows; 1.5 rows a slot reads
  // 6, just enough. Either way one window.
  for (const auto& [per_slot, rows_read] : {std::pair{0.0, 16}, std::pair{1.5, 6}}) {
    INFO("first_window_per_slot " << per_slot);
    r.first_window_per_slot = per_slot;
    ClaimResult one = RunClaim(conn, r);
    CHECK(JobIds(one) == want);
    CHECK(one.windows == 1);
    CHECK(one.rows_read == rows_read);
    CHECK(one.rows_needed == 6);
  }
  // One row a slot: 4 rows hold two free jobs; the planner reads on (a
  // further window skipping a, which is at its limit) to the same plan.
  r.first_window_per_slot = 1;
  ClaimResult small = RunClaim(conn, r);
  CHECK(JobIds(small) == want);
  CHECK(small.windows >= 2);
  CHECK(small.rows_read >= 6);
  // Its plan ends in the window that skipped a: the need is not known.
  CHECK_FALSE(small.rows_needed);
  // Out of range: a bad request.
  for (double bad : {0.5, 65.0, -1.0, std::nan("")}) {
    r.first_window_per_slot = bad;
    CHECK_THROWS_AS(RunClaim(conn, r), std::invalid_argument);
  }
}

// Reading around skipped groups (docs/claim.md): a key at its limit owns
// the head of the queue, so the second window reads the other keys' rows
// through jobs_claim_key_idx instead of stepping over the held key's rows.
// The claim returns what the full-scan reference returns, and reads about
// as many rows whatever the length of the skipped run.
TEST_CASE("a long run of a key at its limit is read around, with the reference's result",
          "[claim][keyed]") {
  pg::Connection conn = pg::Connection::Open(test::FreshDatabase());
  SetLimit(conn, LimitRow{"*", 1000, std::nullopt, std::nullopt});
  SetLimit(conn, LimitRow{"hot", 1, std::nullopt, std::nullopt});
  conn.exec("INSERT INTO akadze.jobs (task, queue, state, limit_key, run_count, worker_id, started_at)"
            " VALUES ('t', 'elsewhere', 'running', 'hot', 1, gen_random_uuid(), now())");
  std::vector<std::int64_t> rows_read;
  for (int hot_rows : {2000, 20000}) {
    conn.exec("DELETE FROM akadze.jobs WHERE queue = 'q'");
    // hot's jobs first in claim order, then 30 keys interleaved; one of them
    // also has a job that is not ready, between the hot run and the rest.
    conn.exec("INSERT INTO akadze.jobs (task, queue, limit_key, run_at)"
              " SELECT 't', 'q', CASE WHEN i <= $1 THEN 'hot' ELSE 'k' || i % 30 END,"
              "        now() - interval '1 day' + i * interval '1 ms'"
              " FROM generate_series(1, $1::int + 600) AS i",
              pg::Params().add(hot_rows));
    conn.exec("UPDATE akadze.jobs SET cancel_requested_at = now()"
              " WHERE id = (SELECT min(id) FROM akadze.jobs WHERE queue = 'q' AND limit_key = 'k7')");
    conn.exec("ANALYZE akadze.jobs");
    for (ClaimMode mode : {ClaimMode::kOrdered, ClaimMode::kFair}) {
      ClaimRequest r;
      r.queue = "q";
      r.slots = 10;
      r.mode = mode;
      pg::Transaction tx(conn, "BEGIN ISOLATION LEVEL READ COMMITTED");
      test::ReferenceClaimRequest ref{"q", 10, mode == ClaimMode::kFair, {}, std::nullopt};
      Ids expected = test::ReferenceClaim(conn, ref);
      ClaimResult got = ClaimInTransaction(tx, r);
      tx.rollback();
      const Ids ids = JobIds(got);
      CHECK(ids == expected);
      CHECK(ids.size() == 10);
      CHECK(got.keyed_windows >= 1);
      rows_read.push_back(got.rows_read);
    }
  }
  // Ten times the skipped run, the same rows read.
  CHECK(rows_read[2] == rows_read[0]);
  CHECK(rows_read[3] == rows_read[1]);
}

TEST_CASE("a queue of one key at its limit, or one fair group, ends after two windows",
          "[claim][keyed]") {
  pg::Connection conn = pg::Connection::Open(test::FreshDatabase());
  SetLimit(conn, LimitRow{"hot", 1, std::nullopt, std::nullopt});
  conn.exec("INSERT INTO akadze.jobs (task, queue, state, limit_key, run_count, worker_id, started_at)"
            " VALUES ('t', 'elsewhere', 'running', 'hot', 1, gen_random_uuid(), now())");
  conn.exec("INSERT INTO akadze.jobs (task, queue, limit_key, run_at)"
            " SELECT 't', 'one-key', 'hot', now() - i * interval '1 ms' FROM generate_series(1, 5000) i");
  conn.exec("INSERT INTO akadze.jobs (task, queue, run_at)"
            " SELECT 't', 'no-keys', now() - i * interval '1 ms' FROM generate_series(1, 5000) i");
  conn.exec("ANALYZE akadze.jobs");
  ClaimRequest r;
  r.slots = 5;
  r.dry_run = true;
  r.queue = "one-key";
  ClaimResult one_key = RunClaim(conn, r);
  CHECK(one_key.jobs.empty());
  CHECK(one_key.windows == 2);
  CHECK(one_key.keyed_windows == 1);
  CHECK(one_key.rows_read == 20);
  r.queue = "no-keys";
  r.mode = ClaimMode::kFair;
  ClaimResult no_keys = RunClaim(conn, r);
  CHECK(no_keys.jobs.size() == 5);
  CHECK(no_keys.windows == 2);
  CHECK(no_keys.keyed_windows == 1);
  CHECK(no_keys.rows_read == 20);
}

std::string DatabaseOf(pg::Connection& conn) {
  return test::Cluster().conninfo(std::string(conn.exec("SELECT current_database()").text(0, 0)));
}

TEST_CASE("rows another transaction holds are skipped: the next ones are claimed", "[claim][locks]") {
  pg::Connection conn = pg::Connection::Open(test::FreshDatabase());
  std::int64_t j1 = Enqueue(conn, std::nullopt, 3);
  std::int64_t j2 = Enqueue(conn, std::nullopt, 3);
  std::int64_t j3 = Enqueue(conn, std::nullopt, 2);
  pg::Connection other = pg::Connection::Open(DatabaseOf(conn));
  pg::Transaction holder(other);
  holder.exec("SELECT id FROM akadze.jobs WHERE id = $1 FOR UPDATE", pg::Params().add(j1));
  CHECK(ClaimIds(conn, 2) == Ids{j2, j3});
  holder.rollback();
  CHECK(ClaimIds(conn, 2) == Ids{j1});
}

TEST_CASE("a speculative claim locks its keys in the claiming statement's round trip: 2 in all",
          "[claim][locks]") {
  pg::Connection conn = pg::Connection::Open(test::FreshDatabase());
  SetLimit(conn, LimitRow{"*", 2, std::nullopt, std::nullopt});
  SetLimit(conn, LimitRow{"rated", 5, 3, 60'000'000});
  Ids a, rated;
  for (int i = 0; i < 3; ++i) a.push_back(Enqueue(conn, "a"));
  for (int i = 0; i < 4; ++i) rated.push_back(Enqueue(conn, "rated"));
  ClaimRequest r;
  r.queue = "q";
  r.slots = 10;
  ClaimResult first = RunClaim(conn, r);
  CHECK(first.round_trips == 2);
  CHECK(first.speculation_failures == 0);
  CHECK(first.jobs.size() == 5);  // 2 of a (max_running), 3 of rated (max_starts)
  CHECK(conn.exec("SELECT count(*) FROM akadze.limit_starts WHERE key = 'rated'").int64(0, 0) == 3);
  // The counts were right: nothing more of either key until one finishes.
  ClaimResult second = RunClaim(conn, r);
  CHECK(second.jobs.empty());
  Finish(conn, a[0]);
  CHECK(ClaimIds(conn, 10) == Ids{a[2]});
}

TEST_CASE("a start cap set on a key while a speculative claim is in flight: its starts are still marked",
          "[claim][locks]") {
  const std::string db = test::FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  pg::Connection admin = pg::Connection::Open(db);
  SetLimit(conn, LimitRow{"k", 5, std::nullopt, std::nullopt});
  Ids k;
  for (int i = 0; i < 2; ++i) k.push_back(Enqueue(conn, "k"));
  ClaimRequest r;
  r.queue = "q";
  r.slots = 10;
  // Between the first round trip (the counts without locks: k caps only
  // running) and the claiming statement, an operator gives k a start cap
  // with room for both jobs. The claim planned no start marks for k; it
  // must not start k's jobs unmarked, which would let the window start
  // more than max_starts.
  int asked = 0;
  r.slots_at_lock = [&] {
    if (asked++ == 0) SetLimit(admin, LimitRow{"k", 5, 3, 60'000'000});
    return r.slots;
  };
  ClaimResult res = RunClaim(conn, r);
  CHECK(res.speculation_failures == 1);  // the first try saw the row change, and claimed nothing
  CHECK(res.jobs.size() == 2);
  CHECK(conn.exec("SELECT count(*) FROM akadze.limit_starts WHERE key = 'k'").int64(0, 0) == 2);
  // So the cap counts them: one more start in the window, not three.
  for (int i = 0; i < 3; ++i) Enqueue(conn, "k");
  CHECK(ClaimIds(conn, 10).size() == 1);
}

TEST_CASE("a key whose lock another claim holds is skipped without waiting", "[claim][locks]") {
  pg::Connection conn = pg::Connection::Open(test::FreshDatabase());
  std::string db(conn.exec("SELECT current_database()").text(0, 0));
  SetLimit(conn, LimitRow{"*", 5, std::nullopt, std::nullopt});
  std::int64_t b1 = Enqueue(conn, "b", 5);  // seen first: its lock may wait
  std::int64_t a1 = Enqueue(conn, "a", 1);  // its lock is held elsewhere
  std::int64_t n1 = Enqueue(conn, std::nullopt, 0);

  pg::Connection other = pg::Connection::Open(test::Cluster().conninfo(db));
  pg::Transaction holder(other);
  holder.exec("SELECT pg_advisory_xact_lock(hashtextextended('akadze.limit_key:' || 'a', 0))");
  ClaimRequest r;
  r.queue = "q";
  r.slots = 10;
  ClaimResult res = RunClaim(conn, r);
  CHECK(JobIds(res) == Ids{b1, n1});
  // The first try planned a and b on their counts without locks (a
  // speculative claim), found a's lock held and claimed nothing; the second,
  // without speculation, skipped a. Each try counted a as locked elsewhere.
  CHECK(res.speculation_failures == 1);
  CHECK(res.keys_locked_elsewhere == 2);
  holder.rollback();
  CHECK(ClaimIds(conn, 10) == Ids{a1});
}

TEST_CASE("the first key lock waits, then counts what the holder committed", "[claim][locks]") {
  pg::Connection conn = pg::Connection::Open(test::FreshDatabase());
  SetLimit(conn, LimitRow{"a", 2, std::nullopt, std::nullopt});
  std::int64_t a1 = Enqueue(conn, "a");
  std::int64_t a2 = Enqueue(conn, "a");
  std::int64_t a3 = Enqueue(conn, "a");
  REQUIRE(ClaimIds(conn, 1) == Ids{a1});

  // Another claim holds a's lock and, inside its transaction, takes a2: a
  // has one free slot left and that claim is using it.
  pg::Connection other = pg::Connection::Open(DatabaseOf(conn));
  pg::Transaction holder(other);
  holder.exec("SELECT pg_advisory_xact_lock(hashtextextended('akadze.limit_key:' || 'a', 0))");
  holder.exec("UPDATE akadze.jobs SET state = 'running', run_count = 1 WHERE id = $1",
              pg::Params().add(a2));

  // Our claim sees a as free (a2's claim is not committed) and a is its first
  // key: it waits for the lock...
  pg::Connection claimer = pg::Connection::Open(DatabaseOf(conn));
  const int pid = claimer.backend_pid();
  auto claim = std::async(std::launch::async, [&] { return ClaimIds(claimer, 10); });
  pg::Connection watcher = pg::Connection::Open(DatabaseOf(conn));
  bool waiting = false;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
       !waiting && std::chrono::steady_clock::now() < deadline;) {
    pg::Result w = watcher.exec("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1",
                                pg::Params().add(pid));
    waiting = w.rows() == 1 && w.boolean(0, 0);
    if (!waiting) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(waiting);
  CHECK(claim.wait_for(std::chrono::milliseconds(0)) == std::future_status::timeout);
  // ...and once the holder commits, counts again, sees a1 and a2 running and
  // takes nothing: the same free slot is never given twice.
  holder.commit();
  CHECK(claim.get().empty());
  CHECK(State(conn, a3) == "queued");
}

}  // namespace
}  // namespace akadzed

namespace akadzed {
namespace {

// ClaimRequest::lease_span_us: the worker's row decides, by the server's clock when each statement runs.
TEST_CASE("the lease fence: no worker row, or a heartbeat older than the lease span, claims nothing",
          "[claim][fence]") {
  pg::Connection conn = pg::Connection::Open(test::FreshDatabase());
  std::int64_t job = Enqueue(conn, std::nullopt);
  const std::string worker = "6f1c1d2e-0000-4000-8000-000000000001";
  ClaimRequest r;
  r.queue = "q";
  r.slots = 4;
  r.worker_id = worker;
  r.lease_span_us = 2'000'000;
  // No row: a rescue deleted it, or the id was never registered.
  ClaimResult none = RunClaim(conn, r);
  CHECK(none.fenced);
  CHECK(none.jobs.empty());
  CHECK(State(conn, job) == "queued");
  // A row whose heartbeat is older than the span.
  conn.exec("INSERT INTO akadze.workers (id, hostname, pid, queues, heartbeat_at)"
            " VALUES ($1::uuid, 'h', 1, '{q}', now() - interval '3 seconds')",
            pg::Params().add(worker));
  ClaimResult stale = RunClaim(conn, r);
  CHECK(stale.fenced);
  CHECK(State(conn, job) == "queued");
  // A fresh heartbeat: claimed.
  conn.exec("UPDATE akadze.workers SET heartbeat_at = now()");
  ClaimResult fresh = RunClaim(conn, r);
  CHECK_FALSE(fresh.fenced);
  REQUIRE(fresh.jobs.size() == 1);
  CHECK(fresh.jobs[0].id == job);
  // No span: no fence (akadzed claim, the benchmarks).
  std::int64_t other = Enqueue(conn, std::nullopt);
  conn.exec("DELETE FROM akadze.workers");
  r.lease_span_us.reset();
  ClaimResult unfenced = RunClaim(conn, r);
  CHECK_FALSE(unfenced.fenced);
  REQUIRE(unfenced.jobs.size() == 1);
  CHECK(unfenced.jobs[0].id == other);
}

// [direct]: holds a session-level advisory lock across statements.
TEST_CASE("the lease fence is checked again by the statement that claims: a lease lost mid-claim takes nothing",
          "[claim][fence][direct]") {
  const std::string db = test::FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  pg::Connection blocker = pg::Connection::Open(db);
  SetLimit(conn, LimitRow{"acct", 1, std::nullopt, std::nullopt});
  std::int64_t job = Enqueue(conn, "acct");
  const std::string worker = "6f1c1d2e-0000-4000-8000-000000000002";
  conn.exec("INSERT INTO akadze.workers (id, hostname, pid, queues) VALUES ($1::uuid, 'h', 1, '{q}')",
            pg::Params().add(worker));
  // The claim passes the fence at its start, then waits for the key's lock.
  blocker.exec("SELECT pg_advisory_lock(hashtextextended('akadze.limit_key:' || 'acct', 0))");
  auto claim = std::async(std::launch::async, [&] {
    pg::Connection c = pg::Connection::Open(db);
    ClaimRequest r;
    r.queue = "q";
    r.slots = 1;
    r.worker_id = worker;
    r.lease_span_us = 60'000'000;
    return RunClaim(c, r);
  });
  REQUIRE(test::WaitUntil([&] {
    return conn.exec("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                     " AND wait_event = 'advisory' AND datname = current_database()")
               .int64(0, 0) == 1;
  }));
  // Meanwhile its lease ends: a rescue deleted the row.
  conn.exec("DELETE FROM akadze.workers");
  blocker.exec("SELECT pg_advisory_unlock_all()");
  ClaimResult result = claim.get();
  CHECK(result.fenced);
  CHECK(result.jobs.empty());
  CHECK(State(conn, job) == "queued");
  CHECK(conn.exec("SELECT count(*) FROM akadze.limit_starts").int64(0, 0) == 0);
}

}  // namespace
}  // namespace akadzed
