// /metrics, /healthz and /readyz of the real daemon against a real
// PostgreSQL: the exposition parses strictly and its values match the jobs
// that ran and the database; health and readiness answer 503 when a loop
// stalls, the schema is behind or the database is gone; a taken port fails
// the start. Every wait is for a condition, never a fixed sleep.
#include <catch2/catch.hpp>

#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <optional>
#include <regex>
#include <thread>

#include "pg/connection.h"
#include "support/daemon_process.h"
#include "support/http_probe.h"
#include "support/prometheus_text.h"
#include "support/test_cluster.h"

namespace akadzed::test {
namespace {

using namespace std::chrono_literals;

constexpr const char* kFastWorker = R"(worker:
  heartbeat_interval: 200ms
  heartbeat_ttl: 1500ms
  poll_interval: 100ms
  shutdown_timeout: 2s
)";

struct MetricsFixture {
  std::string db = FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  TempDir dir;
  int started = 0;

  std::string Config(const std::string& handlers, const std::string& metrics,
                     const std::string& worker = kFastWorker) {
    return dir.Write("akadzed.yaml", worker +
                                         "queues:\n  - {name: default, slots: 4, mode: fair}\n"
                                         "handlers:\n" + handlers + metrics +
                                         "logging: {level: info, format: logfmt}\n");
  }
  std::unique_ptr<DaemonProcess> Start(const std::string& config, const std::string& url,
                                       EnvChanges env = {}) {
    std::string log = dir.path() + "/daemon" + std::to_string(++started) + ".log";
    return std::make_unique<DaemonProcess>(
        std::vector<std::string>{"run", "--config", config, "--database-url", url}, env, log);
  }
  std::int64_t Enqueue(const std::string& task, int max_attempts = 3,
                       const std::string& args = "{}") {
    return conn
        .exec("INSERT INTO akadze.jobs (task, args, max_attempts) VALUES ($1, $2::jsonb, $3)"
              " RETURNING id",
              pg::Params().add(task).add(args).add(max_attempts))
        .int64(0, 0);
  }
};

std::string Shell(const std::string& task, const std::string& script) {
  return "  " + task + ":\n    shell: {command: [\"" + script + "\"], kill_grace: 500ms}\n";
}

const std::string kListenAnyPort = "metrics: {listen: 127.0.0.1:0}\n";

PromExposition Scrape(int port) {
  HttpAnswer answer = HttpGet(port, "/metrics");
  REQUIRE(answer.status == 200);
  return ParsePrometheusText(answer.body);
}

double Value(const PromExposition& e, const std::string& name, const PromLabels& labels = {}) {
  std::optional<double> v = e.Value(name, labels);
  INFO(name);
  REQUIRE(v);
  return *v;
}

TEST_CASE("/metrics: outcomes, durations, job gauges, slots and build info match what ran",
          "[daemon][metrics]") {
  MetricsFixture f;
  std::string ok = f.dir.Write("ok.sh", "#!/bin/sh\n", true);
  std::string flaky = f.dir.Write(
      "flaky.sh", "#!/bin/sh\nif [ \"$AKADZE_ATTEMPT\" = 1 ]; then exit 3; fi\n", true);
  std::string doomed = f.dir.Write(
      "doomed.sh", "#!/bin/sh\necho '{\"outcome\": \"fail\", \"error\": \"Nope\"}' >&3\n", true);
  std::string broken = f.dir.Write("broken.sh", "#!/bin/sh\nexit 1\n", true);
  auto daemon = f.Start(f.Config(Shell("ok", ok) + Shell("flaky", flaky) + Shell("doomed", doomed) +
                                     Shell("broken", broken),
                                 kListenAnyPort),
                        f.db);
  int port = ListenerPort(*daemon);
  for (int i = 0; i < 3; ++i) f.Enqueue("ok", 3, R"({"secret_arg": "s3cr3t-value"})");
  f.Enqueue("flaky");
  f.Enqueue("doomed");
  f.Enqueue("broken", 1);
  // Finished in the database: 4 succeeded (3 ok, flaky's second run), 2 failed.
  REQUIRE(WaitUntil([&] {
    return test::JobsInState(f.conn, "succeeded") == 4 &&
           test::JobsInState(f.conn, "failed") == 2;
  }));
  // The counters follow the finishes; the database gauges are up to a
  // second old: await both rather than sleep.
  PromExposition e;
  REQUIRE(WaitUntil([&] {
    e = Scrape(port);
    return e.Sum("akadzed_job_outcomes_total") == 7 &&
           e.Value("akadzed_busy_slots", {{"queue", "default"}}) == 0 &&
           e.Value("akadzed_queue_finished_last_hour", {{"queue", "default"}, {"state", "succeeded"}}) == 4 &&
           e.Value("akadzed_queue_finished_last_hour", {{"queue", "default"}, {"state", "failed"}}) == 2;
  }));

  // Outcomes per task, and one duration observation per run.
  auto outcome = [&](const std::string& task, const std::string& o) {
    return e.Value("akadzed_job_outcomes_total", {{"task", task}, {"outcome", o}}).value_or(0);
  };
  CHECK(outcome("ok", "success") == 3);
  CHECK(outcome("flaky", "retry") == 1);
  CHECK(outcome("flaky", "success") == 1);
  CHECK(outcome("doomed", "fail") == 1);
  CHECK(outcome("broken", "retry") == 1);
  for (const auto& [task, runs] : std::vector<std::pair<std::string, double>>{
           {"ok", 3}, {"flaky", 2}, {"doomed", 1}, {"broken", 1}}) {
    INFO(task);
    CHECK(e.Sum("akadzed_job_outcomes_total", {{"task", task}}) == runs);
    CHECK(Value(e, "akadzed_job_duration_seconds_count", {{"task", task}}) == runs);
    CHECK(Value(e, "akadzed_job_duration_seconds_bucket", {{"task", task}, {"le", "+Inf"}}) == runs);
    CHECK(Value(e, "akadzed_job_duration_seconds_sum", {{"task", task}}) > 0);
  }
  CHECK(e.Find("akadzed_job_outcomes_total")->type == "counter");
  CHECK(e.Find("akadzed_job_duration_seconds")->type == "histogram");

  // Claims: every run was claimed once, after reading at least its row.
  CHECK(Value(e, "akadzed_jobs_claimed_total", {{"queue", "default"}}) == 7);
  CHECK(Value(e, "akadzed_claim_rows_read_total", {{"queue", "default"}}) >= 7);
  CHECK(Value(e, "akadzed_claim_duration_seconds_count", {{"queue", "default"}}) >= 1);

  // The jobs gauge is the database's count of queued and running jobs;
  // the finishes of the last hour (all of this test's) are the queue's
  // minutes, state by state.
  for (const char* state : {"queued", "running"}) {
    INFO(state);
    CHECK(Value(e, "akadzed_jobs", {{"queue", "default"}, {"state", state}}) ==
          test::JobsInState(f.conn, state));
  }
  CHECK(e.Find("akadzed_jobs") != nullptr);
  CHECK_FALSE(e.Value("akadzed_jobs", {{"queue", "default"}, {"state", "succeeded"}}).has_value());
  for (const char* state : {"succeeded", "failed", "cancelled"}) {
    INFO(state);
    CHECK(Value(e, "akadzed_queue_finished_last_hour", {{"queue", "default"}, {"state", state}}) ==
          test::JobsInState(f.conn, state));
  }
  CHECK(Value(e, "akadzed_queue_ready_jobs", {{"queue", "default"}}) == 0);
  CHECK(Value(e, "akadzed_queue_lag_seconds", {{"queue", "default"}}) == 0);
  CHECK(Value(e, "akadzed_queue_paused", {{"queue", "default"}}) == 0);
  CHECK(Value(e, "akadzed_slots", {{"queue", "default"}}) == 4);
  CHECK(Value(e, "akadzed_busy_slots", {{"queue", "default"}}) == 0);
  CHECK(Value(e, "akadzed_lease_held") == 1);
  CHECK(Value(e, "akadzed_database_up") == 1);
  CHECK(Value(e, "akadzed_ready") == 1);
  CHECK(Value(e, "akadzed_limit_keys_in_use") == 0);

  // Build info and the process.
  auto build = e.Samples("akadzed_build_info");
  REQUIRE(build.size() == 1);
  CHECK(build[0].value == 1);
  CHECK_FALSE(build[0].labels.at("version").empty());
  CHECK(Value(e, "process_start_time_seconds") > 1.6e9);
  CHECK(Value(e, "process_resident_memory_bytes") > 0);
  CHECK(Value(e, "process_open_fds") > 0);
  CHECK(e.Find("process_cpu_seconds_total") != nullptr);
  CHECK(e.Find("akadzed_database_errors_total") != nullptr);

  // Job args never reach the exposition.
  CHECK(HttpGet(port, "/metrics").body.find("s3cr3t") == std::string::npos);

  HttpAnswer health = HttpGet(port, "/healthz");
  CHECK(health.status == 200);
  CHECK(health.body == "ok\n");
  HttpAnswer ready = HttpGet(port, "/readyz");
  CHECK(ready.status == 200);
  CHECK(HttpGet(port, "/nope").status == 404);

  daemon->Signal(SIGTERM);
  CHECK(daemon->Wait() == 0);
  CHECK(HttpGet(port, "/metrics").status == 0);  // the listener is gone
}

// FirstWindowSizer in the daemon (docs/claim.md, "The first window's
// size"): a queue whose claims take the rows at its head reads 1.15 rows a
// slot in each first window after the first claim, not 4 (16 rows a claim
// for these 4 slots).
TEST_CASE("claims of a queue with nothing to pass over read 1.15 rows a slot after the first",
          "[daemon][metrics][first_window]") {
  MetricsFixture f;
  std::string ok = f.dir.Write("ok.sh", "#!/bin/sh\n", true);
  f.conn.exec("INSERT INTO akadze.jobs (task) SELECT 'ok' FROM generate_series(1, 200)");
  auto daemon = f.Start(f.Config(Shell("ok", ok), kListenAnyPort), f.db);
  int port = ListenerPort(*daemon);
  REQUIRE(WaitUntil([&] { return JobsInState(f.conn, "succeeded") == 200; }, 60s));
  PromExposition e;
  REQUIRE(WaitUntil([&] {
    e = Scrape(port);
    return Value(e, "akadzed_jobs_claimed_total", {{"queue", "default"}}) == 200;
  }));
  const double rows = Value(e, "akadzed_claim_rows_read_total", {{"queue", "default"}});
  const double claims = Value(e, "akadzed_claim_duration_seconds_count", {{"queue", "default"}});
  INFO("rows read " << rows << " in " << claims << " claims");
  // The first claim reads 16 rows, every later one at most 5 (4 x 1.15,
  // rounded up); with the fixed size every claim that found jobs read 16
  // while 16 were left.
  CHECK(rows >= 200);
  CHECK(rows <= 16 + 5 * (claims - 1));
  daemon->Signal(SIGTERM);
  CHECK(daemon->Wait() == 0);
}

TEST_CASE("/metrics while jobs run: busy slots, limit keys in use, lag of an unserved queue",
          "[daemon][metrics]") {
  MetricsFixture f;
  std::string go = f.dir.path() + "/go";
  std::string hold = f.dir.Write(
      "hold.sh", "#!/bin/sh\nwhile [ ! -e " + go + " ]; do sleep 0.05; done\n", true);
  f.conn.exec("INSERT INTO akadze.limits (key, max_running) VALUES ('tenant-1', 2)");
  auto daemon = f.Start(f.Config(Shell("hold", hold), kListenAnyPort), f.db);
  int port = ListenerPort(*daemon);
  f.conn.exec("INSERT INTO akadze.jobs (task, limit_key) VALUES ('hold', 'tenant-1'),"
              " ('hold', 'tenant-1'), ('hold', NULL)");
  // Nobody serves queue "other": its job waits, and its lag grows.
  f.conn.exec("INSERT INTO akadze.jobs (task, queue, run_at) VALUES ('hold', 'other',"
              " now() - interval '90 seconds')");
  REQUIRE(WaitUntil([&] {
    return test::JobsInState(f.conn, "running") == 3;
  }));
  PromExposition e;
  // The database's count (a gauge read from it) and the daemon's own
  // (the executors' pool, counted once the claim's COMMIT returned and its
  // jobs were handed over) agree once both have seen the claim: under a
  // sanitizer on a busy machine a scrape came between the two (0 busy).
  REQUIRE(WaitUntil([&] {
    e = Scrape(port);
    return e.Value("akadzed_jobs", {{"queue", "default"}, {"state", "running"}}) == 3 &&
           e.Value("akadzed_busy_slots", {{"queue", "default"}}) == 3;
  }));
  CHECK(Value(e, "akadzed_limit_running", {{"key", "tenant-1"}}) == 2);
  CHECK(Value(e, "akadzed_limit_max_running", {{"key", "tenant-1"}}) == 2);
  CHECK(Value(e, "akadzed_limit_keys_in_use") == 1);
  CHECK(Value(e, "akadzed_limit_keys_held") == 0);
  CHECK(e.Samples("akadzed_limit_held_jobs").empty());
  CHECK(Value(e, "akadzed_jobs", {{"queue", "other"}, {"state", "queued"}}) == 1);
  CHECK(Value(e, "akadzed_queue_ready_jobs", {{"queue", "other"}}) == 1);
  CHECK(Value(e, "akadzed_queue_lag_seconds", {{"queue", "other"}}) >= 90);
  CHECK(e.Value("akadzed_slots", {{"queue", "other"}}) == std::nullopt);  // not ours

  f.conn.exec("INSERT INTO akadze.queue_pauses (queue) VALUES ('other')");
  REQUIRE(WaitUntil([&] {
    e = Scrape(port);
    return e.Value("akadzed_queue_paused", {{"queue", "other"}}) == 1;
  }));
  f.dir.Write("go", "");
  REQUIRE(WaitUntil([&] {
    e = Scrape(port);
    return e.Value("akadzed_busy_slots", {{"queue", "default"}}) == 0 &&
           e.Value("akadzed_limit_keys_in_use") == 0;
  }));
  CHECK(e.Samples("akadzed_limit_running").empty());
  // A mistyped key (no row of its own, no '*' row): its jobs are held, and
  // the metrics say so.
  f.conn.exec("INSERT INTO akadze.jobs (task, limit_key) VALUES ('hold', 'tenant-l'),"
              " ('hold', 'tenant-l')");
  REQUIRE(WaitUntil([&] {
    e = Scrape(port);
    return e.Value("akadzed_limit_keys_held") == 1;
  }));
  CHECK(Value(e, "akadzed_limit_held_jobs", {{"key", "tenant-l"}}) == 2);
  daemon->Signal(SIGTERM);
  CHECK(daemon->Wait() == 0);
}

TEST_CASE("the daemon sweeps cancel-requested and expired queued jobs: logged and counted",
          "[daemon][metrics][sweep]") {
  MetricsFixture f;
  std::string ok = f.dir.Write("ok.sh", "#!/bin/sh\n", true);
  auto daemon = f.Start(f.Config(Shell("ok", ok), kListenAnyPort), f.db);
  int port = ListenerPort(*daemon);
  PromExposition before = Scrape(port);
  CHECK(Value(before, "akadzed_queued_jobs_swept_total", {{"reason", "expired"}}) == 0);
  CHECK(Value(before, "akadzed_queued_jobs_swept_total", {{"reason", "cancel_requested"}}) == 0);
  // Two jobs cancelled before they ran, then one that expires while it
  // waits for its run_at, and one that runs.
  f.conn.exec("INSERT INTO akadze.jobs (task, run_at, cancel_requested_at)"
              " SELECT 'ok', now() + interval '1 hour', now() FROM generate_series(1, 2)");
  CHECK(daemon->WaitForLog("swept cancel_requested=2 expired=0"));
  f.conn.exec("INSERT INTO akadze.jobs (task, run_at, expires_at) VALUES"
              " ('ok', now() + interval '1 hour', now() + interval '300 ms')");
  const std::int64_t runs = f.Enqueue("ok");
  REQUIRE(WaitUntil([&] {
    return test::JobsInState(f.conn, "cancelled") == 3 &&
           test::JobsInState(f.conn, "succeeded") == 1;
  }));
  CHECK(test::Count(f.conn, "SELECT count(*) FROM akadze.jobs WHERE state = 'cancelled' AND errors @>"
                " '[{\"error\": \"Expired\"}]'") == 1);
  CHECK(test::Count(f.conn, "SELECT count(*) FROM akadze.jobs WHERE id = " + std::to_string(runs) +
                " AND state = 'succeeded'") == 1);
  CHECK(daemon->WaitForLog("swept cancel_requested=0 expired=1"));
  // The lease keeper counts a sweep after it logs it: await the count too.
  PromExposition after;
  REQUIRE(WaitUntil([&] {
    after = Scrape(port);
    return after.Value("akadzed_queued_jobs_swept_total", {{"reason", "expired"}}).value_or(0) > 0;
  }));
  CHECK(Value(after, "akadzed_queued_jobs_swept_total", {{"reason", "expired"}}) == 1);
  CHECK(Value(after, "akadzed_queued_jobs_swept_total", {{"reason", "cancel_requested"}}) == 2);
}

TEST_CASE("/readyz answers 503 when the schema is behind or the database is gone; /metrics still answers",
          "[daemon][metrics]") {
  MetricsFixture f;
  // The daemon logs in as its own role, so that the test can lock it out.
  f.conn.exec("CREATE ROLE akadzed_metrics_test LOGIN SUPERUSER PASSWORD 'hunter2'");
  std::string url = f.db + " user=akadzed_metrics_test password=hunter2";
  std::string noop = f.dir.Write("noop.sh", "#!/bin/sh\n", true);
  auto daemon = f.Start(f.Config(Shell("noop", noop), kListenAnyPort), url);
  int port = ListenerPort(*daemon);
  REQUIRE(WaitUntil([&] { return HttpGet(port, "/readyz").status == 200; }));

  // The schema falls behind (as if this binary were newer than the database).
  std::string newest =
      std::string(f.conn.exec("SELECT max(version) FROM akadze.schema_migrations").text(0, 0));
  f.conn.exec("DELETE FROM akadze.schema_migrations WHERE version = $1", pg::Params().add(newest));
  HttpAnswer ready;
  REQUIRE(WaitUntil([&] { return (ready = HttpGet(port, "/readyz")).status == 503; }));
  CHECK(ready.body.find("the database schema is at migration") != std::string::npos);
  CHECK(ready.body.find("this akadzed needs " + newest) != std::string::npos);
  CHECK(Lines(ready.body).size() == 1);
  PromExposition e = Scrape(port);
  CHECK(Value(e, "akadzed_ready") == 0);
  CHECK(Value(e, "akadzed_database_up") == 1);
  CHECK(e.Find("akadzed_jobs") == nullptr);  // not read from a schema it does not know
  f.conn.exec("INSERT INTO akadze.schema_migrations (version) VALUES ($1)", pg::Params().add(newest));
  REQUIRE(WaitUntil([&] { return HttpGet(port, "/readyz").status == 200; }));

  // The database refuses the daemon's role.
  double errors_before = Value(Scrape(port), "akadzed_database_errors_total", {{"kind", "connection"}});
  f.conn.exec("ALTER ROLE akadzed_metrics_test NOLOGIN");
  f.conn.exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
              " WHERE usename = 'akadzed_metrics_test'");
  REQUIRE(WaitUntil([&] { return (ready = HttpGet(port, "/readyz")).status == 503; }));
  CHECK(ready.body.rfind("database: ", 0) == 0);
  CHECK(ready.body.find("hunter2") == std::string::npos);
  CHECK(Lines(ready.body).size() == 1);
  REQUIRE(WaitUntil([&] {
    e = Scrape(port);
    return e.Value("akadzed_database_up") == 0;
  }));
  CHECK(Value(e, "akadzed_ready") == 0);
  CHECK(Value(e, "akadzed_database_errors_total", {{"kind", "connection"}}) > errors_before);
  CHECK(Value(e, "akadzed_slots", {{"queue", "default"}}) == 4);  // in-process values still there
  CHECK(HttpGet(port, "/healthz").status == 200);  // the loops go on, failing

