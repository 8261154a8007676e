// Scenario 3 (docs/reliability.md): `kill -9` of a daemon at random moments
// (while it claims, while its handlers run, while it finishes) with two
// others running; a replacement starts at once. heartbeat_ttl is 1.5 s: the
// others rescue the dead daemon's jobs, which run again (at-least-once), and
// a job whose finish was in flight when its daemon died is never recorded
// twice. The shell handlers of a killed daemon live on in their own process
// groups and finish their runs; their records are audited too.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <random>
#include <sstream>
#include <thread>

#include "faults/fault_scenario.h"

namespace akadzed::test {
namespace {

using namespace std::chrono_literals;

TEST_CASE("kill -9 of daemons at random moments: the others rescue their jobs",
          "[faults][kill][direct]") {
  FaultScenario s;  // heartbeat 200 ms, ttl 1.5 s
  const int kills = Long() ? 60 : 6;
  const int batch = Long() ? 1500 : 250;
  const int keys = 40;
  s.SetLimits(keys);
  s.Enqueue("shell", batch, keys, 20, 300, 0.5);
  s.sampler().Start();
  for (int i = 0; i < 3; ++i) s.StartDaemon();
  REQUIRE(WaitUntil([&] { return s.CountJobs("state = 'succeeded'") > 0; }, 60s));

  struct Kill {
    pid_t pid;
    std::int64_t at_us;
    std::int64_t running;  // jobs running under it at the kill
  };
  std::vector<Kill> done;
  std::mt19937 rng(777);
  for (int k = 0; k < kills; ++k) {
    if (s.CountJobs("state = 'queued'") < batch / 2) {
      s.Enqueue("shell", batch, keys, 20, 300, 0.51 + k * 1e-3);
    }
    // The fault's moment: 0.5 to 2.5 s after the last one.
    std::this_thread::sleep_for(std::chrono::milliseconds(500 + rng() % 2000));
    std::vector<int> live = s.LiveDaemons();
    REQUIRE(live.size() == 3);
    const int victim = live[rng() % live.size()];
    const pid_t pid = s.daemon(victim).pid();
    const std::int64_t running = s.Query(
        "SELECT count(*) FROM akadze.jobs j JOIN fault_audit.workers w ON w.id = j.worker_id"
        " WHERE j.state = 'running' AND w.pid = $1", pg::Params().add(pid)).int64(0, 0);
    const std::int64_t at = NowUs();
    s.KillDaemon(victim);
    done.push_back({pid, at, running});
    s.StartDaemon();
  }
  REQUIRE(s.WaitAllFinished(Long() ? 600s : 180s));
  // Orphaned handlers of the killed daemons finish their runs on their own.
  REQUIRE(s.WaitHandlersGone(60s));
  CHECK(s.StopDaemons() == 0);
  AuditReport audit = s.RunAudit();

  // Kill to the rescue of the victim's last job, by the others.
  std::int64_t worst_ms = 0, rescued = 0, orphaned = 0;
  for (const Kill& k : done) {
    orphaned += k.running;
    pg::Result r = s.Query(
        "SELECT count(*), (extract(epoch FROM max(t.at)) * 1000000)::int8"
        " FROM fault_audit.transitions t JOIN fault_audit.workers w ON w.id = t.worker_id"
        " WHERE w.pid = $1 AND t.from_state = 'running' AND t.app = 'akadzed lease'",
        pg::Params().add(k.pid));
    rescued += r.int64(0, 0);
    if (auto last = r.optional_int64(0, 1)) worst_ms = std::max(worst_ms, (*last - k.at_us) / 1000);
  }
  std::ostringstream faults, recovery;
  faults << kills << " kill -9 (" << orphaned << " jobs running in the victims)";
  recovery << rescued << " jobs rescued, at most " << worst_ms
           << " ms from the kill to the last rescue (heartbeat_ttl 1.5 s)";
  s.Report("3. kill -9 of a daemon", audit, faults.str(), recovery.str());
  INFO(audit.Summary());
  CHECK(audit.ok());
  CHECK(rescued > 0);  // the kills hit running jobs, which were rescued
}

}  // namespace
}  // namespace akadzed::test
