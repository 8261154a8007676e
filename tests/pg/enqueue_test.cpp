// Tests of the producers' SQL API (migrations/006_enqueue.sql,
// docs/enqueue.md): akadze.enqueue and akadze.enqueue_many write the row the
// producer described and nothing else, refuse what a producer can get wrong
// with the message it sees (and leave no row behind), resolve a unique_key
// held by an active job by the conflict mode, notify akadze_jobs once per
// queue with a job ready now, and work for a role with EXECUTE and no
// privilege on akadze.jobs.
#include <catch2/catch.hpp>

#include <libpq-fe.h>
#include <poll.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "pg/connection.h"
#include "support/caught_error.h"
#include "support/test_cluster.h"

namespace akadzed {
namespace {

using pg::Connection;

std::int64_t Count(Connection& conn, const std::string& where = "true") {
  return std::stoll(std::string(conn.exec("SELECT count(*) FROM akadze.jobs WHERE " + where).text(0, 0)));
}

std::string One(Connection& conn, const std::string& sql) {
  pg::Result r = conn.exec(sql);
  REQUIRE(r.rows() == 1);
  return r.is_null(0, 0) ? std::string("NULL") : std::string(r.text(0, 0));
}

// The error a producer's statement gets, checked to have left no job.
test::Caught Refused(Connection& conn, const std::string& sql) {
  const std::int64_t before = Count(conn);
  test::Caught caught = test::Capture([&] { conn.exec(sql); });
  CHECK(Count(conn) == before);
  return caught;
}

// Every notification on akadze_jobs that `listener` has, waiting up to
// `wait` for the first: payload -> how many times.
std::map<std::string, int> Notifications(Connection& listener, std::chrono::milliseconds wait) {
  std::map<std::string, int> seen;
  const auto until = std::chrono::steady_clock::now() + wait;
  for (;;) {
    REQUIRE(PQconsumeInput(listener.raw()) == 1);
    while (PGnotify* n = PQnotifies(listener.raw())) {
      if (std::string(n->relname) == "akadze_jobs") ++seen[n->extra];
      PQfreemem(n);
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (!seen.empty() || left.count() <= 0) return seen;
    pollfd p{PQsocket(listener.raw()), POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(left.count()));
  }
}

}  // namespace

TEST_CASE("enqueue: defaults and named parameters write the row described", "[enqueue]") {
  Connection conn = Connection::Open(test::FreshDatabase(true));
  const std::string id = One(conn, "SELECT akadze.enqueue('mail.send')");
  CHECK(One(conn, "SELECT concat_ws('|', task, queue, priority, args, meta, max_attempts, state,"
                  " attempt, run_count, run_at <= now(), coalesce(limit_key, '-'),"
                  " coalesce(unique_key, '-'), coalesce(expires_at::text, '-'))"
                  " FROM akadze.jobs WHERE id = " + id) ==
        "mail.send|default|0|{}|{}|3|queued|0|0|t|-|-|-");

  const std::string id2 = One(conn,
      "SELECT akadze.enqueue('report', args => '{\"day\": \"2026-12-01\"}', queue => 'slow',"
      " priority => -7, limit_key => 'tenant:42', delay => '10 minutes', max_attempts => 9,"
      " expires_at => now() + interval '1 hour', meta => '{\"source\": \"test\"}')");
  CHECK(One(conn, "SELECT concat_ws('|', task, queue, priority, args, meta, max_attempts,"
                  " limit_key, run_at - now() BETWEEN interval '9 minutes' AND interval '10 minutes',"
                  " expires_at - now() > interval '59 minutes')"
                  " FROM akadze.jobs WHERE id = " + id2) ==
        "report|slow|-7|{\"day\": \"2026-12-01\"}|{\"source\": \"test\"}|9|tenant:42|t|t");

  const std::string id3 = One(conn,
      "SELECT akadze.enqueue('later', run_at => '2030-01-02T03:04:05Z')");
  CHECK(One(conn, "SELECT run_at = '2030-01-02T03:04:05Z' FROM akadze.jobs WHERE id = " + id3) ==
        "t");
  CHECK(One(conn, "SELECT akadze.enqueue('n', delay => '0 seconds') IS NOT NULL") == "t");

  // args and meta are stored as given, nulls inside them kept, whichever
  // path the call takes (a delay or a unique_key takes the general one).
  for (const char* extra : {"", ", delay => '1 minute'", ", unique_key => 'nulls'"}) {
    INFO(extra);
    const std::string nulls = One(conn,
        std::string("SELECT akadze.enqueue('n', '{\"cc\": null, \"o\": {\"x\": null}}',"
                    " meta => '{\"m\": null}'") + extra + ")");
    CHECK(One(conn, "SELECT args::text || ' ' || meta::text FROM akadze.jobs WHERE id = " + nulls) ==
          "{\"o\": {\"x\": null}, \"cc\": null} {\"m\": null}");
  }
  // A queue name too long for a notification's payload: enqueued, no NOTIFY.
  CHECK(One(conn, "SELECT akadze.enqueue('n', queue => repeat('q', 9000)) > 0") == "t");
}

TEST_CASE("enqueue: each mistake a producer can make is refused with its message, no row left",
          "[enqueue]") {
  Connection conn = Connection::Open(test::FreshDatabase(true));
  struct Case {
    const char* sql;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"SELECT akadze.enqueue('')", "akadze.enqueue: task must be a non-empty string"},
      {"SELECT akadze.enqueue(NULL)", "akadze.enqueue: task must be a non-empty string"},
      {"SELECT akadze.enqueue('t', '[1, 2]')",
       "akadze.enqueue: args must be a JSON object, not array"},
      {"SELECT akadze.enqueue('t', '\"text\"')",
       "akadze.enqueue: args must be a JSON object, not string"},
      {"SELECT akadze.enqueue('t', meta => '3')",
       "akadze.enqueue: meta must be a JSON object, not number"},
      {"SELECT akadze.enqueue('t', queue => '')",
       "akadze.enqueue: queue must be a non-empty string"},
      {"SELECT akadze.enqueue('t', limit_key => '')",
       "akadze.enqueue: limit_key must be a non-empty string or null"},
      {"SELECT akadze.enqueue('t', unique_key => '')",
       "akadze.enqueue: unique_key must be a non-empty string or null"},
      {"SELECT akadze.enqueue('t', priority => 32768)",
       "akadze.enqueue: priority must be an integer from -32768 to 32767, not 32768"},
      {"SELECT akadze.enqueue('t', priority => -40000)",
       "akadze.enqueue: priority must be an integer from -32768 to 32767, not -40000"},
      {"SELECT akadze.enqueue('t', max_attempts => 0)",
       "akadze.enqueue: max_attempts must be an integer from 1 to 2147483647, not 0"},
      {"SELECT akadze.enqueue('t', max_attempts => 2147483648)",
       "akadze.enqueue: max_attempts must be an integer from 1 to 2147483647, not 2147483648"},
      {"SELECT akadze.enqueue('t', run_at => 'infinity')",
       "akadze.enqueue: run_at must be a finite timestamp, not \"infinity\""},
      {"SELECT akadze.enqueue('t', run_at => '-infinity')",
       "akadze.enqueue: run_at must be a finite timestamp, not \"-infinity\""},
      {"SELECT akadze.enqueue('t', run_at => now(), delay => '1 minute')",
       "akadze.enqueue: run_at and delay exclude each other: give one or neither"},
      {"SELECT akadze.enqueue('t', delay => '-1 second')",
       "akadze.enqueue: delay must not be negative"},
      {"SELECT akadze.enqueue('t', expires_at => now() - interval '1 second')",
       "akadze.enqueue: expires_at must be after the time the job may run (now)"},
      {"SELECT akadze.enqueue('t', run_at => now() + interval '1 hour', expires_at => now())",
       "akadze.enqueue: expires_at must be after the time the job may run (run_at)"},
      {"SELECT akadze.enqueue('t', expires_at => 'infinity')",
       "akadze.enqueue: expires_at must be a finite timestamp or null"},
      {"SELECT akadze.enqueue('t', unique_key => 'u', on_conflict => 'ignore')",
       "akadze.enqueue: on_conflict must be skip, replace or raise, not 'ignore'"},
      {"SELECT akadze.enqueue_many('{\"task\": \"t\"}')",
       "akadze.enqueue_many: jobs must be a JSON array of job objects, not object"},
      {"SELECT akadze.enqueue_many(NULL)",
       "akadze.enqueue_many: jobs must be a JSON array of job objects, not NULL"},
      {"SELECT akadze.enqueue_many('[{\"task\": \"a\"}, 5]')",
       "akadze.enqueue_many: jobs[1] must be a JSON object with at least a task, not number"},
      {"SELECT akadze.enqueue_many('[{\"task\": \"a\"}, {\"task\": \"b\", \"state\": \"running\"}]')",
       "akadze.enqueue_many: jobs[1]: state is not a field a producer sets"},
      {"SELECT akadze.enqueue_many('[{\"task\": \"a\", \"worker_id\": null}]')",
       "akadze.enqueue_many: jobs[0]: worker_id is not a field a producer sets"},
      {"SELECT akadze.enqueue_many('[{\"args\": {}}]')",
       "akadze.enqueue_many: jobs[0].task must be a non-empty string"},
      {"SELECT akadze.enqueue_many('[{\"task\": 7}]')",
       "akadze.enqueue_many: jobs[0].task must be a non-empty string"},
      {"SELECT akadze.enqueue_many('[{\"task\": \"a\", \"priority\": 1.5}]')",
       "akadze.enqueue_many: jobs[0].priority must be an integer from -32768 to 32767, not 1.5"},
      {"SELECT akadze.enqueue_many('[{\"task\": \"a\", \"priority\": \"high\"}]')",
       "akadze.enqueue_many: jobs[0].priority must be an integer from -32768 to 32767, not \"high\""},
      {"SELECT akadze.enqueue_many('[{\"task\": \"a\", \"run_at\": \"soon\"}]')",
       "akadze.enqueue_many: jobs[0].run_at is not a timestamp (ISO-8601, e.g. "
       "2026-12-01T09:00:00Z): \"soon\""},
      {"SELECT akadze.enqueue_many('[{\"task\": \"a\", \"run_at\": \"2026-12-01T09:00:00+16:00\"}]')",
       "akadze.enqueue_many: jobs[0].run_at is not a timestamp (ISO-8601, e.g. "
       "2026-12-01T09:00:00Z): \"2026-12-01T09:00:00+16:00\""},
      {"SELECT akadze.enqueue_many('[{\"task\": \"a\", \"line\\nbreak\": 1}]')",
       "akadze.enqueue_many: jobs[0]: \"line break\" is not a field a producer sets"},
      {"SELECT akadze.enqueue_many('[{\"task\": \"a\", \"run_at\": 1764579600}]')",
       "akadze.enqueue_many: jobs[0].run_at must be a timestamp (ISO-8601, e.g. "
       "2026-12-01T09:00:00Z), not number"},
      {"SELECT akadze.enqueue_many('[{\"task\": \"a\", \"delay\": \"1 fortnight\"}]')",
       "akadze.enqueue_many: jobs[0].delay is not a non-negative interval within range: "
       "\"1 fortnight\""},
      {"SELECT akadze.enqueue_many('[{\"task\": \"a\", \"delay\": -3}]')",
       "akadze.enqueue_many: jobs[0].delay must not be negative, not -3"},
      {"SELECT akadze.enqueue_many('[{\"task\": \"a\", \"limit_key\": 12}]')",
       "akadze.enqueue_many: jobs[0].limit_key must be a non-empty string or null"},
      {"SELECT akadze.enqueue_many('[{\"task\": \"a\", \"unique_key\": \"z\"},"
       " {\"task\": \"b\", \"unique_key\": \"z\"}]', 'replace')",
       "akadze.enqueue_many: jobs[0] and jobs[1] have the same unique_key 'z': one call can "
       "replace a job once"},
  };
  for (const Case& c : cases) {
    INFO(c.sql);
    test::Caught caught = Refused(conn, c.sql);
    CHECK(caught.kind == "SqlError");
    CHECK(caught.sqlstate == "22023");
    CHECK_THAT(caught.message, Catch::Contains(c.message));
  }
  CHECK(Count(conn) == 0);

