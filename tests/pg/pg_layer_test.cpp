// Tests of the libpq layer (daemon/pg): Params encoding (NULLs, text[] and
// int8[] literals), Result accessors, Transaction commit and rollback, and the
// typed errors of pg_error.h, each provoked for real against the throwaway
// PostgreSQL: syntax errors, deadlocks, serialization failures, lock timeouts,
// killed backends, a COMMIT on a dead connection, connection failures whose
// messages must not leak passwords.
#include <libpq-fe.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <future>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "pg/connection.h"
#include "pg/params.h"
#include "pg/pg_error.h"
#include "pg/result.h"
#include "pg/statement.h"
#include "pg/transaction.h"
#include "support/blackhole_proxy.h"
#include "support/caught_error.h"
#include "support/test_cluster.h"

namespace akadzed {
namespace {

using pg::Connection;
using pg::Params;
using pg::Result;
using pg::SessionBounds;
using pg::Statement;
using pg::Transaction;
using test::Capture;
using test::Caught;

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

// True once the backend `pid` is blocked waiting for a heavyweight lock.
bool WaitingForLock(Connection& monitor, int pid) {
  Result r = monitor.exec("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1",
                          Params().add(pid));
  return r.rows() == 1 && !r.is_null(0, 0) && r.boolean(0, 0);
}

// Terminates the server process `pid` from `killer` and waits until it is gone.
bool TerminateBackend(Connection& killer, int pid) {
  Result r = killer.exec("SELECT pg_terminate_backend($1)", Params().add(pid));
  if (!r.boolean(0, 0)) return false;
  return Eventually([&] {
    return killer.exec("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", Params().add(pid))
               .int64(0, 0) == 0;
  });
}

// Terminates `victim`'s backend: the one libpq got at login (a direct session).
bool TerminateBackend(Connection& killer, const Connection& victim) {
  return TerminateBackend(killer, victim.backend_pid());
}

std::int64_t Count(Connection& conn, const std::string& table) {
  return conn.exec("SELECT count(*) FROM " + table).int64(0, 0);
}

PGTransactionStatusType TxStatus(const Connection& conn) { return PQtransactionStatus(conn.raw()); }

}  // namespace

// ---------------------------------------------------------------- Params

TEST_CASE("pg: Params binds NULLs and scalar values", "[pg][params]") {
  Connection conn = Connection::Open(test::FreshDatabase(false));
  Params p;
  p.add_null()
      .add(std::optional<std::string>())
      .add(std::optional<std::int64_t>())
      .add(std::optional<std::string>("x"))
      .add(std::optional<std::int64_t>(7))
      .add("")
      .add(std::numeric_limits<std::int64_t>::min())
      .add(std::numeric_limits<std::int64_t>::max())
      .add(true)
      .add(false)
      .add(-42)
      .add(std::string("it's \"quoted\" \\ {a,b} NULL"));
  REQUIRE(p.size() == 12);
  std::vector<const char*> pointers = p.pointers();
  REQUIRE(pointers.size() == 12);
  CHECK(pointers[0] == nullptr);
  CHECK(pointers[1] == nullptr);
  CHECK(pointers[2] == nullptr);
  CHECK(pointers[5] != nullptr);

  Result r = conn.exec(
      "SELECT $1::text IS NULL, $2::text IS NULL, $3::int8 IS NULL, $4::text, $5::int8,"
      " $6::text IS NULL, $6::text = '', $7::int8, $8::int8, $9::bool, $10::bool, $11::int4,"
      " $12::text",
      p);
  REQUIRE(r.rows() == 1);
  CHECK(r.boolean(0, 0));
  CHECK(r.boolean(0, 1));
  CHECK(r.boolean(0, 2));
  CHECK(r.text(0, 3) == "x");
  CHECK(r.int64(0, 4) == 7);
  CHECK_FALSE(r.boolean(0, 5));  // "" is an empty string, not NULL
  CHECK(r.boolean(0, 6));
  CHECK(r.int64(0, 7) == std::numeric_limits<std::int64_t>::min());
  CHECK(r.int64(0, 8) == std::numeric_limits<std::int64_t>::max());
  CHECK(r.boolean(0, 9));
  CHECK_FALSE(r.boolean(0, 10));
  CHECK(r.int64(0, 11) == -42);
  // Scalars go over the wire verbatim: no array quoting applies to them.
  CHECK(r.text(0, 12) == "it's \"quoted\" \\ {a,b} NULL");
}

TEST_CASE("pg: Params encodes text[] literals element for element", "[pg][params]") {
  Connection conn = Connection::Open(test::FreshDatabase(false));
  const std::vector<std::optional<std::string>> values = {
      "plain",   "say \"hi\"", "back\\slash", "trailing\\", "a,b",     "{braces}", "",
      "NULL",    std::nullopt, " padded ",    "line\nbreak", "tab\there", "\"",      "\\\"",
      "ünïcødé", std::nullopt, "'single'"};

  SECTION("optional elements, NULLs kept in place") {
    Result r = conn.exec(
        "SELECT v, v IS NULL FROM unnest($1::text[]) WITH ORDINALITY AS u(v, n) ORDER BY n",
        Params().add_array(values));
    REQUIRE(r.rows() == static_cast<int>(values.size()));
    for (int i = 0; i < r.rows(); ++i) {
      INFO("element " << i);
      CHECK(r.optional_text(i, 0) == values[static_cast<std::size_t>(i)]);
      CHECK(r.boolean(i, 1) == !values[static_cast<std::size_t>(i)].has_value());
    }
  }

  SECTION("plain strings") {
    std::vector<std::string> plain;
    for (const auto& v : values) {
      if (v) plain.push_back(*v);
    }
    Result r = conn.exec(
        "SELECT v, v IS NULL FROM unnest($1::text[]) WITH ORDINALITY AS u(v, n) ORDER BY n",
        Params().add_array(plain));
    REQUIRE(r.rows() == static_cast<int>(plain.size()));
    for (int i = 0; i < r.rows(); ++i) {
      INFO("element " << i);
      CHECK_FALSE(r.boolean(i, 1));  // not even the string "NULL" becomes NULL
      CHECK(r.text(i, 0) == plain[static_cast<std::size_t>(i)]);
    }
  }

  SECTION("empty arrays and single empty strings") {
    Result r = conn.exec("SELECT cardinality($1::text[]), cardinality($2::text[]),"
                         " cardinality($3::text[]), ($3::text[])[1] IS NULL",
                         Params()
                             .add_array(std::vector<std::string>{})
                             .add_array(std::vector<std::string>{""})
                             .add_array(std::vector<std::optional<std::string>>{std::nullopt}));
    CHECK(r.int64(0, 0) == 0);
    CHECK(r.int64(0, 1) == 1);
    CHECK(r.int64(0, 2) == 1);
    CHECK(r.boolean(0, 3));
  }

  SECTION("usable in = ANY()") {
    Result r = conn.exec("SELECT 'a,b' = ANY($1::text[]), 'a' = ANY($1::text[])",
                         Params().add_array(std::vector<std::string>{"a,b", "c"}));
    CHECK(r.boolean(0, 0));
    CHECK_FALSE(r.boolean(0, 1));
  }
}

TEST_CASE("pg: Params encodes int8[] literals", "[pg][params]") {
  Connection conn = Connection::Open(test::FreshDatabase(false));
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  const char* sql =
      "SELECT v, v IS NULL FROM unnest($1::int8[]) WITH ORDINALITY AS u(v, n) ORDER BY n";

  SECTION("plain") {
    const std::vector<std::int64_t> values = {0, -1, 42, kMax, kMin};
    Result r = conn.exec(sql, Params().add_array(values));
    REQUIRE(r.rows() == static_cast<int>(values.size()));
    for (int i = 0; i < r.rows(); ++i) CHECK(r.int64(i, 0) == values[static_cast<std::size_t>(i)]);
  }
  SECTION("with NULL elements") {
    const std::vector<std::optional<std::int64_t>> values = {std::nullopt, 5, std::nullopt, kMin};
    Result r = conn.exec(sql, Params().add_array(values));
    REQUIRE(r.rows() == static_cast<int>(values.size()));
    for (int i = 0; i < r.rows(); ++i) {
      CHECK(r.optional_int64(i, 0) == values[static_cast<std::size_t>(i)]);
    }
  }
  SECTION("empty") {
    Result r = conn.exec("SELECT cardinality($1::int8[])",
                         Params().add_array(std::vector<std::int64_t>{}));
    CHECK(r.int64(0, 0) == 0);
  }
}

// ---------------------------------------------------------------- Result

TEST_CASE("pg: Result accessors", "[pg][result]") {
  Connection conn = Connection::Open(test::FreshDatabase(false));

  SECTION("typed cells") {
    Result r = conn.exec(
        "SELECT 42::int8, NULL::int8, 'x'::text, true, false, 1.5::float8, 'junk'::text, ''::text,"
        " '-9223372036854775808'::int8, '12abc'::text, 'héllo'::text"
        " FROM generate_series(1, 2)");
    CHECK(r.rows() == 2);
    CHECK(r.columns() == 11);
    CHECK_FALSE(r.empty());
    CHECK_FALSE(r.is_null(0, 0));
    CHECK(r.is_null(1, 1));
    CHECK(r.text(0, 0) == "42");
    CHECK(r.text(0, 1).empty());
    CHECK(r.optional_text(0, 1) == std::nullopt);
    CHECK(r.optional_text(1, 2) == std::optional<std::string>("x"));
    CHECK(r.int64(1, 0) == 42);
    CHECK(r.optional_int64(0, 0) == std::optional<std::int64_t>(42));
    CHECK(r.optional_int64(0, 1) == std::nullopt);
    CHECK_THROWS_AS(r.int64(0, 1), std::runtime_error);   // NULL
    CHECK_THROWS_AS(r.int64(0, 6), std::runtime_error);   // junk
    CHECK_THROWS_AS(r.int64(0, 7), std::runtime_error);   // empty
    CHECK_THROWS_AS(r.int64(0, 9), std::runtime_error);   // trailing junk
    CHECK(r.int64(0, 8) == std::numeric_limits<std::int64_t>::min());
    CHECK(r.boolean(0, 3));
    CHECK_FALSE(r.boolean(0, 4));
    CHECK(r.float64(0, 5) == 1.5);
    CHECK(r.text(0, 10) == "héllo");
    CHECK(r.text(0, 10).size() == 6);
  }

  SECTION("empty results") {
    Result none = conn.exec("SELECT 1, 2 WHERE false");
    CHECK(none.rows() == 0);
    CHECK(none.columns() == 2);
    CHECK(none.empty());
    Result defaulted;
    CHECK(defaulted.rows() == 0);
    CHECK(defaulted.columns() == 0);
    CHECK(defaulted.empty());
    CHECK(defaulted.affected() == 0);
  }

  SECTION("affected rows") {
    CHECK(conn.exec("CREATE TABLE t (x int)").affected() == 0);
    CHECK(conn.exec("INSERT INTO t SELECT generate_series(1, 3)").affected() == 3);
    CHECK(conn.exec("UPDATE t SET x = x + 10 WHERE x > 1").affected() == 2);
    CHECK(conn.exec("UPDATE t SET x = 0 WHERE false").affected() == 0);
    CHECK(conn.exec("DELETE FROM t WHERE x = $1", Params().add(1)).affected() == 1);
    CHECK(conn.exec("DELETE FROM t").affected() == 2);
  }

  SECTION("several statements: the last one's result") {
    Result r = conn.exec("SELECT 1; SELECT 2, 3");
    REQUIRE(r.rows() == 1);
    CHECK(r.columns() == 2);
    CHECK(r.int64(0, 0) == 2);
    CHECK(r.int64(0, 1) == 3);
  }
}

// ---------------------------------------------------------------- Connection

// [direct]: through PgBouncer the pid libpq gets at login is the pooler's.
TEST_CASE("pg: Connection::Open sets application_name and reports its backend",
          "[pg][conn][direct]") {
  const std::string url = test::FreshDatabase(false);
  Connection a = Connection::Open(url);
  CHECK(a.healthy());
  CHECK(a.exec("SHOW application_name").text(0, 0) == "akadzed");
  CHECK(a.exec("SELECT pg_backend_pid()").int64(0, 0) == a.backend_pid());

  Connection b = Connection::Open(url, "akadzed test");
  CHECK(b.exec("SHOW application_name").text(0, 0) == "akadzed test");
  CHECK(b.backend_pid() != a.backend_pid());

  // A conninfo that names one wins over the default.
  Connection c = Connection::Open(url + " application_name=mine", "akadzed test");
  CHECK(c.exec("SHOW application_name").text(0, 0) == "mine");

  // Moving transfers ownership: the moved-to connection works.
  Connection moved = std::move(c);
  CHECK(moved.exec("SELECT 1").int64(0, 0) == 1);
}

// Prepared statements (connection.h): the names this connection has prepared
// on its server, from pg_prepared_statements.
std::vector<std::string> PreparedNames(Connection& conn) {
  std::vector<std::string> names;
  Result r = conn.exec("SELECT name FROM pg_prepared_statements ORDER BY name");
  for (int i = 0; i < r.rows(); ++i) names.emplace_back(r.text(i, 0));
  return names;
}

// [direct]: through PgBouncer statements run unnamed (the next case).
TEST_CASE("pg: a statement with parameters is prepared once and then run by name",
          "[pg][conn][prepared][direct]") {
  Connection conn = Connection::Open(test::FreshDatabase(false));
  CHECK_FALSE(conn.pooled());
  CHECK(PreparedNames(conn).empty());
  for (int i = 1; i <= 3; ++i) CHECK(conn.exec("SELECT $1::int + 1", Params().add(i)).int64(0, 0) == i + 1);
  std::vector<std::string> names = PreparedNames(conn);
  REQUIRE(names.size() == 1);
  CHECK(names[0].rfind("akadzed_", 0) == 0);
  Result runs = conn.exec("SELECT generic_plans + custom_plans FROM pg_prepared_statements");
  CHECK(runs.int64(0, 0) == 3);  // all three runs went through it
  // Another text is another statement; the same text again is not.
  CHECK(conn.exec("SELECT $1::text || 'x'", Params().add("a")).text(0, 0) == "ax");
  CHECK(conn.exec("SELECT $1::int + 1", Params().add(9)).int64(0, 0) == 10);
  CHECK(PreparedNames(conn).size() == 2);

  // A statement that fails to prepare fails as it would unnamed, and leaves
  // the connection preparing.
  Caught syntax = Capture([&] { conn.exec("SELEC $1::int", Params().add(1)); });
  CHECK(syntax.kind == "SqlError");
  CHECK(syntax.sqlstate == "42601");
  CHECK(PreparedNames(conn).size() == 2);

  // A prepared statement survives the rollback of the transaction that
  // prepared it (it is not transactional) and works in the next one.
  conn.exec("BEGIN");
  CHECK(conn.exec("SELECT $1::int * 2", Params().add(21)).int64(0, 0) == 42);
  conn.exec("ROLLBACK");
  CHECK(conn.exec("SELECT $1::int * 2", Params().add(4)).int64(0, 0) == 8);
  CHECK(PreparedNames(conn).size() == 3);
}

TEST_CASE("pg: a prepared statement whose result type changed fails once, then runs unnamed",
          "[pg][conn][prepared][direct]") {
  const std::string url = test::FreshDatabase(false);
  Connection conn = Connection::Open(url);
  conn.exec("CREATE TABLE m (id int, v int)");
  conn.exec("INSERT INTO m VALUES (1, 10)");
  CHECK(conn.exec("SELECT * FROM m WHERE id = $1", Params().add(1)).columns() == 2);
  // A migration on another connection adds a column.
  Connection other = Connection::Open(url);
  other.exec("ALTER TABLE m ADD COLUMN w int");
  Caught changed = Capture([&] { conn.exec("SELECT * FROM m WHERE id = $1", Params().add(1)); });
  CHECK(changed.kind == "SqlError");
  CHECK(changed.sqlstate == "0A000");
  // The caller retries: the statement now runs unnamed, with the new columns.
  CHECK(conn.exec("SELECT * FROM m WHERE id = $1", Params().add(1)).columns() == 3);
  CHECK(conn.exec("SELECT $1::int + 1", Params().add(1)).int64(0, 0) == 2);
  CHECK(PreparedNames(conn).size() == 1);  // nothing prepared after the failure
}

TEST_CASE("pg: a prepared statement the server lost fails once, then runs unnamed",
          "[pg][conn][prepared][direct]") {
  Connection conn = Connection::Open(test::FreshDatabase(false));
  CHECK(conn.exec("SELECT $1::int", Params().add(5)).int64(0, 0) == 5);
  conn.exec("DEALLOCATE ALL");  // as a DISCARD ALL in a hook would
  Caught lost = Capture([&] { conn.exec("SELECT $1::int", Params().add(5)); });
  CHECK(lost.kind == "SqlError");
  CHECK(lost.sqlstate == "26000");
  CHECK(conn.exec("SELECT $1::int", Params().add(6)).int64(0, 0) == 6);
  CHECK(PreparedNames(conn).empty());
}

// Through PgBouncer in transaction pooling (pg_tests_pgbouncer), the server
// process differs from the login's, and nothing is prepared: a statement
// prepared on one server connection would be missing on the next.
TEST_CASE("pg: through a pooler statements run unnamed", "[pg][conn][prepared]") {
  Connection conn = Connection::Open(test::FreshDatabase(false));
  for (int i = 0; i < 3; ++i) CHECK(conn.exec("SELECT $1::int", Params().add(i)).int64(0, 0) == i);
  if (test::ThroughPgBouncer()) {
    CHECK(conn.pooled());
    // Whichever server connection answers has nothing of ours prepared.
    CHECK(conn.exec("SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'akadzed%'").int64(0, 0) == 0);
  } else {
    CHECK_FALSE(conn.pooled());
    CHECK(PreparedNames(conn).size() == 1);
  }
}

// Statement::bind_set (pg/statement.h): a set of 9 or more elements makes
// the statement one planned for its values (so the server can hash the set);
// a smaller one leaves it prepared. Either way the rows are the same.
// [direct]: through PgBouncer nothing is prepared at all.
TEST_CASE("pg: a statement testing membership in a large set is planned for its values, a small one prepared",
          "[pg][conn][prepared][direct]") {
  Connection conn = Connection::Open(test::FreshDatabase(false));
  auto not_in = [&](std::size_t set_size) {
    std::vector<std::string> set;
    for (std::size_t i = 0; i < set_size; ++i) set.push_back("k" + std::to_string(i * 2));
    Statement st;
    st.sql = "SELECT count(*) FROM generate_series(0, 99) g WHERE 'k' || g <> ALL(" + st.bind_set(set) + "::text[])";
    CHECK(st.prepare() == (set_size < Statement::kHashedSetSize));
    Transaction tx(conn, "BEGIN", Transaction::Begin::kWithFirstStatement);
    const std::int64_t kept = tx.exec(st).int64(0, 0);
    tx.commit();
    return kept;
  };
  CHECK(not_in(Statement::kHashedSetSize) == 100 - 9);
  CHECK(PreparedNames(conn).empty());
  CHECK(not_in(50) == 50);
  CHECK(PreparedNames(conn).empty());
  CHECK(not_in(Statement::kHashedSetSize - 1) == 100 - 8);
  CHECK(PreparedNames(conn).size() == 1);
}

TEST_CASE("pg: a transaction with generic plans plans each prepared statement once, and a statement with a "
          "hashed set for its values",
          "[pg][conn][prepared][direct]") {
  Connection conn = Connection::Open(test::FreshDatabase(false), "akadzed test", SessionBounds::ForStall(std::chrono::seconds(5)));
  const std::string mode = "SELECT current_setting('plan_cache_mode')";
  auto set_of = [](std::size_t n) {
    std::vector<std::string> set;
    for (std::size_t i = 0; i < n; ++i) set.push_back("k" + std::to_string(i * 2));
    return set;
  };
  auto not_in = [](Statement& st, const std::vector<std::string>& set) {
    st.sql = "SELECT count(*) FROM generate_series(0, 99) g WHERE 'k' || g <> ALL(" + st.bind_set(set) + "::text[])";
  };
  const std::string small_sql = "SELECT count(*) FROM generate_series(0, 99) g WHERE g < $1::int";
  for (int round = 0; round < 3; ++round) {
    Transaction tx(conn, "BEGIN", Transaction::Begin::kWithFirstStatement, Transaction::Plans::kGeneric);
    CHECK(tx.exec(small_sql, Params().add(10 + round)).int64(0, 0) == 10 + round);
    CHECK(tx.exec(mode).text(0, 0) == std::string("force_generic_plan"));
    // A pipeline's results are its statements' alone, in order, with the
    // switch to custom plans sent before the one planned for its values.
    Statement hashed;
    not_in(hashed, set_of(Statement::kHashedSetSize + round));
    REQUIRE_FALSE(hashed.prepare());
    const Params small_params = Params().add(5);
    const pg::PipelinedStatement statements[] = {{small_sql, &small_params},
                                             {hashed.sql, &hashed.params(), hashed.prepare()},
                                             {mode}};
    std::vector<Result> got = tx.pipeline(statements);
    REQUIRE(got.size() == 3);
    CHECK(got[0].int64(0, 0) == 5);
    CHECK(got[1].int64(0, 0) == 100 - static_cast<std::int64_t>(Statement::kHashedSetSize) - round);
    CHECK(got[2].text(0, 0) == std::string("force_custom_plan"));
    tx.commit();
  }
  // Local to the transaction.
  CHECK(conn.exec(mode).text(0, 0) == std::string("auto"));
  // Planned once, run six times (twice a round) by its generic plan; never custom-planned.
  Result plans = conn.exec("SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1",
                           Params().add(small_sql));
  REQUIRE(plans.rows() == 1);
  CHECK(plans.int64(0, 0) == 6);
  CHECK(plans.int64(0, 1) == 0);
  // exec(Statement) outside a pipeline switches the same way, once.
  Transaction tx(conn, "BEGIN", Transaction::Begin::kNow, Transaction::Plans::kGeneric);
  Statement hashed;
  not_in(hashed, set_of(20));
  CHECK(tx.exec(hashed).int64(0, 0) == 80);
  CHECK(tx.exec(mode).text(0, 0) == std::string("force_custom_plan"));
  tx.commit();
}

TEST_CASE("pg: Connection::Open failures are ConnectionErrors without the password",
          "[pg][conn][errors]") {
  const std::string socket_dir = test::Cluster().socket_directory().string();
  const std::string port = std::to_string(test::Cluster().port());
  const std::vector<std::string> conninfos = {
      // No such socket directory: fails fast.
      "postgresql://bob:secret@/postgres?host=/nonexistent-akadzed-dir",
      // libpq echoes the whole URI in this parse error.
      "postgresql://bob:secret@[::1/postgres",
      // libpq echoes the (bad) password token itself in this one.
      "postgresql://bob:secret%zz@/postgres?host=/nonexistent-akadzed-dir",
      // The real server, a role that does not exist.
      "host=" + socket_dir + " port=" + port +
          " user=akadzed_no_such_role password=secret dbname=postgres",
      "host=/nonexistent-akadzed-dir password=secret port=5432",
      "host=/nonexistent-akadzed-dir password='secret and more' port=5432",
  };
  for (const std::string& conninfo : conninfos) {
    CAPTURE(conninfo);
    Caught c = Capture([&] { Connection::Open(conninfo); });
    CAPTURE(c.message);
    CHECK(c.kind == "ConnectionError");
    CHECK(c.poisons);
    CHECK(c.transient);
    CHECK(c.sqlstate.empty());
    CHECK(c.message.find("secret") == std::string::npos);
    CHECK(c.message.find('\n') == std::string::npos);
    CHECK(c.message.rfind("cannot connect to PostgreSQL", 0) == 0);
  }
  // The message still says what went wrong.
  Caught role = Capture([&] {
    Connection::Open("host=" + socket_dir + " port=" + port +
                     " user=akadzed_no_such_role password=secret dbname=postgres");
  });
  CHECK(role.message.find("akadzed_no_such_role") != std::string::npos);
}

// ---------------------------------------------------------------- Transaction

TEST_CASE("pg: Transaction rolls back on destruction and commits on commit()", "[pg][tx]") {
  const std::string url = test::FreshDatabase(false);
  Connection conn = Connection::Open(url);
  Connection other = Connection::Open(url);
  conn.exec("CREATE TABLE t (x int)");

  SECTION("destruction without commit rolls back") {
    {
      Transaction tx(conn);
      CHECK(TxStatus(conn) == PQTRANS_INTRANS);
      tx.exec("INSERT INTO t VALUES (1)");
      CHECK(tx.exec("SELECT count(*) FROM t").int64(0, 0) == 1);
      CHECK(Count(other, "t") == 0);
    }
    CHECK(TxStatus(conn) == PQTRANS_IDLE);
    CHECK(Count(conn, "t") == 0);
    CHECK(Count(other, "t") == 0);
  }

  SECTION("an exception unwinding through it rolls back") {
    try {
      Transaction tx(conn);
      tx.exec("INSERT INTO t VALUES ($1)", Params().add(2));
      throw std::runtime_error("handler failed");
    } catch (const std::runtime_error&) {
    }
    CHECK(TxStatus(conn) == PQTRANS_IDLE);
    CHECK(Count(conn, "t") == 0);
  }

  SECTION("commit makes the work visible to others") {
    {
      Transaction tx(conn);
      tx.exec("INSERT INTO t VALUES (3)");
      CHECK(Count(other, "t") == 0);
      tx.commit();
      CHECK(TxStatus(conn) == PQTRANS_IDLE);
      CHECK(Count(other, "t") == 1);
      CHECK_NOTHROW(tx.rollback());  // a no-op once committed
      // Work after commit is outside the transaction: it must survive the destructor.
      conn.exec("INSERT INTO t VALUES (4)");
    }
    CHECK(Count(other, "t") == 2);
  }

  SECTION("explicit rollback, then the destructor does nothing") {
    {
      Transaction tx(conn);
      tx.exec("INSERT INTO t VALUES (5)");
      tx.rollback();
      CHECK(TxStatus(conn) == PQTRANS_IDLE);
      CHECK_NOTHROW(tx.rollback());
      conn.exec("INSERT INTO t VALUES (6)");
    }
    Result r = other.exec("SELECT x FROM t");
    REQUIRE(r.rows() == 1);
    CHECK(r.int64(0, 0) == 6);
  }

  SECTION("begin_sql chooses the isolation level") {
    {
      Transaction tx(conn, "BEGIN ISOLATION LEVEL SERIALIZABLE");
      CHECK(tx.exec("SHOW transaction_isolation").text(0, 0) == "serializable");
      CHECK(&tx.connection() == &conn);
    }
    Transaction tx(conn);
    CHECK(tx.exec("SHOW transaction_isolation").text(0, 0) == "read committed");
  }
}

TEST_CASE("pg: a pipeline runs its statements in one round trip, each with its own snapshot",
          "[pg][pipeline][direct]") {
  const std::string url = test::FreshDatabase(false);
  Connection conn = Connection::Open(url, "akadzed pipeline test");
  Connection other = Connection::Open(url);
  conn.exec("CREATE TABLE t (x int)");
  conn.exec("INSERT INTO t VALUES (1)");

  SECTION("results in order; prepared statements on first use in the same round trip") {
    const Params two = Params().add(2);
    const Params three = Params().add(3);
    conn.pooled();  // asked once per connection, in a round trip of its own
    const std::int64_t before = conn.round_trips();
    const pg::PipelinedStatement batch[] = {{"SELECT $1::int + 1", &two},
                                            {"SELECT count(*) FROM t"},
                                            {"SELECT $1::int * 10", &three, false}};
    std::vector<Result> r = conn.pipeline(batch);
    CHECK(conn.round_trips() - before == 1);
    REQUIRE(r.size() == 3);
    CHECK(r[0].int64(0, 0) == 3);
    CHECK(r[1].int64(0, 0) == 1);
    CHECK(r[2].int64(0, 0) == 30);
    // Prepared: the second time it runs by name.
    CHECK(conn.pipeline(std::span(batch, 1))[0].int64(0, 0) == 3);
  }

  SECTION("a failing statement: its error, the rest skipped, the connection usable") {
    const pg::PipelinedStatement batch[] = {{"INSERT INTO t VALUES (2)"},
                                            {"SELECT 1 / 0"},
                                            {"INSERT INTO t VALUES (3)"}};
    Caught c = Capture([&] { conn.pipeline(batch); });
    CHECK(c.kind == "SqlError");
    CHECK(c.sqlstate == "22012");
    // Outside a transaction block the pipeline is one implicit transaction.
    CHECK(Count(conn, "t") == 1);
    CHECK(conn.exec("SELECT 7").int64(0, 0) == 7);
  }

  SECTION("a statement sees what committed while the one before it ran") {
    // The first statement waits for a lock `other` holds; `other` inserts
    // and commits, releasing it; the second statement's snapshot has it.
    Transaction holder(other);
    holder.exec("SELECT pg_advisory_xact_lock(42)");
    holder.exec("INSERT INTO t VALUES (5)");
    const int pid = conn.backend_pid();
    auto pipelined = std::async(std::launch::async, [&] {
      Transaction tx(conn, "BEGIN ISOLATION LEVEL READ COMMITTED", Transaction::Begin::kWithFirstStatement);
      const pg::PipelinedStatement batch[] = {{"SELECT pg_advisory_xact_lock(42)"}, {"SELECT count(*) FROM t"}};
      std::vector<Result> r = tx.pipeline(batch);
      return r[1].int64(0, 0);
    });
    // Commit once the pipeline waits for the lock.
    Connection monitor = Connection::Open(url);
    REQUIRE(Eventually([&] { return WaitingForLock(monitor, pid); }));
    holder.commit();
    CHECK(pipelined.get() == 2);
  }
}

TEST_CASE("pg: a deferred BEGIN rides with the first statement; end_after commits in the same round trip",
          "[pg][pipeline][tx]") {
  using std::chrono::milliseconds;
  const std::string url = test::FreshDatabase(false);
  Connection conn = Connection::Open(url, "akadzed", SessionBounds{milliseconds(800), milliseconds(5000)});
  Connection other = Connection::Open(url);
  conn.exec("CREATE TABLE t (x int)");

  SECTION("BEGIN, the bounds and the first statement: one round trip") {
    const std::int64_t before = conn.round_trips();
    Transaction tx(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ", Transaction::Begin::kWithFirstStatement);
    CHECK(conn.round_trips() == before);  // nothing sent yet
    CHECK(TxStatus(conn) == PQTRANS_IDLE);
    CHECK(tx.exec("SHOW transaction_isolation").text(0, 0) == "repeatable read");
    CHECK(tx.exec("SHOW lock_timeout").text(0, 0) == "800ms");
    CHECK(tx.exec("SHOW statement_timeout").text(0, 0) == "4s");
    CHECK(conn.round_trips() - before == 3);
    tx.exec("INSERT INTO t VALUES ($1)", Params().add(1));
    const Params two = Params().add(2);
    const pg::PipelinedStatement last{"INSERT INTO t VALUES ($1)", &two};
    const std::int64_t at_end = conn.round_trips();
    tx.end_after(std::span(&last, 1), true);
    CHECK(conn.round_trips() - at_end == 1);
    CHECK(TxStatus(conn) == PQTRANS_IDLE);
    CHECK(Count(other, "t") == 2);
  }

  SECTION("a pipeline refused before it is sent (bad Params) leaves the connection usable") {
    {
      Transaction tx(conn, "BEGIN", Transaction::Begin::kWithFirstStatement);
      Params bad = Params().add(1).types({23, 23});
      const pg::PipelinedStatement one{"SELECT $1::int", &bad};
      CHECK_THROWS_AS(tx.pipeline(std::span(&one, 1)), std::invalid_argument);
      tx.exec("INSERT INTO t VALUES (7)");
      tx.commit();
    }
    CHECK(TxStatus(conn) == PQTRANS_IDLE);
    CHECK(Count(other, "t") == 1);
    CHECK(conn.exec("SELECT 8").int64(0, 0) == 8);
  }

  SECTION("several statements in one exec() with a deferred BEGIN") {
    Transaction tx(conn, "BEGIN", Transaction::Begin::kWithFirstStatement);
    CHECK(tx.exec("INSERT INTO t VALUES (9); SELECT count(*) FROM t").int64(0, 0) == 1);
    CHECK(tx.exec("SHOW lock_timeout").text(0, 0) == "800ms");
  }

  SECTION("nothing sent: commit and rollback send nothing") {
    const std::int64_t before = conn.round_trips();
    {
      Transaction tx(conn, "BEGIN", Transaction::Begin::kWithFirstStatement);
      tx.commit();
    }
    { Transaction tx(conn, "BEGIN", Transaction::Begin::kWithFirstStatement); }
    CHECK(conn.round_trips() == before);
  }

  SECTION("end_after with ROLLBACK; a failing statement leaves the transaction to the destructor") {
    {
      Transaction tx(conn, "BEGIN", Transaction::Begin::kWithFirstStatement);
      tx.exec("INSERT INTO t VALUES (3)");
      const pg::PipelinedStatement last{"INSERT INTO t VALUES (4)"};
      tx.end_after(std::span(&last, 1), false);
      CHECK(TxStatus(conn) == PQTRANS_IDLE);
    }
    {
      Transaction tx(conn, "BEGIN", Transaction::Begin::kWithFirstStatement);
      tx.exec("INSERT INTO t VALUES (5)");
      const pg::PipelinedStatement last{"SELECT 1 / 0"};
      Caught c = Capture([&] { tx.end_after(std::span(&last, 1), true); });
      CHECK(c.sqlstate == "22012");
      CHECK(TxStatus(conn) == PQTRANS_INERROR);
    }
    CHECK(TxStatus(conn) == PQTRANS_IDLE);
    CHECK(Count(other, "t") == 0);
  }
}

TEST_CASE("test support: BlackholeProxy::SetDelay adds its delay each way", "[pg][proxy][direct]") {
  using std::chrono::milliseconds;
  const std::string url = test::FreshDatabase(false);
  test::BlackholeProxy proxy(test::BlackholeProxy::ClusterTarget());
  Connection conn = Connection::Open(url + " " + proxy.conninfo());
  auto round_trip = [&] {
    const auto started = std::chrono::steady_clock::now();
    conn.exec("SELECT 1");
    return std::chrono::steady_clock::now() - started;
  };
  // A delay large against a loaded machine's stalls (a margin of 80 ms was
  // one stall from failing), so that one round trip and three tell apart.
  round_trip();
  proxy.SetDelay(milliseconds(200));
  round_trip();  // bytes read before the change may still pass at once
  const auto delayed = round_trip();
  CHECK(delayed >= milliseconds(400));
  CHECK(delayed < milliseconds(3000));
  // A pipeline of three statements still costs one delayed round trip, not
  // three.
  const pg::PipelinedStatement batch[] = {{"SELECT 1"}, {"SELECT 2"}, {"SELECT 3"}};
  const auto started = std::chrono::steady_clock::now();
  CHECK(conn.pipeline(batch).size() == 3);
  const auto pipelined = std::chrono::steady_clock::now() - started;
  CHECK(pipelined >= milliseconds(400));
  CHECK(pipelined < delayed + milliseconds(400));
  proxy.SetDelay(milliseconds(0));
  round_trip();
  CHECK(round_trip() < milliseconds(400));
}

TEST_CASE("pg: commit of an aborted transaction throws SqlError 25P02", "[pg][tx][errors]") {
  const std::string url = test::FreshDatabase(false);
  Connection conn = Connection::Open(url);
  conn.exec("CREATE TABLE t (x int)");
  {
    Transaction tx(conn);
    tx.exec("INSERT INTO t VALUES (1)");
    Caught failed = Capture([&] { tx.exec("SELECT 1 / 0"); });
    CHECK(failed.kind == "SqlError");
    CHECK(failed.sqlstate == "22012");
    // Later statements are refused while the transaction is aborted.
    Caught refused = Capture([&] { tx.exec("SELECT 1"); });
    CHECK(refused.kind == "SqlError");
    CHECK(refused.sqlstate == "25P02");

    Caught commit = Capture([&] { tx.commit(); });
    CHECK(commit.kind == "SqlError");
    CHECK(commit.sqlstate == "25P02");
    CHECK_FALSE(commit.transient);
    CHECK_FALSE(commit.poisons);
  }
  CHECK(conn.healthy());
  CHECK(TxStatus(conn) == PQTRANS_IDLE);
  CHECK(Count(conn, "t") == 0);
}

// ---------------------------------------------------------------- typed errors

TEST_CASE("pg: an error one row can cause is a RowFaultError; the server's state is not",
          "[pg][errors]") {
  Connection conn = Connection::Open(test::FreshDatabase(false));
  conn.exec("CREATE TABLE r (k int PRIMARY KEY, v int CHECK (v > 0))");
  conn.exec("INSERT INTO r VALUES (1, 1)");
  auto kind_of = [&](const char* sql) {
    try {
      conn.exec(sql);
    } catch (...) {
      return pg::ErrorKindOf(std::current_exception());
    }
    return pg::ErrorKind::kOther;
  };
  // A constraint, a data exception, a trigger raising: a row's fault.
  CHECK(kind_of("INSERT INTO r VALUES (1, 2)") == pg::ErrorKind::kRowFault);
  CHECK(kind_of("UPDATE r SET v = -1") == pg::ErrorKind::kRowFault);
  CHECK(kind_of("SELECT 1 / (k - 1) FROM r") == pg::ErrorKind::kRowFault);
  CHECK(kind_of("DO $$ BEGIN RAISE EXCEPTION 'no'; END $$") == pg::ErrorKind::kRowFault);
  CHECK_THROWS_AS(conn.exec("INSERT INTO r VALUES (1, 2)"), pg::RowFaultError);
  // The server's state: a statement timeout (57014) is an SqlError of no row.
  conn.exec("SET statement_timeout = '10ms'");
  CHECK(kind_of("SELECT pg_sleep(1)") == pg::ErrorKind::kSql);
  conn.exec("RESET statement_timeout");
  CHECK(conn.exec("SELECT 1").int64(0, 0) == 1);
}

TEST_CASE("pg: SQL errors are SqlError, not transient, and leave the connection usable",
          "[pg][errors]") {
  Connection conn = Connection::Open(test::FreshDatabase(false));

  Caught syntax = Capture([&] { conn.exec("SELEC 1"); });
  CHECK(syntax.kind == "SqlError");
  CHECK(syntax.sqlstate == "42601");
  CHECK_FALSE(syntax.transient);
  CHECK_FALSE(syntax.poisons);
  CHECK(syntax.message.find("syntax error") != std::string::npos);
  CHECK(conn.healthy());
  CHECK(conn.exec("SELECT 1").int64(0, 0) == 1);

  Caught with_params = Capture([&] { conn.exec("SELEC $1::int", Params().add(1)); });
  CHECK(with_params.kind == "SqlError");
  CHECK(with_params.sqlstate == "42601");

  Caught missing = Capture([&] { conn.exec("SELECT * FROM no_such_table"); });
  CHECK(missing.kind == "SqlError");
  CHECK(missing.sqlstate == "42P01");

  conn.exec("CREATE TABLE u (k int PRIMARY KEY)");
  conn.exec("INSERT INTO u VALUES (1)");
  Caught duplicate = Capture([&] { conn.exec("INSERT INTO u VALUES ($1)", Params().add(1)); });
  CHECK(duplicate.kind == "SqlError");
  CHECK(duplicate.sqlstate == "23505");
  CHECK_FALSE(duplicate.transient);

  CHECK(conn.healthy());
  CHECK(TxStatus(conn) == PQTRANS_IDLE);
}

TEST_CASE("pg: a serialization failure (SERIALIZABLE write skew) is TransientError 40001",
          "[pg][errors]") {
  const std::string url = test::FreshDatabase(false);
  Connection setup = Connection::Open(url);
  setup.exec("CREATE TABLE doctors (id int PRIMARY KEY, on_call bool NOT NULL);"
             "INSERT INTO doctors VALUES (1, true), (2, true)");
  Connection a = Connection::Open(url);
  Connection b = Connection::Open(url);

  Transaction ta(a, "BEGIN ISOLATION LEVEL SERIALIZABLE");
  Transaction tb(b, "BEGIN ISOLATION LEVEL SERIALIZABLE");
  // Both check that someone else stays on call, then each leaves.
  CHECK(ta.exec("SELECT count(*) FROM doctors WHERE on_call").int64(0, 0) == 2);
  CHECK(tb.exec("SELECT count(*) FROM doctors WHERE on_call").int64(0, 0) == 2);
  ta.exec("UPDATE doctors SET on_call = false WHERE id = 1");
  ta.commit();
  // The second one fails, on its UPDATE or at COMMIT.
  Caught c = Capture([&] {
    tb.exec("UPDATE doctors SET on_call = false WHERE id = 2");
    tb.commit();
  });
  CHECK(c.kind == "TransientError");
  CHECK(c.sqlstate == "40001");
  CHECK(c.transient);
  CHECK_FALSE(c.poisons);
  tb.rollback();
  CHECK(b.healthy());
  CHECK(TxStatus(b) == PQTRANS_IDLE);
  CHECK(setup.exec("SELECT count(*) FROM doctors WHERE on_call").int64(0, 0) == 1);
}

// [direct]: session SETs and a backend pid, which PgBouncer does not keep.
TEST_CASE("pg: a deadlock is TransientError 40P01", "[pg][errors][direct]") {
  const std::string url = test::FreshDatabase(false);
  Connection monitor = Connection::Open(url);
  monitor.exec("CREATE TABLE rows (id int PRIMARY KEY); INSERT INTO rows VALUES (1), (2)");
  Connection a = Connection::Open(url);
  Connection b = Connection::Open(url);
  // b runs the deadlock check first and is the victim; a's lock_timeout is a
  // safety net so a broken test cannot hang.
  a.exec("SET deadlock_timeout = '10min'; SET lock_timeout = '2min'");
  b.exec("SET deadlock_timeout = '10ms'; SET lock_timeout = '2min'");

  // Declaration order matters: tb is destroyed (releasing row 2) before the
  // future joins a's thread, and ta after that.
  Transaction ta(a);
  std::future<Caught> a_waits;
  Transaction tb(b);
  ta.exec("SELECT id FROM rows WHERE id = 1 FOR UPDATE");
  tb.exec("SELECT id FROM rows WHERE id = 2 FOR UPDATE");
  a_waits = std::async(std::launch::async, [&] {
    return Capture([&] { ta.exec("SELECT id FROM rows WHERE id = 2 FOR UPDATE"); });
  });
  REQUIRE(Eventually([&] { return WaitingForLock(monitor, a.backend_pid()); }));

  Caught c = Capture([&] { tb.exec("SELECT id FROM rows WHERE id = 1 FOR UPDATE"); });
  CHECK(c.kind == "TransientError");
  CHECK(c.sqlstate == "40P01");
  CHECK(c.transient);
  CHECK_FALSE(c.poisons);
  tb.rollback();

  Caught a_result = a_waits.get();
  CHECK(a_result.kind == "none");
  ta.commit();
  CHECK(b.healthy());
  CHECK(b.exec("SELECT 1").int64(0, 0) == 1);
}

// [direct]: a session SET, which PgBouncer does not keep.
TEST_CASE("pg: a lock timeout is TransientError 55P03", "[pg][errors][direct]") {
  const std::string url = test::FreshDatabase(false);
  Connection a = Connection::Open(url);
  Connection b = Connection::Open(url);
  a.exec("CREATE TABLE rows (id int PRIMARY KEY); INSERT INTO rows VALUES (1)");
  Transaction ta(a);
  ta.exec("SELECT id FROM rows WHERE id = 1 FOR UPDATE");
  b.exec("SET lock_timeout = '20ms'");
  Transaction tb(b);
  Caught c = Capture([&] { tb.exec("SELECT id FROM rows WHERE id = 1 FOR UPDATE"); });
  CHECK(c.kind == "TransientError");
  CHECK(c.sqlstate == "55P03");
  CHECK(c.transient);
  CHECK_FALSE(c.poisons);
}

// Runs through PgBouncer too: SET LOCAL rides in the BEGIN's round trip.
TEST_CASE("pg: a stall_timeout bounds each transaction's idle time and lock waits, and only the transaction's",
          "[pg][tx][stall]") {
  const std::string url = test::FreshDatabase(false);
  Connection holder = Connection::Open(url);
  holder.exec("CREATE TABLE rows (id int PRIMARY KEY); INSERT INTO rows VALUES (1)");
  Connection bounded = Connection::Open(url, "akadzed test", {std::chrono::milliseconds(300)});
  {
    Transaction tx(bounded);
    CHECK(tx.exec("SHOW idle_in_transaction_session_timeout").text(0, 0) == "300ms");
    CHECK(tx.exec("SHOW lock_timeout").text(0, 0) == "300ms");
    CHECK(tx.exec("SHOW client_connection_check_interval").text(0, 0) == "300ms");
    // A lock held elsewhere: the wait ends after 300 ms with 55P03.
    Transaction held(holder);
    held.exec("SELECT id FROM rows WHERE id = 1 FOR UPDATE");
    const auto started = std::chrono::steady_clock::now();
    Caught c = Capture([&] { tx.exec("SELECT id FROM rows WHERE id = 1 FOR UPDATE"); });
    CHECK(c.sqlstate == "55P03");
    CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(5));
  }
  // Outside a transaction nothing is bounded: SET LOCAL ended with it.
  CHECK(bounded.exec("SHOW lock_timeout").text(0, 0) == "0");
  CHECK(bounded.exec("SHOW idle_in_transaction_session_timeout").text(0, 0) == "0");
  // Unbounded connections are untouched.
  Connection plain = Connection::Open(url);
  Transaction tx(plain);
  CHECK(tx.exec("SHOW lock_timeout").text(0, 0) == "0");
}

// [direct]: the backend's pid is watched, which PgBouncer does not tie to a client.
TEST_CASE("pg: a client that goes silent mid-transaction is cut off by the server after stall_timeout",
          "[pg][tx][stall][direct]") {
  const std::string url = test::FreshDatabase(false);
  Connection watcher = Connection::Open(url);
  watcher.exec("CREATE TABLE rows (id int PRIMARY KEY); INSERT INTO rows VALUES (1)");
  Connection silent = Connection::Open(url, "akadzed test", {std::chrono::milliseconds(300)});
  const int pid = silent.backend_pid();
  Transaction tx(silent);
  tx.exec("SELECT id FROM rows WHERE id = 1 FOR UPDATE");
  // The client says nothing more, as if the network had cut it off: the
  // server ends the session and its row lock is free again.
  const auto started = std::chrono::steady_clock::now();
  CHECK(Eventually([&] {
    return watcher.exec("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", Params().add(pid)).int64(0, 0) == 0;
  }));
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(10));
  Transaction other(watcher);
  CHECK(other.exec("SELECT id FROM rows WHERE id = 1 FOR UPDATE NOWAIT").rows() == 1);
  Caught c = Capture([&] { tx.exec("SELECT 1"); });
  CHECK(c.kind == "ConnectionError");
}

