// Finishes and rescues as SQL (store/job_finish.h, store/worker_lease.h)
// against a real PostgreSQL: akadze's next-state rules, fencing, error
// trimming and redaction, and the rescue of jobs of dead workers.
#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "claim/claim_transaction.h"
#include "pg/connection.h"
#include "pg/pg_error.h"
#include "support/held_horizon.h"
#include "support/index_stats.h"
#include "support/test_cluster.h"
#include "store/job_finish.h"
#include "store/worker_lease.h"

namespace akadzed {
namespace {

using nlohmann::json;

struct Db {
  std::string url = test::FreshDatabase();
  pg::Connection conn = pg::Connection::Open(url);
  std::string worker = RandomUuid();

  // A job claimed by `worker` (state running, run_count 1).
  std::int64_t RunningJob(int attempt = 0, int max_attempts = 3) {
    return conn
        .exec("INSERT INTO akadze.jobs (task, state, attempt, max_attempts, run_count, worker_id,"
              " started_at) VALUES ('t', 'running', $1, $2, 1, $3::uuid, now()) RETURNING id",
              pg::Params().add(attempt).add(max_attempts).add(worker))
        .int64(0, 0);
  }
  json Row(std::int64_t id) {
    pg::Result r = conn.exec(
        "SELECT to_jsonb(j) || jsonb_build_object('run_in', extract(epoch FROM j.run_at - now()))"
        " FROM akadze.jobs j WHERE id = $1",
        pg::Params().add(id));
    return json::parse(r.text(0, 0));
  }
  FinishResult Finish(std::int64_t id, JobOutcome outcome, int run_count = 1) {
    return FinishJobs(conn, worker, {{id, run_count, std::move(outcome)}}).front();
  }
};

JobOutcome Outcome(OutcomeKind kind, std::string error = "", std::string message = "") {
  JobOutcome o;
  o.kind = kind;
  o.error = std::move(error);
  o.message = std::move(message);
  return o;
}

TEST_CASE("backoff is min(2^(attempt-1), 300) seconds", "[finish]") {
  CHECK(RetryBackoffSeconds(1) == 1);
  CHECK(RetryBackoffSeconds(2) == 2);
  CHECK(RetryBackoffSeconds(5) == 16);
  CHECK(RetryBackoffSeconds(9) == 256);
  CHECK(RetryBackoffSeconds(10) == 300);
  CHECK(RetryBackoffSeconds(1000) == 300);
}

TEST_CASE("success stores the result and the finish time", "[finish]") {
  Db db;
  auto id = db.RunningJob();
  JobOutcome o = Outcome(OutcomeKind::kSuccess);
  o.result_json = R"({"n": 42, "s": "x"})";
  FinishResult r = db.Finish(id, o);
  CHECK(r.applied);
  CHECK(r.state == JobState::kSucceeded);
  json row = db.Row(id);
  CHECK(row["state"] == "succeeded");
  CHECK(row["result"] == json{{"n", 42}, {"s", "x"}});
  CHECK_FALSE(row["finished_at"].is_null());
  CHECK(row["attempt"] == 0);
  CHECK(row["worker_id"] == db.worker);
}

TEST_CASE("retry spends an attempt and waits the backoff, or the given delay", "[finish]") {
  Db db;
  auto first = db.RunningJob(0);
  auto third = db.RunningJob(4, 10);
  auto delayed = db.RunningJob(0);
  FinishResult r1 = db.Finish(first, Outcome(OutcomeKind::kRetry, "ExitStatus", "exited with status 1"));
  FinishResult r3 = db.Finish(third, Outcome(OutcomeKind::kRetry, "E", "m"));
  JobOutcome with_delay = Outcome(OutcomeKind::kRetry, "E", "m");
  with_delay.delay_us = 120'000'000;
  FinishResult rd = db.Finish(delayed, with_delay);
  CHECK(r1.state == JobState::kQueued);
  CHECK(r1.attempt == 1);
  CHECK(r1.run_in_s == Approx(1).margin(0.2));
  CHECK(r3.attempt == 5);
  CHECK(r3.run_in_s == Approx(16).margin(0.2));
  CHECK(rd.run_in_s == Approx(120).margin(0.2));
  json row = db.Row(first);
  CHECK(row["worker_id"].is_null());
  CHECK(row["finished_at"].is_null());
  CHECK(row["errors"] == json::array({{{"error", "ExitStatus"}, {"message", "exited with status 1"}}}));
}

TEST_CASE("a retry with its attempts spent fails the job, as does fail", "[finish]") {
  Db db;
  auto last = db.RunningJob(2, 3);
  auto permanent = db.RunningJob(0, 3);
  CHECK(db.Finish(last, Outcome(OutcomeKind::kRetry, "E", "m")).state == JobState::kFailed);
  CHECK(db.Finish(permanent, Outcome(OutcomeKind::kFail, "Bad", "no")).state == JobState::kFailed);
  CHECK(db.Row(last)["attempt"] == 3);
  CHECK(db.Row(permanent)["attempt"] == 1);
  CHECK_FALSE(db.Row(permanent)["finished_at"].is_null());
}

TEST_CASE("snooze, cancel and release", "[finish]") {
  Db db;
  auto snoozed = db.RunningJob(1);
  auto cancelled = db.RunningJob();
  auto released = db.RunningJob(1);
  JobOutcome snooze = Outcome(OutcomeKind::kSnooze);
  snooze.delay_us = 30'000'000;
  FinishResult rs = db.Finish(snoozed, snooze);
  CHECK(rs.state == JobState::kQueued);
  CHECK(rs.run_in_s == Approx(30).margin(0.2));
  json row = db.Row(snoozed);
  CHECK(row["attempt"] == 1);
  CHECK(row["snoozes"] == 1);
  CHECK(db.Finish(cancelled, Outcome(OutcomeKind::kCancel)).state == JobState::kCancelled);
  json before = db.Row(released);
  CHECK(db.Finish(released, Outcome(OutcomeKind::kRelease)).state == JobState::kQueued);
  json after = db.Row(released);
  CHECK(after["attempt"] == 1);
  CHECK(after["run_at"] == before["run_at"]);
  CHECK(after["worker_id"].is_null());
}

TEST_CASE("errors keep the last 10, redacted and cut to 500 characters", "[finish]") {
  Db db;
  auto id = db.RunningJob(0, 100);
  for (int i = 1; i <= 12; ++i) {
    db.conn.exec("UPDATE akadze.jobs SET state = 'running', run_count = $2, worker_id = $3::uuid"
                 " WHERE id = $1",
                 pg::Params().add(id).add(i).add(db.worker));
    std::string message = "try " + std::to_string(i);
    if (i == 12) message = "postgres://app:s3cret@db/x " + std::string(600, 'y');
    REQUIRE(db.Finish(id, Outcome(OutcomeKind::kRetry, "E" + std::to_string(i), message), i).applied);
  }
  json errors = db.Row(id)["errors"];
  REQUIRE(errors.size() == 10);
  CHECK(errors[0]["error"] == "E3");
  CHECK(errors[9]["error"] == "E12");
  std::string last = errors[9]["message"];
  CHECK(last.find("s3cret") == std::string::npos);
  CHECK(last.rfind("postgres://app:***@db/x yyy", 0) == 0);
  // 500 characters, counted in the database as characters.
  CHECK(db.conn.exec("SELECT length(errors->9->>'message') FROM akadze.jobs WHERE id = $1",
                     pg::Params().add(id)).int64(0, 0) == 500);
}

TEST_CASE("a finish with the wrong run_count, worker or state is stale", "[finish]") {
  Db db;
  auto id = db.RunningJob();
  CHECK_FALSE(db.Finish(id, Outcome(OutcomeKind::kSuccess), 2).applied);
  CHECK_FALSE(FinishJobs(db.conn, RandomUuid(), {{id, 1, Outcome(OutcomeKind::kSuccess)}})
                  .front().applied);
  CHECK(db.Row(id)["state"] == "running");
  CHECK(db.Finish(id, Outcome(OutcomeKind::kSuccess)).applied);
  // A second finish of the same run is stale too.
  CHECK_FALSE(db.Finish(id, Outcome(OutcomeKind::kFail, "E", "m")).applied);
  CHECK(db.Row(id)["state"] == "succeeded");
}

TEST_CASE("one statement finishes a batch, results in request order", "[finish]") {
  Db db;
  std::vector<FinishRequest> batch;
  for (int i = 0; i < 50; ++i) {
    JobOutcome o = Outcome(i % 2 ? OutcomeKind::kSuccess : OutcomeKind::kRetry, "E", "m");
    batch.push_back({db.RunningJob(), i == 7 ? 5 : 1, o});
  }
  auto results = FinishJobs(db.conn, db.worker, batch);
  REQUIRE(results.size() == 50);
  for (int i = 0; i < 50; ++i) {
    CHECK(results[i].job_id == batch[i].job_id);
    CHECK(results[i].applied == (i != 7));
    if (i != 7) CHECK(results[i].state == (i % 2 ? JobState::kSucceeded : JobState::kQueued));
  }
}

TEST_CASE("finishes of a daemon with few slots run prepared, on a generic plan, with the same results",
          "[finish]") {
  CHECK(FinishPlanFor(8) == FinishPlan::kPrepared);
  CHECK(FinishPlanFor(kPreparedFinishMaxSlots) == FinishPlan::kPrepared);
  CHECK(FinishPlanFor(kPreparedFinishMaxSlots + 1) == FinishPlan::kPerBatch);
  Db db;
  // The generic plan from the first finish on (made as index lookups:
  // store/job_sql.h, kIndexLookupPlansSql), never a custom one.
  for (int round = 0; round < 8; ++round) {
    const auto ok = db.RunningJob(), retried = db.RunningJob(), stale = db.RunningJob();
    auto results = FinishJobs(db.conn, db.worker,
                              {{ok, 1, Outcome(OutcomeKind::kSuccess)},
                               {retried, 1, Outcome(OutcomeKind::kRetry, "E", "m")},
                               {stale, 2, Outcome(OutcomeKind::kSuccess)}},
                              nullptr, FinishPlan::kPrepared);
    REQUIRE(results.size() == 3);
    CHECK(results[0].state == JobState::kSucceeded);
    CHECK(results[1].state == JobState::kQueued);
    CHECK(results[1].attempt == 1);
    CHECK_FALSE(results[2].applied);
    CHECK(db.Row(stale)["state"] == "running");
  }
  // Through a pooler every statement runs unnamed (pg/connection.h): the
  // same results, planned each time.
  if (db.conn.pooled()) return;
  pg::Result plans = db.conn.exec(
      "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
      " WHERE statement LIKE '%UPDATE akadze.jobs AS j SET%'");
  REQUIRE(plans.rows() == 1);
  CHECK(plans.int64(0, 0) == 8);
  CHECK(plans.int64(0, 1) == 0);
}

TEST_CASE("a request that keeps no succeeded job deletes it if it succeeds, fenced like the update",
          "[finish][keep_succeeded]") {
  Db db;
  // Planned per batch, and prepared (7 rounds: PostgreSQL may choose its
  // generic plan after five custom ones).
  for (const FinishPlan plan : {FinishPlan::kPerBatch, FinishPlan::kPrepared}) {
    for (int round = 0; round < (plan == FinishPlan::kPrepared ? 7 : 1); ++round) {
      const auto kept = db.RunningJob(), gone = db.RunningJob(), retried = db.RunningJob(),
                 stale = db.RunningJob(), failed = db.RunningJob(), others = db.RunningJob(),
                 ended = db.RunningJob();
      // Not ours to delete: another worker's job, and one of ours already ended.
      db.conn.exec("UPDATE akadze.jobs SET worker_id = gen_random_uuid() WHERE id = $1", pg::Params().add(others));
      db.conn.exec("UPDATE akadze.jobs SET state = 'failed' WHERE id = $1", pg::Params().add(ended));
      JobOutcome success = Outcome(OutcomeKind::kSuccess);
      success.result_json = R"({"n": 1})";
      const std::vector<FinishRequest> batch = {
          {kept, 1, success, true},
          {gone, 1, success, false},
          {retried, 1, Outcome(OutcomeKind::kRetry, "E", "m"), false},
          {stale, 2, success, false},  // another run's finish: not ours to delete
          {failed, 1, Outcome(OutcomeKind::kFail, "E", "m"), false},
          {others, 1, success, false},
          {ended, 1, success, false}};
      auto results = FinishJobs(db.conn, db.worker, batch, nullptr, plan);
      REQUIRE(results.size() == 7);
      for (std::size_t k = 0; k < batch.size(); ++k) CHECK(results[k].job_id == batch[k].job_id);
      CHECK(results[0].state == JobState::kSucceeded);
      CHECK(results[1].applied);
      CHECK(results[1].state == JobState::kSucceeded);
      CHECK(results[2].state == JobState::kQueued);
      CHECK(results[2].attempt == 1);
      CHECK_FALSE(results[3].applied);
      CHECK(results[4].state == JobState::kFailed);
      CHECK_FALSE(results[5].applied);
      CHECK_FALSE(results[6].applied);
      CHECK(db.Row(others)["state"] == "running");
      CHECK(db.Row(ended)["state"] == "failed");
      CHECK(db.Row(kept)["result"] == json{{"n", 1}});
      CHECK(test::Count(db.conn, "SELECT count(*) FROM akadze.jobs WHERE id = " + std::to_string(gone)) == 0);
      CHECK(db.Row(retried)["state"] == "queued");
      CHECK(db.Row(stale)["state"] == "running");
      CHECK(db.Row(failed)["state"] == "failed");
      // Its run's finish, once more: the job is gone, so it is stale.
      CHECK_FALSE(FinishJobs(db.conn, db.worker, {{gone, 1, success, false}}, nullptr, plan)
                      .front().applied);
    }
  }
}

TEST_CASE("a batch that only deletes runs the DELETE alone, fenced the same", "[finish][keep_succeeded]") {
  Db db;
  // Planned per batch, and prepared past PostgreSQL's five custom plans.
  for (const FinishPlan plan : {FinishPlan::kPerBatch, FinishPlan::kPrepared}) {
    for (int round = 0; round < (plan == FinishPlan::kPrepared ? 7 : 1); ++round) {
      const auto gone = db.RunningJob(), also_gone = db.RunningJob(), stale = db.RunningJob(),
                 others = db.RunningJob(), ended = db.RunningJob();
      db.conn.exec("UPDATE akadze.jobs SET worker_id = gen_random_uuid() WHERE id = $1", pg::Params().add(others));
      db.conn.exec("UPDATE akadze.jobs SET state = 'failed' WHERE id = $1", pg::Params().add(ended));
      const JobOutcome success = Outcome(OutcomeKind::kSuccess);
      const std::vector<FinishRequest> batch = {{gone, 1, success, false},
                                                {stale, 2, success, false},
                                                {also_gone, 1, success, false},
                                                {others, 1, success, false},
                                                {ended, 1, success, false}};
      auto results = FinishJobs(db.conn, db.worker, batch, nullptr, plan);
      REQUIRE(results.size() == 5);
      for (std::size_t k = 0; k < batch.size(); ++k) CHECK(results[k].job_id == batch[k].job_id);
      CHECK(results[0].applied);
      CHECK(results[0].state == JobState::kSucceeded);
      CHECK(results[2].applied);
      CHECK(results[2].state == JobState::kSucceeded);
      CHECK_FALSE(results[1].applied);
      CHECK_FALSE(results[3].applied);
      CHECK_FALSE(results[4].applied);
      CHECK(test::Count(db.conn, "SELECT count(*) FROM akadze.jobs WHERE id IN (" + std::to_string(gone) + ", " +
                                     std::to_string(also_gone) + ")") == 0);
      CHECK(db.Row(stale)["state"] == "running");
      CHECK(db.Row(others)["state"] == "running");
      CHECK(db.Row(ended)["state"] == "failed");
    }
  }
  if (db.conn.pooled()) return;
  // The prepared one is the DELETE alone: no UPDATE planned beside it.
  pg::Result alone = db.conn.exec(
      "SELECT count(*) FROM pg_prepared_statements"
      " WHERE statement LIKE 'DELETE FROM akadze.jobs AS j%' AND statement NOT LIKE '%UPDATE%'");
  CHECK(alone.int64(0, 0) == 1);
}

TEST_CASE("a result jsonb refuses fails the statement as an SqlError", "[finish]") {
  Db db;
  auto id = db.RunningJob();
  JobOutcome o = Outcome(OutcomeKind::kSuccess);
  o.result_json = R"({"bad": "\u0000"})";
  CHECK_THROWS_AS(db.Finish(id, o), pg::SqlError);
  CHECK(db.Row(id)["state"] == "running");
}

TEST_CASE("the rescue requeues or fails jobs of workers past the ttl", "[lease]") {
  Db db;
  WorkerIdentity dead{RandomUuid(), "h", 1, {"default"}};
  WorkerIdentity alive{RandomUuid(), "h", 2, {"default"}};
  RegisterWorker(db.conn, dead);
  RegisterWorker(db.conn, alive);
  db.conn.exec("UPDATE akadze.workers SET heartbeat_at = now() - interval '1 minute' WHERE id = $1::uuid",
               pg::Params().add(dead.id));
  auto job_of = [&](const std::string& worker, int attempt, int max_attempts) {
    db.worker = worker;
    return db.RunningJob(attempt, max_attempts);
  };
  auto requeued = job_of(dead.id, 0, 3);
  auto spent = job_of(dead.id, 2, 3);
  auto kept = job_of(alive.id, 0, 3);
  // No worker row and started long ago: rescued; started just now: kept.
  auto orphan = job_of(RandomUuid(), 0, 3);
  db.conn.exec("UPDATE akadze.jobs SET started_at = now() - interval '1 minute' WHERE id = $1",
               pg::Params().add(orphan));
  auto young_orphan = job_of(RandomUuid(), 0, 3);

  auto rescued = RescueLostJobs(db.conn, 30'000'000);
  REQUIRE(rescued.size() == 3);
  CHECK(rescued[0].id == requeued);
  CHECK(rescued[0].worker_id == dead.id);
  CHECK(rescued[0].state == JobState::kQueued);
  CHECK(rescued[1].id == spent);
  CHECK(rescued[1].state == JobState::kFailed);
  CHECK(rescued[2].id == orphan);
  json row = db.Row(requeued);
  CHECK(row["attempt"] == 1);
  CHECK(row["worker_id"].is_null());
  CHECK(row["errors"][0]["error"] == "WorkerLost");
  CHECK(db.Row(kept)["state"] == "running");
  CHECK(db.Row(young_orphan)["state"] == "running");
  // The dead worker's row goes once it owns no running job.
  CHECK(db.conn.exec("SELECT count(*) FROM akadze.workers").int64(0, 0) == 1);
  CHECK(RescueLostJobs(db.conn, 30'000'000).empty());
}

// The rescue reads jobs_running_worker_idx between the registered worker
// ids and not within a live one's: each kind of orphan, wherever its
// worker id sorts, is still found.
TEST_CASE("the rescue finds a job of a worker with no row wherever its id sorts", "[lease]") {
  Db db;
  const std::string low = "40000000-0000-4000-8000-000000000000";
  const std::string high = "c0000000-0000-4000-8000-000000000000";
  RegisterWorker(db.conn, WorkerIdentity{low, "h", 1, {"default"}});
  RegisterWorker(db.conn, WorkerIdentity{high, "h", 2, {"default"}});
  std::vector<std::int64_t> kept, lost;
  for (const std::string& worker : {low, high}) {
    db.worker = worker;
    kept.push_back(db.RunningJob());
  }
  for (const char* worker : {"00000000-0000-0000-0000-000000000000", "3fffffff-ffff-4fff-bfff-ffffffffffff",
                                    "40000000-0000-4000-8000-000000000001", "80000000-0000-4000-8000-000000000000",
                                    "bfffffff-ffff-4fff-bfff-ffffffffffff", "c0000000-0000-4000-8000-000000000001",
                                    "ffffffff-ffff-ffff-ffff-ffffffffffff"}) {
    db.worker = worker;
    lost.push_back(db.RunningJob());
  }
  lost.push_back(db.conn.exec("INSERT INTO akadze.jobs (task, state, run_count, started_at)"
                              " VALUES ('t', 'running', 1, now()) RETURNING id").int64(0, 0));
  db.conn.exec("UPDATE akadze.jobs SET started_at = now() - interval '1 minute'");
  std::vector<std::int64_t> got;
  for (const RescuedJob& job : RescueLostJobs(db.conn, 30'000'000)) got.push_back(job.id);
  CHECK(got == lost);
  for (std::int64_t id : kept) CHECK(db.Row(id)["state"] == "running");
  // With no worker row at all, every running job is an orphan.
  db.conn.exec("DELETE FROM akadze.workers");
  got.clear();
  for (const RescuedJob& job : RescueLostJobs(db.conn, 30'000'000)) got.push_back(job.id);
  CHECK(got == kept);
}

// `n` jobs made running under `worker_id` now, by INSERT.
void StartJobs(pg::Connection& conn, const std::string& worker_id, int n) {
  conn.exec("INSERT INTO akadze.jobs (task, state, run_count, worker_id, started_at)"
            " SELECT 't', 'running', 1, $1::uuid, now() FROM generate_series(1, $2::int)",
            pg::Params().add(worker_id).add(n));
}

// Every running job succeeds: under a held horizon their entries in
// jobs_running_worker_idx stay, dead.
void FinishAllRunning(pg::Connection& conn) {
  conn.exec("UPDATE akadze.jobs SET state = 'succeeded', finished_at = now() WHERE id IN"
            " (SELECT id FROM akadze.jobs WHERE (state = 'running') IS NOT FALSE)");
}

// One job running under `worker_id`, started a minute ago (past the
// rescue's ttl in these tests); its id.
std::int64_t JobStartedAMinuteAgo(pg::Connection& conn, const std::string& worker_id) {
  return conn.exec("INSERT INTO akadze.jobs (task, state, run_count, worker_id, started_at)"
                   " VALUES ('t', 'running', 1, $1::uuid, now() - interval '1 minute') RETURNING id",
                   pg::Params().add(worker_id))
      .int64(0, 0);
}

// Issue 41, goal 2: while another session holds the horizon back, a live
// worker's entries in jobs_running_worker_idx are every job it ran since.
// The rescue reads none of them (before: an anti-join of every running
// row, 115 ms and 16,000 buffers a round after 9 minutes at 1,000 jobs/s).
TEST_CASE("under a held horizon the rescue reads no entry of a live worker", "[lease][horizon]") {
  const std::string db = test::FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  pg::Connection report = pg::Connection::Open(db);
  pg::Connection stats = pg::Connection::Open(db);
  WorkerIdentity alive{RandomUuid(), "h", 1, {"default"}};
  RegisterWorker(conn, alive);
  test::HeldHorizon held(report);
  // 3,000 jobs the live worker ran and finished: dead entries, kept.
  StartJobs(conn, alive.id, 3000);
  FinishAllRunning(conn);
  const std::int64_t orphan = JobStartedAMinuteAgo(conn, RandomUuid());
  // Planned as under a held horizon: the statistics count live rows only.
  conn.exec("ANALYZE akadze.jobs");
  test::AwaitStatistics(conn, [&] { return test::TableRowsUpdated(stats, "akadze.jobs") == 3000; });
  const std::int64_t before = test::IndexTuplesRead(stats, "akadze.jobs_running_worker_idx");

  auto rescued = RescueLostJobs(conn, 30'000'000);
  REQUIRE(rescued.size() == 1);
  CHECK(rescued[0].id == orphan);
  test::AwaitStatistics(conn, [&] { return test::TableRowsUpdated(stats, "akadze.jobs") == 3001; });
  // The orphan's entry, and at most a few more where a range begins.
  CHECK(test::IndexTuplesRead(stats, "akadze.jobs_running_worker_idx") - before <= 3);
  held.release();
}

namespace {

std::set<std::int64_t> OwnedIds(const std::vector<OwnedJob>& jobs) {
  std::set<std::int64_t> ids;
  for (const OwnedJob& j : jobs) ids.insert(j.id);
  return ids;
}

}  // namespace

// The reconcile's read with a floor (core/running_floor.h) finds what a
// whole read of the worker's entries finds, whoever made a job running and
// whenever: each way a row can come to run under the worker after the
// floor's snapshot is here, and each arm of the read (the last read's ids,
// the range from from_xid, the points) is the only one that finds one of
// them.
TEST_CASE("a reconcile read with a floor finds every job the worker runs", "[lease][floor]") {
  Db db;
  const std::string other = RandomUuid();
  pg::Connection slow = pg::Connection::Open(db.url);
  pg::Connection recent = pg::Connection::Open(db.url);
  auto queued = [&] {
    return db.conn.exec("INSERT INTO akadze.jobs (task) VALUES ('t') RETURNING id").int64(0, 0);
  };
  auto run = [&](pg::Connection& c, std::int64_t id, const std::string& worker) {
    c.exec("UPDATE akadze.jobs SET state = 'running', worker_id = $2::uuid, run_count = run_count + 1,"
           " started_at = now() WHERE id = $1",
           pg::Params().add(id).add(worker));
  };
  const std::int64_t before = db.RunningJob();   // found by the first read, then by id only
  const std::int64_t finishes = db.RunningJob();
  const std::int64_t moves = db.RunningJob();
  const std::int64_t cancelled = db.RunningJob();
  const std::int64_t by_slow = queued(), by_recent = queued(), by_claim = queued();
  // A transaction with an id over kRunningRangeSlack before the floor's
  // snapshot (a point), and one just before it (in the range).
  slow.exec("BEGIN");
  const std::uint64_t slow_xid = std::stoull(std::string(slow.exec("SELECT pg_current_xact_id()").text(0, 0)));
  for (std::uint64_t i = 0; i <= kRunningRangeSlack; ++i) db.conn.exec("SELECT pg_current_xact_id()");
  recent.exec("BEGIN");
  recent.exec("SELECT pg_current_xact_id()");

  OwnedJobsFloor floor;
  CHECK(OwnedIds(OwnedRunningJobs(db.conn, db.worker, 0, &floor)) ==
        std::set<std::int64_t>{before, finishes, moves, cancelled});
  REQUIRE(floor.worker_id == db.worker);
  CHECK(std::count(floor.running.points.begin(), floor.running.points.end(), slow_xid) == 1);

  run(slow, by_slow, db.worker);
  slow.exec("COMMIT");
  run(recent, by_recent, db.worker);
  recent.exec("COMMIT");
  run(db.conn, by_claim, db.worker);
  const std::int64_t inserted = db.RunningJob();
  db.conn.exec("UPDATE akadze.jobs SET state = 'succeeded', finished_at = now() WHERE id = $1",
               pg::Params().add(finishes));
  db.conn.exec("UPDATE akadze.jobs SET worker_id = $2::uuid WHERE id = $1", pg::Params().add(moves).add(other));
  db.conn.exec("UPDATE akadze.jobs SET cancel_requested_at = now() WHERE id = $1", pg::Params().add(cancelled));

  const std::set<std::int64_t> now = {before, cancelled, by_slow, by_recent, by_claim, inserted};
  const std::vector<OwnedJob> since = OwnedRunningJobs(db.conn, db.worker, 0, &floor);
  CHECK(OwnedIds(since) == now);
  CHECK(OwnedIds(OwnedRunningJobs(db.conn, db.worker)) == now);
  for (const OwnedJob& j : since) CHECK(j.cancel_requested == (j.id == cancelled));
  // The floor it left serves the next read, which changes nothing.
  CHECK(OwnedIds(OwnedRunningJobs(db.conn, db.worker, 0, &floor)) == now);
  // A floor of another worker, or of another server, is not used: the read
  // is a whole one.
  OwnedJobsFloor elsewhere = floor;
  elsewhere.server_started = "another server";
  elsewhere.running.ids.clear();
  elsewhere.running.from_xid = std::numeric_limits<std::int64_t>::max();
  CHECK(OwnedIds(OwnedRunningJobs(db.conn, db.worker, 0, &elsewhere)) == now);
  CHECK(elsewhere.server_started == floor.server_started);
  OwnedJobsFloor of_other = floor;
  of_other.worker_id = other;
  CHECK(OwnedIds(OwnedRunningJobs(db.conn, db.worker, 0, &of_other)) == now);
  CHECK(of_other.worker_id == db.worker);
}

// Issue 41, goal 2: while another session holds the horizon back, the
// worker's entries in jobs_running_worker_idx are every job it ran since.
// A reconcile read with the last round's floor reads only the entries of
// the jobs made running since (before 011: all of them, 57 ms a round after
// 20 minutes at 1,000 jobs/s). One without a floor of its connection (a
// lease connection replaced) reads so from the floor the worker's
// heartbeats stored, as the rescue does (before: the entries whole, 0.1 ->
// 318 ms over 30 minutes). Exact either way: what a whole read finds.
TEST_CASE("under a held horizon a reconcile reads only the round's entries, with its floor or the stored one",
          "[lease][horizon]") {
  const std::string db = test::FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  pg::Connection report = pg::Connection::Open(db);
  pg::Connection stats = pg::Connection::Open(db);
  const std::string worker = RandomUuid();
  RegisterWorker(conn, WorkerIdentity{worker, "h", 1, {"default"}});
  test::HeldHorizon held(report);
  // 3,000 jobs the worker ran and finished: dead entries, kept.
  StartJobs(conn, worker, 3000);
  FinishAllRunning(conn);
  StartJobs(conn, worker, 5);
  OwnedJobsFloor floor;
  REQUIRE(OwnedRunningJobs(conn, worker, 0, &floor).size() == 5);
  REQUIRE(Heartbeat(conn, worker, std::nullopt, &floor));
  const OwnedJobsFloor stored = floor;
  // Since the floor (stored too): ten made running, one of the five
  // finished.
  StartJobs(conn, worker, 10);
  conn.exec("UPDATE akadze.jobs SET state = 'succeeded', finished_at = now() WHERE id ="
            " (SELECT min(id) FROM akadze.jobs WHERE state = 'running')");
  std::set<std::int64_t> now;
  pg::Result rows = conn.exec("SELECT id FROM akadze.jobs WHERE worker_id = $1::uuid AND state = 'running'",
                              pg::Params().add(worker));
  for (int i = 0; i < rows.rows(); ++i) now.insert(rows.int64(i, 0));
  REQUIRE(now.size() == 14);
  // Planned as under a held horizon: the statistics count live rows only.
  conn.exec("ANALYZE akadze.jobs");
  test::AwaitStatistics(conn, [&] { return test::TableRowsUpdated(stats, "akadze.jobs") == 3001; });
  // The entries of jobs_running_worker_idx one read steps over.
  auto entries_read = [&](const std::function<void()>& read) {
    const std::int64_t before = test::IndexTuplesRead(stats, "akadze.jobs_running_worker_idx");
    read();
    std::int64_t after = before;
    test::AwaitStatistics(conn, [&] {
      after = test::IndexTuplesRead(stats, "akadze.jobs_running_worker_idx");
      return after > before;
    });
    return after - before;
  };
  std::vector<OwnedJob> found;
  // With the floor, through its connection: the 10 new entries, and at
  // most a few more where the range begins.
  CHECK(entries_read([&] { found = OwnedRunningJobs(conn, worker, 0, &floor); }) <= 13);
  CHECK(OwnedIds(found) == now);
  // Through a new connection the floor in memory is not used (docs/claim.md:
  // a crash may hand out its transaction ids again); the stored one is.
  // Here one that would find nothing if it were used.
  pg::Connection replaced = pg::Connection::Open(db);
  OwnedJobsFloor kept = stored;
  kept.running.ids.clear();
  kept.running.points.clear();
  kept.running.from_xid = std::numeric_limits<std::int64_t>::max();
  CHECK(entries_read([&] { found = OwnedRunningJobs(replaced, worker, 0, &kept); }) <= 13);
  CHECK(OwnedIds(found) == now);
  CHECK(kept.connection == replaced.serial());
  // No floor at all (a first round): the same.
  CHECK(entries_read([&] { found = OwnedRunningJobs(replaced, worker); }) <= 13);
  CHECK(OwnedIds(found) == now);
  // A stored floor of another server is not used: the read is whole, and
  // as exact.
  conn.exec("UPDATE akadze.workers SET running_floor = jsonb_set(running_floor, '{s}', '\"1\"')"
            " WHERE id = $1::uuid",
            pg::Params().add(worker));
  CHECK(entries_read([&] { found = OwnedRunningJobs(replaced, worker); }) >= 3000);
  CHECK(OwnedIds(found) == now);
  held.release();
}

std::set<std::int64_t> RescuedIds(pg::Connection& conn) {
  std::set<std::int64_t> ids;
  for (const RescuedJob& job : RescueLostJobs(conn, 30'000'000)) ids.insert(job.id);
  return ids;
}

// The worker's last heartbeat an hour ago: dead for RescuedIds' ttl.
void StopHeartbeats(pg::Connection& conn, const std::string& worker_id) {
  conn.exec("UPDATE akadze.workers SET heartbeat_at = now() - interval '1 hour' WHERE id = $1::uuid",
            pg::Params().add(worker_id));
}

std::int64_t WorkerRows(pg::Connection& conn, const std::string& worker_id) {
  return conn.exec("SELECT count(*) FROM akadze.workers WHERE id = $1::uuid", pg::Params().add(worker_id))
      .int64(0, 0);
}

// A worker that stopped with nothing running under it is recorded in
// akadze.worker_stops (migration 012), and the rescue reads, for its id,
// only the jobs made running since (core/running_floor.h). Whoever makes
// a job run under a stopped id afterwards, and whenever, the rescue finds
// it: by an INSERT, by a transaction in flight across the stop (the range),
// by one over 1,000 transactions older (a point). Each arm is the only one
// that finds one of them.
TEST_CASE("the rescue finds a job made running under a stopped worker's id after its stop", "[lease][floor]") {
  Db db;
  pg::Connection slow = pg::Connection::Open(db.url);
  pg::Connection recent = pg::Connection::Open(db.url);
  WorkerIdentity me{db.worker, "h", 1, {"default"}};
  RegisterWorker(db.conn, me);
  // The live worker beside it, whose id bounds the stopped one's range.
  RegisterWorker(db.conn, WorkerIdentity{RandomUuid(), "h", 2, {"default"}});
  const std::int64_t done = db.RunningJob();
  db.conn.exec("UPDATE akadze.jobs SET state = 'succeeded', finished_at = now() WHERE id = $1",
               pg::Params().add(done));
  auto queued = [&] {
    return db.conn.exec("INSERT INTO akadze.jobs (task) VALUES ('t') RETURNING id").int64(0, 0);
  };
  const std::int64_t by_slow = queued(), by_recent = queued();
  slow.exec("BEGIN");
  slow.exec("SELECT pg_current_xact_id()");
  for (std::uint64_t i = 0; i <= kRunningRangeSlack; ++i) db.conn.exec("SELECT pg_current_xact_id()");
  recent.exec("BEGIN");
  recent.exec("SELECT pg_current_xact_id()");

  DeregisterWorker(db.conn, me.id);
  pg::Result stop = db.conn.exec("SELECT cardinality(points) FROM akadze.worker_stops WHERE id = $1::uuid",
                                 pg::Params().add(me.id));
  REQUIRE(stop.rows() == 1);
  CHECK(stop.int64(0, 0) >= 1);  // `slow`, at least
  CHECK(RescuedIds(db.conn).empty());

  auto run = [&](pg::Connection& c, std::int64_t id) {
    c.exec("UPDATE akadze.jobs SET state = 'running', worker_id = $2::uuid, run_count = 1,"
           " started_at = now() - interval '1 minute' WHERE id = $1",
           pg::Params().add(id).add(me.id));
  };
  run(slow, by_slow);
  slow.exec("COMMIT");
  run(recent, by_recent);
  recent.exec("COMMIT");
  const std::int64_t inserted = db.RunningJob();
  db.conn.exec("UPDATE akadze.jobs SET started_at = now() - interval '1 minute' WHERE id = $1",
               pg::Params().add(inserted));
  CHECK(RescuedIds(db.conn) == std::set<std::int64_t>{by_slow, by_recent, inserted});

  // A stop row the rescue cannot believe (its floor past every transaction
  // there is: only a hand-written one) is not used.
  const std::string other = RandomUuid();
  db.conn.exec("INSERT INTO akadze.worker_stops (id, from_xid) VALUES"
               " ($1::uuid, (pg_snapshot_xmax(pg_current_snapshot())::text::numeric + 1000000)::text::xid8)",
               pg::Params().add(other));
  db.worker = other;
  const std::int64_t hidden = db.RunningJob();
  db.conn.exec("UPDATE akadze.jobs SET started_at = now() - interval '1 minute' WHERE id = $1",
               pg::Params().add(hidden));
  CHECK(RescuedIds(db.conn) == std::set<std::int64_t>{hidden});
}

TEST_CASE("a stopped worker with a job left running has its stop recorded from that job's running_xid", "[lease]") {
  Db db;
  RegisterWorker(db.conn, WorkerIdentity{db.worker, "h", 1, {"default"}});
  const std::int64_t left = db.RunningJob();
  DeregisterWorker(db.conn, db.worker);
  CHECK(db.conn.exec("SELECT s.from_xid <= j.running_xid FROM akadze.worker_stops s, akadze.jobs j"
                     " WHERE j.id = $1", pg::Params().add(left)).boolean(0, 0));
  db.conn.exec("UPDATE akadze.jobs SET started_at = now() - interval '1 minute'");
  CHECK(RescuedIds(db.conn) == std::set<std::int64_t>{left});
}

// Issue 41, goal 2: a worker that stopped during a held horizon leaves an
// entry in jobs_running_worker_idx for every job it ran, dead and kept,
// between the registered ids. Once its stop is recorded (by its daemon, or
// by the rescue round that removes its row as dead), the rescue reads none
// of them.
TEST_CASE("under a held horizon the rescue reads no entry of a worker that stopped", "[lease][horizon]") {
  const std::string db = test::FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  pg::Connection report = pg::Connection::Open(db);
  pg::Connection stats = pg::Connection::Open(db);
  RegisterWorker(conn, WorkerIdentity{RandomUuid(), "h", 1, {"default"}});  // alive
  const WorkerIdentity stopped{RandomUuid(), "h", 2, {"default"}};
  const WorkerIdentity died{RandomUuid(), "h", 3, {"default"}};
  test::HeldHorizon held(report);
  for (const WorkerIdentity& w : {stopped, died}) {
    RegisterWorker(conn, w);
    // 3,000 jobs each ran and finished: dead entries, kept.
    StartJobs(conn, w.id, 3000);
  }
  FinishAllRunning(conn);
  DeregisterWorker(conn, stopped.id);
  StopHeartbeats(conn, died.id);
  // The round that removes the dead worker's row reads its entries, once,
  // and records its stop.
  CHECK(RescuedIds(conn).empty());
  CHECK(conn.exec("SELECT count(*) FROM akadze.worker_stops").int64(0, 0) == 2);
  conn.exec("ANALYZE akadze.jobs");
  test::AwaitStatistics(conn, [&] { return test::TableRowsUpdated(stats, "akadze.jobs") == 6000; });
  const std::int64_t before = test::IndexTuplesRead(stats, "akadze.jobs_running_worker_idx");
  const std::int64_t orphan = JobStartedAMinuteAgo(conn, stopped.id);
  CHECK(RescuedIds(conn) == std::set<std::int64_t>{orphan});
  test::AwaitStatistics(conn, [&] { return test::TableRowsUpdated(stats, "akadze.jobs") == 6001; });
  // The orphan's entry, and at most a few more where the ranges begin.
  CHECK(test::IndexTuplesRead(stats, "akadze.jobs_running_worker_idx") - before <= 4);
  held.release();
}

// A running row without a running_xid (only with the triggers of
// migration 010 off: session_replication_role replica) cannot be found by
// a stop's range: no stop is recorded, and the rescue reads the id's range
// whole.
TEST_CASE("a stopped worker with a job left running without a running_xid has no stop recorded", "[lease][direct]") {
  Db db;
  RegisterWorker(db.conn, WorkerIdentity{db.worker, "h", 1, {"default"}});
  const std::int64_t left = db.RunningJob();
  db.conn.exec("SET session_replication_role = replica");
  db.conn.exec("UPDATE akadze.jobs SET running_xid = NULL, started_at = now() - interval '1 minute' WHERE id = $1",
               pg::Params().add(left));
  db.conn.exec("RESET session_replication_role");
  DeregisterWorker(db.conn, db.worker);
  CHECK(db.conn.exec("SELECT count(*) FROM akadze.worker_stops").int64(0, 0) == 0);
  CHECK(RescuedIds(db.conn) == std::set<std::int64_t>{left});
}

// Issue 41, goal 2: a daemon that stops with jobs it could not release
// (a lost connection, a handler that would not stop) records its stop from
// the earliest running_xid of those jobs, so that every akadzed's rescue
// (an older one's too, which reads only the stop's range) finds them.
// Before, it recorded none, and every rescue round read the range its id
// lies in whole: the 3,000 dead entries of the jobs it ran during the hold,
// until the horizon moved on.
TEST_CASE("under a held horizon the rescue reads no dead entry of a worker that stopped with a job running",
          "[lease][horizon]") {
  const std::string db = test::FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  pg::Connection report = pg::Connection::Open(db);
  pg::Connection stats = pg::Connection::Open(db);
  RegisterWorker(conn, WorkerIdentity{RandomUuid(), "h", 1, {"default"}});  // alive
  const WorkerIdentity stopped{RandomUuid(), "h", 2, {"default"}};
  RegisterWorker(conn, stopped);
  test::HeldHorizon held(report);
  StartJobs(conn, stopped.id, 3000);
  FinishAllRunning(conn);
  // Left running at its stop, started past the rescue's ttl.
  const std::int64_t left = JobStartedAMinuteAgo(conn, stopped.id);
  DeregisterWorker(conn, stopped.id);
  CHECK(WorkerRows(conn, stopped.id) == 0);
  CHECK(conn.exec("SELECT s.from_xid <= j.running_xid FROM akadze.worker_stops s, akadze.jobs j"
                  " WHERE s.id = $1::uuid AND j.id = $2", pg::Params().add(stopped.id).add(left))
            .boolean(0, 0));
  conn.exec("ANALYZE akadze.jobs");
  test::AwaitStatistics(conn, [&] { return test::TableRowsUpdated(stats, "akadze.jobs") == 3000; });
  const std::int64_t before = test::IndexTuplesRead(stats, "akadze.jobs_running_worker_idx");
  // And one made running under its id after the stop (an application's
  // hand-written row): found in the range from the stop's snapshot on.
  const std::int64_t later = JobStartedAMinuteAgo(conn, stopped.id);
  CHECK(RescuedIds(conn) == std::set<std::int64_t>{left, later});
  test::AwaitStatistics(conn, [&] { return test::TableRowsUpdated(stats, "akadze.jobs") == 3002; });
  // The two jobs' entries, and at most a few more where the ranges begin.
  CHECK(test::IndexTuplesRead(stats, "akadze.jobs_running_worker_idx") - before <= 4);
  held.release();
}

// Issue 41, goal 2: a worker that dies during a held horizon with jobs
// running leaves an entry in jobs_running_worker_idx for every job it ran.
// Its last heartbeat stored its running floor (migration 014), so the
// rescue rounds until its jobs are requeued, and the one that removes its
// row, read its jobs past the floor: the ids its last reconcile found and
// the jobs made running since, not its 3,000 dead entries (before: all of
// them, each round, until its row went).
TEST_CASE("under a held horizon the rescue reads a dead worker's jobs past its stored floor", "[lease][horizon]") {
  const std::string db = test::FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  pg::Connection report = pg::Connection::Open(db);
  pg::Connection stats = pg::Connection::Open(db);
  RegisterWorker(conn, WorkerIdentity{RandomUuid(), "h", 1, {"default"}});  // alive
  const WorkerIdentity died{RandomUuid(), "h", 2, {"default"}};
  RegisterWorker(conn, died);
  test::HeldHorizon held(report);
  auto started = [&](int n) {
    pg::Result r = conn.exec("INSERT INTO akadze.jobs (task, state, run_count, worker_id, started_at)"
                             " SELECT 't', 'running', 1, $1::uuid, now() - interval '1 minute'"
                             " FROM generate_series(1, $2::int) RETURNING id",
                             pg::Params().add(died.id).add(n));
    std::set<std::int64_t> ids;
    for (int i = 0; i < r.rows(); ++i) ids.insert(r.int64(i, 0));
    return ids;
  };
  started(3000);
  FinishAllRunning(conn);
  std::set<std::int64_t> running = started(5);
  OwnedJobsFloor floor;
  REQUIRE(OwnedRunningJobs(conn, died.id, 0, &floor).size() == 5);
  REQUIRE(Heartbeat(conn, died.id, std::nullopt, &floor));
  for (std::int64_t id : started(3)) running.insert(id);  // after its last reconcile
  StopHeartbeats(conn, died.id);
  conn.exec("ANALYZE akadze.jobs");
  test::AwaitStatistics(conn, [&] { return test::TableRowsUpdated(stats, "akadze.jobs") == 3000; });
  const std::int64_t before = test::IndexTuplesRead(stats, "akadze.jobs_running_worker_idx");
  CHECK(RescuedIds(conn) == running);
  CHECK(WorkerRows(conn, died.id) == 0);  // removed in the same round, its stop recorded
  CHECK(conn.exec("SELECT count(*) FROM akadze.worker_stops").int64(0, 0) == 1);
  test::AwaitStatistics(conn, [&] { return test::TableRowsUpdated(stats, "akadze.jobs") >= 3008; });
  // Its 3 entries made running after the floor (read by the rescue and by
  // the removal), and at most a few more where the ranges begin.
  CHECK(test::IndexTuplesRead(stats, "akadze.jobs_running_worker_idx") - before <= 16);
  held.release();
}

// The rescue reads a dead worker past its stored floor with the reconcile's
// three arms (RunningJobsOfWorkerSql): the ids its last reconcile found, the
// range from from_xid, and the points, transactions in flight at the
// floor's snapshot and older than the range's slack. Each job here can be
// found by one arm only, so a rescue that misses any arm leaves one of them
// running under a worker that is gone.
TEST_CASE("a dead worker's rescue past its stored floor finds a job by each arm", "[lease][floor]") {
  const std::string db = test::FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  pg::Connection slow = pg::Connection::Open(db);
  RegisterWorker(conn, WorkerIdentity{RandomUuid(), "h", 1, {"default"}});  // alive
  const WorkerIdentity died{RandomUuid(), "h", 2, {"default"}};
  RegisterWorker(conn, died);
  auto queued = [&] { return conn.exec("INSERT INTO akadze.jobs (task) VALUES ('t') RETURNING id").int64(0, 0); };
  auto run = [&](pg::Connection& c, std::int64_t id) {
    c.exec("UPDATE akadze.jobs SET state = 'running', worker_id = $2::uuid, run_count = run_count + 1,"
           " started_at = now() - interval '1 minute' WHERE id = $1",
           pg::Params().add(id).add(died.id));
  };
  const std::int64_t by_id = queued(), by_point = queued(), by_range = queued();
  run(conn, by_id);  // running when its last reconcile read: one of the floor's ids
  // In flight at the floor's snapshot, over kRunningRangeSlack ids before
  // it: one of the floor's points.
  slow.exec("BEGIN");
  const std::uint64_t slow_xid = std::stoull(std::string(slow.exec("SELECT pg_current_xact_id()").text(0, 0)));
  for (std::uint64_t i = 0; i <= kRunningRangeSlack; ++i) conn.exec("SELECT pg_current_xact_id()");
  OwnedJobsFloor floor;
  REQUIRE(OwnedIds(OwnedRunningJobs(conn, died.id, 0, &floor)) == std::set<std::int64_t>{by_id});
  REQUIRE(std::count(floor.running.points.begin(), floor.running.points.end(), slow_xid) == 1);
  REQUIRE(Heartbeat(conn, died.id, std::nullopt, &floor));  // its last: the floor is stored
  run(slow, by_point);
  slow.exec("COMMIT");
  run(conn, by_range);  // after the floor's snapshot: in the range
  StopHeartbeats(conn, died.id);
  CHECK(RescuedIds(conn) == std::set<std::int64_t>{by_id, by_point, by_range});
  CHECK(conn.exec("SELECT count(*) FROM akadze.jobs WHERE (state = 'running') IS NOT FALSE").int64(0, 0) == 0);
  CHECK(WorkerRows(conn, died.id) == 0);
}

// akadze.worker_stops only saves reads: a daemon whose role lacks its GRANT
// (an upgrade that did not run the new GRANTs, docs/security.md) still
// rescues, removes dead workers' rows and deregisters (found in review: the
// rescue failed every round with 42501).
TEST_CASE("without a grant on akadze.worker_stops the rescue and a deregister still work", "[lease][security]") {
  Db db;
  const std::string role = "akadzed_no_stops_" + RandomUuid().substr(0, 8);
  db.conn.exec("CREATE ROLE " + role + " LOGIN");
  db.conn.exec("GRANT USAGE ON SCHEMA akadze TO " + role + ";"
               " GRANT SELECT, INSERT, UPDATE, DELETE ON akadze.jobs, akadze.workers TO " + role);
  {
    pg::Connection worker = pg::Connection::Open(test::DirectConninfo(db.url) + " user=" + role);
    db.conn.exec("INSERT INTO akadze.worker_stops (id, from_xid) VALUES (gen_random_uuid(), '1')");
    const WorkerIdentity dead{RandomUuid(), "h", 1, {"default"}};
    RegisterWorker(worker, dead);
    db.worker = dead.id;
    const std::int64_t lost = db.RunningJob();
    db.conn.exec("UPDATE akadze.workers SET heartbeat_at = now() - interval '1 hour'");
    CHECK(RescuedIds(worker) == std::set<std::int64_t>{lost});
    CHECK(db.conn.exec("SELECT count(*) FROM akadze.workers").int64(0, 0) == 0);
    const WorkerIdentity clean{RandomUuid(), "h", 2, {"default"}};
    RegisterWorker(worker, clean);
    DeregisterWorker(worker, clean.id);
    CHECK(db.conn.exec("SELECT count(*) FROM akadze.workers").int64(0, 0) == 0);
    CHECK(db.conn.exec("SELECT count(*) FROM akadze.worker_stops").int64(0, 0) == 1);  // none written
  }
  db.conn.exec("DROP OWNED BY " + role + "; DROP ROLE " + role);
}

TEST_CASE("recording a stop deletes the stops older than a day", "[lease]") {
  Db db;
  db.conn.exec("INSERT INTO akadze.worker_stops (id, from_xid, stopped_at) VALUES"
               " (gen_random_uuid(), '1', now() - interval '25 hours'),"
               " (gen_random_uuid(), '1', now() - interval '23 hours')");
  RegisterWorker(db.conn, WorkerIdentity{db.worker, "h", 1, {"default"}});
  DeregisterWorker(db.conn, db.worker);
  CHECK(db.conn.exec("SELECT count(*) FROM akadze.worker_stops WHERE stopped_at < now() - interval '1 day'")
            .int64(0, 0) == 0);
  CHECK(db.conn.exec("SELECT count(*) FROM akadze.worker_stops").int64(0, 0) == 2);
}

TEST_CASE("heartbeat reports a vanished worker row", "[lease]") {
  Db db;
  WorkerIdentity me{RandomUuid(), "h", 1, {"default"}};
  RegisterWorker(db.conn, me);
  CHECK(Heartbeat(db.conn, me.id));
  DeregisterWorker(db.conn, me.id);
  CHECK_FALSE(Heartbeat(db.conn, me.id));
}

TEST_CASE("a heartbeat that arrives after the lease span does not renew the old id", "[lease]") {
  Db db;
  WorkerIdentity me{RandomUuid(), "h", 1, {"default"}};
  RegisterWorker(db.conn, me);
  CHECK(Heartbeat(db.conn, me.id, 2'000'000));
  db.conn.exec("UPDATE akadze.workers SET heartbeat_at = now() - interval '3 seconds'");
  CHECK_FALSE(Heartbeat(db.conn, me.id, 2'000'000));
  // The row keeps its old heartbeat, so the rescue comes on time.
  CHECK(db.conn.exec("SELECT heartbeat_at < now() - interval '2 seconds' FROM akadze.workers")
            .boolean(0, 0));
  CHECK(Heartbeat(db.conn, me.id));  // without a span: renewed (registration, tests)
}

}  // namespace
}  // namespace akadzed

