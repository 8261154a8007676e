// Tests of the schema and its migrations (schema/migrations.h, migrations/*.sql)
// against akadze's criteria: versions applied in order and recorded once,
// idempotent and concurrency-safe Migrate(), atomic failure, the columns,
// defaults, constraints, indexes and reloptions of SPEC §1, and the
// `akadzed migrate` command (flag, environment, failures, bad usage).
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "pg/connection.h"
#include "pg/pg_error.h"
#include "pg/transaction.h"
#include "schema/migrations.h"
#include "support/caught_error.h"
#include "support/run_command.h"
#include "support/test_cluster.h"

namespace akadzed {
namespace {

using pg::Connection;
using pg::Params;
using pg::Result;

const std::vector<std::string> kAllVersions = {"001_initial", "002_queue_pauses",
                                               "003_limit_keys", "004_claim_key_index",
                                               "005_limit_window_bound", "006_enqueue",
                                               "007_status_page", "008_queue_caps",
                                               "009_queued_xid", "010_running_xid",
                                               "011_worker_running_xid", "012_worker_stops",
                                               "013_queue_floors", "014_worker_running_floor",
                                               "015_limit_starts_started_at"};

// Polls `condition` until it holds or `timeout` passes; returns whether it held.
template <typename F>
bool Eventually(F&& condition, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // poll interval, not a wait
  }
}

std::vector<std::string> Column(const Result& r, int column = 0) {
  std::vector<std::string> out;
  for (int i = 0; i < r.rows(); ++i) out.emplace_back(r.text(i, column));
  return out;
}

// The SQLSTATE of the PgError `body` throws, "" when it throws none.
template <typename F>
std::string SqlStateOf(F&& body, std::string* message = nullptr) {
  test::Caught caught = test::Capture(std::forward<F>(body));
  // Anything but a PgError is not an answer to "which SQLSTATE": fail loudly.
  if (caught.kind == "other") throw std::runtime_error("not a PgError: " + caught.message);
  if (message != nullptr && caught.kind != "none") *message = caught.message;
  return caught.sqlstate;
}

// Inserts a job with `columns` = `values` (SQL text) and returns the SQLSTATE
// of the failure, "" on success.
std::string InsertJob(Connection& conn, const std::string& columns, const std::string& values,
                      std::string* message = nullptr) {
  return SqlStateOf(
      [&] {
        conn.exec("INSERT INTO akadze.jobs (task, " + columns + ") VALUES ('t', " + values + ")");
      },
      message);
}

std::string InsertLimit(Connection& conn, const std::string& values,
                        std::string* message = nullptr) {
  return SqlStateOf(
      [&] {
        conn.exec("INSERT INTO akadze.limits (key, max_running, max_starts, starts_window)"
                  " VALUES (" + values + ")");
      },
      message);
}

}  // namespace

// ---------------------------------------------------------------- Migrate()

TEST_CASE("migrations: the embedded migrations are 001-003 in order", "[migrations]") {
  std::vector<std::string> versions;
  for (const Migration& m : EmbeddedMigrations()) {
    versions.emplace_back(m.version);
    CHECK_FALSE(m.sql.empty());
  }
  CHECK(versions == kAllVersions);
  CHECK(ExpectedSchemaVersion() == "015_limit_starts_started_at");
}

TEST_CASE("migrations: Migrate applies every version in order, then nothing",
          "[migrations]") {
  Connection conn = Connection::Open(test::FreshDatabase(false));
  CHECK(AppliedMigrations(conn).empty());
  CHECK(conn.exec("SELECT to_regnamespace('akadze') IS NULL").boolean(0, 0));

  std::vector<std::string> applied = Migrate(conn);
  CHECK(applied == kAllVersions);
  CHECK(AppliedMigrations(conn) == kAllVersions);
  Result rows = conn.exec("SELECT version, applied_at IS NOT NULL, applied_at <= now()"
                          " FROM akadze.schema_migrations ORDER BY version");
  REQUIRE(rows.rows() == static_cast<int>(kAllVersions.size()));
  CHECK(Column(rows) == kAllVersions);
  for (int i = 0; i < rows.rows(); ++i) {
    CHECK(rows.boolean(i, 1));
    CHECK(rows.boolean(i, 2));
  }
  CHECK(conn.exec("SELECT to_regclass('akadze.limits') IS NOT NULL").boolean(0, 0));

  SECTION("a second run applies nothing") {
    CHECK(Migrate(conn).empty());
    CHECK(AppliedMigrations(conn) == kAllVersions);
    CHECK(conn.exec("SELECT count(*) FROM akadze.schema_migrations").int64(0, 0) ==
          static_cast<std::int64_t>(kAllVersions.size()));
  }

  SECTION("a later migration is applied alone") {
    std::vector<Migration> more(EmbeddedMigrations().begin(), EmbeddedMigrations().end());
    more.push_back(Migration{"999_test_extra", "CREATE TABLE akadze.test_extra (id int)"});
    CHECK(Migrate(conn, more) == std::vector<std::string>{"999_test_extra"});
    CHECK(conn.exec("SELECT to_regclass('akadze.test_extra') IS NOT NULL").boolean(0, 0));
    CHECK(Migrate(conn, more).empty());
    CHECK(AppliedMigrations(conn).back() == "999_test_extra");
  }
}

