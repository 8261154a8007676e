// `akadzed demo`: the quick start. Starts a throwaway PostgreSQL, migrates it,
// sets a few limits, enqueues sample jobs and claims them in fair mode until
// the queue is drained, printing every claim. Until the daemon exists this is
// what the README's run command shows.
#include <signal.h>

#include <iostream>
#include <memory>
#include <vector>

#include "sample_rows/demo_jobs.h"
#include "store/limits_table.h"
#include "claim/claim_transaction.h"
#include "cli/commands.h"
#include "embedded/throwaway_postgres.h"
#include "pg/transaction.h"
#include "store/job_finish.h"

namespace akadzed::cli {

namespace {

struct DemoOptions {
  int jobs = 40;
  int slots = 4;
  int work_ms = 150;
};

// Waits up to `ms` for SIGINT/SIGTERM (blocked in main's thread); true if one came.
bool InterruptedWithin(int ms) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  timespec timeout{ms / 1000, (ms % 1000) * 1000000L};
  return sigtimedwait(&set, nullptr, &timeout) > 0;
}

int RunDemo(const DemoOptions& o) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  auto server = StartEmbeddedDatabase();
  pg::Connection conn = pg::Connection::Open(server->conninfo(), "akadzed demo");

  SetLimit(conn, LimitRow{"*", 2, std::nullopt, std::nullopt});
  SetLimit(conn, LimitRow{"tenant-b", 1, 2, 2'000'000});
  std::cout << "limits: '*' max_running=2 (tenant-a, tenant-c); tenant-b max_running=1 and"
               " max_starts=2 per 2s"
            << std::endl;
  EnqueueSampleJobs(conn, o.jobs);
  std::cout << "enqueued " << o.jobs
            << " sample jobs over keys tenant-a, tenant-b, tenant-c and no key" << std::endl;

  const std::string worker = RandomUuid();
  int done = 0;
  bool was_empty = false;
  while (true) {
    ClaimRequest request;
    request.queue = "default";
    request.slots = o.slots;
    request.mode = ClaimMode::kFair;
    request.worker_id = worker;
    ClaimResult r = RunClaim(conn, request);
    for (const ClaimedJob& job : r.jobs) {
      std::cout << "claim job=" << job.id << " task=" << job.task
                << " key=" << job.limit_key.value_or("-") << " priority=" << job.priority << '\n';
    }
    // An empty claim is reported once per stretch of empty claims.
    if (!r.jobs.empty() || !was_empty) {
      std::cout << "claimed " << r.jobs.size() << " in " << r.elapsed_ms << " ms (windows=" << r.windows
                << " rows_read=" << r.rows_read << ")"
                << (r.jobs.empty() ? ": every remaining key is at its limit, waiting" : "")
                << std::endl;
    }
    was_empty = r.jobs.empty();
    if (InterruptedWithin(o.work_ms)) {
      std::cout << "interrupted" << std::endl;
      break;
    }
    // "Run" the jobs: record them succeeded, as the daemon's finisher does.
    std::vector<FinishRequest> finishes;
    for (const ClaimedJob& job : r.jobs) finishes.push_back({job.id, job.run_count, JobOutcome{}});
    done += static_cast<int>(finishes.size());
    FinishJobs(conn, worker, finishes);
    if (CountActiveJobs(conn) == 0) break;
  }
  std::cout << "done: " << done << " jobs finished; stopping PostgreSQL" << std::endl;
  return kExitOk;
}

}  // namespace

void AddDemoCommand(CLI::App& app, Action& action) {
  auto o = std::make_shared<DemoOptions>();
  CLI::App* cmd = app.add_subcommand(
      "demo", "Start a throwaway PostgreSQL, enqueue sample jobs and claim them (quick start)");
  cmd->add_option("--jobs", o->jobs, "Sample jobs to enqueue")->check(CLI::Range(1, 1000000));
  cmd->add_option("--slots", o->slots, "Slots per claim")->check(CLI::Range(1, 1000));
  cmd->add_option("--work-ms", o->work_ms, "Pretend work time per claim")->check(CLI::Range(0, 60000));
  cmd->callback([&action, o] {
    action = [o]() -> int {
      return RunCommand("demo", [&] { return RunDemo(*o); });
    };
  });
}

}  // namespace akadzed::cli
