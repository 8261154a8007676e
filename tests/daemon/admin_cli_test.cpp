// Tests of the admin commands (enqueue, jobs, queues, workers, status) as a
// child process against a real database: what they print (text and --json),
// what they change, and their error paths (one line on stderr, exit 1 or 2).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <libpq-fe.h>
#include <poll.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "pg/connection.h"
#include "support/daemon_process.h"
#include "support/run_command.h"
#include "support/test_cluster.h"

namespace akadzed {
namespace {

using nlohmann::json;
using pg::Connection;
using pg::Params;

struct Db {
  std::string url = test::FreshDatabase(true);
  Connection conn = Connection::Open(url);

  test::CommandResult Run(std::vector<std::string> args) {
    args.push_back("--database-url");
    args.push_back(url);
    return test::RunAkadzed(args);
  }
  // A command that must succeed; returns its stdout.
  std::string Ok(const std::vector<std::string>& args) {
    test::CommandResult r = Run(args);
    INFO("args: " << args.front() << " stderr: " << r.err << " stdout: " << r.out);
    REQUIRE(r.exit_code == 0);
    CHECK(r.err.empty());
    return r.out;
  }
  json OkJson(const std::vector<std::string>& args) {
    std::string out = Ok(args);
    REQUIRE(test::Lines(out).size() == 1);
    return json::parse(out);
  }
  // A command that must fail with `code` and one line on stderr; returns it.
  std::string Fails(const std::vector<std::string>& args, int code) {
    test::CommandResult r = Run(args);
    INFO("args: " << args.front() << " stderr: " << r.err << " stdout: " << r.out);
    CHECK(r.exit_code == code);
    CHECK(r.out.empty());
    REQUIRE(test::Lines(r.err).size() == 1);
    return r.err;
  }
  std::string Field(std::int64_t id, const std::string& expr) {
    return std::string(
        conn.exec("SELECT (" + expr + ")::text FROM akadze.jobs WHERE id = $1", Params().add(id))
            .text(0, 0));
  }
  std::int64_t Insert(const std::string& columns, const std::string& values) {
    return conn.exec("INSERT INTO akadze.jobs (" + columns + ") VALUES (" + values + ") RETURNING id")
        .int64(0, 0);
  }
};

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("admin enqueue: inserts a job and prints its id", "[admin]") {
  Db db;
  std::string out = db.Ok({"enqueue", "send_email", "--args", R"({"to":"a@example.com"})",
                           "--queue", "mail", "--priority", "5", "--limit-key", "tenant-1",
                           "--max-attempts", "7"});
  REQUIRE(test::Lines(out).size() == 1);
  const std::int64_t id = std::stoll(out);
  CHECK(db.Field(id, "task") == "send_email");
  CHECK(db.Field(id, "queue") == "mail");
  CHECK(db.Field(id, "priority") == "5");
  CHECK(db.Field(id, "state") == "queued");
  CHECK(db.Field(id, "args->>'to'") == "a@example.com");
  CHECK(db.Field(id, "limit_key") == "tenant-1");
  CHECK(db.Field(id, "max_attempts") == "7");
  CHECK(db.Field(id, "run_at <= now()") == "true");

  SECTION("defaults: args {}, queue default, priority 0, 3 attempts") {
    const std::int64_t id2 = std::stoll(db.Ok({"enqueue", "t"}));
    CHECK(db.Field(id2, "args") == "{}");
    CHECK(db.Field(id2, "queue") == "default");
    CHECK(db.Field(id2, "priority") == "0");
    CHECK(db.Field(id2, "max_attempts") == "3");
  }
  SECTION("--delay puts run_at in the future") {
    const std::int64_t id2 = std::stoll(db.Ok({"enqueue", "t", "--delay", "1h"}));
    CHECK(db.Field(id2, "run_at > now() + interval '59 minutes'") == "true");
    CHECK(db.Field(id2, "run_at < now() + interval '61 minutes'") == "true");
  }
  SECTION("--run-at and --expires-at take ISO-8601 timestamps") {
    const std::int64_t id2 = std::stoll(db.Ok({"enqueue", "t", "--run-at",
                                               "2030-01-02T03:04:05Z", "--expires-at",
                                               "2030-01-03T00:00:00+02:00"}));
    CHECK(db.Field(id2, "run_at = '2030-01-02 03:04:05+00'") == "true");
    CHECK(db.Field(id2, "expires_at = '2030-01-02 22:00:00+00'") == "true");
  }
  SECTION("--json prints the row without args") {
    json j = db.OkJson({"enqueue", "t", "--args", R"({"secret":"s3"})", "--unique-key", "u1",
                        "--json"});
    CHECK(j["id"].get<std::int64_t>() > id);
    CHECK(j["task"] == "t");
    CHECK(j["state"] == "queued");
    CHECK(j["unique_key"] == "u1");
    CHECK(j["limit_key"].is_null());
    CHECK(j["run_at"].get<std::string>().back() == 'Z');
    CHECK_FALSE(j.contains("args"));
    CHECK_FALSE(Contains(j.dump(), "s3"));
  }
}

TEST_CASE("admin enqueue: error paths", "[admin]") {
  Db db;
  SECTION("args that are not JSON, or not an object, are usage errors") {
    CHECK(db.Fails({"enqueue", "t", "--args", "{nope"}, 2) == "enqueue: --args: not valid JSON\n");
    CHECK(db.Fails({"enqueue", "t", "--args", "[1,2]"}, 2) ==
          "enqueue: --args: must be a JSON object\n");
  }
  SECTION("bad durations, timestamps and ranges") {
    CHECK(Contains(db.Fails({"enqueue", "t", "--delay", "5x"}, 2), "enqueue: --delay: "));
    CHECK(Contains(db.Fails({"enqueue", "t", "--run-at", "tomorrowish"}, 2),
                   "enqueue: --run-at: not a timestamp"));
    CHECK(Contains(db.Fails({"enqueue", "t", "--expires-at", "2030-13-45"}, 2),
                   "enqueue: --expires-at: not a timestamp"));
    db.Fails({"enqueue", "t", "--delay", "1s", "--run-at", "2030-01-01T00:00:00Z"}, 2);
    db.Fails({"enqueue", "t", "--priority", "40000"}, 2);
    db.Fails({"enqueue", "t", "--max-attempts", "0"}, 2);
    db.Fails({"enqueue"}, 2);
    // Refused by akadze.enqueue itself, with its message.
    CHECK(db.Fails({"enqueue", "t", "--run-at", "infinity"}, 2) ==
          "enqueue: run_at must be a finite timestamp, not \"infinity\"\n");
    CHECK(Contains(db.Fails({"enqueue", "t", "--expires-at", "2001-01-01T00:00:00Z"}, 2),
                   "enqueue: expires_at must be after the time the job may run (now)"));
    CHECK(db.conn.exec("SELECT count(*) FROM akadze.jobs").int64(0, 0) == 0);
  }
  SECTION("a duplicate active unique_key is a clear error, exit 1") {
    const std::int64_t first = std::stoll(db.Ok({"enqueue", "t", "--unique-key", "daily"}));
    std::string err = db.Fails({"enqueue", "t", "--unique-key", "daily"}, 1);
    CHECK(err == "enqueue failed: unique_key 'daily' is already held by job " +
                     std::to_string(first) + " (queued); no job enqueued\n");
    CHECK(db.conn.exec("SELECT count(*) FROM akadze.jobs").int64(0, 0) == 1);
    // Once the holder is finished the key is free again.
    db.conn.exec("UPDATE akadze.jobs SET state = 'succeeded', finished_at = now()");
    db.Ok({"enqueue", "t", "--unique-key", "daily"});
  }
  SECTION("an unmigrated database is exit 1 with the migrate hint") {
    test::CommandResult r =
        test::RunAkadzed({"enqueue", "t", "--database-url", test::FreshDatabase(false)});
    CHECK(r.exit_code == 1);
    CHECK(Contains(r.err, "akadzed migrate"));
    CHECK(test::Lines(r.err).size() == 1);
  }
}

// [direct]: LISTEN needs a session of its own.
TEST_CASE("admin enqueue: a job ready now wakes LISTEN akadze_jobs, a delayed one does not",
          "[admin][direct]") {
  Db db;
  Connection listener = Connection::Open(db.url);
  listener.exec("LISTEN akadze_jobs");
  db.Ok({"enqueue", "t", "--queue", "later", "--delay", "1h"});
  db.Ok({"enqueue", "t", "--queue", "mail"});
  std::vector<std::string> payloads;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (payloads.empty() && std::chrono::steady_clock::now() < until) {
    REQUIRE(PQconsumeInput(listener.raw()) == 1);
    while (PGnotify* n = PQnotifies(listener.raw())) {
      payloads.emplace_back(n->extra);
      PQfreemem(n);
    }
    pollfd p{PQsocket(listener.raw()), POLLIN, 0};
    if (payloads.empty()) ::poll(&p, 1, 100);
  }
  CHECK(payloads == std::vector<std::string>{"mail"});
}

TEST_CASE("admin jobs list: newest first, filters, limit, never args", "[admin]") {
  Db db;
  const std::int64_t a = db.Insert("task, queue, args", "'ta', 'q1', '{\"pw\":\"hunter2\"}'");
  const std::int64_t b = db.Insert("task, queue, state, finished_at", "'tb', 'q2', 'failed', now()");
  const std::int64_t c = db.Insert("task, queue, limit_key", "'tc', 'q1', 'k'");

  json all = db.OkJson({"jobs", "list", "--json"});
  REQUIRE(all.size() == 3);
  CHECK(all[0]["id"] == c);
  CHECK(all[1]["id"] == b);
  CHECK(all[2]["id"] == a);
  CHECK(all[0]["limit_key"] == "k");
  for (const json& j : all) CHECK_FALSE(j.contains("args"));
  CHECK_FALSE(Contains(all.dump(), "hunter2"));

  json q1 = db.OkJson({"jobs", "list", "--queue", "q1", "--json"});
  REQUIRE(q1.size() == 2);
  CHECK(q1[0]["id"] == c);
  json failed = db.OkJson({"jobs", "list", "--state", "failed", "--json"});
  REQUIRE(failed.size() == 1);
  CHECK(failed[0]["id"] == b);
  CHECK(db.OkJson({"jobs", "list", "--limit", "1", "--json"}).size() == 1);
  CHECK(db.OkJson({"jobs", "list", "--queue", "none", "--json"}).empty());

  std::string text = db.Ok({"jobs", "list"});
  std::vector<std::string> lines = test::Lines(text);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == "ID\tSTATE\tQUEUE\tTASK\tPRIORITY\tATTEMPT\tRUN_AT\tLIMIT_KEY");
  CHECK(lines[1].rfind(std::to_string(c) + "\tqueued\tq1\ttc\t0\t0/3\t", 0) == 0);
  CHECK_FALSE(Contains(text, "hunter2"));