TEST_CASE("migrations: the template used by FreshDatabase(true) is fully migrated",
          "[migrations]") {
  Connection conn = Connection::Open(test::FreshDatabase(true));
  CHECK(AppliedMigrations(conn) == kAllVersions);
  CHECK(Migrate(conn).empty());
}

TEST_CASE("migrations: a failing migration applies nothing", "[migrations]") {
  Connection conn = Connection::Open(test::FreshDatabase(false));
  const std::vector<Migration> broken = {
      {"001_ok", "CREATE TABLE akadze.first (id int)"},
      {"002_broken", "CREATE TABLE akadze.second (id no_such_type)"},
  };
  std::string message;
  CHECK(SqlStateOf([&] { Migrate(conn, broken); }, &message) == "42704");
  CHECK(message.find("002_broken") != std::string::npos);
  CHECK_THROWS_AS(Migrate(conn, broken), pg::SqlError);
  // Everything was one transaction: not even the schema is left behind.
  CHECK(conn.exec("SELECT to_regnamespace('akadze') IS NULL").boolean(0, 0));
  CHECK(AppliedMigrations(conn).empty());
  CHECK(conn.healthy());
  CHECK(Migrate(conn) == kAllVersions);
}

TEST_CASE("migrations: concurrent Migrate calls both succeed and apply each version once",
          "[migrations][concurrency]") {
  const std::string url = test::FreshDatabase(false);
  Connection holder = Connection::Open(url);
  Connection monitor = Connection::Open(url);
  Connection c1 = Connection::Open(url);
  Connection c2 = Connection::Open(url);

  // Hold the migration lock so both calls are in flight, waiting, at once.
  auto hold = std::make_unique<pg::Transaction>(holder);
  hold->exec("SELECT pg_advisory_xact_lock(hashtext('akadze.migrate'))");

  std::vector<std::string> r1, r2;
  std::exception_ptr e1, e2;
  std::thread t1([&] {
    try {
      r1 = Migrate(c1);
    } catch (...) {
      e1 = std::current_exception();
    }
  });
  std::thread t2([&] {
    try {
      r2 = Migrate(c2);
    } catch (...) {
      e2 = std::current_exception();
    }
  });
  const bool both_waited = Eventually([&] { return test::AdvisoryLockWaiters(monitor) == 2; });
  hold->commit();
  t1.join();
  t2.join();

  CHECK(both_waited);
  auto describe = [](const std::exception_ptr& e) -> std::string {
    if (!e) return "";
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      return ex.what();
    }
  };
  CHECK(describe(e1).empty());
  CHECK(describe(e2).empty());
  // One applied everything, the other found the schema up to date.
  std::vector<std::string> all = r1;
  all.insert(all.end(), r2.begin(), r2.end());
  CHECK(all == kAllVersions);
  CHECK((r1.empty() || r2.empty()));
  CHECK(AppliedMigrations(monitor) == kAllVersions);
  CHECK(monitor.exec("SELECT count(*) FROM akadze.schema_migrations").int64(0, 0) ==
        static_cast<std::int64_t>(kAllVersions.size()));
}

// ---------------------------------------------------------------- the schema