  f.conn.exec("ALTER ROLE akadzed_metrics_test LOGIN");
  REQUIRE(WaitUntil([&] { return HttpGet(port, "/readyz").status == 200; }));
  daemon->Signal(SIGTERM);
  CHECK(daemon->Wait() == 0);
}

TEST_CASE("/healthz answers 503 naming a claim loop that stopped making rounds",
          "[daemon][metrics]") {
  MetricsFixture f;
  std::string noop = f.dir.Write("noop.sh", "#!/bin/sh\n", true);
  // A 1 s watchdog makes the health grace 1 s (else 60 s).
  TempDir socket_dir;
  // A lock wait lasts database.stall_timeout at most: 30 s here, far past
  // the 1 s grace (the lease, with a 60 s ttl, is not in the way).
  std::string worker = kFastWorker;
  worker.replace(worker.find("heartbeat_ttl: 1500ms"), 21, "heartbeat_ttl: 60s");
  auto daemon = f.Start(f.Config(Shell("noop", noop), kListenAnyPort + "database: {stall_timeout: 30s}\n", worker),
                        f.db,
                        {{"NOTIFY_SOCKET", socket_dir.path() + "/nobody-listens"},
                         {"WATCHDOG_USEC", "1000000"}});
  int port = ListenerPort(*daemon);
  REQUIRE(WaitUntil([&] { return HttpGet(port, "/healthz").status == 200; }));
  // A claim starts by reading akadze.queue_pauses: hold it, and the claim
  // loop's next round waits.
  pg::Connection locker = pg::Connection::Open(f.db);
  locker.exec("BEGIN");
  locker.exec("LOCK TABLE akadze.queue_pauses IN ACCESS EXCLUSIVE MODE");
  HttpAnswer health;
  REQUIRE(WaitUntil([&] { return (health = HttpGet(port, "/healthz")).status == 503; }));
  CHECK(health.body.find("claim loop of queue default: no round for") != std::string::npos);
  CHECK(Lines(health.body).size() == 1);
  locker.exec("ROLLBACK");
  REQUIRE(WaitUntil([&] { return HttpGet(port, "/healthz").status == 200; }));
  daemon->Signal(SIGTERM);
  CHECK(daemon->Wait() == 0);
}

