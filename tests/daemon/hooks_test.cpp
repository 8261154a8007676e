// Transition hooks (hooks/transition_hooks.h) against a real PostgreSQL:
// SQL and plugin hooks write outbox rows that commit with the transition, and
// a failing hook rolls the transition back (the job stays where it was)
// until it succeeds.
#include <catch2/catch.hpp>

#include <signal.h>

#include <memory>
#include <optional>

#include "config/config.h"
#include "hooks/transition_hooks.h"
#include "pg/connection.h"
#include "pg/transaction.h"
#include "support/daemon_process.h"
#include "support/test_cluster.h"
#include "store/job_finish.h"
#include "store/worker_lease.h"

namespace akadzed {
namespace {

using namespace std::chrono_literals;


constexpr const char* kOutboxTable =
    "CREATE TABLE outbox (seq bigserial PRIMARY KEY, job_id bigint NOT NULL, task text,"
    " from_state text NOT NULL, to_state text NOT NULL, attempt int, result jsonb,"
    " source text NOT NULL DEFAULT 'sql');"
    // The gate a failing hook consults: closed, the hook divides by zero.
    "CREATE TABLE gate (open boolean NOT NULL); INSERT INTO gate VALUES (false);";

constexpr const char* kOutboxSql =
    "INSERT INTO outbox (job_id, task, from_state, to_state, attempt, result)"
    " VALUES ($1, $3, $4, $5, $6, $14)";

constexpr const char* kGateSql = "SELECT 1 / (SELECT open::int FROM gate)";

// The outbox as "from->to" lines in order, for one job.
std::vector<std::string> Transitions(pg::Connection& conn, std::int64_t id,
                                     const std::string& source = "sql") {
  pg::Result r = conn.exec(
      "SELECT from_state || '->' || to_state FROM outbox WHERE job_id = $1 AND source = $2 ORDER BY seq",
      pg::Params().add(id).add(source));
  std::vector<std::string> out;
  for (int i = 0; i < r.rows(); ++i) out.emplace_back(r.text(i, 0));
  return out;
}

HookConfig SqlHook(const std::string& name, const std::string& sql,
                   std::vector<JobState> from = {}, std::vector<JobState> to = {}) {
  HookConfig h;
  h.name = name;
  h.sql = sql;
  h.from = std::move(from);
  h.to = std::move(to);
  return h;
}

// A handler's outcome: `error` for a retry or a failure, `result` for a success.
JobOutcome Outcome(OutcomeKind kind, std::string error = "",
                   std::optional<std::string> result = std::nullopt) {
  JobOutcome o;
  o.kind = kind;
  o.error = std::move(error);
  o.result_json = std::move(result);
  return o;
}

// A running job claimed by `worker`, with run_count 1.
std::int64_t RunningJob(pg::Connection& conn, const std::string& worker, const std::string& task = "t") {
  return conn.exec("INSERT INTO akadze.jobs (task, state, worker_id, run_count, started_at)"
                   " VALUES ($1, 'running', $2::uuid, 1, now()) RETURNING id",
                   pg::Params().add(task).add(worker)).int64(0, 0);
}

TEST_CASE("a finish's hook writes its outbox row in the finish's transaction", "[hooks]") {
  pg::Connection conn = pg::Connection::Open(test::FreshDatabase());
  conn.exec(kOutboxTable);
  const std::string worker = "6f1c1a4e-0000-4000-8000-000000000001";
  TransitionHooks hooks;
  hooks.Add(SqlHook("outbox", kOutboxSql));
  // Uses one parameter of fifteen: the others are typed all the same.
  hooks.Add(SqlHook("only-to-failed", "INSERT INTO outbox (job_id, from_state, to_state, source)"
                                      " VALUES ($1, 'x', 'y', 'failed-only')", {}, {JobState::kFailed}));
  const std::int64_t ok = RunningJob(conn, worker);
  const std::int64_t bad = RunningJob(conn, worker);
  const JobOutcome success = Outcome(OutcomeKind::kSuccess, "", R"({"n": 1})");
  const JobOutcome fail = Outcome(OutcomeKind::kFail, "Boom");
  auto results = FinishJobs(conn, worker, {{ok, 1, success}, {bad, 1, fail}}, &hooks);
  CHECK(results[0].state == JobState::kSucceeded);
  CHECK(results[1].state == JobState::kFailed);
  CHECK(Transitions(conn, ok) == std::vector<std::string>{"running->succeeded"});
  CHECK(Transitions(conn, bad) == std::vector<std::string>{"running->failed"});
  CHECK(conn.exec("SELECT result::text FROM outbox WHERE job_id = $1", pg::Params().add(ok))
            .text(0, 0) == R"({"n": 1})");
  CHECK(test::Count(conn, "SELECT count(*) FROM outbox WHERE source = 'failed-only' AND job_id = " +
                        std::to_string(bad)) == 1);
  CHECK(test::Count(conn, "SELECT count(*) FROM outbox WHERE source = 'failed-only'") == 1);
}

TEST_CASE("a hook sees a job its queue does not keep succeed; then it is deleted",
          "[hooks][keep_succeeded]") {
  pg::Connection conn = pg::Connection::Open(test::FreshDatabase());
  conn.exec(kOutboxTable);
  const std::string worker = "6f1c1a4e-0000-4000-8000-000000000003";
  TransitionHooks hooks;
  hooks.Add(SqlHook("outbox", kOutboxSql));
  const std::int64_t gone = RunningJob(conn, worker);
  const std::int64_t kept = RunningJob(conn, worker);
  const std::int64_t retried = RunningJob(conn, worker);
  const std::int64_t stale = RunningJob(conn, worker);
  const JobOutcome success = Outcome(OutcomeKind::kSuccess, "", R"({"n": 2})");
  const JobOutcome retry = Outcome(OutcomeKind::kRetry, "Again");
  auto results = FinishJobs(conn, worker,
                            {{gone, 1, success, false},
                             {kept, 1, success, true},
                             {retried, 1, retry, false},
                             {stale, 3, success, false}},
                            &hooks);
  CHECK(results[0].state == JobState::kSucceeded);
  CHECK(results[1].state == JobState::kSucceeded);
  CHECK(results[2].state == JobState::kQueued);
  CHECK_FALSE(results[3].applied);
  CHECK(Transitions(conn, kept) == std::vector<std::string>{"running->succeeded"});
  CHECK(Transitions(conn, gone) == std::vector<std::string>{"running->succeeded"});
  CHECK(conn.exec("SELECT result::text FROM outbox WHERE job_id = $1", pg::Params().add(gone))
            .text(0, 0) == R"({"n": 2})");
  CHECK(test::Count(conn, "SELECT count(*) FROM akadze.jobs WHERE id = " + std::to_string(gone)) == 0);
  CHECK(Transitions(conn, retried) == std::vector<std::string>{"running->queued"});
  CHECK(test::Count(conn, "SELECT count(*) FROM akadze.jobs WHERE id IN (" + std::to_string(kept) + ", " +
                              std::to_string(retried) + ", " + std::to_string(stale) + ")") == 3);
}

TEST_CASE("a failing hook rolls the finish back: the job stays running", "[hooks]") {
  pg::Connection conn = pg::Connection::Open(test::FreshDatabase());
  conn.exec(kOutboxTable);
  const std::string worker = "6f1c1a4e-0000-4000-8000-000000000002";
  TransitionHooks hooks;
  hooks.Add(SqlHook("outbox", kOutboxSql));
  hooks.Add(SqlHook("gate", kGateSql, {JobState::kRunning}, {JobState::kSucceeded}));
  const std::int64_t id = RunningJob(conn, worker);
  const JobOutcome success = Outcome(OutcomeKind::kSuccess);
  try {
    FinishJobs(conn, worker, {{id, 1, success}}, &hooks);
    FAIL("the gate hook should have refused");
  } catch (const HookError& e) {
    CHECK(e.hook() == "gate");
    CHECK(e.job_id() == id);
    CHECK(e.transition() == "running->succeeded");
    CHECK(std::string(e.what()).find("division by zero") != std::string::npos);
  }
  // Nothing of it stayed: neither the state change nor the first hook's row.
  CHECK(conn.exec("SELECT state FROM akadze.jobs WHERE id = $1", pg::Params().add(id)).text(0, 0) ==
        "running");
  CHECK(test::Count(conn, "SELECT count(*) FROM outbox") == 0);
  CHECK(conn.exec("SELECT 1").rows() == 1);  // the connection is usable again

  conn.exec("UPDATE gate SET open = true");
  CHECK(FinishJobs(conn, worker, {{id, 1, success}}, &hooks)[0].state == JobState::kSucceeded);
  CHECK(Transitions(conn, id) == std::vector<std::string>{"running->succeeded"});
}

TEST_CASE("the rescue runs hooks; a job a hook refuses stays, the others are rescued",
          "[hooks]") {
  pg::Connection conn = pg::Connection::Open(test::FreshDatabase());
  conn.exec(kOutboxTable);
  const std::string dead = "6f1c1a4e-0000-4000-8000-000000000003";
  const std::int64_t kept = RunningJob(conn, dead, "refused");
  const std::int64_t rescued = RunningJob(conn, dead, "fine");
  conn.exec("UPDATE akadze.jobs SET started_at = now() - interval '1 hour'");
  TransitionHooks hooks;
  hooks.Add(SqlHook("outbox", kOutboxSql));
  hooks.Add(SqlHook("refuse", "SELECT CASE WHEN $3 = 'refused' THEN 1 / 0 ELSE 1 END"));
  auto result = RescueLostJobs(conn, 1'000'000, &hooks);
  REQUIRE(result.size() == 1);
  CHECK(result[0].id == rescued);
  CHECK(Transitions(conn, rescued) == std::vector<std::string>{"running->queued"});
  CHECK(Transitions(conn, kept).empty());
  CHECK(conn.exec("SELECT state FROM akadze.jobs WHERE id = $1", pg::Params().add(kept)).text(0, 0) ==
        "running");
}

// The daemon with hooks, end to end.
struct HookedDaemon {
  std::string db = test::FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  test::TempDir dir;
  std::unique_ptr<test::DaemonProcess> daemon;