TEST_CASE("migrations: akadze.jobs has akadze's columns plus limit_key", "[migrations][schema]") {
  Connection conn = Connection::Open(test::FreshDatabase(true));
  Result r = conn.exec(
      "SELECT column_name || ':' || data_type || ':' || is_nullable"
      " FROM information_schema.columns WHERE table_schema = 'akadze' AND table_name = 'jobs'"
      " ORDER BY ordinal_position");
  const std::vector<std::string> expected = {
      "id:bigint:NO",
      "task:text:NO",
      "queue:text:NO",
      "priority:smallint:NO",
      "state:text:NO",
      "args:jsonb:NO",
      "meta:jsonb:NO",
      "run_count:integer:NO",
      "attempt:integer:NO",
      "max_attempts:integer:NO",
      "snoozes:integer:NO",
      "run_at:timestamp with time zone:NO",
      "expires_at:timestamp with time zone:YES",
      "unique_key:text:YES",
      "worker_id:uuid:YES",
      "cancel_requested_at:timestamp with time zone:YES",
      "errors:jsonb:NO",
      "result:jsonb:YES",
      "created_at:timestamp with time zone:NO",
      "started_at:timestamp with time zone:YES",
      "finished_at:timestamp with time zone:YES",
      "limit_key:text:YES",
      "queued_xid:xid8:YES",
      "running_xid:xid8:YES",
  };
  CHECK(Column(r) == expected);
  Result id = conn.exec(
      "SELECT is_identity, identity_generation FROM information_schema.columns"
      " WHERE table_schema = 'akadze' AND table_name = 'jobs' AND column_name = 'id'");
  REQUIRE(id.rows() == 1);
  CHECK(id.text(0, 0) == "YES");
  CHECK(id.text(0, 1) == "ALWAYS");
  CHECK(InsertJob(conn, "id", "1") == "428C9");  // GENERATED ALWAYS

  Result tables = conn.exec(
      "SELECT table_name FROM information_schema.tables WHERE table_schema = 'akadze'"
      " ORDER BY table_name");
  CHECK(Column(tables) == std::vector<std::string>{"jobs", "limit_starts", "limits",
                                                   "periodic_runs", "queue_caps", "queue_floors", "queue_minutes",
                                                   "queue_pauses", "schema_migrations", "worker_stops", "workers"});
  Result others = conn.exec(
      "SELECT table_name || '.' || column_name || ':' || data_type || ':' || is_nullable"
      " FROM information_schema.columns WHERE table_schema = 'akadze'"
      " AND table_name IN ('workers', 'periodic_runs', 'queue_pauses', 'limits', 'queue_minutes',"
      " 'queue_caps', 'worker_stops', 'queue_floors')"
      " ORDER BY table_name, ordinal_position");
  CHECK(Column(others) == std::vector<std::string>{
                              "limits.key:text:NO",
                              "limits.max_running:integer:YES",
                              "limits.max_starts:integer:YES",
                              "limits.starts_window:interval:YES",
                              "periodic_runs.name:text:NO",
                              "periodic_runs.fire_at:timestamp with time zone:NO",
                              "periodic_runs.job_id:bigint:YES",
                              "queue_caps.queue:text:NO",
                              "queue_caps.max_running:integer:NO",
                              "queue_caps.set_at:timestamp with time zone:NO",
                              "queue_floors.queue:text:NO",
                              "queue_floors.floor:jsonb:NO",
                              "queue_floors.set_at:timestamp with time zone:NO",
                              "queue_minutes.minute:timestamp with time zone:NO",
                              "queue_minutes.queue:text:NO",
                              "queue_minutes.succeeded:bigint:NO",
                              "queue_minutes.failed:bigint:NO",
                              "queue_minutes.cancelled:bigint:NO",
                              "queue_pauses.queue:text:NO",
                              "queue_pauses.paused_at:timestamp with time zone:NO",
                              "worker_stops.id:uuid:NO",
                              "worker_stops.from_xid:xid8:NO",
                              "worker_stops.points:ARRAY:NO",
                              "worker_stops.stopped_at:timestamp with time zone:NO",
                              "workers.id:uuid:NO",
                              "workers.hostname:text:NO",
                              "workers.pid:integer:NO",
                              "workers.queues:ARRAY:NO",
                              "workers.started_at:timestamp with time zone:NO",
                              "workers.heartbeat_at:timestamp with time zone:NO", "workers.running_floor:jsonb:YES",
                          });
}

