// The stage every fault scenario runs on (docs/reliability.md): a fresh
// database with durable commits and the audit log (faults/job_audit.h),
// limits and jobs, two handlers that record every completed run in one file
// (task "shell": a bash script; task "plugin": tests/plugins/sleepy_plugin.c),
// daemons (`akadzed run` child processes, two queues: "fair" and "ordered")
// that can be killed and replaced, a running-jobs sampler, and the one-line
// report each scenario prints.
//
// Durable commits: the test cluster runs with synchronous_commit=off, under
// which PostgreSQL itself forgets acknowledged commits when it crashes
// (pg_ctl -m immediate); no client can survive that, so each scenario's
// database sets synchronous_commit=on, as production servers do.
//
// AKADZED_LONG_FAULTS=1 selects the long variants (Long()); with
// AKADZED_FAULT_REPORT=<file>, each report line is also appended there.
//
// Thread-safety: one FaultScenario per test case, used from its thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "faults/job_audit.h"
#include "pg/connection.h"
#include "pg/params.h"
#include "support/daemon_process.h"

namespace akadzed::test {

// True when AKADZED_LONG_FAULTS asks for the long variants.
bool Long();

// The wall clock in microseconds since the epoch (the audit's time base).
std::int64_t NowUs();

// The scenarios' shell handler: reads {"ms": N} from stdin, sleeps N ms,
// then appends "<job> <run_count> <start_us> <end_us>" to `record` in one
// write. With `ignore_term` it ignores SIGTERM (only SIGKILL ends it).
std::string ShellHandlerScript(const std::string& record, bool ignore_term = false);

// True while a live process has `needle` in its command line (a zombie
// nobody reaps has an empty one).
bool ProcessRunning(const std::string& needle);

// The whole of a /proc file, "" when it cannot be read. With read(2): a
// process that exits while it is read makes the read fail with ESRCH, and
// libstdc++'s filebuf throws on a failed read whatever the stream's
// exception mask.
std::string ReadProcFile(const std::string& path);

struct ScenarioOptions {
  std::string heartbeat_interval = "200ms";
  std::string heartbeat_ttl = "1500ms";
  std::string poll_interval = "100ms";
  int slots = 4;  // per queue, per daemon
  int max_attempts = 5;
  std::string log_level = "info";
  // The conninfo of a migrated database to run on (a multi-host URL, say);
  // "": a FreshDatabase() of the test cluster.
  std::string database;
};

class FaultScenario {
 public:
  explicit FaultScenario(ScenarioOptions options = {});
  ~FaultScenario();
  FaultScenario(const FaultScenario&) = delete;
  FaultScenario& operator=(const FaultScenario&) = delete;

  const std::string& db() const { return db_; }
  const TempDir& dir() const { return dir_; }
  const ScenarioOptions& options() const { return options_; }
  // Runs `sql`, reconnecting while the database is away (a restart under
  // test), for up to 90 s; other errors are thrown.
  pg::Result Query(const std::string& sql, const pg::Params& params = pg::Params());

  // akadze.limits for keys k0..k<keys-1>: the first half have rows of their
  // own, max_running 1 + i % 4, and every tenth of those also max_starts 20
  // per 1 s; the rest fall back to '*' (max_running 3). Queue "fair" gets a
  // cluster-wide cap (akadze.queue_caps) of 2 x slots - 1, which binds
  // with two daemons or more.
  void SetLimits(int keys);
  // Enqueues `count` jobs of `task` ("shell" or "plugin"), alternating the
  // two queues, 9 in 10 with a key among `keys`, args {"ms": uniform in
  // [min_ms, max_ms]}, priorities 0..2; seeded, so a rerun enqueues the same.
  void Enqueue(const std::string& task, int count, int keys, int min_ms, int max_ms,
               double seed = 0.42);

  // Starts one more daemon (on `database_url`, default db()); returns its index.
  int StartDaemon(const std::string& database_url = "");
  // SIGKILL and reap (the handlers it started live on: their own groups).
  void KillDaemon(int index);
  DaemonProcess& daemon(int index) { return *daemons_.at(static_cast<std::size_t>(index)); }
  int daemons_started() const { return static_cast<int>(daemons_.size()); }
  std::vector<int> LiveDaemons();
  // SELECT count(*) FROM akadze.jobs WHERE <where>, through Query.
  std::int64_t CountJobs(const std::string& where);

  // Waits until every job is succeeded, failed or cancelled.
  bool WaitAllFinished(std::chrono::milliseconds timeout);
  // Waits until no process runs the shell handler script any more (orphans
  // of killed daemons finish their jobs on their own).
  bool WaitHandlersGone(std::chrono::milliseconds timeout);
  // SIGTERM to every live daemon; the number that did not exit 0 in time.
  int StopDaemons();

  LimitSampler& sampler() { return *sampler_; }
  // Stops the sampler and audits every job (against the handler's records,
  // or `executions` as given), with the scenario's heartbeat_ttl.
  AuditReport RunAudit(bool records_complete = true);
  AuditReport RunAudit(std::vector<Execution> executions, bool records_complete = true);
  // Prints "<scenario>: <figures> | <audit summary>" and appends a table row
  // to $AKADZED_FAULT_REPORT when set.
  void Report(const std::string& scenario, const AuditReport& audit, const std::string& faults,
              const std::string& recovery);

  // Lines of daemon `index`'s log containing `needle`.
  int CountLogLines(int index, const std::string& needle);
  std::string shell_script() const { return shell_script_; }
  std::string record_path() const { return dir_.path() + "/executions"; }

 private:
  std::string WriteConfig();

  ScenarioOptions options_;
  TempDir dir_;
  std::string db_;
  std::unique_ptr<pg::Connection> conn_;
  std::string shell_script_;
  std::string config_;
  std::vector<std::unique_ptr<DaemonProcess>> daemons_;
  std::unique_ptr<LimitSampler> sampler_;
};

}  // namespace akadzed::test