  // One bad job among a thousand good ones: the call writes none of them.
  test::Caught caught = Refused(conn,
      "SELECT akadze.enqueue_many((SELECT jsonb_agg(CASE WHEN g = 700"
      " THEN jsonb_build_object('task', 'x', 'args', '[]'::jsonb)"
      " ELSE jsonb_build_object('task', 'x', 'args', jsonb_build_object('n', g)) END ORDER BY g)"
      " FROM generate_series(1, 1000) AS g))");
  CHECK_THAT(caught.message,
             Catch::Contains("akadze.enqueue_many: jobs[699].args must be a JSON object, not array"));
  CHECK(Count(conn) == 0);
}

TEST_CASE("enqueue_many: ids come back in input order, jobs with and without a unique_key mixed",
          "[enqueue]") {
  Connection conn = Connection::Open(test::FreshDatabase(true));
  pg::Result r = conn.exec(
      "SELECT u.id, u.ord FROM unnest(akadze.enqueue_many("
      " (SELECT jsonb_agg(CASE WHEN g % 3 = 0"
      "   THEN jsonb_build_object('task', 't' || g, 'unique_key', 'u' || g)"
      "   ELSE jsonb_build_object('task', 't' || g, 'args', jsonb_build_object('g', g)) END"
      "  ORDER BY g) FROM generate_series(1, 500) AS g))) WITH ORDINALITY AS u(id, ord)");
  REQUIRE(r.rows() == 500);
  for (int i = 0; i < r.rows(); ++i) {
    INFO("jobs[" << i << "]");
    CHECK(One(conn, "SELECT task FROM akadze.jobs WHERE id = " + std::string(r.text(i, 0))) ==
          "t" + std::string(r.text(i, 1)));
  }
  CHECK(Count(conn) == 500);
  CHECK(One(conn, "SELECT akadze.enqueue_many('[]')") == "{}");
}

TEST_CASE("enqueue: a unique_key held by an active job resolves by on_conflict", "[enqueue]") {
  const std::string db = test::FreshDatabase(true);
  Connection conn = Connection::Open(db);
  const std::string holder = One(conn,
      "SELECT akadze.enqueue('daily', '{\"v\": 1}', unique_key => 'daily:2026-12-01')");

  SECTION("skip (the default) returns the holder and changes nothing") {
    CHECK(One(conn, "SELECT akadze.enqueue('daily', '{\"v\": 2}', unique_key => 'daily:2026-12-01')") ==
          holder);
    CHECK(One(conn, "SELECT akadze.enqueue_many('[{\"task\": \"daily\", \"unique_key\":"
                    " \"daily:2026-12-01\"}, {\"task\": \"other\"}]')") ==
          "{" + holder + "," + std::to_string(std::stoll(holder) + 2) + "}");
    CHECK(One(conn, "SELECT args FROM akadze.jobs WHERE id = " + holder) == "{\"v\": 1}");
    CHECK(Count(conn) == 2);
  }
  SECTION("raise refuses with 23505 naming the holder") {
    test::Caught caught = Refused(conn,
        "SELECT akadze.enqueue('daily', unique_key => 'daily:2026-12-01', on_conflict => 'raise')");
    CHECK(caught.sqlstate == "23505");
    CHECK_THAT(caught.message,
               Catch::Contains("akadze.enqueue: unique_key 'daily:2026-12-01' is already held by job " +
                               holder + " (queued); no job enqueued"));
  }
  SECTION("replace sets a queued holder's args and run_at") {
    CHECK(One(conn, "SELECT akadze.enqueue('daily', '{\"v\": 3}', unique_key => 'daily:2026-12-01',"
                    " on_conflict => 'replace', run_at => '2030-01-01Z')") == holder);
    CHECK(One(conn, "SELECT args || jsonb_build_object('later', run_at = '2030-01-01Z')"
                    " FROM akadze.jobs WHERE id = " + holder) == "{\"v\": 3, \"later\": true}");
    CHECK(Count(conn) == 1);
  }
  SECTION("replace keeps the holder's task: another task is refused") {
    test::Caught caught = Refused(conn,
        "SELECT akadze.enqueue('weekly', unique_key => 'daily:2026-12-01', on_conflict => 'replace')");
    CHECK(caught.sqlstate == "23505");
    CHECK_THAT(caught.message,
               Catch::Contains("akadze.enqueue: unique_key 'daily:2026-12-01' is held by job " + holder +
                               " of task 'daily': replace keeps the holder's task (only args and "
                               "run_at change); no job enqueued"));
  }
  SECTION("a queued holder that can never run frees the key: it ends cancelled, the job is enqueued") {
    for (const char* mode : {"skip", "replace", "raise"}) {
      INFO(mode);
      const std::string dead = One(conn, "SELECT id FROM akadze.jobs WHERE unique_key = 'daily:2026-12-01'"
                                         " AND state = 'queued'");
      // Past its expires_at (set by hand: the API refuses one in the past).
      conn.exec("UPDATE akadze.jobs SET expires_at = '2026-01-02T03:04:05Z' WHERE id = " + dead);
      const std::string fresh = One(conn,
          std::string("SELECT akadze.enqueue('daily', unique_key => 'daily:2026-12-01', on_conflict => '") +
          mode + "')");
      CHECK(fresh != dead);
      CHECK(One(conn, "SELECT state || ' ' || (errors -> -1 ->> 'error') FROM akadze.jobs WHERE id = " + dead) ==
            "cancelled Expired");
    }
    // A cancel request frees it too, without an error entry.
    const std::string requested = One(conn, "SELECT id FROM akadze.jobs WHERE unique_key = 'daily:2026-12-01'"
                                            " AND state = 'queued'");
    conn.exec("UPDATE akadze.jobs SET cancel_requested_at = now() WHERE id = " + requested);
    CHECK(One(conn, "SELECT akadze.enqueue('daily', unique_key => 'daily:2026-12-01')") != requested);
    CHECK(One(conn, "SELECT state || ' ' || jsonb_array_length(errors) FROM akadze.jobs WHERE id = " +
                        requested) == "cancelled 0");
  }
  SECTION("skip and raise leave the holder unlocked: a claim in another session can take it") {
    conn.exec("BEGIN");
    CHECK(One(conn, "SELECT akadze.enqueue('daily', unique_key => 'daily:2026-12-01')") == holder);
    Connection other = Connection::Open(test::DirectConninfo(db));
    CHECK(One(other, "SELECT count(*) FROM (SELECT id FROM akadze.jobs WHERE id = " + holder +
                         " FOR UPDATE SKIP LOCKED) AS free") == "1");
    conn.exec("COMMIT");
  }
  SECTION("replace refuses a running holder; a finished holder frees the key") {
    conn.exec("UPDATE akadze.jobs SET state = 'running', worker_id = gen_random_uuid(),"
              " attempt = 1, run_count = 1, started_at = now() WHERE id = " + holder);
    test::Caught caught = Refused(conn,
        "SELECT akadze.enqueue('daily', unique_key => 'daily:2026-12-01', on_conflict => 'replace')");
    CHECK(caught.sqlstate == "23505");
    CHECK_THAT(caught.message,
               Catch::Contains("is held by job " + holder +
                               ", which is running: only a queued job can be replaced"));
    conn.exec("UPDATE akadze.jobs SET state = 'succeeded', worker_id = NULL, finished_at = now()"
              " WHERE id = " + holder);
    const std::string fresh = One(conn,
        "SELECT akadze.enqueue('daily', unique_key => 'daily:2026-12-01', on_conflict => 'raise')");
    CHECK(fresh != holder);
    CHECK(Count(conn, "unique_key = 'daily:2026-12-01'") == 2);
  }
}

// [direct]: LISTEN needs a session of its own.
TEST_CASE("enqueue: NOTIFY akadze_jobs once per queue with a job ready now", "[enqueue][direct]") {
  const std::string db = test::FreshDatabase(true);
  Connection conn = Connection::Open(db);
  Connection listener = Connection::Open(db);
  listener.exec("LISTEN akadze_jobs");

  conn.exec("BEGIN");
  conn.exec("SELECT akadze.enqueue_many('[{\"task\": \"a\", \"queue\": \"mail\"},"
            " {\"task\": \"b\", \"queue\": \"mail\"}, {\"task\": \"c\", \"queue\": \"reports\"},"
            " {\"task\": \"d\", \"queue\": \"later\", \"delay\": \"1 hour\"}]')");
  conn.exec("SELECT akadze.enqueue('e', queue => 'mail', unique_key => 'k')");
  conn.exec("SELECT akadze.enqueue('f', queue => 'mail')");
  conn.exec("COMMIT");
  CHECK(Notifications(listener, std::chrono::seconds(10)) ==
        std::map<std::string, int>{{"mail", 1}, {"reports", 1}});

  // Nothing ready now: no notification (awaited for a short while after a
  // marker notification proves delivery works).
  conn.exec("SELECT akadze.enqueue('d', queue => 'later', run_at => now() + interval '1 day')");
  conn.exec("SELECT akadze.enqueue('a', queue => 'mail', unique_key => 'k')");  // skipped
  conn.exec("NOTIFY akadze_jobs, 'marker'");
  CHECK(Notifications(listener, std::chrono::seconds(10)) ==
        std::map<std::string, int>{{"marker", 1}});
}

// [direct]: the test connects as other roles, which the test PgBouncer does not know.
TEST_CASE("enqueue: a producer with EXECUTE and no privilege on akadze.jobs can enqueue only",
          "[enqueue][direct]") {
  const std::string db = test::FreshDatabase(true);
  Connection admin = Connection::Open(db);
  const std::string dbname = One(admin, "SELECT current_database()");
  const std::string producer = dbname + "_producer";
  const std::string stranger = dbname + "_stranger";
  admin.exec("CREATE ROLE " + producer + " LOGIN");
  admin.exec("CREATE ROLE " + stranger + " LOGIN");
  // docs/security.md, "A producer role".
  admin.exec("GRANT USAGE ON SCHEMA akadze TO " + producer);
  admin.exec("GRANT EXECUTE ON FUNCTION akadze.enqueue(text, jsonb, text, bigint, text,"
             " timestamptz, interval, bigint, text, text, timestamptz, jsonb),"
             " akadze.enqueue_many(jsonb, text) TO " + producer);
  admin.exec("GRANT USAGE ON SCHEMA akadze TO " + stranger);

  Connection as_producer = Connection::Open(db + " user=" + producer);
  const std::string id = One(as_producer, "SELECT akadze.enqueue('from.producer', '{\"n\": 1}')");
  CHECK(One(as_producer, "SELECT cardinality(akadze.enqueue_many("
                         "'[{\"task\": \"a\"}, {\"task\": \"b\", \"unique_key\": \"p\"}]'))") == "2");
  CHECK(One(admin, "SELECT task FROM akadze.jobs WHERE id = " + id) == "from.producer");

  const std::vector<std::string> refused = {
      "INSERT INTO akadze.jobs (task) VALUES ('direct')",
      "UPDATE akadze.jobs SET state = 'running'",
      "SELECT count(*) FROM akadze.jobs",
      "SELECT akadze.enqueue_jobs('[{\"task\": \"x\"}]', 'skip', 'x')",
      "SELECT * FROM akadze.enqueue_checked('{\"task\": \"x\"}', '')",
  };
  for (const std::string& sql : refused) {
    INFO(sql);
    test::Caught caught = test::Capture([&] { as_producer.exec(sql); });
    CHECK(caught.sqlstate == "42501");
  }

  // A role without the grant cannot enqueue, even with USAGE on the schema.
  Connection as_stranger = Connection::Open(db + " user=" + stranger);
  test::Caught caught = test::Capture([&] { as_stranger.exec("SELECT akadze.enqueue('x')"); });
  CHECK(caught.sqlstate == "42501");
  CHECK(Count(admin) == 3);

  // The fixed search_path: a function the producer's search_path puts
  // before pg_catalog's is not what the functions call.
  admin.exec("CREATE SCHEMA shadow");
  admin.exec("CREATE FUNCTION shadow.now() RETURNS timestamptz LANGUAGE sql"
             " AS $$SELECT '2000-01-01Z'::timestamptz$$");
  admin.exec("GRANT USAGE ON SCHEMA shadow TO " + producer);
  as_producer.exec("SET search_path = shadow, pg_catalog");
  REQUIRE(One(as_producer, "SELECT now()") == One(as_producer, "SELECT '2000-01-01Z'::timestamptz"));
  const std::string shadowed = One(as_producer, "SELECT akadze.enqueue('not.shadowed')");
  CHECK(One(admin, "SELECT run_at > '2020-01-01Z' FROM akadze.jobs WHERE id = " + shadowed) == "t");
}

}  // namespace akadzed
