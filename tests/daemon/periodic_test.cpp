// Periodic jobs (periodic/periodic_scheduler.h) against a real PostgreSQL:
// the fire decision, overlap, the grace, and three daemons sharing one entry.
#include <catch2/catch.hpp>

#include <signal.h>

#include <memory>

#include "config/config.h"
#include "periodic/periodic_scheduler.h"
#include "pg/connection.h"
#include "support/daemon_process.h"
#include "support/test_cluster.h"

namespace akadzed {
namespace {

using namespace std::chrono_literals;


constexpr std::int64_t kMinute = 60'000'000;

PeriodicConfig Entry(const std::string& name, Schedule schedule) {
  PeriodicConfig e;
  e.name = name;
  e.task = name + "-task";
  e.queue = "reports";
  e.schedule = std::move(schedule);
  e.args_json = R"({"kind":"daily"})";
  e.priority = 5;
  e.max_attempts = 2;
  return e;
}

TEST_CASE("LatestFire: the last fire at or before now, only within the grace", "[periodic]") {
  const Schedule every = Schedule::Every("10s");
  CHECK(LatestFire(every, 125'000'000, kMinute) == 120'000'000);
  CHECK(LatestFire(every, 120'000'000, kMinute) == 120'000'000);
  CHECK(LatestFire(every, 125'000'000, 4'000'000) == std::nullopt);
  CHECK(LatestFire(every, 125'000'000, 5'000'000) == 120'000'000);
  // 2026-11-30T10:07:30Z; "*/5 * * * *" last fired 10:05.
  const std::int64_t now = 1'796'033'250'000'000;
  const Schedule cron = Schedule::Cron("*/5 * * * *");
  CHECK(LatestFire(cron, now, kMinute * 3) == now - 150'000'000);
  CHECK(LatestFire(cron, now, kMinute * 2) == std::nullopt);
  // Never fires within the grace: a yearly entry ten months away.
  CHECK(LatestFire(Schedule::Cron("0 0 1 1 *"), now, 24 * 60 * kMinute) == std::nullopt);
}

TEST_CASE("a fire is recorded once, with its job, and then taken", "[periodic]") {
  pg::Connection conn = pg::Connection::Open(test::FreshDatabase());
  PeriodicConfig entry = Entry("nightly", Schedule::Every("1h"));
  entry.grace_us = 2 * 60 * kMinute;  // the last hour boundary is always within it

  FireResult first = FirePeriodic(conn, entry);
  REQUIRE(first.kind == FireResult::Kind::kEnqueued);
  CHECK(first.fire_at_us % (60 * kMinute) == 0);
  CHECK(first.db_now_us - first.fire_at_us < 60 * kMinute);
  pg::Result job = conn.exec(
      "SELECT task, queue, priority, max_attempts, args::text, unique_key IS NULL, state"
      " FROM akadze.jobs WHERE id = $1", pg::Params().add(first.job_id));
  REQUIRE(job.rows() == 1);
  CHECK(job.text(0, 0) == "nightly-task");
  CHECK(job.text(0, 1) == "reports");
  CHECK(job.int64(0, 2) == 5);
  CHECK(job.int64(0, 3) == 2);
  CHECK(job.text(0, 4) == R"({"kind": "daily"})");
  CHECK(job.text(0, 5) == "t");
  CHECK(job.text(0, 6) == "queued");
  CHECK(test::Count(conn, "SELECT count(*) FROM akadze.periodic_runs WHERE name = 'nightly' AND job_id = " +
                        std::to_string(first.job_id) +
                        " AND fire_at = to_timestamp(" + std::to_string(first.fire_at_us) +
                        " / 1000000.0)") == 1);

  FireResult again = FirePeriodic(conn, entry);
  CHECK(again.kind == FireResult::Kind::kTaken);
  CHECK(again.fire_at_us == first.fire_at_us);
  CHECK(test::Count(conn, "SELECT count(*) FROM akadze.jobs") == 1);

  // Outside the grace nothing happens at all.
  PeriodicConfig yearly = Entry("yearly", Schedule::Cron("0 0 1 1 *"));
  if (FirePeriodic(conn, yearly).kind == FireResult::Kind::kNone) {
    CHECK(test::Count(conn, "SELECT count(*) FROM akadze.periodic_runs WHERE name = 'yearly'") == 0);
  }
}

TEST_CASE("overlap: false rolls the fire back while the previous job is active", "[periodic]") {
  pg::Connection conn = pg::Connection::Open(test::FreshDatabase());
  PeriodicConfig entry = Entry("sync", Schedule::Every("1h"));
  entry.grace_us = 2 * 60 * kMinute;
  entry.overlap = false;
  FireResult first = FirePeriodic(conn, entry);
  REQUIRE(first.kind == FireResult::Kind::kEnqueued);
  CHECK(conn.exec("SELECT unique_key FROM akadze.jobs WHERE id = $1", pg::Params().add(first.job_id))
            .text(0, 0) == "periodic:sync");

  // The next fire, simulated by forgetting this one: the job still holds the key.
  conn.exec("DELETE FROM akadze.periodic_runs");
  conn.exec("UPDATE akadze.jobs SET state = 'running', worker_id = gen_random_uuid()");
  CHECK(FirePeriodic(conn, entry).kind == FireResult::Kind::kOverlapped);
  CHECK(test::Count(conn, "SELECT count(*) FROM akadze.periodic_runs") == 0);
  CHECK(test::Count(conn, "SELECT count(*) FROM akadze.jobs") == 1);

  // Once it finished, the same fire goes through, late but within its grace.
  conn.exec("UPDATE akadze.jobs SET state = 'succeeded', worker_id = NULL, finished_at = now()");
  FireResult late = FirePeriodic(conn, entry);
  CHECK(late.kind == FireResult::Kind::kEnqueued);
  CHECK(late.fire_at_us == first.fire_at_us);
  CHECK(test::Count(conn, "SELECT count(*) FROM akadze.jobs WHERE state = 'queued'") == 1);
}

// A config whose periodic entry enqueues into a queue no daemon claims from,
// so the jobs stay where the entry put them.
std::string PeriodicConfigYaml(const std::string& entry) {
  return "queues:\n  - {name: default, slots: 1}\n"
         "handlers:\n  t:\n    shell: {command: [\"true\"], kill_grace: 500ms}\n"
         "periodic:\n" + entry +
         "worker: {heartbeat_interval: 200ms, heartbeat_ttl: 2s, poll_interval: 100ms}\n"
         "pruning: {enabled: false}\n"
         "metrics: {enabled: false}\n"
         "logging: {level: info, format: logfmt}\n";
}

TEST_CASE("three daemons with one periodic entry create exactly one job per fire",
          "[periodic][daemon]") {
  std::string db = test::FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  test::TempDir dir;
  std::string config = dir.Write(
      "akadzed.yaml",
      PeriodicConfigYaml("  tick:\n    every: 1s\n    queue: ticks\n    args: {n: 1}\n"));
  std::vector<std::unique_ptr<test::DaemonProcess>> daemons;
  for (int i = 0; i < 3; ++i) {
    daemons.push_back(std::make_unique<test::DaemonProcess>(
        std::vector<std::string>{"run", "--config", config, "--database-url", db},
        test::EnvChanges{}, dir.path() + "/daemon" + std::to_string(i) + ".log"));
  }
  for (auto& d : daemons) REQUIRE(d->WaitForLog("started worker="));
  // Five fires after all three run.
  const std::int64_t before = test::Count(conn, "SELECT count(*) FROM akadze.periodic_runs");
  REQUIRE(test::WaitUntil(
      [&] { return test::Count(conn, "SELECT count(*) FROM akadze.periodic_runs") >= before + 5; }, 30s));
  for (auto& d : daemons) d->Signal(SIGTERM);
  for (auto& d : daemons) CHECK(d->Wait() == 0);

  const std::int64_t fires = test::Count(conn, "SELECT count(*) FROM akadze.periodic_runs WHERE name = 'tick'");
  CHECK(test::Count(conn, "SELECT count(*) FROM akadze.jobs WHERE task = 'tick' AND queue = 'ticks'") == fires);
  // Each fire links its own job; no job without a fire.
  CHECK(test::Count(conn, "SELECT count(DISTINCT job_id) FROM akadze.periodic_runs WHERE name = 'tick'") == fires);
  CHECK(test::Count(conn, "SELECT count(*) FROM akadze.jobs j"
                    " WHERE NOT EXISTS (SELECT 1 FROM akadze.periodic_runs r WHERE r.job_id = j.id)") == 0);
  // Fire instants are whole seconds, one per second.
  CHECK(test::Count(conn, "SELECT count(*) FROM akadze.periodic_runs"
                    " WHERE fire_at <> date_trunc('second', fire_at)") == 0);
  // The daemons' logs agree: one periodic_enqueued line per fire in all.
  std::int64_t logged = 0;
  for (auto& d : daemons) {
    const std::string log = d->Log();
    for (std::size_t at = log.find("periodic_enqueued name=tick"); at != std::string::npos;
         at = log.find("periodic_enqueued name=tick", at + 1)) {
      ++logged;
    }
  }
  CHECK(logged == fires);
}

TEST_CASE("the daemon skips a fire while the entry's previous job is active (overlap: false)",
          "[periodic][daemon]") {
  std::string db = test::FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  test::TempDir dir;
  std::string config = dir.Write(
      "akadzed.yaml",
      PeriodicConfigYaml("  sync:\n    every: 1s\n    queue: ticks\n    overlap: false\n"));
  test::DaemonProcess daemon({"run", "--config", config, "--database-url", db}, {},
                             dir.path() + "/daemon.log");
  REQUIRE(test::WaitUntil([&] { return test::Count(conn, "SELECT count(*) FROM akadze.jobs") == 1; }, 30s));
  // Later fires come and are skipped; still one job, one recorded fire.
  REQUIRE(daemon.WaitForLog("periodic_skipped name=sync"));
  const std::string log = daemon.Log();
  const std::size_t first_skip = log.find("periodic_skipped name=sync");
  REQUIRE(test::WaitUntil([&] {
    return daemon.Log().find("periodic_skipped name=sync", first_skip + 1) != std::string::npos;
  }, 30s));
  CHECK(test::Count(conn, "SELECT count(*) FROM akadze.jobs") == 1);
  CHECK(test::Count(conn, "SELECT count(*) FROM akadze.periodic_runs") == 1);

  conn.exec("UPDATE akadze.jobs SET state = 'cancelled', finished_at = now()");
  CHECK(test::WaitUntil([&] {
    return test::Count(conn, "SELECT count(*) FROM akadze.jobs WHERE state = 'queued'") == 1;
  }, 30s));
  CHECK(test::Count(conn, "SELECT count(*) FROM akadze.jobs WHERE unique_key = 'periodic:sync'") == 2);
  daemon.Signal(SIGTERM);
  CHECK(daemon.Wait() == 0);
}

}  // namespace
}  // namespace akadzed