  SECTION("bad --limit and --state are usage errors") {
    db.Fails({"jobs", "list", "--limit", "0"}, 2);
    db.Fails({"jobs", "list", "--limit", "1001"}, 2);
    db.Fails({"jobs", "list", "--limit", "ten"}, 2);
    db.Fails({"jobs", "list", "--state", "done"}, 2);
    db.Fails({"jobs"}, 2);
  }
}

TEST_CASE("admin jobs show: every field but args, with errors and result", "[admin]") {
  Db db;
  const std::int64_t id = db.Insert(
      "task, state, args, errors, result, attempt, finished_at",
      "'t', 'succeeded', '{\"token\":\"tok-123\"}',"
      " '[{\"error\":\"Boom\",\"message\":\"first try\"}]', '{\"rows\":42}', 1, now()");
  json j = db.OkJson({"jobs", "show", std::to_string(id), "--json"});
  CHECK(j["id"] == id);
  CHECK(j["state"] == "succeeded");
  CHECK(j["attempt"] == 1);
  CHECK(j["result"] == json{{"rows", 42}});
  REQUIRE(j["errors"].size() == 1);
  CHECK(j["errors"][0]["error"] == "Boom");
  CHECK(j["finished_at"].is_string());
  CHECK(j["started_at"].is_null());
  CHECK_FALSE(j.contains("args"));
  CHECK_FALSE(Contains(j.dump(), "tok-123"));

  std::string text = db.Ok({"jobs", "show", std::to_string(id)});
  CHECK(Contains(text, "state: succeeded\n"));
  CHECK(Contains(text, "result: {\"rows\": 42}\n"));
  CHECK(Contains(text, "first try"));
  CHECK_FALSE(Contains(text, "tok-123"));

  CHECK(db.Fails({"jobs", "show", "999999"}, 1) == "jobs show failed: job 999999 not found\n");
  db.Fails({"jobs", "show", "abc"}, 2);
  db.Fails({"jobs", "show"}, 2);
}

TEST_CASE("admin jobs cancel: queued now, running by request, finished refused", "[admin]") {
  Db db;
  const std::int64_t queued = db.Insert("task", "'t'");
  const std::int64_t running = db.Insert(
      "task, state, run_count, worker_id, started_at",
      "'t', 'running', 1, '4b1d5a3e-9c2f-4e8a-b7d6-0123456789ab', now()");
  const std::int64_t done = db.Insert("task, state, finished_at", "'t', 'succeeded', now()");

  CHECK(db.Ok({"jobs", "cancel", std::to_string(queued)}) ==
        "cancelled job " + std::to_string(queued) + "\n");
  CHECK(db.Field(queued, "state") == "cancelled");
  CHECK(db.Field(queued, "finished_at IS NOT NULL") == "true");

  CHECK(db.OkJson({"jobs", "cancel", std::to_string(running), "--json"}) ==
        json{{"id", running}, {"outcome", "cancel_requested"}});
  CHECK(db.Field(running, "state") == "running");
  CHECK(db.Field(running, "cancel_requested_at IS NOT NULL") == "true");
  CHECK(db.OkJson({"jobs", "cancel", std::to_string(running), "--json"})["outcome"] ==
        "already_requested");

  CHECK(db.Fails({"jobs", "cancel", std::to_string(done)}, 1) ==
        "jobs cancel failed: job " + std::to_string(done) + " is already succeeded\n");
  CHECK(db.Fails({"jobs", "cancel", std::to_string(queued)}, 1) ==
        "jobs cancel failed: job " + std::to_string(queued) + " is already cancelled\n");
  CHECK(db.Fails({"jobs", "cancel", "424242"}, 1) == "jobs cancel failed: job 424242 not found\n");
  db.Fails({"jobs", "cancel", "0"}, 2);
}

TEST_CASE("admin jobs requeue: only failed jobs, one more attempt as akadze's, errors kept", "[admin]") {
  Db db;
  const std::int64_t failed = db.Insert(
      "task, state, attempt, max_attempts, run_count, worker_id, started_at, finished_at,"
      " run_at, errors",
      "'t', 'failed', 3, 3, 3, '4b1d5a3e-9c2f-4e8a-b7d6-0123456789ab', now(), now(),"
      " now() - interval '1 day', '[{\"error\":\"E\",\"message\":\"m\"}]'");
  const std::int64_t queued = db.Insert("task", "'t'");

  CHECK(db.Ok({"jobs", "requeue", std::to_string(failed)}) ==
        "requeued job " + std::to_string(failed) + " in queue default\n");
  CHECK(db.Field(failed, "state") == "queued");
  CHECK(db.Field(failed, "attempt") == "3");
  CHECK(db.Field(failed, "max_attempts") == "4");
  CHECK(db.Field(failed, "run_count") == "3");
  CHECK(db.Field(failed, "worker_id IS NULL AND finished_at IS NULL") == "true");
  CHECK(db.Field(failed, "run_at > now() - interval '1 minute'") == "true");
  CHECK(db.Field(failed, "jsonb_array_length(errors)") == "1");

  CHECK(db.Fails({"jobs", "requeue", std::to_string(queued)}, 1) ==
        "jobs requeue failed: job " + std::to_string(queued) +
            " is queued; only failed jobs can be requeued\n");
  db.conn.exec("UPDATE akadze.jobs SET state = 'cancelled', finished_at = now() WHERE id = $1",
               Params().add(queued));
  CHECK(Contains(db.Fails({"jobs", "requeue", std::to_string(queued)}, 1), "is cancelled"));
  CHECK(db.Fails({"jobs", "requeue", "31337"}, 1) == "jobs requeue failed: job 31337 not found\n");

  SECTION("max_attempts is raised only as far as one more attempt needs, and saturates") {
    const std::int64_t failed_early = db.Insert("task, state, attempt, max_attempts, finished_at",
                                                "'t', 'failed', 1, 5, now()");  // failed by outcome
    db.Ok({"jobs", "requeue", std::to_string(failed_early)});
    CHECK(db.Field(failed_early, "attempt || '/' || max_attempts") == "1/5");
    const std::int64_t at_max = db.Insert("task, state, attempt, max_attempts, finished_at",
                                          "'t', 'failed', 2147483647, 2147483647, now()");
    db.Ok({"jobs", "requeue", std::to_string(at_max)});
    CHECK(db.Field(at_max, "state || ' ' || attempt || '/' || max_attempts") ==
          "queued 2147483647/2147483647");
    const std::int64_t below_max = db.Insert("task, state, attempt, max_attempts, finished_at",
                                             "'t', 'failed', 2147483646, 7, now()");
    db.Ok({"jobs", "requeue", std::to_string(below_max)});
    CHECK(db.Field(below_max, "attempt || '/' || max_attempts") == "2147483646/2147483647");
  }
  SECTION("a failed job whose unique_key is held again is refused") {
    const std::int64_t old = db.Insert("task, state, unique_key, finished_at",
                                       "'t', 'failed', 'nightly', now()");
    const std::int64_t holder = db.Insert("task, unique_key", "'t', 'nightly'");
    CHECK(db.Fails({"jobs", "requeue", std::to_string(old)}, 1) ==
          "jobs requeue failed: job " + std::to_string(old) +
              " cannot be requeued: unique_key 'nightly' is held by job " +
              std::to_string(holder) + " (queued)\n");
    CHECK(db.Field(old, "state") == "failed");
  }
}

TEST_CASE("admin queues: list counts, lag and pause; pause/resume are idempotent", "[admin]") {
  Db db;
  db.Insert("task, queue, run_at", "'t', 'mail', now() - interval '120 seconds'");
  db.Insert("task, queue", "'t', 'mail'");
  db.Insert("task, queue, run_at", "'t', 'mail', now() + interval '1 hour'");
  db.Insert("task, queue, state, run_count, started_at", "'t', 'mail', 'running', 1, now()");
  db.Insert("task, queue, state, finished_at", "'t', 'mail', 'failed', now()");
  db.Insert("task, queue, state, finished_at", "'t', 'other', 'succeeded', now()");

  json q = db.OkJson({"queues", "list", "--json"});
  REQUIRE(q.size() == 2);
  CHECK(q[0]["queue"] == "mail");
  CHECK(q[0]["queued"] == 3);
  CHECK(q[0]["ready"] == 2);
  CHECK(q[0]["running"] == 1);
  CHECK(q[0]["failed"] == 1);
  CHECK(q[0]["succeeded"] == 0);
  CHECK(q[0]["lag_seconds"].get<double>() >= 119.0);
  CHECK(q[0]["lag_seconds"].get<double>() < 200.0);
  CHECK(q[0]["paused"] == false);
  CHECK(q[1]["queue"] == "other");
  CHECK(q[1]["lag_seconds"].get<double>() == 0.0);

  CHECK(db.Ok({"queues", "pause", "mail"}) == "paused mail\n");
  CHECK(db.Ok({"queues", "pause", "mail"}) == "mail was already paused\n");
  CHECK(db.Ok({"queues", "pause", "empty"}) == "paused empty\n");
  q = db.OkJson({"queues", "list", "--json"});
  REQUIRE(q.size() == 3);
  CHECK(q[0]["queue"] == "empty");
  CHECK(q[0]["paused"] == true);
  CHECK(q[0]["queued"] == 0);
  CHECK(q[1]["paused"] == true);
  CHECK(q[1]["paused_at"].is_string());

  std::vector<std::string> lines = test::Lines(db.Ok({"queues", "list"}));
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == "QUEUE\tQUEUED\tREADY\tRUNNING\tMAX_RUNNING\tSUCCEEDED\tFAILED\tCANCELLED\tLAG\tPAUSED");
  CHECK(lines[2].rfind("mail\t3\t2\t1\t-\t0\t1\t0\t", 0) == 0);
  CHECK(lines[2].substr(lines[2].size() - 4) == "\tyes");

