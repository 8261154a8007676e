// Catch2 main for test programs that need PostgreSQL: starts one throwaway
// cluster for the whole run, prepares a migrated template database, runs the
// tests, stops the cluster.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <mutex>

#include "schema/migrations.h"
#include "support/test_cluster.h"

namespace akadzed::test {

namespace {
std::unique_ptr<ThrowawayPostgres> g_cluster;
std::atomic<int> g_next_db{0};
constexpr const char* kTemplate = "akadzed_migrated_template";
}  // namespace

ThrowawayPostgres& Cluster() { return *g_cluster; }

std::string FreshDatabase(bool migrated) {
  // CREATE DATABASE from one template must not run concurrently.
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::string name = "t" + std::to_string(++g_next_db);
  g_cluster->create_database(name, migrated ? kTemplate : "template0");
  return g_cluster->conninfo(name);
}

std::string AkadzedBinary() {
  if (const char* bin = std::getenv("AKADZED_BIN"); bin != nullptr && *bin != '\0') return bin;
  return AKADZED_DEFAULT_BIN;
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
  int rc = Catch::Session().run(argc, argv);
  test::g_cluster.reset();
  return rc;
}
