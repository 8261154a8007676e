// Scenario 2b (docs/reliability.md): a COMMIT in doubt, made deterministic.
// With synchronous_standby_names naming a standby that never connects, a
// commit is written locally and then waits for the standby; a backend
// terminated in that wait ends its transaction committed but never answers
// the COMMIT. So the daemon sees the connection break during COMMIT although
// the transaction committed: the one case that fencing alone cannot settle.
//  - A claim in doubt: its jobs are `running` under a live worker that does
//    not run them, and no rescue takes a live worker's jobs; the claim loop
//    must release them (daemon/worker/queue_runner.h).
//  - A finish in doubt: the retried finish finds the job already finished by
//    itself and is discarded (stale); the job is recorded finished once.
#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <sstream>

#include "faults/fault_scenario.h"
#include "support/test_cluster.h"

namespace akadzed::test {
namespace {

using namespace std::chrono_literals;

// Makes every durable commit of the cluster wait for a standby that never
// comes, until Off() (or destruction). Its own session commits locally.
class SyncRepStall {
 public:
  SyncRepStall() : admin_(pg::Connection::Open(Cluster().conninfo("postgres"), "fault injector")) {
    admin_.exec("SET synchronous_commit = local");
  }
  ~SyncRepStall() {
    try {
      Off();
    } catch (...) {
    }
  }
  void On() {
    admin_.exec("ALTER SYSTEM SET synchronous_standby_names = 'akadzed_fault_no_standby'");
    admin_.exec("SELECT pg_reload_conf()");
    on_ = true;
  }
  void Off() {
    if (!on_) return;
    admin_.exec("ALTER SYSTEM RESET synchronous_standby_names");
    admin_.exec("SELECT pg_reload_conf()");
    on_ = false;
  }

 private:
  pg::Connection admin_;
  bool on_ = false;
};

TEST_CASE("a claim and a finish whose COMMIT is in doubt: the claimed job is released and runs, "
          "the finish is recorded once",
          "[faults][in_doubt][direct]") {
  ScenarioOptions options;
  options.heartbeat_interval = "500ms";
  options.heartbeat_ttl = "60s";  // the stalled heartbeats must not cost the lease
  options.slots = 1;
  FaultScenario s(options);
  s.sampler().Start();
  const int d = s.StartDaemon();
  REQUIRE(s.daemon(d).WaitForLog("event=started"));
  pg::Connection local = pg::Connection::Open(s.db(), "fault injector");
  local.exec("SET synchronous_commit = local");
  SyncRepStall stall;
  auto enqueue = [&](int ms) {
    return local.exec("INSERT INTO akadze.jobs (task, queue, args) VALUES ('plugin', 'fair',"
                      " jsonb_build_object('ms', $1::int)) RETURNING id",
                      pg::Params().add(ms)).int64(0, 0);
  };
  auto waiting_backend = [&](const std::string& app) -> std::int64_t {
    pg::Result r = local.exec(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND application_name = $1 AND wait_event = 'SyncRep'",
        pg::Params().add(app));
    return r.rows() == 1 ? r.int64(0, 0) : 0;
  };
  auto row = [&](std::int64_t id) {
    pg::Result r = local.exec("SELECT state, run_count, attempt FROM akadze.jobs WHERE id = $1",
                              pg::Params().add(id));
    return std::string(r.text(0, 0)) + " run_count=" + std::string(r.text(0, 1)) +
           " attempt=" + std::string(r.text(0, 2));
  };

  // A claim in doubt.
  stall.On();
  const std::int64_t claimed = enqueue(0);
  std::int64_t pid = 0;
  REQUIRE(WaitUntil([&] { return (pid = waiting_backend("akadzed claim fair")) != 0; }, 30s));
  local.exec("SELECT pg_terminate_backend($1::int)", pg::Params().add(pid));
  auto released_from = std::chrono::steady_clock::now();
  stall.Off();
  // Released without spending an attempt, claimed again and run.
  CHECK(WaitUntil([&] { return row(claimed) == "succeeded run_count=2 attempt=0"; }, 30s));
  auto release_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - released_from).count();
  INFO(row(claimed));
  // Released by the claim loop before its next claim (`release`), or, when
  // the claim loop is still backing off from the broken connection, by the
  // lease keeper's reconcile, which finds the job running under this worker,
  // held by no runner, with no claim in flight (`orphan_released`): either
  // way no attempt spent, as row() checked. The claim loop's own release is
  // the next case's (a daemon stopped right after an in-doubt claim).
  CHECK(WaitUntil(
      [&] {
        const std::string log = s.daemon(d).Log();
        return log.find("event=release job=" + std::to_string(claimed) + " ") != std::string::npos ||
               log.find("event=orphan_released job=" + std::to_string(claimed) + " ") !=
                   std::string::npos;
      },
      30s));

