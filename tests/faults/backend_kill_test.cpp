// Scenario 2 (docs/reliability.md): the daemons' backends are killed with
// pg_terminate_backend, over and over, picked by application_name ("akadzed
// claim <queue>", "akadzed finisher", "akadzed lease") and preferably while
// they are busy (a statement running, or inside a transaction): in the middle
// of claims, finishes, heartbeats and rescues. Every job is audited at the end.
#include <catch2/catch.hpp>

#include <chrono>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "faults/fault_scenario.h"

namespace akadzed::test {
namespace {

using namespace std::chrono_literals;

TEST_CASE("backends killed with pg_terminate_backend mid-claim, mid-finish and mid-heartbeat",
          "[faults][terminate][direct]") {
  ScenarioOptions options;
  options.heartbeat_interval = "300ms";
  options.heartbeat_ttl = "5s";
  FaultScenario s(options);
  const int kills = Long() ? 1500 : 60;
  const int batch = Long() ? 1500 : 200;
  const int keys = 40;
  s.SetLimits(keys);
  s.Enqueue("shell", batch, keys, 5, 60, 0.3);
  s.sampler().Start();
  for (int i = 0; i < 3; ++i) s.StartDaemon();
  // Kills begin once every daemon is up: a daemon that cannot register its
  // worker at start exits 1 by design (systemd restarts it), and a killed
  // registration is not the fault this scenario injects.
  for (int i = 0; i < 3; ++i) REQUIRE(s.daemon(i).WaitForLog("event=started worker=", 60s));
  REQUIRE(WaitUntil([&] { return s.CountJobs("state = 'succeeded'") > 0; }, 60s));

  pg::Connection killer = pg::Connection::Open(s.db(), "fault injector");
  const std::vector<std::string> kinds = {"akadzed claim %", "akadzed finisher", "akadzed lease"};
  std::map<std::string, int> killed;  // by kind
  int busy_kills = 0, total = 0;
  std::mt19937 rng(424242);
  for (int k = 0; total < kills && k < kills * 20; ++k) {
    if (k % 20 == 0 && s.CountJobs("state = 'queued'") < batch / 2) {
      s.Enqueue("shell", batch, keys, 5, 60, 0.31 + k * 1e-4);
    }
    const std::string& kind = kinds[rng() % kinds.size()];
    // Fault timing: catch one of them busy within 300 ms, else take an idle one.
    std::int64_t pid = 0;
    bool busy = false;
    auto deadline = std::chrono::steady_clock::now() + 300ms;
    while (pid == 0) {
      const bool any = std::chrono::steady_clock::now() >= deadline;
      pg::Result r = killer.exec(
          "SELECT pid, state <> 'idle' FROM pg_stat_activity"
          " WHERE datname = current_database() AND application_name LIKE $1"
          "   AND ($2 OR state IN ('active', 'idle in transaction'))"
          " ORDER BY random() LIMIT 1",
          pg::Params().add(kind).add(any ? "true" : "false"));
      if (r.rows() == 1) {
        pid = r.int64(0, 0);
        busy = r.text(0, 1) == "t";
      } else if (any) {
        break;  // none connected right now (it is reconnecting)
      }
    }
    if (pid == 0) continue;
    pg::Result r = killer.exec("SELECT pg_terminate_backend($1::int)", pg::Params().add(pid));
    if (r.text(0, 0) == "t") {
      ++total;
      ++killed[kind];
      if (busy) ++busy_kills;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 130));
  }
  REQUIRE(s.WaitAllFinished(Long() ? 600s : 180s));
  for (int d = 0; d < s.daemons_started(); ++d) {
    if (s.daemon(d).running()) continue;
    const std::vector<std::string> lines = Lines(s.daemon(d).Log());
    std::string tail;
    for (std::size_t i = lines.size() > 30 ? lines.size() - 30 : 0; i < lines.size(); ++i) tail += lines[i] + "\n";
    FAIL_CHECK("daemon " << d << " died; the end of its log:\n" << tail);
  }
  CHECK(s.LiveDaemons().size() == 3);
  CHECK(s.StopDaemons() == 0);
  REQUIRE(s.WaitHandlersGone(30s));
  AuditReport audit = s.RunAudit();

  std::ostringstream faults;
  faults << total << " backends terminated (claim " << killed[kinds[0]] << ", finisher "
         << killed[kinds[1]] << ", lease " << killed[kinds[2]] << "; " << busy_kills
         << " mid-statement or mid-transaction)";
  int lost_leases = 0;
  for (int d = 0; d < s.daemons_started(); ++d) {
    lost_leases += s.CountLogLines(d, "event=lease_lost");
  }
  std::ostringstream recovery;
  recovery << "each loop reconnects on its next round; " << lost_leases << " leases lost";
  s.Report("2. pg_terminate_backend", audit, faults.str(), recovery.str());
  INFO(audit.Summary());
  CHECK(audit.ok());
  CHECK(total == kills);
}

}  // namespace
}  // namespace akadzed::test
