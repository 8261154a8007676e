// The counts of the status report, the status page, `akadzed status` and
// the /metrics gauges under a held MVCC horizon (docs/claim.md, "Counts past
// the floors"): queued jobs counted past the queue's stored claim floor
// (claim/queue_counts.h), running jobs past each worker's stored running
// floor (store/job_sql.h, RunningJobsOfWorkersSql), and the skip scans of
// queue names and held keys bounded by the known ones (FirstInGapSql). Each
// must give what a count of every row gives, and step over none of the dead
// entries the held snapshot keeps; each is shown to read them without its
// floor.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "claim/claim_transaction.h"
#include "claim/queue_counts.h"
#include "claim/stored_floor.h"
#include "pg/transaction.h"
#include "store/job_admin.h"
#include "store/limits_table.h"
#include "store/status_report.h"
#include "store/worker_lease.h"
#include "support/held_horizon.h"
#include "support/test_cluster.h"

namespace akadzed {
namespace {

// Entries of `index` this transaction's reads returned whose row version
// was not visible: the dead entries they stepped over (the backend's
// pending statistics, exact within one transaction).
std::int64_t DeadEntriesRead(pg::Connection& conn, const std::string& index) {
  return conn
      .exec("SELECT (pg_stat_get_xact_tuples_returned($1::regclass) - pg_stat_get_xact_tuples_fetched($1::regclass))::int8",
            pg::Params().add("akadze." + index))
      .int64(0, 0);
}

struct Counted {
  QueuedCount count;
  std::int64_t dead = 0;  // dead entries of jobs_claim_idx read
};

Counted CountInTransaction(pg::Connection& conn, const std::string& queue, std::int64_t cap = 0) {
  pg::Transaction tx(conn, "BEGIN READ ONLY");
  const std::int64_t before = DeadEntriesRead(conn, "jobs_claim_idx");
  Counted c;
  c.count = CountQueuedJobs(conn, {queue}, cap).at(0);
  c.dead = DeadEntriesRead(conn, "jobs_claim_idx") - before;
  tx.commit();
  return c;
}

// What a count of every row says.
QueuedCount Whole(pg::Connection& conn, const std::string& queue) {
  pg::Result r = conn.exec(
      "SELECT count(*), count(*) FILTER (WHERE run_at <= now()),"
      " EXTRACT(EPOCH FROM now() - min(run_at) FILTER (WHERE run_at <= now()))::float8"
      " FROM akadze.jobs WHERE state = 'queued' AND queue = $1",
      pg::Params().add(queue));
  QueuedCount c{r.int64(0, 0), r.int64(0, 1), std::nullopt};
  if (!r.is_null(0, 2)) c.oldest_ready_age_seconds = r.float64(0, 2);
  return c;
}

void CheckSame(const QueuedCount& got, const QueuedCount& want) {
  CHECK(got.total == want.total);
  CHECK(got.ready == want.ready);
  REQUIRE(got.oldest_ready_age_seconds.has_value() == want.oldest_ready_age_seconds.has_value());
  if (want.oldest_ready_age_seconds) {
    CHECK(*got.oldest_ready_age_seconds == Approx(*want.oldest_ready_age_seconds).margin(1.0));
  }
}

}  // namespace

TEST_CASE("queued counts read past the stored floor and count what a whole count does",
          "[queue_counts][floor]") {
  const std::string db = test::FreshDatabase();
  pg::Connection daemon = pg::Connection::Open(db);
  pg::Connection reader = pg::Connection::Open(db);
  pg::Connection report = pg::Connection::Open(db);
  // Two levels of ready jobs, and scheduled ones in both.
  daemon.exec("INSERT INTO akadze.jobs (task, queue, run_at, priority) SELECT 't', 'q', now() + interval '1 hour' +"
              " g * interval '1 second', g % 2 FROM generate_series(1, 40) g");
  test::ClaimedPastTwoLevels held(daemon, report);
  const ClaimFloor& floor = held.floor;

  // Without a stored floor: from the heads, over the 2,000 claims' dead
  // entries.
  daemon.exec("DELETE FROM akadze.queue_floors");
  const Counted heads = CountInTransaction(reader, "q");
  CheckSame(heads.count, Whole(reader, "q"));
  CHECK(heads.dead >= 1900);
  SaveQueueFloor(daemon, "q", floor);

  const Counted past = CountInTransaction(reader, "q");
  CheckSame(past.count, Whole(reader, "q"));
  CHECK(past.count.total == 1040);
  CHECK(past.dead == 0);

  // Rows that land at or below the floor after it was written, each found
  // by one arm: released (its run_at is in the dead prefix), a new job of
  // an old run_at (queued_xid), and a level no floor names, above both.
  // A ready job made scheduled: counted as scheduled.
  daemon.exec("UPDATE akadze.jobs SET run_at = now() + interval '1 day' WHERE id ="
              " (SELECT max(id) FROM akadze.jobs WHERE state = 'queued' AND priority = 0 AND run_at <= now())");
  daemon.exec("UPDATE akadze.jobs SET state = 'queued', worker_id = NULL WHERE id ="
              " (SELECT min(id) FROM akadze.jobs WHERE (state = 'running') IS NOT FALSE)");
  daemon.exec("INSERT INTO akadze.jobs (task, queue, priority, run_at) VALUES ('t', 'q', 0, now() - interval '3 hours')");
  daemon.exec("INSERT INTO akadze.jobs (task, queue, priority, run_at) SELECT 't', 'q', 7, now() - interval '2 hours'"
              " FROM generate_series(1, 5)");
  const Counted after = CountInTransaction(reader, "q");
  CheckSame(after.count, Whole(reader, "q"));
  CHECK(after.count.total == 1047);
  // The oldest ready job is the new one at priority 0, three hours old,
  // found below its level's floor.
  REQUIRE(after.count.oldest_ready_age_seconds);
  CHECK(*after.count.oldest_ready_age_seconds >= 3 * 3600.0 - 60);
  CHECK(after.dead == 1);  // the old entry of the job made scheduled, past the floor

  // Capped: each read stops at cap + 1, and the total says "more".
  const Counted capped = CountInTransaction(reader, "q", 10);
  CHECK(capped.count.total > 10);

  // A role that may not read the stored floors counts from the heads, and
  // the report's other statements do not fail for it.
  daemon.exec("CREATE ROLE no_floors");
  daemon.exec("GRANT USAGE ON SCHEMA akadze TO no_floors");
  daemon.exec("GRANT SELECT ON akadze.jobs, akadze.workers, akadze.limits, akadze.limit_starts, akadze.queue_pauses,"
              " akadze.queue_caps, akadze.queue_minutes TO no_floors");
  reader.exec("SET ROLE no_floors");
  const Counted no_grant = CountInTransaction(reader, "q");
  CheckSame(no_grant.count, Whole(reader, "q"));
  CHECK(no_grant.dead >= 1900);
  const StatusReport report_without = ReadStatusReport(reader, CountQueuedJobs);
  REQUIRE(report_without.queues.size() == 1);
  CHECK(report_without.queues[0].capped);  // over 500 queued: counted up to the cap
  reader.exec("RESET ROLE");

  // An old floor (its daemons stopped, the queue paused) is not used: each
  // count would read every job queued since it was written.
  daemon.exec("UPDATE akadze.queue_floors SET set_at = now() - interval '1 minute'");
  const Counted old = CountInTransaction(reader, "q");
  CheckSame(old.count, Whole(reader, "q"));
  CHECK(old.dead >= 1900);
  daemon.exec("UPDATE akadze.queue_floors SET set_at = now()");

  // A floor of another server is not used: from the heads again.
  daemon.exec("UPDATE akadze.queue_floors SET floor = jsonb_set(floor, '{server}', '\"elsewhere\"')");
  const Counted elsewhere = CountInTransaction(reader, "q");
  CheckSame(elsewhere.count, Whole(reader, "q"));
  CHECK(elsewhere.dead >= 1900);

  // A row that is no object (any jsonb the column takes) is not used, and
  // fails no count (the count's load drops the running floors: `floor -
  // 'running'` raises on a scalar).
  for (const char* scalar : {"null", "1", "\"text\"", "[1]"}) {
    INFO(scalar);
    daemon.exec("UPDATE akadze.queue_floors SET floor = $1::jsonb", pg::Params().add(scalar));
    const Counted odd = CountInTransaction(reader, "q");
    CheckSame(odd.count, Whole(reader, "q"));
  }
  held.release();
}

TEST_CASE("running counts read each worker past its stored running floor", "[queue_counts][running]") {
  const std::string db = test::FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  pg::Connection report = pg::Connection::Open(db);
  const WorkerIdentity worker{"5b0f6a52-8a4c-4f4e-9d55-0b0c1c2d3e4f", "host", 1, {"q"}};
  RegisterWorker(conn, worker);
  SetLimit(conn, LimitRow{"k", 100, std::nullopt, std::nullopt});
  conn.exec("INSERT INTO akadze.jobs (task, queue, limit_key) SELECT 't', 'q', CASE WHEN g % 2 = 0 THEN 'k' END"
            " FROM generate_series(1, 2020) g");
  test::HeldHorizon held(report);
  // 2,000 jobs run and finish under the worker, 100 at a time, each batch
  // its own transaction: 2,000 dead entries of the worker's in
  // jobs_running_worker_idx that the held snapshot keeps.
  const auto run = [&](int n) {
    conn.exec("UPDATE akadze.jobs SET state = 'running', worker_id = $1::uuid, started_at = now(),"
              " run_count = run_count + 1"
              " WHERE id IN (SELECT id FROM akadze.jobs WHERE state = 'queued' ORDER BY id LIMIT $2)",
              pg::Params().add(worker.id).add(std::int64_t{n}));
  };
  for (int i = 0; i < 20; ++i) {
    run(100);
    conn.exec("UPDATE akadze.jobs SET state = 'succeeded', finished_at = now() WHERE state = 'running'");
  }
  run(6);  // running when the reconcile reads
  OwnedJobsFloor floor;
  REQUIRE(OwnedRunningJobs(conn, worker.id, 0, &floor).size() == 6);
  REQUIRE(Heartbeat(conn, worker.id, std::nullopt, &floor));
  run(4);  // made running after the floor's snapshot

  const auto read = [&] {
    pg::Transaction tx(conn, "BEGIN READ ONLY");
    const std::int64_t before = DeadEntriesRead(conn, "jobs_running_worker_idx");
    const std::vector<WorkerRow> workers = ListWorkers(conn);
    const std::int64_t dead = DeadEntriesRead(conn, "jobs_running_worker_idx") - before;
    const std::vector<LimitUse> limits = ListLimitUse(conn);
    const QueueSection section = ReadQueueSection(conn, CountQueuedJobs, {});
    tx.commit();
    REQUIRE(workers.size() == 1);
    CHECK(workers[0].running == 10);
    REQUIRE(section.queues.size() == 1);
    CHECK(section.queues[0].running == 10);
    std::int64_t keyed = 0;
    for (const LimitUse& l : limits) {
      if (l.key == "k") keyed = l.running;
    }
    CHECK(keyed == 5);
    return dead;
  };
  CHECK(read() <= 10);
  // Without a stored floor, and with floors no heartbeat wrote: the
  // worker's entries whole, the same counts.
  const std::string server(conn.exec("SELECT extract(epoch FROM pg_postmaster_start_time())::text").text(0, 0));
  // Each floor has the stored one's from_xid, with which a floor taken for
  // usable would read a few entries, not 2,000.
  const std::string x(conn.exec("SELECT running_floor ->> 'x' FROM akadze.workers").text(0, 0));
  const std::string of_worker = "{\"v\": 1, \"w\": \"" + worker.id + "\", ";
  const std::string here = "\"s\": \"" + server + "\", ";
  for (const std::string& bad : std::vector<std::string>{
           "null", "[]", "{\"v\": 2}",
           of_worker + here + "\"x\": \"not a number\", \"p\": [], \"i\": []}",
           of_worker + "\"s\": \"elsewhere\", \"x\": \"" + x + "\", \"p\": [], \"i\": []}",
           "{\"v\": 1, \"w\": \"another\", " + here + "\"x\": \"" + x + "\", \"p\": [], \"i\": []}",
           "{\"v\": 1, " + here + "\"x\": \"" + x + "\", \"p\": [], \"i\": []}",
           of_worker + here + "\"x\": \"99999999999999999\", \"p\": [], \"i\": []}",
           of_worker + here + "\"x\": \"" + x + "\", \"p\": {}, \"i\": []}"}) {
    INFO(bad);
    conn.exec("UPDATE akadze.workers SET running_floor = $1::jsonb", pg::Params().add(bad));
    CHECK(read() >= 2000);
  }
  // A floor with one element that is not a well-formed point or id is not
  // used (a read without that element would miss its job: review), and is
  // no error: the worker is read whole. Ids anywhere in int8 are well-formed.
  for (const char* bad : {R"('{p}', '["x"]')", R"('{p}', '["99999999999999999999"]')", R"('{i}', '["a"]')",
                          R"('{i}', '[1.5]')", R"('{i}', '[9223372036854775808]')"}) {
    INFO(bad);
    REQUIRE(Heartbeat(conn, worker.id, std::nullopt, &floor));
    conn.exec(std::string("UPDATE akadze.workers SET running_floor = jsonb_set(running_floor, ") + bad + ")");
    CHECK(read() >= 2000);
  }
  REQUIRE(Heartbeat(conn, worker.id, std::nullopt, &floor));
  conn.exec("UPDATE akadze.workers SET running_floor = jsonb_set(running_floor, '{i}',"
            " running_floor -> 'i' || '[-9223372036854775808, 9223372036854775807]'::jsonb)");
  CHECK(read() <= 10);
  held.release();
}

TEST_CASE("queue names and held keys are found between the known ones, never inside them",
          "[queue_counts][names]") {
  const std::string db = test::FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  pg::Connection report = pg::Connection::Open(db);
  const WorkerIdentity worker{"6b0f6a52-8a4c-4f4e-9d55-0b0c1c2d3e4f", "host", 1, {"m"}};
  RegisterWorker(conn, worker);
  SetLimit(conn, LimitRow{"kb", 1000, std::nullopt, std::nullopt});
  // The served queue "m" and key "kb" have many claims' dead entries; the
  // unserved queues around "m" and the held keys around "kb" have jobs.
  conn.exec("INSERT INTO akadze.jobs (task, queue, limit_key) SELECT 't', 'm', 'kb' FROM generate_series(1, 2000)");
  conn.exec("INSERT INTO akadze.jobs (task, queue, limit_key) VALUES ('t', 'a', NULL), ('t', 'z', NULL),"
            " ('t', 'm', 'ka'), ('t', 'm', 'kc'), ('t', 'm', NULL)");
  test::HeldHorizon held(report);
  conn.exec("UPDATE akadze.jobs SET state = 'running', worker_id = $1::uuid WHERE limit_key = 'kb'",
            pg::Params().add(worker.id));
  conn.exec("UPDATE akadze.jobs SET state = 'queued', worker_id = NULL WHERE id ="
            " (SELECT max(id) FROM akadze.jobs WHERE limit_key = 'kb')");

  pg::Transaction tx(conn, "BEGIN READ ONLY");
  const std::int64_t before = DeadEntriesRead(conn, "jobs_claim_idx") + DeadEntriesRead(conn, "jobs_claim_key_idx");
  StatusReportOptions names_only;
  names_only.count_cap = 1;
  const QueueSection section = ReadQueueSection(conn, [](pg::Connection&, const std::vector<std::string>& queues,
                                                          std::int64_t) {
    return std::vector<QueuedCount>(queues.size(), QueuedCount{1, 1, std::nullopt});
  }, names_only);
  std::int64_t total = 0;
  const std::vector<HeldLimitKey> keys = ListHeldLimitKeys(conn, 100, &total, 0);
  const std::int64_t dead =
      DeadEntriesRead(conn, "jobs_claim_idx") + DeadEntriesRead(conn, "jobs_claim_key_idx") - before;
  tx.commit();
  std::vector<std::string> names;
  for (const QueueStatus& q : section.queues) names.push_back(q.queue);
  CHECK(names == std::vector<std::string>{"a", "m", "z"});
  std::vector<std::string> held_keys;
  for (const HeldLimitKey& k : keys) held_keys.push_back(k.key);
  std::sort(held_keys.begin(), held_keys.end());
  CHECK(held_keys == std::vector<std::string>{"ka", "kc"});
  CHECK(total == 2);
  CHECK(dead <= 10);
  held.release();
}

}  // namespace akadzed
