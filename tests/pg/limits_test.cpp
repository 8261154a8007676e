// Tests of per-key limits administration: the store/limits_table.h functions
// (SetLimit / ListLimits / DeleteLimit) and the `akadzed limits set | list |
// delete` commands, including their validation and exit codes.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "store/limits_table.h"
#include "pg/connection.h"
#include "support/run_command.h"
#include "support/test_cluster.h"

namespace akadzed {
namespace {

using pg::Connection;
using Cap = std::optional<std::int64_t>;

constexpr std::int64_t kSecond = 1'000'000;
constexpr std::int64_t kMinute = 60 * kSecond;

// One row as "key|max_running|max_starts|starts_window" ("-" for NULL), read
// with SQL independent of ListLimits.
std::vector<std::string> TableRows(Connection& conn) {
  pg::Result r = conn.exec(
      "SELECT key || '|' || coalesce(max_running::text, '-') || '|'"
      " || coalesce(max_starts::text, '-') || '|' || coalesce(starts_window::text, '-')"
      " FROM akadze.limits ORDER BY key");
  std::vector<std::string> out;
  for (int i = 0; i < r.rows(); ++i) out.emplace_back(r.text(i, 0));
  return out;
}

bool SameRow(const LimitRow& a, const LimitRow& b) {
  return a.key == b.key && a.max_running == b.max_running && a.max_starts == b.max_starts &&
         a.starts_window_us == b.starts_window_us;
}

test::CommandResult Limits(const std::vector<std::string>& args, const std::string& url) {
  std::vector<std::string> argv = {"limits"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--database-url");
  argv.push_back(url);
  return test::RunAkadzed(argv);
}

}  // namespace

// ---------------------------------------------------------------- library

TEST_CASE("limits: SetLimit inserts, replaces; ListLimits reads back; DeleteLimit removes",
          "[limits]") {
  Connection conn = Connection::Open(test::FreshDatabase(true));
  CHECK(ListLimits(conn).empty());

  const LimitRow a{"tenant-a", 3, std::nullopt, std::nullopt};
  const LimitRow b{"tenant-b", std::nullopt, 10, kMinute};
  const LimitRow star{"*", 2, 5, 1500 * 1000};  // 1.5 s
  const LimitRow odd{"tenant 'ü' \"x\"", 1, 1, 1};
  SetLimit(conn, a);
  SetLimit(conn, b);
  SetLimit(conn, star);
  SetLimit(conn, odd);
  CHECK(TableRows(conn) == std::vector<std::string>{"*|2|5|00:00:01.5",
                                                    "tenant 'ü' \"x\"|1|1|00:00:00.000001",
                                                    "tenant-a|3|-|-", "tenant-b|-|10|00:01:00"});

  std::vector<LimitRow> rows = ListLimits(conn);
  REQUIRE(rows.size() == 4);
  CHECK(SameRow(rows[0], star));  // ordered by key
  CHECK(SameRow(rows[1], odd));
  CHECK(SameRow(rows[2], a));
  CHECK(SameRow(rows[3], b));

  SECTION("replacing a row replaces every cap") {
    const LimitRow replaced{"tenant-a", std::nullopt, 7, 2 * 86400 * kSecond};
    SetLimit(conn, replaced);
    rows = ListLimits(conn);
    REQUIRE(rows.size() == 4);
    CHECK(SameRow(rows[2], replaced));
    CHECK(conn.exec("SELECT starts_window = interval '2 days' FROM akadze.limits"
                    " WHERE key = 'tenant-a'")
              .boolean(0, 0));
  }

  SECTION("delete") {
    CHECK(DeleteLimit(conn, "tenant-a"));
    CHECK_FALSE(DeleteLimit(conn, "tenant-a"));
    CHECK_FALSE(DeleteLimit(conn, "no-such-key"));
    CHECK(DeleteLimit(conn, "*"));
    rows = ListLimits(conn);
    REQUIRE(rows.size() == 2);
    CHECK(rows[0].key == odd.key);
    CHECK(rows[1].key == "tenant-b");
  }
}

TEST_CASE("limits: SetLimit rejects bad caps before any SQL", "[limits]") {
  Connection conn = Connection::Open(test::FreshDatabase(true));
  SetLimit(conn, LimitRow{"k", 4, std::nullopt, std::nullopt});
  const std::vector<LimitRow> bad = {
      {"k", 0, std::nullopt, std::nullopt},
      {"k", -1, std::nullopt, std::nullopt},
      {"k", std::nullopt, 0, kMinute},
      {"k", std::nullopt, 5, std::nullopt},
      {"k", std::nullopt, std::nullopt, kMinute},
      {"k", std::nullopt, 5, 0},
      {"k", std::nullopt, 5, -kSecond},
      {"", 1, std::nullopt, std::nullopt},
  };
  for (const LimitRow& row : bad) {
    CAPTURE(row.key, row.max_running, row.max_starts, row.starts_window_us);
    CHECK_THROWS_AS(SetLimit(conn, row), std::invalid_argument);
  }
  CHECK(TableRows(conn) == std::vector<std::string>{"k|4|-|-"});
  CHECK(conn.healthy());
}

// ---------------------------------------------------------------- CLI

TEST_CASE("limits: akadzed limits set / list / delete round trip", "[limits][cli]") {
  const std::string url = test::FreshDatabase(true);
  Connection conn = Connection::Open(url);

  test::CommandResult r = Limits({"set", "tenant-a", "--max-running", "3"}, url);
  INFO("stderr: " << r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.err.empty());
  CHECK(test::Lines(r.out) ==
        std::vector<std::string>{"set tenant-a max_running=3 max_starts=- starts_window=-"});

  r = Limits({"set", "tenant-b", "--max-starts", "10", "--starts-window", "1m"}, url);
  CHECK(r.exit_code == 0);
  CHECK(test::Lines(r.out) ==
        std::vector<std::string>{"set tenant-b max_running=- max_starts=10 starts_window=1m"});

  r = Limits({"set", "*", "--max-running", "2", "--max-starts", "100", "--starts-window", "1h30m"},
             url);
  CHECK(r.exit_code == 0);
  CHECK(TableRows(conn) == std::vector<std::string>{"*|2|100|01:30:00", "tenant-a|3|-|-",
                                                    "tenant-b|-|10|00:01:00"});

  SECTION("set replaces the whole row") {
    r = Limits({"set", "tenant-a", "--max-starts", "5", "--starts-window", "30s"}, url);
    CHECK(r.exit_code == 0);
    CHECK(TableRows(conn) == std::vector<std::string>{"*|2|100|01:30:00", "tenant-a|-|5|00:00:30",
                                                      "tenant-b|-|10|00:01:00"});
  }

  SECTION("list prints a header and one tab-separated line per row") {
    r = Limits({"list"}, url);
    CHECK(r.exit_code == 0);
    CHECK(r.err.empty());
    CHECK(test::Lines(r.out) == std::vector<std::string>{
                                    "KEY\tMAX_RUNNING\tMAX_STARTS\tSTARTS_WINDOW",
                                    "*\t2\t100\t1h30m",
                                    "tenant-a\t3\t-\t-",
                                    "tenant-b\t-\t10\t1m",
                                });
  }

  SECTION("list --json is one parseable JSON array") {
    r = Limits({"list", "--json"}, url);
    CHECK(r.exit_code == 0);
    REQUIRE(test::Lines(r.out).size() == 1);
    nlohmann::json rows = nlohmann::json::parse(r.out);
    REQUIRE(rows.is_array());
    REQUIRE(rows.size() == 3);
    CHECK(rows[0] == nlohmann::json{{"key", "*"},
                                    {"max_running", 2},
                                    {"max_starts", 100},
                                    {"starts_window", "1h30m"}});
    CHECK(rows[1] == nlohmann::json{{"key", "tenant-a"},
                                    {"max_running", 3},
                                    {"max_starts", nullptr},
                                    {"starts_window", nullptr}});
    CHECK(rows[2] == nlohmann::json{{"key", "tenant-b"},
                                    {"max_running", nullptr},
                                    {"max_starts", 10},
                                    {"starts_window", "1m"}});
  }

  SECTION("delete, then delete of a missing key exits 1") {
    r = Limits({"delete", "tenant-a"}, url);
    CHECK(r.exit_code == 0);
    CHECK(test::Lines(r.out) == std::vector<std::string>{"deleted tenant-a"});
    CHECK(TableRows(conn) ==
          std::vector<std::string>{"*|2|100|01:30:00", "tenant-b|-|10|00:01:00"});

    r = Limits({"delete", "tenant-a"}, url);
    CHECK(r.exit_code == 1);
    CHECK(r.out.empty());
    REQUIRE(test::Lines(r.err).size() == 1);
    CHECK(r.err.find("tenant-a") != std::string::npos);

    r = Limits({"delete", "*"}, url);
    CHECK(r.exit_code == 0);
    r = Limits({"list", "--json"}, url);
    CHECK(r.exit_code == 0);
    nlohmann::json rows = nlohmann::json::parse(r.out);
    REQUIRE(rows.size() == 1);
    CHECK(rows[0]["key"] == "tenant-b");
  }
}

TEST_CASE("limits: akadzed limits list --json on an empty table", "[limits][cli]") {
  const std::string url = test::FreshDatabase(true);
  test::CommandResult r = Limits({"list", "--json"}, url);
  CHECK(r.exit_code == 0);
  CHECK(nlohmann::json::parse(r.out) == nlohmann::json::array());
}

TEST_CASE("limits: akadzed limits set rejects bad usage with exit 2 and one line",
          "[limits][cli]") {
  const std::string url = test::FreshDatabase(true);
  Connection conn = Connection::Open(url);
  conn.exec("INSERT INTO akadze.limits (key, max_running) VALUES ('k', 4)");

  struct Case {
    std::vector<std::string> args;
    std::string mentions;  // the stderr line names the offending value or option
  };
  const std::vector<Case> cases = {
      {{"set", "k", "--max-starts", "5"}, "--starts-window"},
      {{"set", "k", "--starts-window", "1m"}, "--max-starts"},
      {{"set", "k", "--max-starts", "5", "--starts-window", "5x"}, "5x"},
      {{"set", "k", "--max-starts", "5", "--starts-window", "30"}, "30"},
      {{"set", "k", "--max-starts", "5", "--starts-window", "0s"}, "--starts-window"},
      {{"set", "k", "--max-running", "0"}, "--max-running"},
      {{"set", "k", "--max-running", "many"}, "many"},
      {{"set", "k", "--max-starts", "0", "--starts-window", "1m"}, "--max-starts"},
      {{"set", "--max-running", "2"}, "KEY"},
      {{"set", "k", "--max-running", "2", "--bogus"}, "--bogus"},
      {{"frobnicate"}, "subcommand"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.args);
    test::CommandResult r = Limits(c.args, url);
    CAPTURE(r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.out.empty());
    CHECK(test::Lines(r.err).size() == 1);
    CHECK(r.err.find(c.mentions) != std::string::npos);
  }
  // `limits` alone needs a subcommand.
  test::CommandResult bare = test::RunAkadzed({"limits"});
  CHECK(bare.exit_code == 2);
  CHECK(test::Lines(bare.err).size() == 1);
  // Nothing changed.
  CHECK(TableRows(conn) == std::vector<std::string>{"k|4|-|-"});
}

TEST_CASE("limits: a URL given without --database-url is a usage error that hides the password",
          "[limits][cli]") {
  for (const std::string& url :
       {std::string("postgresql://bob:hunter2@/db?host=/nonexistent-akadzed-dir"),
        std::string("host=/nonexistent-akadzed-dir password=hunter2")}) {
    CAPTURE(url);
    test::CommandResult r = test::RunAkadzed({"limits", "list", url});
    CAPTURE(r.err);
    CHECK(r.exit_code == 2);
    CHECK(test::Lines(r.err).size() == 1);
    CHECK(r.err.find("hunter2") == std::string::npos);
  }
}

TEST_CASE("limits: akadzed limits against an unreachable database exits 1", "[limits][cli]") {
  const std::string url = "postgresql://bob:hunter2@/db?host=/nonexistent-akadzed-dir";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"list"},
        std::vector<std::string>{"set", "k", "--max-running", "1"},
        std::vector<std::string>{"delete", "k"}}) {
    CAPTURE(args);
    test::CommandResult r = Limits(args, url);
    CAPTURE(r.err);
    CHECK(r.exit_code == 1);
    CHECK(r.out.empty());
    CHECK(test::Lines(r.err).size() == 1);
    CHECK(r.err.rfind("limits " + args.front() + " failed: ", 0) == 0);
    CHECK(r.err.find("hunter2") == std::string::npos);
  }
}

}  // namespace akadzed