TEST_CASE("migrations: queued_xid names the transaction that last made a row queued, whoever writes it",
          "[migrations][schema]") {
  Connection conn = Connection::Open(test::FreshDatabase(true));
  auto xid_of = [&](const std::string& sql) {
    pg::Transaction tx(conn);
    Result r = tx.exec(sql + " RETURNING queued_xid::text, pg_current_xact_id()::text");
    REQUIRE(r.rows() == 1);
    std::pair<std::string, std::string> got{std::string(r.text(0, 0)), std::string(r.text(0, 1))};
    tx.commit();
    return got;
  };
  // A plain INSERT as akadze's library writes it, and one naming a value.
  auto [plain, plain_tx] = xid_of("INSERT INTO akadze.jobs (task) VALUES ('t')");
  CHECK(plain == plain_tx);
  auto [named, named_tx] = xid_of("INSERT INTO akadze.jobs (task, queued_xid) VALUES ('t', '3')");
  CHECK(named == named_tx);
  const std::string id = std::string(conn.exec("SELECT max(id)::text FROM akadze.jobs").text(0, 0));
  // A claim leaves it; back to queued (a retry, a release, any UPDATE that
  // leaves the row queued) rewrites it, whatever the UPDATE sets.
  auto [claimed, claimed_tx] = xid_of("UPDATE akadze.jobs SET state = 'running' WHERE id = " + id);
  CHECK(claimed == named);
  CHECK(claimed != claimed_tx);
  auto [requeued, requeued_tx] =
      xid_of("UPDATE akadze.jobs SET state = 'queued', queued_xid = '3' WHERE id = " + id);
  CHECK(requeued == requeued_tx);
  auto [moved, moved_tx] = xid_of("UPDATE akadze.jobs SET priority = 5 WHERE id = " + id);
  CHECK(moved == moved_tx);
  // Queued rows are in jobs_queued_xid_idx by queue and transaction.
  Result indexed = conn.exec(
      "SELECT count(*) FROM akadze.jobs WHERE (state = 'queued') IS TRUE"
      " AND queue = 'default' AND queued_xid >= '1'::xid8");
  CHECK(indexed.int64(0, 0) == 2);
  Result definition = conn.exec("SELECT indexdef FROM pg_indexes WHERE indexname = 'jobs_queued_xid_idx'");
  REQUIRE(definition.rows() == 1);
  CHECK(std::string(definition.text(0, 0)).find("(queue, queued_xid) WHERE ((state = 'queued'::text) IS TRUE)") !=
        std::string::npos);
}

TEST_CASE("migrations: running_xid names the transaction that last made a row running, whoever writes it",
          "[migrations][schema]") {
  Connection conn = Connection::Open(test::FreshDatabase(true));
  auto xid_of = [&](const std::string& sql) {
    pg::Transaction tx(conn);
    Result r = tx.exec(sql + " RETURNING coalesce(running_xid::text, ''), pg_current_xact_id()::text");
    REQUIRE(r.rows() == 1);
    std::pair<std::string, std::string> got{std::string(r.text(0, 0)), std::string(r.text(0, 1))};
    tx.commit();
    return got;
  };
  // A queued INSERT leaves it NULL; one inserted running gets it, whatever
  // it names.
  auto [queued, queued_tx] = xid_of("INSERT INTO akadze.jobs (task, limit_key) VALUES ('t', 'k')");
  CHECK(queued.empty());
  auto [inserted, inserted_tx] =
      xid_of("INSERT INTO akadze.jobs (task, state, limit_key, running_xid) VALUES ('t', 'running', 'k', '3')");
  CHECK(inserted == inserted_tx);
  const std::string id = std::string(conn.exec("SELECT min(id)::text FROM akadze.jobs").text(0, 0));
  // A claim by any writer, and any UPDATE that leaves the row running
  // (a heartbeat's progress, a cancel request), rewrite it; a finish
  // leaves it.
  auto [claimed, claimed_tx] = xid_of("UPDATE akadze.jobs SET state = 'running', running_xid = NULL WHERE id = " + id);
  CHECK(claimed == claimed_tx);
  auto [touched, touched_tx] = xid_of("UPDATE akadze.jobs SET meta = '{\"p\": 1}' WHERE id = " + id);
  CHECK(touched == touched_tx);
  auto [finished, finished_tx] = xid_of("UPDATE akadze.jobs SET state = 'succeeded' WHERE id = " + id);
  CHECK(finished == touched);
  CHECK(finished != finished_tx);
  // Running rows with a key are in jobs_running_key_xid_idx, read the way
  // the claim's counts read them.
  Result indexed = conn.exec(
      "SELECT count(*) FROM akadze.jobs WHERE (state = 'running') IS TRUE AND limit_key IS NOT NULL"
      " AND limit_key = 'k' AND running_xid >= '1'::xid8");
  CHECK(indexed.int64(0, 0) == 1);
}

