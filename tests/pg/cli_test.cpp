// Tests of `akadzed claim`: the JSON it prints, what a real claim and a dry
// run do to the rows, ordered vs fair mode, and its exit codes for bad
// arguments and unreachable or unmigrated databases.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "pg/connection.h"
#include "support/run_command.h"
#include "support/test_cluster.h"

namespace akadzed {
namespace {

using nlohmann::json;
using pg::Connection;
using pg::Params;

constexpr const char* kWorker = "4b1d5a3e-9c2f-4e8a-b7d6-0123456789ab";

std::int64_t Enqueue(Connection& conn, const std::string& queue, int priority,
                     const std::optional<std::string>& limit_key, int age_seconds) {
  return conn
      .exec("INSERT INTO akadze.jobs (task, queue, priority, limit_key, run_at)"
            " VALUES ('t', $1, $2, $3, now() - $4::int * interval '1 second') RETURNING id",
            Params().add(queue).add(priority).add(limit_key).add(age_seconds))
      .int64(0, 0);
}

// The queue every claim test uses. Claim order (priority DESC, run_at, id):
// j3, j2, j4, j5, j1. Fair order (turns by key): j3, j4, j5, then j2, j1.
struct Queue {
  std::int64_t j1, j2, j3, j4, j5, other_queue, future;
};

Queue MakeQueue(Connection& conn) {
  Queue q{};
  q.j1 = Enqueue(conn, "mail", 0, std::nullopt, 50);
  q.j2 = Enqueue(conn, "mail", 5, "tenant-a", 10);
  q.j3 = Enqueue(conn, "mail", 5, "tenant-a", 20);
  q.j4 = Enqueue(conn, "mail", 1, "tenant-b", 30);
  q.j5 = Enqueue(conn, "mail", 0, std::nullopt, 60);
  q.other_queue = Enqueue(conn, "other", 9, std::nullopt, 100);
  q.future = Enqueue(conn, "mail", 9, std::nullopt, -3600);
  conn.exec("INSERT INTO akadze.limits (key, max_running) VALUES ('*', 10)");
  return q;
}

std::vector<std::string> ClaimArgs(const std::string& url, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"claim", "--queue", "mail", "--json", "--database-url", url};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Runs a claim that must succeed and returns its one JSON object.
json Claim(const std::string& url, const std::vector<std::string>& extra) {
  test::CommandResult r = test::RunAkadzed(ClaimArgs(url, extra));
  INFO("stderr: " << r.err);
  INFO("stdout: " << r.out);
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.empty());
  REQUIRE(test::Lines(r.out).size() == 1);
  json out = json::parse(r.out);
  REQUIRE(out.is_object());
  std::set<std::string> keys;
  for (const auto& item : out.items()) keys.insert(item.key());
  std::set<std::string> want = {"jobs", "paused", "worker_id", "windows", "rows_read", "round_trips", "elapsed_ms"};
  // --repeat N (N > 1) adds the runs' times.
  if (std::find(extra.begin(), extra.end(), "--repeat") != extra.end() && keys.contains("runs_ms")) {
    want.insert({"runs_ms", "cold_ms", "warm_ms"});
  }
  CHECK(keys == want);
  CHECK(out["round_trips"].is_number_integer());
  REQUIRE(out["jobs"].is_array());
  CHECK(out["paused"].is_boolean());
  CHECK(out["worker_id"].get<std::string>().size() == 36);
  CHECK(out["windows"].is_number_integer());
  CHECK(out["rows_read"].is_number_integer());
  CHECK(out["elapsed_ms"].is_number());
  CHECK(out["elapsed_ms"].get<double>() >= 0);
  for (const json& job : out["jobs"]) {
    std::set<std::string> job_keys;
    for (const auto& item : job.items()) job_keys.insert(item.key());
    CHECK(job_keys == std::set<std::string>{"id", "limit_key", "priority"});
    CHECK(job["id"].is_number_integer());
    CHECK(job["priority"].is_number_integer());
    CHECK((job["limit_key"].is_null() || job["limit_key"].is_string()));
  }
  if (!out["jobs"].empty()) {
    CHECK(out["windows"].get<int>() >= 1);
    CHECK(out["rows_read"].get<std::int64_t>() >= static_cast<std::int64_t>(out["jobs"].size()));
  }
  return out;
}

std::vector<std::int64_t> Ids(const json& out) {
  std::vector<std::int64_t> ids;
  for (const json& job : out["jobs"]) ids.push_back(job["id"].get<std::int64_t>());
  return ids;
}

// "state/run_count/worker set?/started_at set?" of one job.
std::string RowState(Connection& conn, std::int64_t id) {
  return std::string(
      conn.exec("SELECT state || '/' || run_count || '/' || (worker_id IS NOT NULL)::text || '/'"
                " || (started_at IS NOT NULL)::text FROM akadze.jobs WHERE id = $1",
                Params().add(id))
          .text(0, 0));
}

}  // namespace

