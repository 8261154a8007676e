// Tests of the status report (store/status_report.h): what `akadzed status`
// and the status page show, against rows written here: ready and scheduled
// counts and their cap, the oldest ready job across priorities, the queues
// that appear and why, the finished-per-minute chart from
// akadze.queue_minutes, recent failures from any errors value; and, on a
// table of 200,000 jobs, that no statement of the read scans akadze.jobs
// (auto_explain's plans from the server log).
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "embedded/throwaway_postgres.h"
#include "pg/connection.h"
#include "claim/queue_counts.h"
#include "store/status_report.h"
#include "support/daemon_process.h"
#include "support/plan_log.h"
#include "support/test_cluster.h"

namespace akadzed {
namespace {

using pg::Connection;

constexpr const char* kWorkerA = "00000000-0000-4000-8000-00000000000a";

const QueueStatus* Find(const StatusReport& r, const std::string& queue) {
  for (const QueueStatus& q : r.queues) {
    if (q.queue == queue) return &q;
  }
  return nullptr;
}

std::vector<std::string> Names(const StatusReport& r) {
  std::vector<std::string> names;
  for (const QueueStatus& q : r.queues) names.push_back(q.queue);
  return names;
}

std::int64_t Sum(const QueueStatus& q, std::int64_t MinuteCount::*field) {
  std::int64_t total = 0;
  for (const MinuteCount& m : q.finished_per_minute) total += m.*field;
  return total;
}

TEST_CASE("status report: ready, scheduled, running and paused per queue, and which queues appear",
          "[status_report]") {
  Connection conn = Connection::Open(test::FreshDatabase());
  conn.exec("INSERT INTO akadze.jobs (task, queue, run_at) SELECT 't', 'a', now() - interval '1 minute'"
            " FROM generate_series(1, 3)");
  conn.exec("INSERT INTO akadze.jobs (task, queue, run_at) SELECT 't', 'a', now() + interval '1 hour'"
            " FROM generate_series(1, 2)");
  conn.exec("INSERT INTO akadze.workers (id, hostname, pid, queues) VALUES ($1, 'h', 1, '{a,busy,served}')",
            pg::Params().add(kWorkerA));
  conn.exec("INSERT INTO akadze.jobs (task, queue, state, worker_id, run_count, started_at)"
            " VALUES ('t', 'busy', 'running', $1, 1, now()), ('t', 'a', 'running', $1, 1, now())",
            pg::Params().add(kWorkerA));
  conn.exec("INSERT INTO akadze.queue_pauses (queue) VALUES ('stopped')");
  // Finished jobs alone do not make a queue appear, in the history or in
  // the chart's hour: a queue no worker serves and nothing waits in.
  conn.exec("INSERT INTO akadze.jobs (task, queue, state, finished_at) VALUES ('t', 'history', 'succeeded', now())");
  AddQueueMinutes(conn, {{"charted", 1, 0, 0}});

  const StatusReport r = ReadStatusReport(conn, CountQueuedJobs);
  CHECK(Names(r) == std::vector<std::string>{"a", "busy", "served", "stopped"});
  CHECK_FALSE(r.queues_truncated);
  const QueueStatus& a = *Find(r, "a");
  CHECK(a.ready == 3);
  CHECK(a.scheduled == 2);
  CHECK_FALSE(a.capped);
  CHECK(a.running == 1);
  CHECK_FALSE(a.paused);
  REQUIRE(a.oldest_ready_age_seconds);
  CHECK(*a.oldest_ready_age_seconds >= 60.0);
  CHECK(*a.oldest_ready_age_seconds < 120.0);
  CHECK(Find(r, "busy")->running == 1);
  CHECK(Find(r, "stopped")->paused);
  CHECK(Find(r, "stopped")->paused_at.has_value());
  CHECK_FALSE(Find(r, "served")->oldest_ready_age_seconds);
  CHECK(Find(r, "history") == nullptr);
  CHECK(Find(r, "charted") == nullptr);
  CHECK(r.workers.size() == 1);
  CHECK(r.workers[0].running == 2);
  CHECK_FALSE(r.generated_at.empty());

  SECTION("more queued jobs than the cap: both counts are lower bounds") {
    conn.exec("INSERT INTO akadze.jobs (task, queue, run_at) SELECT 't', 'big',"
              " now() + (CASE WHEN i % 2 = 0 THEN 1 ELSE -1 END) * interval '1 hour'"
              " FROM generate_series(1, 120) i");
    StatusReportOptions options;
    options.count_cap = 50;
    const StatusReport capped = ReadStatusReport(conn, CountQueuedJobs, options);
    const QueueStatus& big = *Find(capped, "big");
    CHECK(big.capped);
    CHECK(big.ready <= 50);
    CHECK(big.scheduled <= 50);
    CHECK(big.ready + big.scheduled >= 50);  // the cap + 1 entries read, each count cut at the cap
    CHECK(capped.count_cap == 50);
    CHECK_FALSE(Find(capped, "a")->capped);
  }
  SECTION("at most max_queues queues, by name") {
    StatusReportOptions options;
    options.max_queues = 2;
    const StatusReport few = ReadStatusReport(conn, CountQueuedJobs, options);
    CHECK(Names(few) == std::vector<std::string>{"a", "busy"});
    CHECK(few.queues_truncated);
  }
}

TEST_CASE("status report: hostile rows read: a NULL queue of a worker, a failure without finished_at",
          "[status_report]") {
  Connection conn = Connection::Open(test::FreshDatabase());
  conn.exec("INSERT INTO akadze.workers (id, hostname, pid, queues) VALUES ($1, 'h', 1, ARRAY['a', NULL])",
            pg::Params().add(kWorkerA));
  conn.exec("INSERT INTO akadze.jobs (task, state, finished_at) VALUES ('t', 'failed', NULL), ('t', 'failed', now())");
  const StatusReport r = ReadStatusReport(conn, CountQueuedJobs);
  CHECK(Names(r) == std::vector<std::string>{"a"});
  REQUIRE(r.workers.size() == 1);
  CHECK(r.workers[0].queues == std::vector<std::string>{"a"});
  REQUIRE(r.recent_failures.size() == 1);
  CHECK(r.recent_failures[0].finished_at.has_value());
}

TEST_CASE("status report: the oldest ready job is found at any priority, and infinite run_at reads",
          "[status_report]") {
  Connection conn = Connection::Open(test::FreshDatabase());
  // The claim index's first entry (highest priority) is not the oldest.
  conn.exec("INSERT INTO akadze.jobs (task, priority, run_at) VALUES"
            " ('t', 10, now() - interval '5 seconds'), ('t', 10, now() + interval '1 day'),"
            " ('t', 5, now() + interval '1 hour'), ('t', -3, now() - interval '2 hours'),"
            " ('t', -3, now() - interval '1 hour'), ('t', 0, now() - interval '10 minutes')");
  StatusReport r = ReadStatusReport(conn, CountQueuedJobs);
  const QueueStatus* q = Find(r, "default");
  REQUIRE(q != nullptr);
  REQUIRE(q->oldest_ready_age_seconds);
  CHECK(*q->oldest_ready_age_seconds >= 7200.0);
  CHECK(*q->oldest_ready_age_seconds < 7260.0);
  CHECK(q->ready == 4);
  CHECK(q->scheduled == 2);

  // Only future jobs: nothing is ready.
  conn.exec("DELETE FROM akadze.jobs WHERE run_at <= now()");
  r = ReadStatusReport(conn, CountQueuedJobs);
  CHECK_FALSE(Find(r, "default")->oldest_ready_age_seconds);
  CHECK(Find(r, "default")->ready == 0);

  // -infinity and infinity run_at (the schema takes them).
  conn.exec("INSERT INTO akadze.jobs (task, run_at) VALUES ('t', '-infinity'), ('t', 'infinity')");
  r = ReadStatusReport(conn, CountQueuedJobs);
  CHECK(Find(r, "default")->ready == 1);
  REQUIRE(Find(r, "default")->oldest_ready_age_seconds);
  CHECK(*Find(r, "default")->oldest_ready_age_seconds > 1e9);
}

TEST_CASE("status report: finished per minute adds up rounds over the last hour; old rows go",
          "[status_report]") {
  Connection conn = Connection::Open(test::FreshDatabase());
  conn.exec("INSERT INTO akadze.workers (id, hostname, pid, queues) VALUES ($1, 'h', 1, '{q,other}')",
            pg::Params().add(kWorkerA));
  AddQueueMinutes(conn, {{"q", 2, 1, 0}, {"other", 1, 0, 0}});
  AddQueueMinutes(conn, {{"q", 3, 0, 1}});
  AddQueueMinutes(conn, {{"q", 10, 0, 0}});
  // One row per queue and minute, however many rounds (and daemons) add to it.
  CHECK(conn.exec("SELECT count(*) FROM akadze.queue_minutes WHERE queue = 'q'").int64(0, 0) <= 2);
  // Two hours ago: out of the chart; two days ago: deleted by the next write.
  conn.exec("INSERT INTO akadze.queue_minutes (minute, queue, succeeded) VALUES"
            " (date_trunc('minute', now()) - interval '2 hours', 'q', 100),"
            " (date_trunc('minute', now()) - interval '2 days', 'q', 1000),"
            " (date_trunc('minute', now()) - interval '30 minutes', 'q', 7)");
  AddQueueMinutes(conn, {});
  CHECK(conn.exec("SELECT count(*) FROM akadze.queue_minutes WHERE minute < now() - interval '1 day'")
            .int64(0, 0) == 0);

  const StatusReport r = ReadStatusReport(conn, CountQueuedJobs);
  const QueueStatus& q = *Find(r, "q");
  REQUIRE(q.finished_per_minute.size() == 60);
  // The writes and the read may straddle a minute's end: the written
  // counts are in the last two or three slots, the row of 30 minutes ago in
  // slot 29 or 28.
  const auto recent = [&](std::int64_t MinuteCount::*field) {
    return q.finished_per_minute[57].*field + q.finished_per_minute[58].*field + q.finished_per_minute[59].*field;
  };
  CHECK(recent(&MinuteCount::succeeded) == 15);
  CHECK(recent(&MinuteCount::failed) == 1);
  CHECK(recent(&MinuteCount::cancelled) == 1);
  CHECK(q.finished_per_minute[28].succeeded + q.finished_per_minute[29].succeeded == 7);
  CHECK(Sum(q, &MinuteCount::succeeded) == 22);
  CHECK(Sum(*Find(r, "other"), &MinuteCount::succeeded) == 1);
  // Minutes are ISO text, one minute apart, oldest first.
  CHECK(q.finished_per_minute.front().minute < q.finished_per_minute.back().minute);
  CHECK(q.finished_per_minute.back().minute.substr(16) == ":00.000000Z");
}

TEST_CASE("status report: recent failures, newest first, from whatever the errors column holds",
          "[status_report]") {
  Connection conn = Connection::Open(test::FreshDatabase());
  const auto failed = [&](const std::string& errors, const std::string& age) {
    return conn
        .exec("INSERT INTO akadze.jobs (task, state, attempt, max_attempts, finished_at, errors)"
              " VALUES ('t', 'failed', 3, 3, now() - $2::interval, $1::jsonb) RETURNING id",
              pg::Params().add(errors).add(age))
        .int64(0, 0);
  };
  const std::int64_t two = failed(R"([{"error": "A", "message": "first"}, {"error": "B", "message": "last"}])", "1 minute");
  const std::int64_t object = failed(R"({"error": "X"})", "2 minutes");
  const std::int64_t scalar = failed("5", "3 minutes");
  const std::int64_t scalars = failed("[1, 2]", "4 minutes");
  const std::int64_t long_message =
      failed("[{\"error\": \"Long\", \"message\": \"" + std::string(10'000, 'x') + "\"}]", "5 minutes");
  conn.exec("INSERT INTO akadze.jobs (task, state, finished_at) VALUES ('t', 'succeeded', now())");

  StatusReport r = ReadStatusReport(conn, CountQueuedJobs);
  REQUIRE(r.recent_failures.size() == 5);
  std::vector<std::int64_t> ids;
  for (const RecentFailure& f : r.recent_failures) ids.push_back(f.id);
  CHECK(ids == std::vector<std::int64_t>{two, object, scalar, scalars, long_message});
  CHECK(r.recent_failures[0].error_kind == "B");
  CHECK(r.recent_failures[0].error_message == "last");
  CHECK(r.recent_failures[0].attempt == 3);
  for (int i = 1; i <= 3; ++i) {
    INFO(i);
    CHECK_FALSE(r.recent_failures[i].error_kind);
    CHECK_FALSE(r.recent_failures[i].error_message);
  }
  CHECK(r.recent_failures[4].error_message->size() == 500);

  StatusReportOptions options;
  options.max_failures = 2;
  r = ReadStatusReport(conn, CountQueuedJobs, options);
  CHECK(r.recent_failures.size() == 2);
}

// The statements of one ReadStatusReport, as auto_explain logged them.
std::vector<test::LoggedPlan> PlansOfOneRead(Connection& conn) {
  const std::string log = (test::Cluster().directory() / "server.log").string();
  conn.exec(test::kAutoExplainSql);
  const std::uintmax_t mark = test::FileSize(log);
  ReadStatusReport(conn, CountQueuedJobs);
  conn.exec("SET auto_explain.log_min_duration = -1");
  // The server writes its log asynchronously to the reply: wait for the
  // last statement's plan (the recent failures').
  std::vector<test::LoggedPlan> plans;
  REQUIRE(test::WaitUntil([&] {
    plans = test::PlansInLog(test::ReadFrom(log, mark));
    for (const test::LoggedPlan& p : plans) {
      if (p.query.find("WHERE j.state = 'failed'") != std::string::npos) return true;
    }
    return false;
  }));
  return plans;
}

TEST_CASE("status report: on 200,000 jobs no statement scans akadze.jobs", "[status_report][direct]") {
  Connection conn = Connection::Open(test::FreshDatabase());
  conn.exec("INSERT INTO akadze.jobs (task, queue, state, finished_at, errors)"
            " SELECT 'h', 'q' || (i % 3), CASE WHEN i % 100 = 0 THEN 'failed' ELSE 'succeeded' END,"
            "   now() - (i % 86400) * interval '1 second',"
            "   CASE WHEN i % 100 = 0 THEN '[{\"error\": \"E\", \"message\": \"m\"}]'::jsonb ELSE '[]' END"
            " FROM generate_series(1, 195000) i");
  conn.exec("INSERT INTO akadze.jobs (task, queue, priority, limit_key, run_at)"
            " SELECT 'h', 'q' || (i % 3), i % 4, 'k' || (i % 20),"
            "   now() + (CASE WHEN i % 10 = 0 THEN 1 ELSE -1 END) * interval '1 minute'"
            " FROM generate_series(1, 5000) i");
  // Jobs without a limit key: the held keys' skip scan must not read them.
  conn.exec("INSERT INTO akadze.jobs (task, queue) SELECT 'h', 'q0' FROM generate_series(1, 5000)");
  conn.exec("INSERT INTO akadze.workers (id, hostname, pid, queues) VALUES ($1, 'h', 1, '{q0,q1,q2}')",
            pg::Params().add(kWorkerA));
  conn.exec("INSERT INTO akadze.jobs (task, queue, state, worker_id, run_count, started_at, limit_key)"
            " SELECT 'h', 'q' || (i % 3), 'running', $1, 1, now(), 'k' || (i % 20) FROM generate_series(1, 40) i",
            pg::Params().add(kWorkerA));
  conn.exec("INSERT INTO akadze.limits (key, max_running) SELECT 'k' || i, 5 FROM generate_series(0, 14) i");
  AddQueueMinutes(conn, {{"q0", 5, 1, 0}});
  // Commits are asynchronous on the test cluster: VACUUM marks pages
  // all-visible (what index-only scans need) only once they are flushed.
  conn.exec("CHECKPOINT");
  conn.exec("VACUUM ANALYZE akadze.jobs");

  const std::vector<test::LoggedPlan> plans = PlansOfOneRead(conn);
  CHECK(plans.size() >= 8);
  std::set<std::string> indexes;
  for (const test::LoggedPlan& p : plans) {
    INFO(p.query);
    double jobs_rows = 0;  // index entries or rows of akadze.jobs the statement read
    for (const test::ScanNode& s : test::ScanNodes(p.plan)) {
      if (s.relation == "jobs" || s.index.rfind("jobs_", 0) == 0) jobs_rows += s.actual_rows * s.loops;
      INFO(s.node_type << " on " << s.relation << " " << s.index);
      if (!s.index.empty()) indexes.insert(s.index);
      if (s.relation != "jobs") continue;
      CHECK(s.node_type != "Seq Scan");
      // No scan reads more than the count cap's worth of jobs per loop.
      CHECK(s.actual_rows <= 10'001);
    }
    // The held keys: 3 queues x 20 keys probed, 5 held keys counted (up
    // to 501 each), and none of the 5,000 keyless jobs.
    if (p.query.find("pairs(queue, limit_key)") != std::string::npos) CHECK(jobs_rows < 3'000);
  }
  for (const char* used : {"jobs_claim_idx", "jobs_failed_finished_idx", "jobs_running_worker_idx"}) {
    INFO(used);
    CHECK(indexes.count(used) == 1);
  }
  // And the report is right on the big table too (counted whole here).
  StatusReportOptions whole;
  whole.count_cap = 10'000;
  const StatusReport r = ReadStatusReport(conn, CountQueuedJobs, whole);
  CHECK(Names(r) == std::vector<std::string>{"q0", "q1", "q2"});
  std::int64_t ready = 0, scheduled = 0, running = 0;
  for (const QueueStatus& q : r.queues) {
    ready += q.ready;
    scheduled += q.scheduled;
    running += q.running;
  }
  CHECK(ready == 9500);
  CHECK(scheduled == 500);
  CHECK(running == 40);
  CHECK(r.recent_failures.size() == 20);
  CHECK(r.held_keys_total == 5);  // k15..k19 have no limits row
}

}  // namespace
}  // namespace akadzed