  CHECK(db.Ok({"queues", "resume", "mail"}) == "resumed mail\n");
  CHECK(db.Ok({"queues", "resume", "mail"}) == "mail was not paused\n");
  CHECK(db.conn.exec("SELECT count(*) FROM akadze.queue_pauses").int64(0, 0) == 1);
  db.Fails({"queues", "pause"}, 2);
  db.Fails({"queues"}, 2);
}

TEST_CASE("admin queues limit: sets, changes and clears a queue's cluster-wide cap", "[admin]") {
  Db db;
  db.Insert("task, queue", "'t', 'mail'");
  CHECK(db.Ok({"queues", "limit", "mail", "--max-running", "5"}) == "mail max_running 5 (had no cap)\n");
  CHECK(db.Ok({"queues", "limit", "mail", "--max-running", "2"}) == "mail max_running 2 (was 5)\n");
  // A queue without jobs may be capped before its first job.
  CHECK(db.Ok({"queues", "limit", "later", "--max-running", "1"}) == "later max_running 1 (had no cap)\n");
  json q = db.OkJson({"queues", "list", "--json"});
  REQUIRE(q.size() == 2);
  CHECK(q[0]["queue"] == "later");
  CHECK(q[0]["max_running"] == 1);
  CHECK(q[1]["max_running"] == 2);
  json s = db.OkJson({"status", "--json"});
  REQUIRE(s["queues"].size() == 2);
  CHECK(s["queues"][0]["queue"] == "later");
  CHECK(s["queues"][0]["max_running"] == 1);
  CHECK(s["queues"][1]["max_running"] == 2);
  std::vector<std::string> lines = test::Lines(db.Ok({"status"}));
  REQUIRE(lines.size() > 3);
  CHECK(lines[1] == "QUEUE\tREADY\tSCHEDULED\tRUNNING\tMAX_RUNNING\tOLDEST_READY\tLAST_HOUR\tPAUSED");
  CHECK(lines[2].rfind("later\t0\t0\t0\t1\t-\t", 0) == 0);

  // Zero, negative, too large and not a number are refused by the CLI; so
  // is neither or both of --max-running and --clear. Nothing changes.
  for (const std::string bad : {"0", "-1", "2147483648", "x"}) {
    INFO(bad);
    CHECK(db.Fails({"queues", "limit", "mail", "--max-running", bad}, 2).find("--max-running") != std::string::npos);
  }
  CHECK(db.Fails({"queues", "limit", "mail"}, 2) == "queues limit: give --max-running N or --clear\n");
  db.Fails({"queues", "limit", "mail", "--max-running", "3", "--clear"}, 2);
  CHECK(db.conn.exec("SELECT max_running FROM akadze.queue_caps WHERE queue = 'mail'").int64(0, 0) == 2);

  CHECK(db.Ok({"queues", "limit", "mail", "--clear"}) == "removed the cap of mail (max_running 2)\n");
  CHECK(db.Ok({"queues", "limit", "mail", "--clear"}) == "mail had no cap\n");
  q = db.OkJson({"queues", "list", "--json"});
  CHECK(q[1]["max_running"].is_null());
}