TEST_CASE("migrations: akadze.jobs defaults", "[migrations][schema]") {
  Connection conn = Connection::Open(test::FreshDatabase(true));
  pg::Transaction tx(conn);
  Result r = tx.exec(
      "INSERT INTO akadze.jobs (task) VALUES ('send_email') RETURNING"
      " queue, priority, state, max_attempts, args = '{}'::jsonb, meta = '{}'::jsonb,"
      " errors = '[]'::jsonb, run_count, attempt, snoozes, limit_key IS NULL,"
      " run_at = now(), created_at = now(), expires_at IS NULL, unique_key IS NULL,"
      " worker_id IS NULL, cancel_requested_at IS NULL, result IS NULL, started_at IS NULL,"
      " finished_at IS NULL, id > 0");
  REQUIRE(r.rows() == 1);
  CHECK(r.text(0, 0) == "default");
  CHECK(r.int64(0, 1) == 0);
  CHECK(r.text(0, 2) == "queued");
  CHECK(r.int64(0, 3) == 3);
  for (int c : {4, 5, 6}) CHECK(r.boolean(0, c));
  CHECK(r.int64(0, 7) == 0);
  CHECK(r.int64(0, 8) == 0);
  CHECK(r.int64(0, 9) == 0);
  for (int c = 10; c <= 20; ++c) {
    INFO("column " << c);
    CHECK(r.boolean(0, c));
  }
  tx.commit();
  // run_at ~ now() also as seen from a later statement.
  CHECK(conn.exec("SELECT run_at <= now() AND run_at > now() - interval '1 minute'"
                  " FROM akadze.jobs")
            .boolean(0, 0));
  // Identities increase.
  conn.exec("INSERT INTO akadze.jobs (task) VALUES ('b')");
  CHECK(conn.exec("SELECT max(id) > min(id) FROM akadze.jobs").boolean(0, 0));
}

TEST_CASE("migrations: akadze.jobs check constraints", "[migrations][schema]") {
  Connection conn = Connection::Open(test::FreshDatabase(true));
  std::string message;

  for (const char* state : {"queued", "running", "succeeded", "failed", "cancelled"}) {
    CHECK(InsertJob(conn, "state", std::string("'") + state + "'") == "");
  }
  CHECK(InsertJob(conn, "state", "'done'", &message) == "23514");
  CHECK(message.find("jobs_state_check") != std::string::npos);
  CHECK(InsertJob(conn, "state", "NULL") == "23502");

  CHECK(InsertJob(conn, "attempt", "0") == "");
  CHECK(InsertJob(conn, "attempt", "-1", &message) == "23514");
  CHECK(message.find("jobs_attempt_check") != std::string::npos);

  CHECK(InsertJob(conn, "max_attempts", "1") == "");
  CHECK(InsertJob(conn, "max_attempts", "0", &message) == "23514");
  CHECK(message.find("jobs_max_attempts_check") != std::string::npos);

  CHECK(InsertJob(conn, "run_count", "0") == "");
  CHECK(InsertJob(conn, "run_count", "-1", &message) == "23514");
  CHECK(message.find("jobs_run_count_check") != std::string::npos);

  CHECK(InsertJob(conn, "snoozes", "0") == "");
  CHECK(InsertJob(conn, "snoozes", "-1", &message) == "23514");
  CHECK(message.find("jobs_snoozes_check") != std::string::npos);

  // Updates are checked too.
  CHECK(SqlStateOf([&] { conn.exec("UPDATE akadze.jobs SET attempt = attempt - 1"); }) == "23514");
  // task is required.
  CHECK(SqlStateOf([&] { conn.exec("INSERT INTO akadze.jobs (queue) VALUES ('q')"); }) == "23502");
}

TEST_CASE("migrations: unique_key is unique among queued and running jobs only",
          "[migrations][schema]") {
  Connection conn = Connection::Open(test::FreshDatabase(true));
  std::string message;

  CHECK(InsertJob(conn, "unique_key, state", "'k1', 'queued'") == "");
  CHECK(InsertJob(conn, "unique_key, state", "'k1', 'queued'", &message) == "23505");
  CHECK(message.find("jobs_unique_key_active_idx") != std::string::npos);
  CHECK(InsertJob(conn, "unique_key, state", "'k1', 'running'") == "23505");
  for (const char* finished : {"succeeded", "failed", "cancelled"}) {
    CHECK(InsertJob(conn, "unique_key, state", std::string("'k1', '") + finished + "'") == "");
    CHECK(InsertJob(conn, "unique_key, state", std::string("'k1', '") + finished + "'") == "");
  }

  CHECK(InsertJob(conn, "unique_key, state", "'k2', 'running'") == "");
  CHECK(InsertJob(conn, "unique_key, state", "'k2', 'queued'") == "23505");

  // Without a key there is no uniqueness.
  CHECK(InsertJob(conn, "unique_key, state", "NULL, 'queued'") == "");
  CHECK(InsertJob(conn, "unique_key, state", "NULL, 'queued'") == "");

  // A finished job cannot come back while another active job holds its key.
  CHECK(SqlStateOf([&] {
          conn.exec("UPDATE akadze.jobs SET state = 'queued'"
                    " WHERE unique_key = 'k1' AND state = 'failed'");
        }) == "23505");
  // Once the active one finishes, the key is free again.
  conn.exec("UPDATE akadze.jobs SET state = 'succeeded' WHERE unique_key = 'k2'");
  CHECK(InsertJob(conn, "unique_key, state", "'k2', 'queued'") == "");
}