TEST_CASE("a taken metrics port: run exits 1 with one clear line; enabled: false starts anyway",
          "[daemon][metrics]") {
  MetricsFixture f;
  int taken = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(taken >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(taken, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(listen(taken, 1) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(getsockname(taken, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  std::string noop = f.dir.Write("noop.sh", "#!/bin/sh\n", true);

  std::string config = f.Config(Shell("noop", noop), "metrics:\n  listen: 127.0.0.1:" + port + "\n");
  CommandResult run = RunAkadzed({"run", "--config", config, "--database-url", f.db});
  INFO(run.err);
  CHECK(run.exit_code == 1);
  CHECK(run.err.find("metrics: cannot listen on 127.0.0.1:" + port +
                     ": Address already in use (set metrics.listen, or metrics.enabled: false)") !=
        std::string::npos);
  CHECK(Lines(run.err).size() == 1);
  CHECK(test::Count(f.conn, "SELECT count(*) FROM akadze.workers") == 0);  // failed before registering

  config = f.Config(Shell("noop", noop),
                    "metrics:\n  enabled: false\n  listen: 127.0.0.1:" + port + "\n");
  auto daemon = f.Start(config, f.db);
  REQUIRE(daemon->WaitForLog("started worker="));
  CHECK(daemon->Log().find("metrics_listening") == std::string::npos);
  daemon->Signal(SIGTERM);
  CHECK(daemon->Wait() == 0);
  close(taken);
}

}  // namespace
}  // namespace akadzed::test