TEST_CASE("pg: SessionBounds::ForStall: replies awaited 3 x stall_timeout, 5 s at least; nothing without one",
          "[pg][stall]") {
  using std::chrono::milliseconds;
  CHECK(SessionBounds::ForStall(milliseconds(0)).reply == milliseconds(0));
  CHECK(SessionBounds::ForStall(milliseconds(0)).stall == milliseconds(0));
  CHECK(SessionBounds::ForStall(milliseconds(300)).stall == milliseconds(300));
  CHECK(SessionBounds::ForStall(milliseconds(300)).reply == milliseconds(5000));
  CHECK(SessionBounds::ForStall(milliseconds(5000)).reply == milliseconds(15000));
}

// [direct]: through a blackholing proxy in front of the cluster itself. What
// a pooler that holds a query (no server connection to give) or a network
// that drops packets looks like to the client: TCP alive, no reply.
TEST_CASE("pg: a reply that does not come within SessionBounds::reply closes the connection: "
          "ConnectionError, InDoubtError at COMMIT",
          "[pg][stall][direct]") {
  using std::chrono::milliseconds;
  const std::string url = test::FreshDatabase(false);
  Connection direct = Connection::Open(url);
  direct.exec("CREATE TABLE t (x int)");
  test::BlackholeProxy proxy(test::BlackholeProxy::ClusterTarget());
  const std::string through = url + " " + proxy.conninfo();
  const SessionBounds bounds{milliseconds(300), milliseconds(700)};

  SECTION("a statement") {
    Connection conn = Connection::Open(through, "akadzed reply test", bounds);
    CHECK(conn.exec("SELECT 1").int64(0, 0) == 1);
    proxy.CutAll();
    const auto started = std::chrono::steady_clock::now();
    Caught c = Capture([&] { conn.exec("SELECT $1::int", Params().add(2)); });
    const auto waited = std::chrono::steady_clock::now() - started;
    CHECK(c.kind == "ConnectionError");
    CHECK(c.message.find("SELECT failed: no reply from the server within 700 ms") != std::string::npos);
    CHECK(waited >= milliseconds(700));
    CHECK(waited < milliseconds(5000));
    CHECK_FALSE(conn.healthy());
    // Closed for good: the next statement fails at once, saying why.
    Caught again = Capture([&] { conn.exec("SELECT 1"); });
    CHECK(again.kind == "ConnectionError");
    CHECK(again.message.find("closed after an earlier statement got no reply") != std::string::npos);
    proxy.Heal();
  }
  SECTION("a COMMIT: in doubt; the server's own bound ended the transaction meanwhile") {
    Connection conn = Connection::Open(through, "akadzed reply test", bounds);
    {
      Transaction tx(conn);
      tx.exec("INSERT INTO t VALUES (1)");
      proxy.CutAll();
      Caught c = Capture([&] { tx.commit(); });
      CHECK(c.kind == "InDoubtError");
      CHECK(c.message.find("commit outcome unknown, COMMIT failed: no reply") != std::string::npos);
    }  // the destructor must not throw
    CHECK_FALSE(conn.healthy());
    // The client cannot know what became of it. Here the server ended the
    // session, idle in transaction past the stall bound (300 ms) while the
    // proxy held the COMMIT: rolled back. (Without that bound the held
    // COMMIT would arrive on the heal and commit.)
    proxy.Heal();
    CHECK(Eventually([&] {
      return direct.exec("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'akadzed reply test'")
                 .int64(0, 0) == 0;
    }));
    CHECK(Count(direct, "t") == 0);
  }
  SECTION("a transaction's statements end on the server a second before the reply deadline") {
    Connection conn = Connection::Open(url, "akadzed reply test", {milliseconds(300), milliseconds(3000)});
    Transaction tx(conn);
    CHECK(tx.exec("SHOW statement_timeout").text(0, 0) == "2s");
    Caught c = Capture([&] { tx.exec("SELECT pg_sleep(5)"); });
    CHECK(c.sqlstate == "57014");
    CHECK(c.kind == "SqlError");
  }
  SECTION("without a reply bound the same statement waits until the cut heals") {
    Connection conn = Connection::Open(through, "akadzed reply test", {milliseconds(300)});
    proxy.CutAll();
    auto reply = std::async(std::launch::async, [&] { return conn.exec("SELECT 3").int64(0, 0); });
    CHECK(reply.wait_for(milliseconds(1000)) == std::future_status::timeout);
    proxy.Heal();
    CHECK(reply.get() == 3);
    CHECK(conn.healthy());
  }
}

