// The metrics listener in this process, without a daemon or a database:
// Serve() returns once the accept loop runs (a condition, not a polling
// sleep), so a request right after it is answered and a Stop() right after
// it is never missed; its threads run on the service kit under their names.
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "metrics/metrics_server.h"
#include "support/daemon_process.h"
#include "support/http_probe.h"
#include "support/log_capture.h"

namespace akadzed {
namespace {

namespace fs = std::filesystem;

MetricsServer::Endpoints Steady() {
  return {
      .metrics = [] { return std::string("up 1\n"); },
      .unhealthy = [] { return std::optional<std::string>(); },
      .unready = [] { return std::optional<std::string>(); },
      .pages = nullptr,
  };
}

int PortOf(const MetricsServer& server) {
  const std::string& address = server.address();
  return std::stoi(address.substr(address.rfind(':') + 1));
}

// This process's threads by name (/proc/self/task/*/comm).
std::map<std::string, int> ThreadNames() {
  std::map<std::string, int> names;
  for (const auto& task : fs::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    if (std::getline(comm, name)) ++names[name];
  }
  return names;
}

TEST_CASE("metrics listener: answers as soon as Serve returns, and a Stop right after is never missed",
          "[metrics]") {
  test::LogCapture log;
  for (int i = 0; i < 50; ++i) {
    MetricsServer server;
    server.Bind("127.0.0.1", 0);
    server.Serve(Steady());
    if (i % 2 == 0) {
      const test::HttpAnswer health = test::HttpGet(PortOf(server), "/healthz");
      CHECK(health.status == 200);
      CHECK(health.body == "ok\n");
    }
    server.Stop();  // joins the listener: a missed stop would hang here
    CHECK(test::HttpGet(PortOf(server), "/metrics").status == 0);
  }
  CHECK(log.Count("info metrics_listening address=127.0.0.1:") == 50);
  CHECK(log.Count("metrics_stopped") == 0);
}

TEST_CASE("metrics listener: its accept loop and four request threads are named, and Stop joins them",
          "[metrics]") {
  test::LogCapture log;
  REQUIRE(ThreadNames().count("metrics listen") == 0);
  MetricsServer server;
  server.Bind("127.0.0.1", 0);
  server.Serve(Steady());
  CHECK(test::HttpGet(PortOf(server), "/metrics").body == "up 1\n");
  // Each thread names itself once it runs: awaited, not read once (under
  // AddressSanitizer the fourth request thread was not named yet).
  std::map<std::string, int> names;
  test::WaitUntil([&] {
    names = ThreadNames();
    return names["metrics listen"] == 1 && names["metrics http"] == 4;
  }, std::chrono::seconds(10));
  CHECK(names["metrics listen"] == 1);
  CHECK(names["metrics http"] == 4);
  server.Stop();
  names = ThreadNames();
  CHECK(names.count("metrics listen") == 0);
  CHECK(names.count("metrics http") == 0);
}

}  // namespace
}  // namespace akadzed