TEST_CASE("admin workers list and status", "[admin]") {
  Db db;
  db.conn.exec(
      "INSERT INTO akadze.workers (id, hostname, pid, queues, heartbeat_at) VALUES"
      " ('4b1d5a3e-9c2f-4e8a-b7d6-0123456789ab', 'host-a', 1234, '{default,mail}',"
      "  now() - interval '12 seconds')");
  db.Insert("task, state, run_count, worker_id, started_at, limit_key",
            "'t', 'running', 1, '4b1d5a3e-9c2f-4e8a-b7d6-0123456789ab', now(), 'tenant-a'");
  db.Insert("task, limit_key", "'t', 'tenant-b'");
  db.conn.exec("INSERT INTO akadze.limits (key, max_running) VALUES ('*', 2), ('tenant-c', 1)");

  json w = db.OkJson({"workers", "list", "--json"});
  REQUIRE(w.size() == 1);
  CHECK(w[0]["id"] == "4b1d5a3e-9c2f-4e8a-b7d6-0123456789ab");
  CHECK(w[0]["hostname"] == "host-a");
  CHECK(w[0]["pid"] == 1234);
  CHECK(w[0]["queues"] == json{"default", "mail"});
  CHECK(w[0]["running"] == 1);
  CHECK(w[0]["heartbeat_age_seconds"].get<double>() >= 12.0);
  CHECK(w[0]["heartbeat_age_seconds"].get<double>() < 60.0);
  std::vector<std::string> lines = test::Lines(db.Ok({"workers", "list"}));
  REQUIRE(lines.size() == 2);
  CHECK(lines[1].rfind("4b1d5a3e-9c2f-4e8a-b7d6-0123456789ab\thost-a\t1234\tdefault,mail\t", 0) ==
        0);

  json s = db.OkJson({"status", "--json"});
  // default (a running and a queued job) and mail (a worker serves it).
  REQUIRE(s["queues"].size() == 2);
  CHECK(s["queues"][0]["queue"] == "default");
  CHECK(s["queues"][0]["running"] == 1);
  CHECK(s["queues"][0]["ready"] == 1);
  CHECK(s["queues"][1]["queue"] == "mail");
  CHECK(s["queues"][1]["running"] == 0);
  REQUIRE(s["workers"].size() == 1);
  REQUIRE(s["limits"].size() == 2);
  CHECK(s["limits"][0] == json{{"key", "tenant-a"}, {"row", "*"}, {"running", 1},
                               {"max_running", 2}, {"starts", 0}, {"max_starts", nullptr}});
  CHECK(s["limits"][1] == json{{"key", "tenant-c"}, {"row", "tenant-c"}, {"running", 0},
                               {"max_running", 1}, {"starts", 0}, {"max_starts", nullptr}});
  std::string text = db.Ok({"status"});
  CHECK(Contains(text, "== queues ==\n"));
  CHECK(Contains(text, "== limits in use ==\n"));
  CHECK(Contains(text, "tenant-a\t*\t1\t2\t0\t-\n"));
  CHECK(Contains(text, "== workers ==\n"));
  // With a '*' row no key is held.
  CHECK(s["held_keys"] == json::array());
  CHECK(s["held_keys_total"] == 0);

  SECTION("without a '*' row, keys of queued jobs with no row of their own are held") {
    db.conn.exec("DELETE FROM akadze.limits WHERE key = '*'");
    // tenant-b (one queued job), a mistyped key in two queues, tenant-c's
    // queued job (its own row: not held) and a running job's key.
    db.Insert("task, limit_key, queue", "'t', 'tenant-typo', 'default'");
    db.Insert("task, limit_key, queue", "'t', 'tenant-typo', 'mail'");
    db.Insert("task, limit_key, queue", "'t', 'tenant-typo', 'mail'");
    db.Insert("task, limit_key", "'t', 'tenant-c'");
    json h = db.OkJson({"status", "--json"});
    CHECK(h["held_keys"] == json{{{"key", "tenant-typo"}, {"queued", 3}, {"queued_capped", false}},
                                 {{"key", "tenant-b"}, {"queued", 1}, {"queued_capped", false}}});
    CHECK(h["held_keys_total"] == 2);
    std::string held_text = db.Ok({"status"});
    CHECK(Contains(held_text, "== keys held: queued jobs, no limits row (own or '*') ==\nKEY\tQUEUED\n"
                              "tenant-typo\t3\ntenant-b\t1\n"));
  }
  SECTION("an empty database prints empty sections") {
    Db empty;
    json e = empty.OkJson({"status", "--json"});
    CHECK(e["generated_at"].is_string());
    e.erase("generated_at");
    CHECK(e == json{{"queues", json::array()},
                    {"queues_truncated", false},
                    {"count_cap", 500},
                    {"limits", json::array()},
                    {"held_keys", json::array()},
                    {"held_keys_total", 0},
                    {"workers", json::array()},
                    {"recent_failures", json::array()},
                    {"horizon", {{"holders", json::array()}, {"holders_total", 0}, {"stats_visible", true}}},
                    {"actions", {{"enabled", false}}}});
    CHECK(empty.OkJson({"workers", "list", "--json"}) == json::array());
  }
}