  HookedDaemon() { conn.exec(kOutboxTable); }

  void Start(const std::string& hooks_yaml, const std::string& handlers_yaml) {
    std::string config = dir.Write(
        "akadzed.yaml",
        "worker: {heartbeat_interval: 200ms, heartbeat_ttl: 1500ms, poll_interval: 100ms,"
        " shutdown_timeout: 2s}\n"
        "queues:\n  - {name: default, slots: 2}\n"
        "handlers:\n" + handlers_yaml + "hooks:\n" + hooks_yaml +
        "metrics: {enabled: false}\n"
        "logging: {level: info, format: logfmt}\n");
    test::EnvChanges env;
    env.emplace("AKADZED_PLUGIN_PATH", std::string(AKADZED_TEST_PLUGIN_DIR));
    daemon = std::make_unique<test::DaemonProcess>(
        std::vector<std::string>{"run", "--config", config, "--database-url", db}, env,
        dir.path() + "/daemon.log");
  }
  std::int64_t Enqueue(const std::string& task) {
    return conn.exec("INSERT INTO akadze.jobs (task) VALUES ($1) RETURNING id", pg::Params().add(task))
        .int64(0, 0);
  }
  std::string State(std::int64_t id) {
    return std::string(
        conn.exec("SELECT state FROM akadze.jobs WHERE id = $1", pg::Params().add(id)).text(0, 0));
  }
  bool WaitState(std::int64_t id, const std::string& state) {
    return test::WaitUntil([&] { return State(id) == state; }, 30s);
  }
  void Stop() {
    daemon->Signal(SIGTERM);
    CHECK(daemon->Wait() == 0);
  }
};

std::string ShellHandler(const std::string& task, const std::string& script) {
  return "  " + task + ":\n    shell:\n      command: [\"" + script + "\"]\n      kill_grace: 500ms\n";
}

TEST_CASE("the daemon's SQL hook records every transition of a job that retries, then succeeds",
          "[hooks][daemon]") {
  HookedDaemon d;
  // Fails its first run, succeeds its second (AKADZE_ATTEMPT counts from 1).
  std::string script = d.dir.Write(
      "flaky.sh",
      "#!/bin/sh\n[ \"$AKADZE_ATTEMPT\" = 1 ] && { echo '{\"retry\": {\"delay\": \"10ms\"}}' >&3; exit 0; }\n"
      "echo '{\"result\": {\"ok\": true}}' >&3\n",
      true);
  d.Start("  - name: outbox\n    sql: \"" + std::string(kOutboxSql) + "\"\n",
          ShellHandler("flaky", script));
  const std::int64_t id = d.Enqueue("flaky");
  REQUIRE(d.WaitState(id, "succeeded"));
  CHECK(Transitions(d.conn, id) == std::vector<std::string>{"queued->running", "running->queued",
                                                            "queued->running", "running->succeeded"});
  CHECK(d.conn.exec("SELECT result::text FROM outbox WHERE job_id = $1 AND to_state = 'succeeded'",
                    pg::Params().add(id)).text(0, 0) == R"({"ok": true})");
  d.Stop();
}

TEST_CASE("a failing finish hook leaves the job running until the hook succeeds",
          "[hooks][daemon]") {
  HookedDaemon d;
  std::string script = d.dir.Write("ok.sh", "#!/bin/sh\nexit 0\n", true);
  d.Start("  - name: outbox\n    sql: \"" + std::string(kOutboxSql) + "\"\n"
          "  - name: gate\n    to: succeeded\n    sql: \"" + std::string(kGateSql) + "\"\n",
          ShellHandler("ok", script));
  const std::int64_t id = d.Enqueue("ok");
  const std::string failed = "hook_failed hook=gate job=" + std::to_string(id) + " transition=running->succeeded";
  REQUIRE(d.daemon->WaitForLog(failed));
  // Refused again on the retry; meanwhile the job stays running and only
  // the claim's transition is in the outbox.
  const std::size_t first = d.daemon->Log().find(failed);
  REQUIRE(test::WaitUntil([&] { return d.daemon->Log().find(failed, first + 1) != std::string::npos; }, 30s));
  CHECK(d.State(id) == "running");
  CHECK(Transitions(d.conn, id) == std::vector<std::string>{"queued->running"});

  d.conn.exec("UPDATE gate SET open = true");
  REQUIRE(d.WaitState(id, "succeeded"));
  CHECK(Transitions(d.conn, id) == std::vector<std::string>{"queued->running", "running->succeeded"});
  d.Stop();
}

TEST_CASE("a failing claim hook leaves the job queued until the hook succeeds",
          "[hooks][daemon]") {
  HookedDaemon d;
  std::string script = d.dir.Write("ok.sh", "#!/bin/sh\nexit 0\n", true);
  d.Start("  - name: gate\n    from: queued\n    to: running\n    sql: \"" + std::string(kGateSql) + "\"\n",
          ShellHandler("ok", script));
  const std::int64_t id = d.Enqueue("ok");
  REQUIRE(d.daemon->WaitForLog("hook_failed hook=gate job=" + std::to_string(id) +
                               " transition=queued->running"));
  CHECK(d.State(id) == "queued");
  CHECK(d.conn.exec("SELECT run_count FROM akadze.jobs WHERE id = $1", pg::Params().add(id))
            .int64(0, 0) == 0);
  d.conn.exec("UPDATE gate SET open = true");
  REQUIRE(d.WaitState(id, "succeeded"));
  d.Stop();
}

TEST_CASE("a plugin hook writes through exec_sql in the transition's transaction, and refuses",
          "[hooks][daemon]") {
  HookedDaemon d;
  std::string script = d.dir.Write("ok.sh", "#!/bin/sh\nexit 0\n", true);
  d.Start("  - name: audit\n    plugin:\n      path: libhook_plugin.so\n"
          "      config: {refuse_task: blocked}\n",
          ShellHandler("ok", script) + ShellHandler("blocked", script));
  const std::int64_t ok = d.Enqueue("ok");
  REQUIRE(d.WaitState(ok, "succeeded"));
  CHECK(Transitions(d.conn, ok, "plugin") ==
        std::vector<std::string>{"queued->running", "running->succeeded"});
  // A refused claim rolls back whole, so this one comes alone.
  const std::int64_t blocked = d.Enqueue("blocked");
  REQUIRE(d.daemon->WaitForLog("hook_failed hook=audit job=" + std::to_string(blocked)));
  CHECK(d.State(blocked) == "queued");
  CHECK(Transitions(d.conn, blocked, "plugin").empty());
  CHECK(d.daemon->Log().find("task blocked is refused by this plugin's config") != std::string::npos);
  d.Stop();
}

TEST_CASE("a hook plugin without on_transition is a config error", "[hooks][daemon]") {
  test::TempDir dir;
  std::string config = dir.Write(
      "akadzed.yaml",
      "queues:\n  - {name: default, slots: 1}\nhandlers:\n  t:\n    shell: {command: [\"true\"], kill_grace: 500ms}\n"
      "hooks:\n  - name: wrong\n    plugin: {path: libmisbehaving_plugin.so}\n"
      "metrics: {enabled: false}\n");
  test::EnvChanges env;
  env.emplace("AKADZED_PLUGIN_PATH", std::string(AKADZED_TEST_PLUGIN_DIR));
  test::CommandResult r = test::RunAkadzed({"check-config", config}, env);
  CHECK(r.exit_code == kExitConfig);
  CHECK(r.err.find("akadzed.yaml:7: hooks[0]: plugin ") != std::string::npos);
  CHECK(r.err.find("has no on_transition function, so it cannot be a hook") != std::string::npos);
  test::DaemonProcess daemon({"run", "--config", config, "--database-url", test::FreshDatabase()},
                             env, dir.path() + "/daemon.log");
  CHECK(daemon.Wait() == kExitConfig);
  CHECK(daemon.Log().find("akadzed.yaml:7: hooks[0]: plugin ") != std::string::npos);
  CHECK(daemon.Log().find("has no on_transition function, so it cannot be a hook") !=
        std::string::npos);
}

}  // namespace
}  // namespace akadzed
