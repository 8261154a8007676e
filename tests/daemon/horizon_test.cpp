// What holds back the MVCC horizon (store/horizon.h, metrics/horizon_watch.h,
// docs/operations.md "The MVCC horizon") against a real PostgreSQL: a
// session held in REPEATABLE READ after one SELECT, one idle in transaction
// after a write and a prepared transaction are found with their identity and
// an age that grows; another role's session is listed as hidden, not left
// out, until the role gets pg_read_all_stats; the daemon's /metrics gauge,
// its warning once per episode and its end line; /api/status and `akadzed
// status`. Every wait is for a condition, never a fixed sleep.
#include <catch2/catch.hpp>

#include <algorithm>
#include <csignal>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "claim/stored_floor.h"
#include "daemon/daemon_fixture.h"
#include "embedded/throwaway_postgres.h"
#include "store/horizon.h"
#include "support/http_probe.h"
#include "support/prometheus_text.h"
#include "support/run_command.h"

namespace akadzed::test {
namespace {

using nlohmann::json;

// The holder of `kind` with `pid` (or, for a prepared transaction, `gid`)
// in `report`, or nullptr.
const HorizonHolder* Find(const HorizonReport& report, const std::string& kind, std::int64_t pid,
                          const std::string& gid = "") {
  for (const HorizonHolder& h : report.holders) {
    if (h.kind != kind) continue;
    if (kind == "prepared_transaction" ? h.gid == gid : h.pid == pid) return &h;
  }
  return nullptr;
}

std::int64_t BackendPid(pg::Connection& conn) { return conn.exec("SELECT pg_backend_pid()").int64(0, 0); }

// How many times `needle` occurs in `text`.
std::size_t Occurrences(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST_CASE("horizon: a snapshot, an idle writer and a prepared transaction are found with an age "
          "that grows; another role's session is hidden, not left out", "[horizon]") {
  // A cluster of its own: prepared transactions need max_prepared_transactions
  // at start, and the test gives a role a privilege.
  ThrowawayPostgresOptions options;
  options.settings = {"max_prepared_transactions=2"};
  std::unique_ptr<ThrowawayPostgres> pg = ThrowawayPostgres::Start(options);
  pg::Connection admin = pg::Connection::Open(pg->conninfo());
  admin.exec("CREATE TABLE scratch (x int); CREATE ROLE watcher LOGIN; GRANT SELECT ON scratch TO watcher");
  pg::Connection reader = pg::Connection::Open(pg->conninfo());
  pg::Connection watcher = pg::Connection::Open(pg->conninfo() + " user=watcher");

  // Nothing holds it: no holder, and the superuser sees everything.
  HorizonReport idle = ReadHorizon(reader);
  CHECK(idle.holders.empty());
  CHECK(idle.holders_total == 0);
  CHECK(idle.stats_visible);

  // A snapshot held after one SELECT.
  pg::Connection snapshot = pg::Connection::Open(pg->conninfo(), "nightly-report");
  const std::int64_t snapshot_pid = BackendPid(snapshot);
  snapshot.exec("BEGIN ISOLATION LEVEL REPEATABLE READ");
  snapshot.exec("SELECT count(*) FROM scratch");
  HorizonReport r;
  REQUIRE(WaitUntil([&] {
    r = ReadHorizon(reader);
    return Find(r, "backend", snapshot_pid) != nullptr;
  }));
  const HorizonHolder first = *Find(r, "backend", snapshot_pid);
  CHECK(first.application_name == "nightly-report");
  CHECK(first.state == "idle in transaction");
  CHECK(first.backend_type == "client backend");
  CHECK(first.database == "postgres");
  CHECK(first.xact_start.has_value());
  CHECK(first.query_start.has_value());
  CHECK_FALSE(first.hidden);
  REQUIRE(first.age_seconds);
  CHECK(*first.age_seconds >= 1.0);  // younger holders are left out
  // The age grows.
  REQUIRE(WaitUntil([&] {
    r = ReadHorizon(reader);
    const HorizonHolder* h = Find(r, "backend", snapshot_pid);
    return h != nullptr && h->age_seconds && *h->age_seconds >= *first.age_seconds + 1.0;
  }));

  // A writer idle in transaction (READ COMMITTED: no snapshot between
  // statements, an xid) and a prepared transaction.
  pg::Connection writer = pg::Connection::Open(pg->conninfo(), "forgetful-client");
  const std::int64_t writer_pid = BackendPid(writer);
  writer.exec("BEGIN");
  writer.exec("INSERT INTO scratch VALUES (1)");
  pg::Connection preparer = pg::Connection::Open(pg->conninfo());
  preparer.exec("BEGIN");
  preparer.exec("INSERT INTO scratch VALUES (2)");
  preparer.exec("PREPARE TRANSACTION 'horizon-test'");
  REQUIRE(WaitUntil([&] {
    r = ReadHorizon(reader);
    return Find(r, "backend", writer_pid) != nullptr &&
           Find(r, "prepared_transaction", 0, "horizon-test") != nullptr;
  }));
  CHECK(r.holders_total == 3);
  const HorizonHolder* w = Find(r, "backend", writer_pid);
  CHECK(w->application_name == "forgetful-client");
  CHECK(w->state == "idle in transaction");
  const HorizonHolder* p = Find(r, "prepared_transaction", 0, "horizon-test");
  CHECK(p->owner == "postgres");
  CHECK(p->database == "postgres");
  CHECK_FALSE(p->pid);
  REQUIRE(p->age_seconds);
  CHECK(*p->age_seconds >= 1.0);
  // Oldest first: the snapshot began before the others.
  CHECK(r.holders[0].pid == snapshot_pid);
  // At most max_holders listed, all counted.
  CHECK(ReadHorizon(reader, {.max_holders = 1}).holders.size() == 1);
  CHECK(ReadHorizon(reader, {.max_holders = 1}).holders_total == 3);

  // Another role without pg_read_all_stats: the superuser's sessions are
  // listed, hidden, with no age in seconds, never left out.
  HorizonReport seen = ReadHorizon(watcher);
  CHECK_FALSE(seen.stats_visible);
  const HorizonHolder* hidden = Find(seen, "backend", snapshot_pid);
  REQUIRE(hidden != nullptr);
  CHECK(hidden->hidden);
  CHECK_FALSE(hidden->age_seconds);
  CHECK_FALSE(hidden->state);
  CHECK(hidden->application_name == "nightly-report");
  CHECK(hidden->xid_age >= first.xid_age);
  // The prepared transaction shows to every role.
  CHECK(Find(seen, "prepared_transaction", 0, "horizon-test") != nullptr);
  admin.exec("GRANT pg_read_all_stats TO watcher");
  seen = ReadHorizon(watcher);
  CHECK(seen.stats_visible);
  REQUIRE(Find(seen, "backend", snapshot_pid) != nullptr);
  CHECK_FALSE(Find(seen, "backend", snapshot_pid)->hidden);
  CHECK(Find(seen, "backend", snapshot_pid)->state == "idle in transaction");

  // Ended, each is gone.
  snapshot.exec("COMMIT");
  writer.exec("ROLLBACK");
  admin.exec("ROLLBACK PREPARED 'horizon-test'");
  r = ReadHorizon(reader);
  CHECK(r.holders.empty());
  CHECK(r.holders_total == 0);
}

// The daemon against the program's cluster: one fair queue, a handler never
// used, the warning after 1 s.
struct HorizonFixture : HandlerTestFixture {
  std::string ok = dir.Write("ok.sh", "#!/bin/sh\n", true);
  std::string WithBound(const std::string& bound) {
    return Config(ShellHandlerYaml("ok", ok), "database: {horizon_warn_after: " + bound + "}\n");
  }
};

double Gauge(int port, const std::string& name, const PromLabels& labels = {}) {
  const HttpAnswer answer = HttpGet(port, "/metrics");
  REQUIRE(answer.status == 200);
  const std::optional<double> v = ParsePrometheusText(answer.body).Value(name, labels);
  INFO(name);
  REQUIRE(v);
  return *v;
}

TEST_CASE("horizon: the daemon's gauge, one warning per episode naming the holder, and its end",
          "[daemon][metrics][horizon]") {
  HorizonFixture f;
  f.conn.exec("CREATE TABLE scratch (x int)");
  auto daemon = f.Start(f.WithBound("1s"));
  const int port = ListenerPort(*daemon);
  CHECK(Gauge(port, "akadzed_db_stats_visible") == 1);
  CHECK(Gauge(port, "akadzed_db_dead_tuples", {{"table", "jobs"}}) >= 0);

  // Episode 1: a snapshot held after one SELECT.
  pg::Connection holder = pg::Connection::Open(DirectConninfo(f.db), "nightly-report");
  const std::string pid = std::to_string(BackendPid(holder));
  holder.exec("BEGIN ISOLATION LEVEL REPEATABLE READ");
  holder.exec("SELECT count(*) FROM akadze.jobs");
  const std::string held = "horizon_held kind=backend pid=" + pid + " application_name=nightly-report"
                           " state=\"idle in transaction\" backend_type=\"client backend\"";
  REQUIRE(daemon->WaitForLog(held));
  // The gauge shows it, and grows: every scrape is a read the watch is fed.
  double first = 0;
  REQUIRE(WaitUntil([&] { return (first = Gauge(port, "akadzed_db_horizon_age_seconds")) >= 1.0; }));
  REQUIRE(WaitUntil([&] { return Gauge(port, "akadzed_db_horizon_age_seconds") >= first + 2.0; }));
  CHECK(Gauge(port, "akadzed_db_horizon_holders") >= 1);
  CHECK(Gauge(port, "akadzed_db_horizon_xid_age") >= 0);
  // Many reads later, still one line for this episode.
  CHECK(Occurrences(daemon->Log(), held) == 1);
  const std::string log = daemon->Log();
  CHECK(log.find("SELECT count(*)") == std::string::npos);  // never the query

  // Its end: one line with the episode's length; the gauge falls back.
  holder.exec("COMMIT");
  REQUIRE(daemon->WaitForLog("event=horizon_released"));
  REQUIRE(WaitUntil([&] { return Gauge(port, "akadzed_db_horizon_age_seconds") < 1.0; }));

  // Episode 2: a writer idle in transaction; one more warning, one more end.
  holder.exec("BEGIN");
  holder.exec("INSERT INTO scratch VALUES (1)");
  REQUIRE(WaitUntil([&] { return Occurrences(daemon->Log(), held) == 2; }));
  holder.exec("ROLLBACK");
  REQUIRE(WaitUntil([&] { return Occurrences(daemon->Log(), "event=horizon_released") >= 2; }));
  // One warning per episode (counted by the holder's pid: a daemon
  // transaction of over a second on a loaded machine would be an episode of
  // its own).
  const std::string all = daemon->Log();
  CHECK(Occurrences(all, held) == 2);
  CHECK(Occurrences(all, "event=horizon_stats_hidden") == 0);
}

// A daemon writes its queue's claim floor to akadze.queue_floors (migration
// 013, claim/stored_floor.h); a daemon started later, on the same database
// while a snapshot still holds the horizon, begins its first claim there
// instead of at the head of a queue its predecessor left full of dead
// entries (docs/claim.md, "Stored floors").
TEST_CASE("horizon: a restarted daemon's first claim starts from the stored floor", "[daemon][horizon][floor]") {
  HorizonFixture f;
  pg::Connection holder = pg::Connection::Open(DirectConninfo(f.db), "nightly-report");
  holder.exec("BEGIN ISOLATION LEVEL REPEATABLE READ");
  holder.exec("SELECT count(*) FROM akadze.jobs");
  auto first = f.Start(f.WithBound("off"));
  f.conn.exec("INSERT INTO akadze.jobs (task) SELECT 'ok' FROM generate_series(1, 400)");
  REQUIRE(WaitUntil([&] { return f.Count("SELECT count(*) FROM akadze.jobs WHERE state = 'succeeded'") == 400; },
                    std::chrono::seconds(60)));
  // A floor stored after the last of them was claimed (its rounds go on
  // while the queue is empty, each moving the floor to its now).
  const std::uint64_t after =
      std::stoull(std::string(f.conn.exec("SELECT pg_current_xact_id()::text").text(0, 0)));
  REQUIRE(WaitUntil([&] {
    const ClaimFloor stored = LoadQueueFloor(f.conn, "default");
    const std::optional<SnapshotXids> s = ParseSnapshot(stored.snapshot);
    return !stored.empty() && s && s->xmax > after;
  }));
  first->Signal(SIGTERM);
  REQUIRE(first->Wait() == 0);

  auto second = f.Start(f.WithBound("off"));
  const int port = ListenerPort(*second);
  const std::int64_t job = f.Enqueue("ok");
  REQUIRE(f.WaitState(job, "succeeded"));
  // Its claims stepped over none of the 400 dead entries (from the heads:
  // all of them).
  const HttpAnswer answer = HttpGet(port, "/metrics");
  REQUIRE(answer.status == 200);
  const std::optional<double> dead =
      ParsePrometheusText(answer.body).Value("akadzed_claim_dead_index_entries_total", {{"queue", "default"}});
  REQUIRE(dead);
  CHECK(*dead < 20);
  holder.exec("COMMIT");
}

TEST_CASE("horizon: off logs no warning; the gauge still reads it", "[daemon][metrics][horizon]") {
  HorizonFixture f;
  auto daemon = f.Start(f.WithBound("off"));
  const int port = ListenerPort(*daemon);
  pg::Connection holder = pg::Connection::Open(DirectConninfo(f.db), "nightly-report");
  holder.exec("BEGIN ISOLATION LEVEL REPEATABLE READ");
  holder.exec("SELECT count(*) FROM akadze.jobs");
  REQUIRE(WaitUntil([&] { return Gauge(port, "akadzed_db_horizon_age_seconds") >= 2.0; }));
  CHECK(daemon->Log().find("horizon_held") == std::string::npos);
  holder.exec("COMMIT");
}

// The horizon object without what changes between two reads.
json WithoutAges(json horizon) {
  for (json& h : horizon["holders"]) {
    h.erase("age_seconds");
    h.erase("xid_age");
  }
  return horizon;
}

TEST_CASE("horizon: /api/status and `akadzed status` show the holder and its age",
          "[daemon][web][horizon]") {
  HorizonFixture f;
  auto daemon = f.Start(f.WithBound("5m"));
  const int port = ListenerPort(*daemon);
  pg::Connection holder = pg::Connection::Open(DirectConninfo(f.db), "nightly-report");
  const std::int64_t pid = BackendPid(holder);
  holder.exec("BEGIN ISOLATION LEVEL REPEATABLE READ");
  holder.exec("SELECT count(*) FROM akadze.jobs");

  const auto ours = [&](const json& status) -> const json* {
    for (const json& h : status["horizon"]["holders"]) {
      if (h["pid"] == pid) return &h;
    }
    return nullptr;
  };
  json status;
  REQUIRE(WaitUntil([&] {
    const HttpAnswer answer = HttpGet(port, "/api/status");
    status = json::parse(answer.body);
    return ours(status) != nullptr;
  }));
  const json& h = *ours(status);
  CHECK(h["kind"] == "backend");
  CHECK(h["application_name"] == "nightly-report");
  CHECK(h["state"] == "idle in transaction");
  CHECK(h["backend_type"] == "client backend");
  CHECK(h["hidden"] == false);
  CHECK(h["xact_start"].is_string());
  CHECK(h["age_seconds"].get<double>() >= 1.0);
  CHECK(h.find("query") == h.end());
  CHECK(status["horizon"]["stats_visible"] == true);
  CHECK(status["horizon"]["holders_total"].get<std::int64_t>() >= 1);

  // The CLI prints the same report, the age grown.
  CommandResult cli = RunAkadzed({"status", "--json", "--database-url", f.db});
  INFO(cli.err);
  REQUIRE(cli.exit_code == 0);
  const json printed = json::parse(cli.out);
  CHECK(WithoutAges(printed["horizon"]) == WithoutAges(status["horizon"]));
  REQUIRE(ours(printed) != nullptr);
  CHECK((*ours(printed))["age_seconds"].get<double>() >= h["age_seconds"].get<double>());

  CommandResult text = RunAkadzed({"status", "--database-url", f.db});
  REQUIRE(text.exit_code == 0);
  CHECK(text.out.find("== horizon: what holds back vacuum of akadze.jobs, oldest first ==\n"
                      "KIND\tPID\tNAME\tSTATE\tBACKEND_TYPE\tXACT_START\tAGE\tXID_AGE\n") != std::string::npos);
  CHECK(text.out.find("backend\t" + std::to_string(pid) + "\tnightly-report\tidle in transaction\tclient backend\t") !=
        std::string::npos);
  CHECK(text.out.find("pg_read_all_stats") == std::string::npos);  // the test's role sees all
  holder.exec("COMMIT");
}

}  // namespace
}  // namespace akadzed::test