TEST_CASE("cli claim: --json prints the claimed jobs in claim order and marks them running",
          "[cli][claim]") {
  const std::string url = test::FreshDatabase(true);
  Connection conn = Connection::Open(url);
  Queue q = MakeQueue(conn);
  const std::string before = std::string(conn.exec("SELECT now()::text").text(0, 0));

  json out = Claim(url, {"--slots", "3", "--worker-id", kWorker});
  CHECK(Ids(out) == std::vector<std::int64_t>{q.j3, q.j2, q.j4});
  CHECK(out["jobs"][0] == json{{"id", q.j3}, {"limit_key", "tenant-a"}, {"priority", 5}});
  CHECK(out["jobs"][1] == json{{"id", q.j2}, {"limit_key", "tenant-a"}, {"priority", 5}});
  CHECK(out["jobs"][2] == json{{"id", q.j4}, {"limit_key", "tenant-b"}, {"priority", 1}});

  pg::Result claimed = conn.exec(
      "SELECT id, state, run_count, worker_id::text, started_at >= $2::timestamptz,"
      " started_at <= now() FROM akadze.jobs WHERE id = ANY($1::int8[]) ORDER BY id",
      Params().add_array(Ids(out)).add(before));
  REQUIRE(claimed.rows() == 3);
  for (int i = 0; i < claimed.rows(); ++i) {
    INFO("job " << claimed.text(i, 0));
    CHECK(claimed.text(i, 1) == "running");
    CHECK(claimed.int64(i, 2) == 1);
    CHECK(claimed.text(i, 3) == kWorker);
    CHECK(claimed.boolean(i, 4));
    CHECK(claimed.boolean(i, 5));
  }
  for (std::int64_t id : {q.j1, q.j5, q.other_queue, q.future}) {
    CHECK(RowState(conn, id) == "queued/0/false/false");
  }

  // The next claim takes the rest of the ready jobs, in order, and no more.
  json rest = Claim(url, {"--slots", "10", "--worker-id", kWorker});
  CHECK(Ids(rest) == std::vector<std::int64_t>{q.j5, q.j1});
  CHECK(rest["jobs"][0]["limit_key"].is_null());
  CHECK(rest["jobs"][0]["priority"] == 0);
  // Nothing is left: an empty claim is still one JSON object.
  json none = Claim(url, {"--slots", "5"});
  CHECK(none["jobs"].empty());
  CHECK(RowState(conn, q.other_queue) == "queued/0/false/false");
  CHECK(RowState(conn, q.future) == "queued/0/false/false");
}

TEST_CASE("cli claim: --mode fair takes every key's first job first", "[cli][claim]") {
  const std::string url = test::FreshDatabase(true);
  Connection conn = Connection::Open(url);
  Queue q = MakeQueue(conn);

  SECTION("fair") {
    json out = Claim(url, {"--slots", "3", "--mode", "fair"});
    CHECK(Ids(out) == std::vector<std::int64_t>{q.j3, q.j4, q.j5});
    CHECK(Claim(url, {"--slots", "3", "--mode", "fair"})["jobs"].size() == 2);
  }
  SECTION("ordered, explicitly") {
    json out = Claim(url, {"--slots", "3", "--mode", "ordered"});
    CHECK(Ids(out) == std::vector<std::int64_t>{q.j3, q.j2, q.j4});
  }
}

TEST_CASE("cli claim: without --worker-id one random worker uuid is recorded", "[cli][claim]") {
  const std::string url = test::FreshDatabase(true);
  Connection conn = Connection::Open(url);
  MakeQueue(conn);
  json out = Claim(url, {"--slots", "4"});
  REQUIRE(out["jobs"].size() == 4);
  pg::Result r = conn.exec(
      "SELECT count(DISTINCT worker_id), count(*) FILTER (WHERE worker_id IS NULL)"
      " FROM akadze.jobs WHERE state = 'running'");
  CHECK(r.int64(0, 0) == 1);
  CHECK(r.int64(0, 1) == 0);
}