  // A finish in doubt: the job runs 3 s; the stall starts while it runs.
  const std::int64_t finished = enqueue(3000);
  REQUIRE(WaitUntil([&] { return row(finished).rfind("running", 0) == 0; }, 30s));
  stall.On();
  REQUIRE(WaitUntil([&] { return (pid = waiting_backend("akadzed finisher")) != 0; }, 30s));
  local.exec("SELECT pg_terminate_backend($1::int)", pg::Params().add(pid));
  stall.Off();
  // The finisher writes the finish again; the fence discards the second one.
  CHECK(s.daemon(d).WaitForLog("event=stale_finish job=" + std::to_string(finished)));
  CHECK(row(finished) == "succeeded run_count=1 attempt=0");

  CHECK(s.StopDaemons() == 0);
  AuditReport audit = s.RunAudit();
  std::ostringstream recovery;
  recovery << "in-doubt claim released and its job run " << release_ms
           << " ms after the stall ended; in-doubt finish recorded once";
  s.Report("2b. COMMIT in doubt", audit, "1 claim COMMIT and 1 finish COMMIT in doubt",
           recovery.str());
  INFO(audit.Summary());
  CHECK(audit.ok());
}

TEST_CASE("a daemon stopped right after an in-doubt claim releases its jobs before it exits",
          "[faults][in_doubt][direct]") {
  ScenarioOptions options;
  options.heartbeat_interval = "500ms";
  options.heartbeat_ttl = "60s";  // a rescue would come far after the checks below
  options.slots = 1;
  FaultScenario s(options);
  const int first = s.StartDaemon();
  REQUIRE(s.daemon(first).WaitForLog("event=started"));
  pg::Connection local = pg::Connection::Open(s.db(), "fault injector");
  local.exec("SET synchronous_commit = local");
  SyncRepStall stall;
  stall.On();
  const std::int64_t id = local.exec("INSERT INTO akadze.jobs (task, queue, args) VALUES ('plugin',"
                                     " 'fair', '{\"ms\": 0}') RETURNING id").int64(0, 0);
  std::int64_t pid = 0;
  REQUIRE(WaitUntil([&] {
    pg::Result r = local.exec("SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                              " AND application_name = 'akadzed claim fair' AND wait_event = 'SyncRep'");
    return r.rows() == 1 && (pid = r.int64(0, 0)) != 0;
  }, 30s));
  // SIGTERM while the claim's COMMIT waits; then the COMMIT goes through
  // unanswered. The loop sees it in doubt while stopping.
  s.daemon(first).Signal(SIGTERM);
  local.exec("SELECT pg_terminate_backend($1::int)", pg::Params().add(pid));
  stall.Off();
  CHECK(s.daemon(first).Wait() == 0);
  CHECK(s.CountLogLines(first, "event=release job=" + std::to_string(id)) == 1);
  // Back in the queue with no attempt spent, not running under a gone worker.
  pg::Result r = local.exec("SELECT state, attempt FROM akadze.jobs WHERE id = $1", pg::Params().add(id));
  CHECK(std::string(r.text(0, 0)) == "queued");
  CHECK(std::string(r.text(0, 1)) == "0");
  // The next daemon runs it at once (a rescue would wait heartbeat_ttl).
  s.StartDaemon();
  CHECK(WaitUntil([&] {
    return local.exec("SELECT state = 'succeeded' FROM akadze.jobs WHERE id = $1",
                      pg::Params().add(id)).text(0, 0) == std::string("t");
  }, 30s));
  CHECK(s.StopDaemons() == 0);
  AuditReport audit = s.RunAudit();
  INFO(audit.Summary());
  CHECK(audit.ok());
}

}  // namespace
}  // namespace akadzed::test
