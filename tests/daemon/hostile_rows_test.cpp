// Rows with extreme and hostile values, written straight into the tables as
// an application (or an operator with psql) can: each gets its documented
// outcome (docs/reliability.md, "Rows that cannot be processed" and
// "Extreme values") and never stops the rows beside it, in the claim, the
// finish batch, the rescue, pruning and the admin reads. The first cases
// are the defects found on ed0ed4d, each named after what it was; the last
// runs the real daemon over a queue holding a hostile value in every column
// of every table it reads, next to ordinary companions.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <csignal>
#include <fstream>
#include <optional>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "store/job_admin.h"
#include "daemon/daemon_fixture.h"
#include "claim/claim_transaction.h"
#include "pg/connection.h"
#include "pg/pg_error.h"
#include "support/log_capture.h"
#include "support/test_cluster.h"
#include "store/job_finish.h"
#include "worker/pruner.h"
#include "store/worker_lease.h"

namespace akadzed {
namespace {

using nlohmann::json;

struct Db {
  pg::Connection conn = pg::Connection::Open(test::FreshDatabase());

  // A queued job of `queue`; `extra` sets more columns ("run_at = '-infinity'").
  std::int64_t Job(const std::string& extra = "", const std::string& queue = "default") {
    std::int64_t id = conn.exec("INSERT INTO akadze.jobs (task, queue) VALUES ('t', $1) RETURNING id",
                                pg::Params().add(queue))
                          .int64(0, 0);
    if (!extra.empty()) {
      conn.exec("UPDATE akadze.jobs SET " + extra + " WHERE id = $1", pg::Params().add(id));
    }
    return id;
  }
  json Row(std::int64_t id) {
    return json::parse(conn.exec("SELECT to_jsonb(j) FROM akadze.jobs j WHERE id = $1", pg::Params().add(id))
                           .text(0, 0));
  }
  std::string State(std::int64_t id) { return Row(id)["state"]; }
  ClaimResult Claim(int slots, std::optional<std::int64_t> aging_us = std::nullopt,
                    const std::string& queue = "default") {
    ClaimRequest request;
    request.queue = queue;
    request.slots = slots;
    request.mode = ClaimMode::kFair;
    request.aging_us = aging_us;
    return RunClaim(conn, request);
  }
};

std::vector<std::int64_t> Ids(const std::vector<ClaimedJob>& jobs) {
  std::vector<std::int64_t> ids;
  for (const ClaimedJob& job : jobs) ids.push_back(job.id);
  return ids;
}

bool Has(const std::vector<std::int64_t>& ids, std::int64_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

JobOutcome Outcome(OutcomeKind kind) {
  JobOutcome o;
  o.kind = kind;
  if (kind == OutcomeKind::kRetry || kind == OutcomeKind::kFail) {
    o.error = "E";
    o.message = "m";
  }
  if (kind == OutcomeKind::kSnooze) o.delay_us = 60'000'000;
  return o;
}

TEST_CASE("a queued job with run_at -infinity is claimed first and fails no claim", "[hostile]") {
  Db db;
  std::int64_t before = db.Job();
  std::int64_t minus = db.Job("run_at = '-infinity'");
  std::int64_t earliest = db.Job("run_at = '4714-11-24 00:00:00+00 BC'");
  std::int64_t parked = db.Job("run_at = 'infinity'");
  std::int64_t far = db.Job("run_at = '294276-12-31 23:59:59+00'");
  for (std::optional<std::int64_t> aging : {std::optional<std::int64_t>(), std::optional<std::int64_t>(1)}) {
    INFO("aging " << (aging ? "1us" : "off"));
    // One slot at a time: each window's cursor crosses the infinite rows.
    std::vector<std::int64_t> order;
    for (int i = 0; i < 3; ++i) {
      ClaimResult r = db.Claim(1, aging);
      REQUIRE(r.jobs.size() == 1);
      order.push_back(r.jobs[0].id);
    }
    CHECK(order == std::vector<std::int64_t>{minus, earliest, before});
    CHECK(db.Claim(5, aging).jobs.empty());  // infinity and 294276 AD are not ready
    CHECK(db.State(parked) == "queued");
    CHECK(db.State(far) == "queued");
    db.conn.exec("UPDATE akadze.jobs SET state = 'queued', worker_id = NULL WHERE state = 'running'");
  }
  // The admin reads show and age them without failing.
  auto queues = ListQueues(db.conn);
  REQUIRE(queues.size() == 1);
  CHECK(queues[0].ready == 3);
  CHECK(queues[0].lag_seconds > 1e11);  // aged from 4714 BC
  CHECK(ShowJob(db.conn, minus).run_at == "-infinity");
  CHECK(ShowJob(db.conn, parked).run_at == "infinity");
}

TEST_CASE("aging: a job parked at run_at infinity alone on its level fails no claim", "[hostile]") {
  Db db;
  db.Job("run_at = 'infinity', priority = 7");
  db.Job("run_at = '-infinity', priority = -32768");
  std::int64_t a = db.Job("priority = 1");
  std::int64_t b = db.Job("priority = 0");
  // The first row of its level at int8's minimum id: the level's read
  // starts just before it without overflowing.
  std::int64_t min_id = db.conn.exec("INSERT INTO akadze.jobs (id, task, priority, run_at) OVERRIDING SYSTEM VALUE"
                                     " VALUES (-9223372036854775808, 't', 3, now() - interval '1 hour') RETURNING id")
                            .int64(0, 0);
  ClaimResult r = db.Claim(5, 1'000'000);
  CHECK(r.jobs.size() == 4);  // the -infinity job has aged beyond every other
  CHECK(r.jobs[0].priority == -32768);
  CHECK(Has(Ids(r.jobs), a));
  CHECK(Has(Ids(r.jobs), b));
  CHECK(Has(Ids(r.jobs), min_id));
}

TEST_CASE("run_count 2147483647 on a queued job: failed as Unprocessable, the others claimed; attempt "
          "2147483647 runs", "[hostile]") {
  Db db;
  std::int64_t companion = db.Job();
  std::int64_t at_max = db.Job("run_count = 2147483647, limit_key = 'k'");
  // Its attempts spent by the numbers, but the claim writes no attempt: it
  // runs, as akadze's worker runs it (the finish decides, saturating).
  std::int64_t attempt_max = db.Job("attempt = 2147483647, max_attempts = 3");
  std::int64_t next = db.Job();
  db.conn.exec("INSERT INTO akadze.limits (key, max_running, max_starts, starts_window)"
               " VALUES ('k', 1, 5, '1 hour')");
  ClaimResult r = db.Claim(4);
  CHECK(Ids(r.jobs) == std::vector<std::int64_t>{companion, attempt_max, next});
  REQUIRE(r.unprocessable.size() == 1);
  json row = db.Row(at_max);
  CHECK(row["state"] == "failed");
  CHECK(row["errors"].back()["error"] == "Unprocessable");
  CHECK(row["errors"].back()["message"] == "run_count is at its maximum (2147483647): the job cannot run again");
  CHECK_FALSE(row["finished_at"].is_null());
  CHECK(row["run_count"] == 2147483647);  // counters untouched
  CHECK(db.Row(attempt_max)["state"] == "running");
  REQUIRE(r.jobs.size() == 3);
  CHECK(r.jobs[1].attempt == 2147483647);
  CHECK(r.jobs[1].run_attempt() == 2147483647);  // what its handler is told: no overflow
  // It started nothing: no start mark for its key, no slot held.
  CHECK(db.conn.exec("SELECT count(*) FROM akadze.limit_starts").int64(0, 0) == 0);
  // One below the maximum still runs, once.
  std::int64_t last = db.Job("run_count = 2147483646");
  ClaimResult again = db.Claim(1);
  REQUIRE(again.jobs.size() == 1);
  CHECK(again.jobs[0].id == last);
  CHECK(again.jobs[0].run_count == 2147483647);
}

TEST_CASE("attempt 2147483647 on a job whose run fails: the batch records it and its companions",
          "[hostile]") {
  Db db;
  std::string worker = RandomUuid();
  auto running = [&](const std::string& extra) {
    return db.Job("state = 'running', run_count = 1, started_at = now(), worker_id = '" + worker + "'" +
                  (extra.empty() ? "" : ", " + extra));
  };
  std::int64_t retried_max = running("attempt = 2147483647, max_attempts = 2147483647");
  std::int64_t failed_max = running("attempt = 2147483647, max_attempts = 2147483647");
  std::int64_t snoozed_max = running("snoozes = 2147483647");
  std::int64_t odd_errors = running("errors = '{\"not\": \"an array\"}'");
  std::int64_t companion = running("");
  std::vector<FinishRequest> batch = {{retried_max, 1, Outcome(OutcomeKind::kRetry)},
                                      {failed_max, 1, Outcome(OutcomeKind::kFail)},
                                      {snoozed_max, 1, Outcome(OutcomeKind::kSnooze)},
                                      {odd_errors, 1, Outcome(OutcomeKind::kRetry)},
                                      {companion, 1, Outcome(OutcomeKind::kSuccess)}};
  auto results = FinishJobs(db.conn, worker, batch);
  for (const FinishResult& r : results) CHECK(r.applied);
  CHECK(db.State(retried_max) == "failed");  // attempts can't grow: spent
  CHECK(db.Row(retried_max)["attempt"] == 2147483647);
  CHECK(results[0].attempt == 2147483647);
  CHECK(db.State(failed_max) == "failed");
  CHECK(db.State(snoozed_max) == "queued");
  CHECK(db.Row(snoozed_max)["snoozes"] == 2147483647);
  json errors = db.Row(odd_errors)["errors"];
  REQUIRE(errors.is_array());
  CHECK(errors.back()["error"] == "E");
  CHECK(db.State(companion) == "succeeded");
}

TEST_CASE("a dead worker's job at attempt 2147483647: the rescue takes it and the others", "[hostile]") {
  Db db;
  WorkerIdentity dead{RandomUuid(), "h", 1, {"default"}};
  WorkerIdentity future{RandomUuid(), "h", 2, {"default"}};
  RegisterWorker(db.conn, dead);
  RegisterWorker(db.conn, future);
  db.conn.exec("UPDATE akadze.workers SET heartbeat_at = now() - interval '1 hour' WHERE id = $1::uuid",
               pg::Params().add(dead.id));
  db.conn.exec("UPDATE akadze.workers SET heartbeat_at = 'infinity' WHERE id = $1::uuid",
               pg::Params().add(future.id));
  auto running = [&](const std::string& worker, const std::string& extra) {
    return db.Job("state = 'running', run_count = 1, " + worker + (extra.empty() ? "" : ", " + extra));
  };
  const std::string of_dead = "worker_id = '" + dead.id + "', started_at = now()";
  std::int64_t at_max = running(of_dead, "attempt = 2147483647, max_attempts = 2147483647");
  std::int64_t companion = running(of_dead, "");
  // Running rows an application inserted: no worker at all, a worker that
  // never existed with a start in the future, no start time.
  std::int64_t no_worker = running("worker_id = NULL", "started_at = now() - interval '1 hour'");
  std::int64_t future_start = running("worker_id = gen_random_uuid()", "started_at = 'infinity'");
  std::int64_t no_start = running("worker_id = gen_random_uuid()", "started_at = NULL");
  std::int64_t of_future = running("worker_id = '" + future.id + "'", "started_at = now()");

  auto rescued = RescueLostJobs(db.conn, 1'000'000);
  std::vector<std::int64_t> ids;
  for (const RescuedJob& r : rescued) ids.push_back(r.id);
  CHECK(ids == std::vector<std::int64_t>{at_max, companion, no_worker, future_start, no_start});
  CHECK(db.State(at_max) == "failed");
  CHECK(db.Row(at_max)["attempt"] == 2147483647);
  CHECK(db.Row(at_max)["errors"].back()["error"] == "WorkerLost");
  CHECK(db.State(companion) == "queued");
  // The heartbeat in the future was brought back to now(): that worker is
  // dead one ttl later, unless it heartbeats.
  CHECK(db.State(of_future) == "running");
  CHECK(db.conn.exec("SELECT heartbeat_at <= now() FROM akadze.workers WHERE id = $1::uuid",
                     pg::Params().add(future.id)).boolean(0, 0));
  db.conn.exec("UPDATE akadze.workers SET heartbeat_at = now() - interval '1 hour' WHERE id = $1::uuid",
               pg::Params().add(future.id));
  CHECK(RescueLostJobs(db.conn, 1'000'000).size() == 1);
  CHECK(db.State(of_future) == "queued");
}

TEST_CASE("a row no statement can change is isolated: finish and rescue go on for the others",
          "[hostile]") {
  // An application's own trigger that refuses every change of one job: the
  // batch fails, each row alone, then the job is given up by the finisher
  // and skipped by the rescue, while its companions are recorded.
  Db db;
  std::string worker = RandomUuid();
  auto running = [&]() {
    return db.Job("state = 'running', run_count = 1, started_at = now() - interval '1 hour', worker_id = '" +
                  worker + "'");
  };
  std::int64_t stuck = running();
  std::int64_t companion = running();
  db.conn.exec(
      "CREATE FUNCTION public.refuse_one() RETURNS trigger LANGUAGE plpgsql AS $$"
      " BEGIN IF OLD.id = " + std::to_string(stuck) + " THEN RAISE EXCEPTION 'refused by the app'; END IF;"
      " RETURN NEW; END $$");
  db.conn.exec("CREATE TRIGGER refuse_one BEFORE UPDATE ON akadze.jobs FOR EACH ROW"
               " EXECUTE FUNCTION public.refuse_one()");
  CHECK_THROWS_AS(FinishJobs(db.conn, worker, {{stuck, 1, Outcome(OutcomeKind::kSuccess)},
                                               {companion, 1, Outcome(OutcomeKind::kSuccess)}}),
                  pg::SqlError);
  std::vector<std::int64_t> skipped;
  auto rescued = RescueLostJobs(db.conn, 1'000'000, nullptr, &skipped);
  REQUIRE(rescued.size() == 1);
  CHECK(rescued[0].id == companion);
  CHECK(skipped == std::vector<std::int64_t>{stuck});
  CHECK(db.State(stuck) == "running");
}

TEST_CASE("a start window past 100 years is refused, a mark far in the future is purged", "[hostile]") {
  Db db;
  CHECK_THROWS_AS(db.conn.exec("INSERT INTO akadze.limits (key, max_starts, starts_window)"
                               " VALUES ('k', 1, '101 years')"),
                  pg::SqlError);
  // "27 years" to interval comparison, out of range for now() - window.
  CHECK_THROWS_AS(db.conn.exec("INSERT INTO akadze.limits (key, max_starts, starts_window)"
                               " VALUES ('k', 1, '70000000 months -2099990000 days')"),
                  pg::SqlError);
  db.conn.exec("INSERT INTO akadze.limits (key, max_starts, starts_window) VALUES ('k', 1, '100 years')");
  db.conn.exec("INSERT INTO akadze.limits (key, max_starts, starts_window) VALUES ('f', 1, '1 hour')");
  // A mark at 'infinity' would count as a start of 'f' for ever.
  db.conn.exec("INSERT INTO akadze.limit_starts (key, started_at) VALUES ('f', 'infinity'),"
               " ('f', '-infinity'), ('k', '-infinity'), ('nokey', 'infinity')");
  std::int64_t k = db.Job("limit_key = 'k'");
  std::int64_t f = db.Job("limit_key = 'f'");
  ClaimResult r = db.Claim(4);
  CHECK(Has(Ids(r.jobs), k));
  CHECK(Has(Ids(r.jobs), f));
  PruneBatch(db.conn, 3600'000'000, 100);
  CHECK(db.conn.exec("SELECT count(*) FROM akadze.limit_starts WHERE NOT isfinite(started_at)").int64(0, 0) == 0);
  CHECK(ListLimitUse(db.conn).size() >= 2);
}

// Captures the default logger (LogCapture) and fd 2, into a file, for the
// test's lifetime.
class CapturedLogs {
 public:
  CapturedLogs() {
    std::fflush(stderr);
    saved_stderr_ = dup(2);
    int fd = open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
  }
  ~CapturedLogs() {
    std::fflush(stderr);
    dup2(saved_stderr_, 2);
    close(saved_stderr_);
    std::remove(path_.c_str());
  }
  std::string logs() const { return logger_.text(); }
  std::string stderr_text() const {
    std::fflush(stderr);
    std::ifstream in(path_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  test::LogCapture logger_;
  std::string path_ = "/tmp/akadzed-stderr-" + std::to_string(getpid());
  int saved_stderr_ = -1;
};

TEST_CASE("libpq notices go through the logger, never raw to stderr", "[hostile]") {
  Db db;
  CapturedLogs captured;
  db.conn.exec("DO $$ BEGIN RAISE WARNING 'password=hunter2 was here'; RAISE NOTICE 'just so'; END $$");
  CHECK(captured.stderr_text().empty());
  const std::string logs = captured.logs();
  CHECK(logs.find("pg_notice severity=warning sqlstate=01000 | password=") != std::string::npos);
  CHECK(logs.find("hunter2") == std::string::npos);
  CHECK(logs.find("pg_notice severity=notice sqlstate=00000 | just so") != std::string::npos);
}

}  // namespace
}  // namespace akadzed

// ---------------------------------------------------------------- the daemon

namespace akadzed::test {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr std::int64_t kMaxInt = 2147483647;

TEST_CASE("the daemon over hostile values in every column: each row gets its outcome, the "
          "companions finish and the daemon keeps claiming",
          "[hostile][daemon]") {
  HandlerTestFixture f;
  const std::string go = f.dir.path() + "/go";
  auto script = [&](const std::string& name, const std::string& body) {
    return f.dir.Write(name, "#!/bin/sh\n" + body + "\n", true);
  };
  const std::string handlers =
      ShellHandlerYaml("ok", script("ok.sh", "exit 0")) +
      ShellHandlerYaml("fail", script("fail.sh", "echo '{\"outcome\": \"fail\", \"error\": \"E\", \"message\": \"m\"}' >&3")) +
      ShellHandlerYaml("snooze", script("snooze.sh", "echo '{\"outcome\": \"snooze\", \"delay\": \"1h\"}' >&3")) +
      // Holds its job running until the test creates `go`, then fails it.
      ShellHandlerYaml("block", script("block.sh", "while [ ! -e " + go + " ]; do sleep 0.02; done\n"
                                                   "echo '{\"outcome\": \"fail\", \"error\": \"E\", \"message\": \"m\"}' >&3"));
  const std::string config = f.dir.Write(
      "akadzed.yaml", std::string(kFastWorkerConfig) +
                          "queues:\n"
                          "  - {name: default, slots: 8, mode: fair}\n"
                          "  - {name: aged, slots: 2, aging: 1s}\n"
                          "  - {name: paused, slots: 2}\n"
                          "  - {name: blocked, slots: 4}\n"
                          "handlers:\n" + handlers +
                          "logging:\n  level: debug\n  format: logfmt\nmetrics: {listen: 127.0.0.1:0}\n");
  pg::Connection& c = f.conn;
  auto job = [&](const std::string& task, const std::string& set = "", const std::string& queue = "default") {
    std::int64_t id = c.exec("INSERT INTO akadze.jobs (task, queue) VALUES ($1, $2) RETURNING id",
                             pg::Params().add(task).add(queue))
                          .int64(0, 0);
    if (!set.empty()) c.exec("UPDATE akadze.jobs SET " + set + " WHERE id = $1", pg::Params().add(id));
    return id;
  };
  const std::string dead = "11111111-1111-4111-8111-111111111111";
  const std::string future = "22222222-2222-4222-8222-222222222222";
  c.exec("INSERT INTO akadze.workers (id, hostname, pid, queues, started_at, heartbeat_at) VALUES"
         " ('" + dead + "', '', -1, '{}', '-infinity', now() - interval '1 hour'),"
         " ('" + future + "', 'h', 2147483647, '{default}', 'infinity', 'infinity'),"
         " ('33333333-3333-4333-8333-333333333333', 'idle', 0, '{}', now(), '-infinity')");
  c.exec("INSERT INTO akadze.limits (key, max_running, max_starts, starts_window) VALUES"
         " ('q;\"*', 1, NULL, NULL), ('k', 2, 5, '100 years')");
  c.exec("INSERT INTO akadze.limit_starts (key, started_at) VALUES ('k', 'infinity'), ('k', '-infinity'),"
         " ('unknown', 'infinity')");
  c.exec("INSERT INTO akadze.queue_pauses (queue, paused_at) VALUES ('paused', '-infinity')");

  // queued rows: the value, and what becomes of the job.
  struct Case {
    std::string what;
    std::int64_t id;
    std::string state;
  };
  std::vector<Case> cases = {
      {"run_at -infinity", job("ok", "run_at = '-infinity'"), "succeeded"},
      {"run_at infinity", job("ok", "run_at = 'infinity'"), "queued"},
      {"run_at 294276 AD", job("ok", "run_at = '294276-12-31 23:59:59.999999+00'"), "queued"},
      {"run_at 4714 BC", job("ok", "run_at = '4714-11-24 00:00:00+00 BC'"), "succeeded"},
      {"expires_at -infinity", job("ok", "expires_at = '-infinity'"), "cancelled"},
      {"expires_at infinity", job("ok", "expires_at = 'infinity'"), "succeeded"},
      {"run_count max", job("ok", "run_count = 2147483647"), "failed"},
      {"attempt max", job("ok", "attempt = 2147483647, max_attempts = 3"), "succeeded"},
      {"attempt max-1, fails", job("fail", "attempt = 2147483646, max_attempts = 2147483647"), "failed"},
      {"max_attempts max", job("ok", "max_attempts = 2147483647"), "succeeded"},
      {"snoozes max", job("snooze", "snoozes = 2147483647"), "queued"},
      {"priority min", job("ok", "priority = -32768"), "succeeded"},
      {"priority max", job("ok", "priority = 32767"), "succeeded"},
      {"task empty", job("", "max_attempts = 1"), "failed"},
      {"limit_key empty, no limits row", job("ok", "limit_key = ''"), "queued"},
      {"limit_key with quotes", job("ok", "limit_key = 'q;\"*'"), "succeeded"},
      {"limit_key k, marks at infinity", job("ok", "limit_key = 'k'"), "succeeded"},
      {"errors a scalar", job("fail", "errors = '\"scalar\"'"), "failed"},
      {"errors null", job("ok", "errors = 'null'"), "succeeded"},
      {"args an array", job("ok", "args = '[1, 2]'"), "succeeded"},
      {"args null", job("ok", "args = 'null'"), "succeeded"},
      {"meta an array", job("ok", "meta = '[]'"), "succeeded"},
      {"cancel requested at -infinity", job("ok", "cancel_requested_at = '-infinity'"), "cancelled"},
      {"times infinite", job("ok", "created_at = '-infinity', started_at = 'infinity', finished_at = '-infinity'"),
       "succeeded"},
      {"worker_id set while queued", job("ok", "worker_id = '" + future + "'"), "succeeded"},
      {"unique_key empty", job("ok", "unique_key = ''"), "succeeded"},
      {"result set while queued", job("ok", "result = '{\"x\": 1}'"), "succeeded"},
      {"aging: parked at infinity, alone on its level", job("ok", "run_at = 'infinity', priority = 9", "aged"),
       "queued"},
      {"aging: run_at -infinity", job("ok", "run_at = '-infinity', priority = -5", "aged"), "succeeded"},
      {"aging: companion", job("ok", "", "aged"), "succeeded"},
      {"paused at -infinity", job("ok", "", "paused"), "queued"},
      // running rows an application inserted
      {"running, no worker", job("ok", "state = 'running', started_at = now() - interval '1 hour'"), "succeeded"},
      {"running, dead worker, attempt max",
       job("ok", "state = 'running', worker_id = '" + dead + "', attempt = 2147483647, max_attempts = 2147483647"),
       "failed"},
      {"running, dead worker", job("ok", "state = 'running', worker_id = '" + dead + "'"), "succeeded"},
      {"running, worker heartbeat in the future", job("ok", "state = 'running', worker_id = '" + future + "'"),
       "succeeded"},
      {"running, no worker row, started at infinity",
       job("ok", "state = 'running', worker_id = gen_random_uuid(), started_at = 'infinity'"), "succeeded"},
  };
  // An id at int8's minimum.
  cases.push_back({"id int8 min",
                   c.exec("INSERT INTO akadze.jobs (id, task) OVERRIDING SYSTEM VALUE"
                          " VALUES (-9223372036854775808, 'ok') RETURNING id").int64(0, 0),
                   "succeeded"});
  // Companions in every queue the hostile rows share, and a finish batch
  // with an attempt an application set to the maximum while the job ran,
  // and a row no statement can change (an application's trigger).
  std::vector<std::int64_t> companions;
  for (int i = 0; i < 10; ++i) companions.push_back(job("ok"));
  const std::int64_t at_max_running = job("block", "", "blocked");
  const std::int64_t batch_companion = job("block", "", "blocked");
  const std::int64_t refused = job("block", "", "blocked");

  auto daemon = f.Start(config);
  REQUIRE(f.WaitState(at_max_running, "running"));
  REQUIRE(f.WaitState(batch_companion, "running"));
  REQUIRE(f.WaitState(refused, "running"));
  c.exec("UPDATE akadze.jobs SET attempt = 2147483647, max_attempts = 2147483647 WHERE id = $1",
         pg::Params().add(at_max_running));
  c.exec("CREATE FUNCTION public.refuse_one() RETURNS trigger LANGUAGE plpgsql AS $$"
         " BEGIN IF OLD.id = " + std::to_string(refused) + " THEN RAISE EXCEPTION 'refused by the app'; END IF;"
         " RETURN NEW; END $$");
  c.exec("CREATE TRIGGER refuse_one BEFORE UPDATE ON akadze.jobs FOR EACH ROW EXECUTE FUNCTION public.refuse_one()");
  f.dir.Write("go", "");

  for (const Case& k : cases) {
    if (k.state == "queued") continue;
    INFO(k.what << " (job " << k.id << ")\n" << daemon->Log());
    CHECK(f.WaitState(k.id, k.state));
  }
  for (std::int64_t id : companions) CHECK(f.WaitState(id, "succeeded"));
  REQUIRE(f.WaitState(at_max_running, "failed"));
  CHECK(f.Row(at_max_running)["attempt"] == kMaxInt);
  REQUIRE(f.WaitState(batch_companion, "failed"));
  CHECK(f.Row(batch_companion)["attempt"] == 1);
  // The refused row: given up by the finisher, its slot freed, while
  // everything above went through; after heartbeat_ttl the lease keeper
  // finds it running here in the database only, and cannot release it
  // either (named once).
  CHECK(daemon->WaitForLog("event=finish_unprocessable job=" + std::to_string(refused)));
  CHECK(daemon->WaitForLog("event=orphan_release_failed job=" + std::to_string(refused)));
  CHECK(f.State(refused) == "running");
  c.exec("DROP TRIGGER refuse_one ON akadze.jobs");
  // Released (no attempt spent) once the application's trigger is gone, and
  // run again: its handler fails it.
  CHECK(daemon->WaitForLog("event=orphan_released job=" + std::to_string(refused)));
  CHECK(f.WaitState(refused, "failed"));
  CHECK(f.Row(refused)["run_count"] == 2);

  for (const Case& k : cases) {
    INFO(k.what << " (job " << k.id << ")");
    CHECK(f.State(k.id) == k.state);
  }
  auto row_of = [&](const std::string& what) {
    for (const Case& k : cases) {
      if (k.what == what) return f.Row(k.id);
    }
    FAIL("no case " << what);
    return json();
  };
  CHECK(row_of("run_count max")["errors"].back()["error"] == "Unprocessable");
  CHECK(row_of("run_count max")["run_count"] == kMaxInt);
  // Claimed and finished once, the finish reading its infinite run_at.
  for (const std::string what : {"run_at -infinity", "run_at 4714 BC", "id int8 min", "times infinite"}) {
    json row = row_of(what);
    INFO(what << ": " << row.dump());
    CHECK(row["run_count"] == 1);
    CHECK(row["errors"].empty());
  }
  CHECK(row_of("attempt max")["attempt"] == kMaxInt);
  CHECK(row_of("attempt max-1, fails")["attempt"] == kMaxInt);
  CHECK(row_of("snoozes max")["snoozes"] == kMaxInt);
  CHECK(row_of("task empty")["errors"].back()["error"] == "UnknownTask");
  CHECK(row_of("errors a scalar")["errors"].size() == 2);
  CHECK(row_of("running, dead worker, attempt max")["errors"].back()["error"] == "WorkerLost");
  // Logged by the claim loop after the claim that failed them committed.
  CHECK(daemon->WaitForLog("event=unprocessable job="));
  // The dead and idle worker rows are gone; the one in the future was reset.
  CHECK(f.Count("SELECT count(*) FROM akadze.workers WHERE NOT isfinite(heartbeat_at) OR hostname IN ('', 'idle')") == 0);

  // Still claiming; the admin reads work over all of it.
  const std::int64_t after = job("ok");
  CHECK(f.WaitState(after, "succeeded"));
  for (const std::vector<std::string>& args : {std::vector<std::string>{"status"},
                                              std::vector<std::string>{"status", "--json"},
                                              std::vector<std::string>{"jobs", "list", "--state", "queued"},
                                              std::vector<std::string>{"workers", "list"},
                                              std::vector<std::string>{"limits", "list"},
                                              std::vector<std::string>{"queues", "list"}}) {
    std::vector<std::string> full = args;
    full.insert(full.end(), {"--database-url", f.db});
    CommandResult r = RunAkadzed(full);
    INFO(args.front() << ": " << r.err);
    CHECK(r.exit_code == 0);
  }
  daemon->Signal(SIGTERM);
  CHECK(daemon->Wait() == 0);
  // `akadzed claim` exited 1 over a ready -infinity job: every claim failed.
  const std::int64_t late = job("ok", "run_at = '-infinity'");
  CommandResult claim =
      RunAkadzed({"claim", "--queue", "default", "--slots", "2", "--dry-run", "--database-url", f.db});
  INFO(claim.err);
  CHECK(claim.exit_code == 0);
  CHECK(claim.out.find("id=" + std::to_string(late) + " ") != std::string::npos);
  // One event per line: nothing reached the log raw (libpq notices included).
  for (const std::string& line : Lines(daemon->Log())) {
    INFO(line);
    CHECK(line.rfind("ts=", 0) == 0);
  }
}

}  // namespace
}  // namespace akadzed::test