TEST_CASE("migrations: akadze.limits check constraints", "[migrations][schema]") {
  Connection conn = Connection::Open(test::FreshDatabase(true));
  std::string message;

  CHECK(InsertLimit(conn, "'all-null', NULL, NULL, NULL") == "");
  CHECK(InsertLimit(conn, "'running', 1, NULL, NULL") == "");
  CHECK(InsertLimit(conn, "'starts', NULL, 1, interval '1 microsecond'") == "");
  CHECK(InsertLimit(conn, "'*', 5, 10, interval '1 minute'") == "");
  CHECK(InsertLimit(conn, "'running', 2, NULL, NULL") == "23505");  // key is the primary key
  CHECK(InsertLimit(conn, "NULL, 2, NULL, NULL") == "23502");

  CHECK(InsertLimit(conn, "'a', 0, NULL, NULL", &message) == "23514");
  CHECK(message.find("limits_max_running_check") != std::string::npos);
  CHECK(InsertLimit(conn, "'a', -3, NULL, NULL") == "23514");

  CHECK(InsertLimit(conn, "'a', NULL, 0, interval '1 minute'", &message) == "23514");
  CHECK(message.find("limits_max_starts_check") != std::string::npos);

  CHECK(InsertLimit(conn, "'a', NULL, 1, interval '0'", &message) == "23514");
  CHECK(message.find("limits_starts_window_check") != std::string::npos);
  CHECK(InsertLimit(conn, "'a', NULL, 1, interval '-1 second'") == "23514");

  CHECK(InsertLimit(conn, "'a', NULL, 1, NULL", &message) == "23514");
  CHECK(message.find("limits_starts_pair_check") != std::string::npos);
  CHECK(InsertLimit(conn, "'a', NULL, NULL, interval '1 minute'", &message) == "23514");
  CHECK(message.find("limits_starts_pair_check") != std::string::npos);

  CHECK(conn.exec("SELECT count(*) FROM akadze.limits").int64(0, 0) == 4);
}

