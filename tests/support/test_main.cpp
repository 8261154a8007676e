// Catch2 main for test programs that need PostgreSQL: starts one throwaway
// cluster for the whole run (and, in PgBouncer mode, a PgBouncer in front of
// it), prepares a migrated template database, runs the tests, stops both.
// Catch2's implementation is compiled once, in catch_impl.cpp (run through
// RunCatchSession); this file needs its listener interfaces (DirectTagListener).
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>

#include <libpq-fe.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "schema/migrations.h"
#include "support/catch_session.h"
#include "support/test_cluster.h"
#include "support/throwaway_pgbouncer.h"

namespace akadzed::test {

namespace {
std::unique_ptr<ThrowawayPostgres> g_cluster;
std::unique_ptr<ThrowawayPgBouncer> g_bouncer;  // PgBouncer mode only
std::atomic<bool> g_direct_test{false};         // the running test case is tagged [direct]
std::atomic<int> g_next_db{0};
constexpr const char* kTemplate = "akadzed_migrated_template";
constexpr const char* kDirectTag = "direct";

bool PgBouncerRequested() {
  const char* v = std::getenv("AKADZED_TEST_PGBOUNCER");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

bool TaggedDirect(const Catch::TestCaseInfo& info) {
  return std::find(info.lcaseTags.begin(), info.lcaseTags.end(), kDirectTag) != info.lcaseTags.end();
}

// Keeps g_direct_test in step with the test case Catch2 runs.
class DirectTagListener : public Catch::TestEventListenerBase {
 public:
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseStarting(const Catch::TestCaseInfo& info) override {
    g_direct_test.store(TaggedDirect(info));
  }
  void testCaseEnded(const Catch::TestCaseStats&) override { g_direct_test.store(false); }
};

// libpq conninfo quoting: 'value' with \ and ' escaped.
std::string Quote(const char* value) {
  std::string out = "'";
  for (const char* c = value; *c != '\0'; ++c) {
    if (*c == '\\' || *c == '\'') out += '\\';
    out += *c;
  }
  return out + "'";
}

// When the command line excludes [direct] (as the PgBouncer CTest entries
// do), names on stderr the [direct] test cases it leaves out, so that a
// PgBouncer run says what it did not run rather than skip silently.
void ReportExcludedDirectTests(const Catch::IConfig& config) {
  const auto& filters = config.getTestsOrTags();
  const bool excludes_direct = std::any_of(filters.begin(), filters.end(), [](const std::string& f) {
    return f.find(std::string("~[") + kDirectTag + "]") != std::string::npos;
  });
  if (!excludes_direct) return;
  const Catch::TestSpec& spec = config.testSpec();
  std::vector<std::string> excluded;
  for (const Catch::TestCase& tc : Catch::getAllTestCasesSorted(config)) {
    if (TaggedDirect(tc) && spec.hasFilters() && !Catch::matchTest(tc, spec, config)) {
      excluded.push_back(tc.name);
    }
  }
  if (excluded.empty()) return;
  std::cerr << "PgBouncer mode: not running " << excluded.size()
            << " test case(s) tagged [direct]; they need a direct session (LISTEN, the"
               " server's pid, session SETs) and run in the direct suite:\n";
  for (const std::string& name : excluded) std::cerr << "  skipped [direct]: " << name << "\n";
}
}  // namespace

CATCH_REGISTER_LISTENER(DirectTagListener)

ThrowawayPostgres& Cluster() { return *g_cluster; }

bool ThroughPgBouncer() { return g_bouncer != nullptr && !g_direct_test.load(); }

std::string FreshDatabase(bool migrated) {
  // CREATE DATABASE from one template must not run concurrently.
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::string name = "t" + std::to_string(++g_next_db);
  g_cluster->create_database(name, migrated ? kTemplate : "template0");
  if (ThroughPgBouncer()) return g_bouncer->conninfo(name);
  return g_cluster->conninfo(name);
}

std::string DirectConninfo(const std::string& conninfo) {
  if (g_bouncer == nullptr) return conninfo;
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(conninfo.c_str(), &error);
  if (options == nullptr) {
    std::string message = error != nullptr ? error : "out of memory";
    PQfreemem(error);
    throw std::invalid_argument("DirectConninfo: " + message);
  }
  std::string direct = "host=" + Quote(g_cluster->socket_directory().c_str()) +
                       " port=" + std::to_string(g_cluster->port());
  for (PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    if (o->val == nullptr || std::strcmp(o->keyword, "host") == 0 ||
        std::strcmp(o->keyword, "hostaddr") == 0 || std::strcmp(o->keyword, "port") == 0) {
      continue;
    }
    direct += std::string(" ") + o->keyword + "=" + Quote(o->val);
  }
  PQconninfoFree(options);
  return direct;
}

std::string AkadzedBinary() {
  if (const char* bin = std::getenv("AKADZED_BIN"); bin != nullptr && *bin != '\0') return bin;
  return AKADZED_DEFAULT_BIN;
}

std::int64_t AdvisoryLockWaiters(pg::Connection& conn) {
  return conn
      .exec("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")
      .int64(0, 0);
}

std::int64_t Count(pg::Connection& conn, const std::string& sql) { return conn.exec(sql).int64(0, 0); }

std::int64_t JobsInState(pg::Connection& conn, const std::string& state) {
  return conn.exec("SELECT count(*) FROM akadze.jobs WHERE state = $1", pg::Params().add(state)).int64(0, 0);
}

}  // namespace akadzed::test

int main(int argc, char** argv) {
  using namespace akadzed;
  try {
    test::g_cluster = ThrowawayPostgres::Start();
    test::g_cluster->create_database(test::kTemplate);
    pg::Connection conn = pg::Connection::Open(test::g_cluster->conninfo(test::kTemplate));
    Migrate(conn);
  } catch (const std::exception& e) {
    std::cerr << "test setup: cannot start PostgreSQL: " << e.what() << std::endl;
    return 1;
  }
  if (!test::PgBouncerRequested()) {
    int rc = test::RunCatchSession(argc, argv);
    test::g_cluster.reset();
    return rc;
  }
  try {
    test::g_bouncer = test::ThrowawayPgBouncer::Start(*test::g_cluster);
  } catch (const std::exception& e) {
    std::cerr << "test setup: cannot start PgBouncer: " << e.what() << std::endl;
    test::g_cluster.reset();
    return 1;
  }
  std::cerr << "test setup: through PgBouncer (transaction pooling, pool size "
            << test::ThrowawayPgBouncer::kPoolSize << ") on port " << test::g_bouncer->port()
            << ", log in " << test::g_bouncer->log_path().string() << std::endl;
  int rc = test::RunCatchSession(argc, argv, test::ReportExcludedDirectTests);
  test::g_bouncer.reset();
  test::g_cluster.reset();
  return rc;
}