namespace akadzed {
namespace {

TEST_CASE("a job with a cancel request is cancelled where it would be queued again", "[finish]") {
  Db db;
  auto retried = db.RunningJob();
  auto snoozed = db.RunningJob();
  auto released = db.RunningJob();
  auto succeeded = db.RunningJob();
  db.conn.exec("UPDATE akadze.jobs SET cancel_requested_at = now()");
  CHECK(db.Finish(retried, Outcome(OutcomeKind::kRetry, "E", "m")).state == JobState::kCancelled);
  JobOutcome snooze = Outcome(OutcomeKind::kSnooze);
  snooze.delay_us = 1'000'000;
  CHECK(db.Finish(snoozed, snooze).state == JobState::kCancelled);
  CHECK(db.Finish(released, Outcome(OutcomeKind::kRelease)).state == JobState::kCancelled);
  // A run that finished its work keeps its success.
  CHECK(db.Finish(succeeded, Outcome(OutcomeKind::kSuccess)).state == JobState::kSucceeded);
  CHECK_FALSE(db.Row(released)["finished_at"].is_null());
  CHECK(db.Row(retried)["attempt"] == 1);
}

TEST_CASE("the rescue cancels a lost job whose cancel was requested", "[lease]") {
  Db db;
  auto id = db.RunningJob();  // its worker has no row
  db.conn.exec("UPDATE akadze.jobs SET cancel_requested_at = now(),"
               " started_at = now() - interval '1 minute'");
  auto rescued = RescueLostJobs(db.conn, 30'000'000);
  REQUIRE(rescued.size() == 1);
  CHECK(rescued[0].state == JobState::kCancelled);
  CHECK_FALSE(db.Row(id)["finished_at"].is_null());
}

}  // namespace
}  // namespace akadzed