TEST_CASE("migrations: indexes and autovacuum settings", "[migrations][schema]") {
  Connection conn = Connection::Open(test::FreshDatabase(true));
  Result r = conn.exec(
      "SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i"
      " JOIN pg_class c ON c.oid = i.indexrelid"
      " WHERE i.indrelid = 'akadze.jobs'::regclass ORDER BY c.relname");
  std::vector<std::string> names = Column(r, 0);
  CHECK(names == std::vector<std::string>{"jobs_claim_idx", "jobs_claim_key_idx",
                                          "jobs_failed_finished_idx", "jobs_finished_at_idx", "jobs_pkey",
                                          "jobs_queued_cancel_idx", "jobs_queued_expires_idx", "jobs_queued_xid_idx",
                                          "jobs_running_key_xid_idx", "jobs_running_worker_idx",
                                          "jobs_unique_key_active_idx"});
  auto def = [&](const std::string& name) -> std::string {
    for (int i = 0; i < r.rows(); ++i) {
      if (r.text(i, 0) == name) return std::string(r.text(i, 1));
    }
    return "";
  };
  CHECK(def("jobs_claim_idx") ==
        "CREATE INDEX jobs_claim_idx ON akadze.jobs USING btree"
        " (queue, priority DESC, run_at, id) WHERE (state = 'queued'::text)");
  // akadzed's: each key's queued rows in claim order (004_claim_key_index).
  CHECK(def("jobs_claim_key_idx") ==
        "CREATE INDEX jobs_claim_key_idx ON akadze.jobs USING btree"
        " (queue, limit_key, priority DESC, run_at, id) WHERE (state = 'queued'::text)");
  // akadzed's: the sweep's queued rows with a cancel request or an expiry
  // (006_enqueue), and no other row.
  CHECK(def("jobs_queued_cancel_idx") ==
        "CREATE INDEX jobs_queued_cancel_idx ON akadze.jobs USING btree (id)"
        " WHERE ((state = 'queued'::text) AND (cancel_requested_at IS NOT NULL))");
  CHECK(def("jobs_queued_expires_idx") ==
        "CREATE INDEX jobs_queued_expires_idx ON akadze.jobs USING btree (expires_at, id)"
        " WHERE ((state = 'queued'::text) AND (expires_at IS NOT NULL))");
  // akadze's (001), with akadzed's second column (011_worker_running_xid):
  // a worker's running rows by the transaction that made them running.
  CHECK(def("jobs_running_worker_idx") ==
        "CREATE INDEX jobs_running_worker_idx ON akadze.jobs USING btree (worker_id, running_xid)"
        " WHERE (state = 'running'::text)");
  CHECK(def("jobs_unique_key_active_idx") ==
        "CREATE UNIQUE INDEX jobs_unique_key_active_idx ON akadze.jobs USING btree (unique_key)"
        " WHERE ((unique_key IS NOT NULL) AND (state = ANY (ARRAY['queued'::text,"
        " 'running'::text])))");
  CHECK(def("jobs_finished_at_idx") ==
        "CREATE INDEX jobs_finished_at_idx ON akadze.jobs USING btree (finished_at)"
        " WHERE (state = ANY (ARRAY['succeeded'::text, 'failed'::text, 'cancelled'::text]))");
  // akadzed's: failed jobs, newest first, for the status page
  // (007_status_page), and no other row.
  CHECK(def("jobs_failed_finished_idx") ==
        "CREATE INDEX jobs_failed_finished_idx ON akadze.jobs USING btree (finished_at DESC, id DESC)"
        " WHERE (state = 'failed'::text)");
  // akadzed's: each key's running rows by the transaction that made them
  // running (010_running_xid), spelled so that only reads that say
  // `(state = 'running') IS TRUE` use it.
  CHECK(def("jobs_running_key_xid_idx") ==
        "CREATE INDEX jobs_running_key_xid_idx ON akadze.jobs USING btree (limit_key, running_xid)"
        " WHERE (((state = 'running'::text) IS TRUE) AND (limit_key IS NOT NULL))");

  // The start log is indexed by key and time, so counting never scans
  // history, and by time alone, so pruning never does (015).
  Result starts = conn.exec(
      "SELECT pg_get_indexdef(indexrelid) FROM pg_index"
      " WHERE indrelid = 'akadze.limit_starts'::regclass ORDER BY 1");
  CHECK(Column(starts) == std::vector<std::string>{
                              "CREATE INDEX limit_starts_key_started_at_idx ON akadze.limit_starts USING btree (key, started_at)",
                              "CREATE INDEX limit_starts_started_at_idx ON akadze.limit_starts USING btree (started_at)"});

  Result options = conn.exec(
      "SELECT unnest(reloptions) FROM pg_class WHERE oid = 'akadze.jobs'::regclass ORDER BY 1");
  CHECK(Column(options) == std::vector<std::string>{"autovacuum_analyze_scale_factor=0.01",
                                                    "autovacuum_analyze_threshold=1000",
                                                    "autovacuum_vacuum_scale_factor=0.01",
                                                    "autovacuum_vacuum_threshold=1000"});
}

// ---------------------------------------------------------------- akadzed migrate

TEST_CASE("migrations: akadzed migrate --database-url applies, then reports up to date",
          "[migrations][cli]") {
  const std::string url = test::FreshDatabase(false);
  test::CommandResult first = test::RunAkadzed({"migrate", "--database-url", url});
  INFO("stderr: " << first.err);
  CHECK(first.exit_code == 0);
  CHECK(test::Lines(first.out) == std::vector<std::string>{"applied 001_initial",
                                                           "applied 002_queue_pauses",
                                                           "applied 003_limit_keys",
                                                           "applied 004_claim_key_index",
                                                           "applied 005_limit_window_bound",
                                                           "applied 006_enqueue",
                                                           "applied 007_status_page",
                                                           "applied 008_queue_caps",
                                                           "applied 009_queued_xid",
                                                           "applied 010_running_xid",
                                                           "applied 011_worker_running_xid",
                                                           "applied 012_worker_stops",
                                                           "applied 013_queue_floors",
                                                           "applied 014_worker_running_floor",
                                                           "applied 015_limit_starts_started_at"});
  CHECK(first.err.empty());

  test::CommandResult second = test::RunAkadzed({"migrate", "--database-url", url});
  CHECK(second.exit_code == 0);
  CHECK(test::Lines(second.out) == std::vector<std::string>{"schema up to date"});
  CHECK(second.err.empty());

  Connection conn = Connection::Open(url);
  CHECK(AppliedMigrations(conn) == kAllVersions);
}