TEST_CASE("admin commands against a running daemon: enqueue, workers list, cancel", "[admin]") {
  using namespace std::chrono_literals;
  Db db;
  test::TempDir dir;
  const std::string script = dir.Write("long.sh", "#!/bin/sh\nexec sleep 300\n", true);
  const std::string config = dir.Write(
      "akadzed.yaml",
      "worker:\n  heartbeat_interval: 200ms\n  heartbeat_ttl: 1500ms\n  poll_interval: 100ms\n"
      "  shutdown_timeout: 2s\nqueues:\n  - name: default\n    slots: 2\nhandlers:\n"
      "  long:\n    shell:\n      command: [\"" + script + "\"]\n      kill_grace: 500ms\n"
      "metrics: {listen: 127.0.0.1:0}\n");
  test::DaemonProcess daemon({"run", "--config", config, "--database-url", db.url}, {},
                             dir.path() + "/daemon.log");
  const std::int64_t id = std::stoll(db.Ok({"enqueue", "long", "--args", R"({"n":1})"}));
  auto state = [&] { return db.Field(id, "state"); };
  const bool running = test::WaitUntil([&] { return state() == "running"; });
  INFO("daemon log: " << daemon.Log());
  REQUIRE(running);

  json w = db.OkJson({"workers", "list", "--json"});
  REQUIRE(w.size() == 1);
  CHECK(w[0]["pid"] == daemon.pid());
  CHECK(w[0]["running"] == 1);
  CHECK(w[0]["queues"] == json{"default"});
  CHECK(w[0]["heartbeat_age_seconds"].get<double>() < 5.0);

  CHECK(db.OkJson({"jobs", "cancel", std::to_string(id), "--json"})["outcome"] ==
        "cancel_requested");
  CHECK(test::WaitUntil([&] { return state() == "cancelled"; }, 10s));
  CHECK(db.Fails({"jobs", "cancel", std::to_string(id)}, 1) ==
        "jobs cancel failed: job " + std::to_string(id) + " is already cancelled\n");
}

}  // namespace akadzed