TEST_CASE("cli claim: --dry-run returns what a real claim takes and changes nothing",
          "[cli][claim]") {
  const std::string url = test::FreshDatabase(true);
  Connection conn = Connection::Open(url);
  Queue q = MakeQueue(conn);
  // tenant-a: one running job at most, and its starts are counted.
  conn.exec("INSERT INTO akadze.limits (key, max_running, max_starts, starts_window)"
            " VALUES ('tenant-a', 1, 5, interval '1 minute')");
  const std::vector<std::int64_t> expected = {q.j3, q.j4, q.j5, q.j1};

  for (const char* mode : {"ordered", "fair"}) {
    CAPTURE(mode);
    json dry = Claim(url, {"--slots", "10", "--mode", mode, "--dry-run", "--worker-id", kWorker});
    CHECK(Ids(dry) == expected);
  }
  for (std::int64_t id : {q.j1, q.j2, q.j3, q.j4, q.j5}) {
    CHECK(RowState(conn, id) == "queued/0/false/false");
  }
  CHECK(conn.exec("SELECT count(*) FROM akadze.limit_starts").int64(0, 0) == 0);

  json real = Claim(url, {"--slots", "10", "--worker-id", kWorker});
  CHECK(Ids(real) == expected);
  for (std::int64_t id : expected) CHECK(RowState(conn, id) == "running/1/true/true");
  CHECK(RowState(conn, q.j2) == "queued/0/false/false");  // tenant-a is at its limit
  CHECK(conn.exec("SELECT count(*) FROM akadze.limit_starts WHERE key = 'tenant-a'").int64(0, 0) ==
        1);

  // A dry run now sees what a real claim would: nothing (tenant-a is full).
  CHECK(Claim(url, {"--slots", "10", "--dry-run"})["jobs"].empty());
  conn.exec("UPDATE akadze.jobs SET state = 'succeeded', finished_at = now() WHERE id = $1",
            Params().add(q.j3));
  json dry = Claim(url, {"--slots", "10", "--dry-run"});
  CHECK(Ids(dry) == std::vector<std::int64_t>{q.j2});
  CHECK(RowState(conn, q.j2) == "queued/0/false/false");
  CHECK(Ids(Claim(url, {"--slots", "10"})) == std::vector<std::int64_t>{q.j2});
  CHECK(RowState(conn, q.j2) == "running/1/true/true");
}

TEST_CASE("cli claim: --dry-run --repeat times N claims on one connection, the cold one apart",
          "[cli][claim]") {
  const std::string url = test::FreshDatabase(true);
  Connection conn = Connection::Open(url);
  Queue q = MakeQueue(conn);
  json out = Claim(url, {"--slots", "2", "--dry-run", "--repeat", "5"});
  CHECK(Ids(out) == std::vector<std::int64_t>{q.j3, q.j2});  // every run rolled back: the same jobs
  REQUIRE(out["runs_ms"].is_array());
  REQUIRE(out["runs_ms"].size() == 5);
  std::vector<double> runs = out["runs_ms"].get<std::vector<double>>();
  for (double ms : runs) CHECK(ms > 0);
  CHECK(out["cold_ms"].get<double>() == runs.front());
  const std::vector<double> warm(runs.begin() + 1, runs.end());
  CHECK(out["warm_ms"]["min"].get<double>() == *std::min_element(warm.begin(), warm.end()));
  CHECK(out["warm_ms"]["max"].get<double>() == *std::max_element(warm.begin(), warm.end()));
  CHECK(out["warm_ms"]["median"].get<double>() >= out["warm_ms"]["min"].get<double>());
  CHECK(out["warm_ms"]["median"].get<double>() <= out["warm_ms"]["max"].get<double>());
  // A claim that settles in one window: BEGIN with the first read, the key
  // locks, the claiming statement with its ROLLBACK.
  CHECK(out["round_trips"].get<int>() == 3);
  for (std::int64_t id : {q.j1, q.j2, q.j3, q.j4, q.j5}) CHECK(RowState(conn, id) == "queued/0/false/false");

  test::CommandResult text = test::RunAkadzed(
      {"claim", "--queue", "mail", "--slots", "2", "--dry-run", "--repeat", "3", "--database-url", url});
  INFO("stderr: " << text.err);
  CHECK(text.exit_code == 0);
  std::vector<std::string> lines = test::Lines(text.out);
  REQUIRE(lines.size() == 7);  // 2 jobs, the summary, 3 runs, the warm runs
  CHECK(lines[3].rfind("run 1 (cold): ", 0) == 0);
  CHECK(lines[5].rfind("run 3: ", 0) == 0);
  CHECK(lines[6].rfind("warm runs: 2, min=", 0) == 0);
}

TEST_CASE("cli claim: a paused queue claims nothing", "[cli][claim]") {
  const std::string url = test::FreshDatabase(true);
  Connection conn = Connection::Open(url);
  Queue q = MakeQueue(conn);
  conn.exec("INSERT INTO akadze.queue_pauses (queue) VALUES ('mail')");
  json paused = Claim(url, {"--slots", "10"});
  CHECK(paused["jobs"].empty());
  CHECK(paused["paused"] == true);
  CHECK(RowState(conn, q.j3) == "queued/0/false/false");
  conn.exec("DELETE FROM akadze.queue_pauses");
  CHECK(Claim(url, {"--slots", "1"})["jobs"].size() == 1);
}

