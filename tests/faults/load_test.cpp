// Scenario 5 (docs/reliability.md): load. Three daemons, a fair and an
// ordered queue, jobs over 200 limited keys (max_running 1 to 4, some also
// capped at 20 starts a second, the rest under the '*' default), handled by
// the sleepy test plugin for a random few milliseconds each. No fault is
// injected: the audit must hold under contention, and throughput is reported.
// Also five hot keys at their start-rate cap (5 per 250 ms).
// CI: 3,000 + 750 jobs; AKADZED_LONG_FAULTS=1: 100,000 + 10,000 jobs.
#include <catch2/catch.hpp>

#include <chrono>
#include <sstream>

#include "faults/fault_scenario.h"

namespace akadzed::test {
namespace {

using namespace std::chrono_literals;

TEST_CASE("load: 3 daemons, a fair and an ordered queue, 200 limited keys",
          "[faults][load][direct]") {
  ScenarioOptions options;
  options.heartbeat_interval = "1s";
  options.heartbeat_ttl = "10s";
  options.slots = 8;
  // 100,000 jobs at info would be ~300,000 lines per daemon.
  options.log_level = Long() ? "warn" : "info";
  FaultScenario s(options);
  const int jobs = Long() ? 100000 : 3000;
  const int keys = 200;
  s.SetLimits(keys);
  s.Enqueue("plugin", jobs, keys, 0, Long() ? 40 : 20, 0.9);
  // Start rates at saturation: five hot keys capped at 5 starts per 250 ms
  // (and 4 running), so the six claim loops contend for every window.
  const int hot = Long() ? 2000 : 150;  // jobs per hot key
  s.Query("INSERT INTO akadze.limits (key, max_running, max_starts, starts_window)"
          " SELECT 'hot' || i, 4, 5, interval '250 milliseconds' FROM generate_series(0, 4) AS i");
  s.Query("INSERT INTO akadze.jobs (task, queue, limit_key, args, max_attempts)"
          " SELECT 'plugin', CASE WHEN i % 2 = 0 THEN 'fair' ELSE 'ordered' END, 'hot' || (i % 5),"
          "        jsonb_build_object('ms', i % 7), 5"
          " FROM generate_series(0, $1::int - 1) AS i",
          pg::Params().add(5 * hot));
  s.Query("ANALYZE akadze.jobs");
  s.sampler().Start();
  for (int i = 0; i < 3; ++i) s.StartDaemon();
  REQUIRE(s.WaitAllFinished(Long() ? 3600s : 180s));
  CHECK(s.StopDaemons() == 0);
  AuditReport audit = s.RunAudit();

  std::ostringstream recovery;
  recovery << "n/a (no fault); peak running per key " << s.sampler().max_seen()
           << ", of the capped queue " << s.sampler().max_queue_seen() << ", " << audit.samples << " samples";
  s.Report("5. load", audit, "none", recovery.str());
  INFO(audit.Summary());
  CHECK(audit.ok());
  CHECK(audit.reruns == 0);  // nothing failed, so nothing ran twice
  CHECK(audit.samples > 100);
  CHECK(audit.rate_full_windows > 0);  // the start-rate caps were reached
}

}  // namespace
}  // namespace akadzed::test
