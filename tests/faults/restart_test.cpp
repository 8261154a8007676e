// Scenario 1 (docs/reliability.md): PostgreSQL restarted under three daemons,
// with `pg_ctl restart -m fast` and `-m immediate` in turn. The daemons
// reconnect with backoff and jitter, log each outage once per loop (a
// `<loop>_failed` warning and a `<loop>_recovered` line, never one line per
// retry), keep running, and every job is audited at the end.
// heartbeat_ttl (15 s) outlasts the outage, so the daemons keep their leases
// and their handlers run on; finishes written during the outage are retried.
//
// Then an outage longer than heartbeat_ttl: every daemon loses its lease,
// and finishes held through the outage must be written before any daemon
// rescues their jobs (docs/reliability.md, "Finishes after an outage").
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "faults/fault_scenario.h"
#include "pg/pg_error.h"
#include "support/test_cluster.h"

namespace akadzed::test {
namespace {

using namespace std::chrono_literals;

// For every daemon process that recorded a finish after `since_us`: its
// first one (pid -> microseconds since the epoch).
std::map<std::int64_t, std::int64_t> FirstFinishSince(FaultScenario& s, std::int64_t since_us) {
  pg::Result r = s.Query(
      "SELECT w.pid, (extract(epoch FROM min(t.at)) * 1000000)::int8"
      " FROM fault_audit.transitions t JOIN fault_audit.workers w ON w.id = t.worker_id"
      " WHERE t.to_state = 'succeeded' AND t.at > to_timestamp($1::float8 / 1000000)"
      " GROUP BY w.pid",
      pg::Params().add(since_us));
  std::map<std::int64_t, std::int64_t> first;
  for (int i = 0; i < r.rows(); ++i) first[r.int64(i, 0)] = r.int64(i, 1);
  return first;
}

TEST_CASE("pg layer: the first statement on a connection whose server died is a ConnectionError",
          "[faults][restart][direct]") {
  // libpq reports CONNECTION_OK until the statement after it; the error has
  // no SQLSTATE. Taken for an SQL error, the connection was kept and the
  // daemon logged an error line per loop besides its outage warning.
  FaultScenario s;
  pg::Connection conn = pg::Connection::Open(s.db());
  Cluster().pg_ctl({"restart", "-m", "immediate", "-w", "-t", "60"});
  CHECK_THROWS_AS(conn.exec("SELECT 1", pg::Params()), pg::ConnectionError);
  pg::Connection again = pg::Connection::Open(s.db());
  Cluster().pg_ctl({"restart", "-m", "immediate", "-w", "-t", "60"});
  CHECK_THROWS_AS(again.exec("SELECT 1"), pg::ConnectionError);
}

TEST_CASE("PostgreSQL restarts (-m fast, -m immediate) under three daemons: they reconnect, "
          "log once per outage and lose nothing",
          "[faults][restart][direct]") {
  ScenarioOptions options;
  options.heartbeat_interval = "500ms";
  options.heartbeat_ttl = "15s";
  FaultScenario s(options);
  const int restarts = Long() ? 12 : 2;
  const int batch = Long() ? 1500 : 250;
  const int keys = 40;
  s.SetLimits(keys);
  s.Enqueue("shell", batch, keys, 5, 100, 0.1);
  s.sampler().Start();
  for (int i = 0; i < 3; ++i) s.StartDaemon();

  std::mt19937 rng(20240601);
  std::vector<std::int64_t> recover_ms, outage_ms;
  for (int r = 0; r < restarts; ++r) {
    const std::string mode = r % 2 == 0 ? "fast" : "immediate";
    // Let the daemons get into their stride first.
    const std::int64_t done = s.CountJobs("state = 'succeeded'");
    REQUIRE(WaitUntil([&] { return s.CountJobs("state = 'succeeded'") >= done + 40; }, 60s));
    // The fault's moment: random within half a second.
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 500));
    // Work queued right up to the restart, so every daemon has some to
    // finish after it: three daemons run a batch in about a second, and
    // under load the waits above may outlast one.
    if (s.CountJobs("state = 'queued'") < batch / 2) {
      s.Enqueue("shell", batch, keys, 5, 100, 0.2 + r * 0.01);
    }
    const std::int64_t down_us = NowUs();
    Cluster().pg_ctl({"restart", "-m", mode, "-w", "-t", "60"});
    // pg_ctl -w returns once the server accepts connections: the outage's end.
    const std::int64_t up_us = NowUs();
    outage_ms.push_back((up_us - down_us) / 1000);
    // Recovered: every daemon has recorded a finish since.
    std::map<std::int64_t, std::int64_t> first;
    INFO("restart " << r << " (-m " << mode << ")");
    REQUIRE(WaitUntil([&] { return (first = FirstFinishSince(s, up_us)).size() == 3; }, 90s));
    std::int64_t last = 0;
    for (const auto& [pid, at] : first) last = std::max(last, at);
    recover_ms.push_back(std::max<std::int64_t>(0, last - up_us) / 1000);
    CHECK(s.LiveDaemons().size() == 3);
  }
  REQUIRE(s.WaitAllFinished(Long() ? 600s : 180s));
  CHECK(s.StopDaemons() == 0);
  REQUIRE(s.WaitHandlersGone(30s));
  AuditReport audit = s.RunAudit();