TEST_CASE("cli claim: without --json prints one line per job and a summary", "[cli][claim]") {
  const std::string url = test::FreshDatabase(true);
  Connection conn = Connection::Open(url);
  Queue q = MakeQueue(conn);
  test::CommandResult r =
      test::RunAkadzed({"claim", "--queue", "mail", "--slots", "2", "--database-url", url});
  INFO("stderr: " << r.err);
  CHECK(r.exit_code == 0);
  std::vector<std::string> lines = test::Lines(r.out);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0].rfind("claimed id=" + std::to_string(q.j3) + " ", 0) == 0);
  CHECK(lines[1].rfind("claimed id=" + std::to_string(q.j2) + " ", 0) == 0);
  CHECK(lines[2].rfind("2 claimed", 0) == 0);
  CHECK(RowState(conn, q.j3) == "running/1/true/true");
}

TEST_CASE("cli claim: bad arguments exit 2 with one line on stderr", "[cli][claim]") {
  const std::string url = test::FreshDatabase(true);
  Connection conn = Connection::Open(url);
  MakeQueue(conn);

  struct Case {
    std::vector<std::string> args;
    std::string mentions;
  };
  const std::vector<Case> cases = {
      {{"claim", "--slots", "1", "--json", "--database-url", url}, "--queue"},
      {{"claim", "--queue", "mail", "--json", "--database-url", url}, "--slots"},
      {{"claim", "--queue", "mail", "--slots", "0", "--database-url", url}, "--slots"},
      {{"claim", "--queue", "mail", "--slots", "-1", "--database-url", url}, "-1"},
      {{"claim", "--queue", "mail", "--slots", "two", "--database-url", url}, "two"},
      {{"claim", "--queue", "mail", "--slots", "1", "--mode", "bogus", "--database-url", url},
       "bogus"},
      {{"claim", "--queue", "mail", "--slots", "1", "--worker-id", "not-a-uuid", "--database-url",
        url},
       "not-a-uuid"},
      {{"claim", "--queue", "mail", "--slots", "1", "--frobnicate", "--database-url", url},
       "--frobnicate"},
      {{"claim", "--queue", "mail", "--slots", "1", "--repeat", "3", "--database-url", url}, "--dry-run"},
      {{"claim", "--queue", "mail", "--slots", "1", "--dry-run", "--repeat", "0", "--database-url", url},
       "--repeat"},
      {{"frobnicate", "--queue", "mail"}, "unknown command 'frobnicate'"},
      {{}, "subcommand"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.args);
    test::CommandResult r = test::RunAkadzed(c.args);
    CAPTURE(r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.out.empty());
    CHECK(test::Lines(r.err).size() == 1);
    CHECK(r.err.find(c.mentions) != std::string::npos);
  }
  // None of them claimed anything.
  CHECK(conn.exec("SELECT count(*) FROM akadze.jobs WHERE state <> 'queued'").int64(0, 0) == 0);
}

TEST_CASE("cli claim: an unreachable or unmigrated database exits 1", "[cli][claim]") {
  SECTION("unreachable") {
    test::CommandResult r = test::RunAkadzed(
        {"claim", "--queue", "mail", "--slots", "1", "--json", "--database-url",
         "postgresql://bob:hunter2@/db?host=/nonexistent-akadzed-dir"});
    CAPTURE(r.err);
    CHECK(r.exit_code == 1);
    CHECK(r.out.empty());
    CHECK(test::Lines(r.err).size() == 1);
    CHECK(r.err.rfind("claim failed: ", 0) == 0);
    CHECK(r.err.find("hunter2") == std::string::npos);
  }
  SECTION("through AKADZE_DATABASE_URL") {
    test::CommandResult r = test::RunAkadzed(
        {"claim", "--queue", "mail", "--slots", "1"},
        {{"AKADZE_DATABASE_URL", "postgresql://bob:hunter2@/db?host=/nonexistent-akadzed-dir"}});
    CAPTURE(r.err);
    CHECK(r.exit_code == 1);
    CHECK(test::Lines(r.err).size() == 1);
    CHECK(r.err.rfind("claim failed: ", 0) == 0);
  }
  SECTION("unmigrated") {
    test::CommandResult r = test::RunAkadzed(
        {"claim", "--queue", "mail", "--slots", "1", "--database-url", test::FreshDatabase(false)});
    CAPTURE(r.err);
    CHECK(r.exit_code == 1);
    CHECK(r.out.empty());
    CHECK(test::Lines(r.err).size() == 1);
    CHECK(r.err.rfind("claim failed: ", 0) == 0);
    CHECK(r.err.find("akadze.") != std::string::npos);
  }
}

}  // namespace akadzed