TEST_CASE("migrations: akadzed migrate reads AKADZE_DATABASE_URL", "[migrations][cli]") {
  const std::string url = test::FreshDatabase(false);
  test::CommandResult r = test::RunAkadzed({"migrate"}, {{"AKADZE_DATABASE_URL", url}});
  INFO("stderr: " << r.err);
  CHECK(r.exit_code == 0);
  CHECK(test::Lines(r.out).size() == kAllVersions.size());
  Connection conn = Connection::Open(url);
  CHECK(AppliedMigrations(conn) == kAllVersions);

  // The flag wins over the environment.
  const std::string other = test::FreshDatabase(false);
  test::CommandResult flagged = test::RunAkadzed(
      {"migrate", "--database-url", other},
      {{"AKADZE_DATABASE_URL", "postgresql://bob:hunter2@/db?host=/nonexistent-akadzed-dir"}});
  CHECK(flagged.exit_code == 0);
  Connection other_conn = Connection::Open(other);
  CHECK(AppliedMigrations(other_conn) == kAllVersions);
}

TEST_CASE("migrations: akadzed migrate failures print one redacted line and exit 1",
          "[migrations][cli]") {
  const std::vector<std::string> urls = {
      "postgresql://bob:hunter2@/db?host=/nonexistent-akadzed-dir",
      "postgresql://bob:hunter2@[::1/db",
  };
  for (const std::string& url : urls) {
    CAPTURE(url);
    test::CommandResult flag = test::RunAkadzed({"migrate", "--database-url", url});
    CAPTURE(flag.err);
    CHECK(flag.exit_code == 1);
    CHECK(flag.out.empty());
    CHECK(test::Lines(flag.err).size() == 1);
    CHECK(flag.err.rfind("migrate failed: ", 0) == 0);
    CHECK(flag.err.find("hunter2") == std::string::npos);

    test::CommandResult env = test::RunAkadzed({"migrate"}, {{"AKADZE_DATABASE_URL", url}});
    CAPTURE(env.err);
    CHECK(env.exit_code == 1);
    CHECK(test::Lines(env.err).size() == 1);
    CHECK(env.err.rfind("migrate failed: ", 0) == 0);
    CHECK(env.err.find("hunter2") == std::string::npos);
  }
}

TEST_CASE("migrations: akadzed migrate fails on a conflicting schema, applying nothing",
          "[migrations][cli]") {
  const std::string url = test::FreshDatabase(false);
  {
    Connection conn = Connection::Open(url);
    conn.exec("CREATE SCHEMA akadze; CREATE TABLE akadze.jobs (id int)");
  }
  test::CommandResult r = test::RunAkadzed({"migrate", "--database-url", url});
  CAPTURE(r.err);
  CHECK(r.exit_code == 1);
  REQUIRE(test::Lines(r.err).size() == 1);
  CHECK(r.err.rfind("migrate failed: ", 0) == 0);
  CHECK(r.err.find("001_initial") != std::string::npos);
  Connection conn = Connection::Open(url);
  CHECK(AppliedMigrations(conn).empty());
}

TEST_CASE("migrations: akadzed migrate with bad usage exits 2", "[migrations][cli]") {
  const std::string url = test::FreshDatabase(false);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"migrate", "--bogus", "--database-url", url},
        std::vector<std::string>{"migrate", "--database-url"},
        std::vector<std::string>{"migrate", "--database-url", url, "extra"}}) {
    CAPTURE(args);
    test::CommandResult r = test::RunAkadzed(args);
    CAPTURE(r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.out.empty());
    CHECK(test::Lines(r.err).size() == 1);
  }
  // Nothing ran.
  Connection conn = Connection::Open(url);
  CHECK(AppliedMigrations(conn).empty());

  // A URL passed as a stray argument (--database-url forgotten) is echoed by
  // the parse error: its password must not be.
  test::CommandResult stray =
      test::RunAkadzed({"migrate", "postgresql://bob:hunter2@/db?host=/nonexistent-akadzed-dir"});
  CAPTURE(stray.err);
  CHECK(stray.exit_code == 2);
  CHECK(test::Lines(stray.err).size() == 1);
  CHECK(stray.err.find("hunter2") == std::string::npos);
}

}  // namespace akadzed