  // Once per outage: per daemon and loop, at most one failure line per
  // restart, and each failure has its recovery line.
  int worst = 0;
  for (int d = 0; d < 3; ++d) {
    for (const std::string loop : {"claim_failed queue=fair", "claim_failed queue=ordered",
                                   "finish_failed", "heartbeat_failed"}) {
      const int failed = s.CountLogLines(d, "event=" + loop);
      std::string recovered = loop;
      recovered.replace(recovered.find("_failed"), 7, "_recovered");
      std::string lines;
      for (const std::string& l : Lines(s.daemon(d).Log())) {
        if (l.find("_failed") != std::string::npos || l.find("_recovered") != std::string::npos) {
          lines += l + "\n";
        }
      }
      INFO("daemon " << d << ": " << loop << "; its outage lines:\n" << lines);
      CHECK(failed <= restarts);
      CHECK(s.CountLogLines(d, "event=" + recovered) == failed);
      worst = std::max(worst, failed);
    }
    // The outage was noticed and survived: no lease was lost (ttl 15 s).
    // The lease connection is noticed broken by whichever of its users sends
    // on it first after the restart: the heartbeat, or a service beside it
    // (its finish counts go every heartbeat_interval too); the keeper then
    // reopens it without a failure of its own.
    int lease_session_failed = 0;
    for (const std::string user : {"heartbeat", "finish_counts", "progress", "sweep", "rescue"}) {
      lease_session_failed += s.CountLogLines(d, "event=" + user + "_failed");
    }
    CHECK(lease_session_failed >= 1);
    CHECK(s.CountLogLines(d, "event=lease_lost") == 0);
  }

  std::ostringstream faults, recovery;
  faults << restarts << " restarts (fast and immediate alternating; outage "
         << *std::min_element(outage_ms.begin(), outage_ms.end()) << "-"
         << *std::max_element(outage_ms.begin(), outage_ms.end()) << " ms)";
  std::vector<std::int64_t> sorted = recover_ms;
  std::sort(sorted.begin(), sorted.end());
  recovery << sorted.front() << "-" << sorted.back()
           << " ms from the outage's end to a finish by every daemon; log: at most " << worst
           << " failure lines per loop over " << restarts << " outages";
  s.Report("1. PostgreSQL restart", audit, faults.str(), recovery.str());
  INFO(audit.Summary());
  CHECK(audit.ok());
  CHECK(audit.samples > 100);
}

TEST_CASE("an outage longer than heartbeat_ttl: finishes held through it are written before any "
          "rescue, so no completed run is repeated",
          "[faults][restart][direct]") {
  // Jobs of 100-400 ms: many complete during the outage, their finishes
  // held by the finisher; the handlers still running when a lease is lost
  // are stopped without a finish and rightly run again.
  FaultScenario s;  // heartbeat 200 ms, ttl 1.5 s
  const int keys = 20;
  const int outages = 2;
  s.SetLimits(keys);
  s.Enqueue("shell", 400, keys, 100, 400, 0.3);
  s.sampler().Start();
  for (int i = 0; i < 3; ++i) s.StartDaemon();
  for (int o = 0; o < outages; ++o) {
    const std::int64_t done = s.CountJobs("state = 'succeeded'");
    REQUIRE(WaitUntil([&] { return s.CountJobs("state = 'succeeded'") >= done + 30; }, 60s));
    Cluster().stop();
    // The outage's length is the fault itself: twice heartbeat_ttl.
    std::this_thread::sleep_for(3s);
    Cluster().start();
  }
  REQUIRE(s.WaitAllFinished(180s));
  CHECK(s.StopDaemons() == 0);
  REQUIRE(s.WaitHandlersGone(30s));
  AuditReport audit = s.RunAudit();
  // Every job succeeds once; a completed run beyond that is a repeat.
  const std::int64_t repeated = audit.executions - audit.succeeded;
  int held = 0, lost = 0;
  for (int d = 0; d < 3; ++d) {
    held += s.CountLogLines(d, "event=rescue_held");
    lost += s.CountLogLines(d, "event=lease_lost");
  }
  std::ostringstream faults, recovery;
  faults << outages << " outages of 3 s against heartbeat_ttl 1.5 s (pg_ctl stop -m immediate, start)";
  recovery << repeated << " completed runs repeated; " << audit.reruns << " reruns in all; " << lost
           << " leases lost, " << held << " rescues held off after an outage";
  s.Report("1b. PostgreSQL outage past heartbeat_ttl", audit, faults.str(), recovery.str());
  INFO(audit.Summary());
  CHECK(audit.ok());
  CHECK(audit.succeeded == audit.jobs);
  CHECK(lost >= 3);  // the outage was long enough to matter
  CHECK(repeated == 0);
}

}  // namespace
}  // namespace akadzed::test