TEST_CASE("pg: a read-only server (25006) is a ConnectionError, not a job's SQL error", "[pg][errors]") {
  const std::string url = test::FreshDatabase(false);
  Connection a = Connection::Open(url);
  a.exec("CREATE TABLE rows (id int PRIMARY KEY)");
  Transaction tx(a, "BEGIN READ ONLY");
  Caught c = Capture([&] { tx.exec("INSERT INTO rows VALUES ($1)", Params().add(1)); });
  CHECK(c.kind == "ConnectionError");
  CHECK(c.sqlstate == "25006");
  CHECK(c.poisons);
}

// [direct]: kills the backend of an idle session, which PgBouncer does not
// tie to a client (the COMMIT test below runs through it too).
TEST_CASE("pg: a terminated backend gives ConnectionError", "[pg][errors][direct]") {
  const std::string url = test::FreshDatabase(false);
  Connection killer = Connection::Open(url);

  SECTION("simple query protocol") {
    Connection victim = Connection::Open(url);
    REQUIRE(TerminateBackend(killer, victim));
    Caught c = Capture([&] { victim.exec("SELECT 1"); });
    CHECK(c.kind == "ConnectionError");
    CHECK(c.poisons);
    CHECK(c.transient);
    CHECK_FALSE(victim.healthy());
    // Still a ConnectionError once libpq knows the connection is bad.
    Caught again = Capture([&] { victim.exec("SELECT 1"); });
    CHECK(again.kind == "ConnectionError");
  }

  SECTION("extended protocol") {
    Connection victim = Connection::Open(url);
    REQUIRE(TerminateBackend(killer, victim));
    Caught c = Capture([&] { victim.exec("SELECT $1::int", Params().add(1)); });
    CHECK(c.kind == "ConnectionError");
    CHECK(c.poisons);
    CHECK(c.transient);
    CHECK_FALSE(victim.healthy());
  }

  SECTION("inside a transaction; the destructor's rollback does not throw") {
    Connection victim = Connection::Open(url);
    {
      Transaction tx(victim);
      tx.exec("SELECT 1");
      REQUIRE(TerminateBackend(killer, victim));
      Caught c = Capture([&] { tx.exec("SELECT 2"); });
      CHECK(c.kind == "ConnectionError");
    }
    CHECK_FALSE(victim.healthy());
  }

  SECTION("a transaction that cannot begin") {
    Connection victim = Connection::Open(url);
    REQUIRE(TerminateBackend(killer, victim));
    Caught c = Capture([&] { Transaction tx(victim); });
    CHECK(c.kind == "ConnectionError");
  }
}

TEST_CASE("pg: COMMIT on a connection lost mid-transaction is InDoubtError", "[pg][errors]") {
  const std::string url = test::FreshDatabase(false);
  Connection killer = Connection::Open(url);
  killer.exec("CREATE TABLE t (x int)");
  Connection victim = Connection::Open(url);
  {
    Transaction tx(victim);
    tx.exec("INSERT INTO t VALUES (1)");
    // This transaction's server process: through PgBouncer, not the pid
    // libpq got at login.
    const int pid = static_cast<int>(tx.exec("SELECT pg_backend_pid()").int64(0, 0));
    REQUIRE(TerminateBackend(killer, pid));
    Caught c = Capture([&] { tx.commit(); });
    CHECK(c.kind == "InDoubtError");
    CHECK(c.poisons);
    CHECK(c.transient);
    CHECK(c.message.find("commit") != std::string::npos);
  }  // the destructor must not throw either
  CHECK_FALSE(victim.healthy());
  // Here the backend died before COMMIT arrived: nothing was committed.
  CHECK(Count(killer, "t") == 0);
}

}  // namespace akadzed
