// The pruner's, the lease keeper's, the finisher's and a queue's claim
// rounds driven one by one on the test's thread, against a real PostgreSQL,
// with a clock the test moves by hand (support/manual_clock.h): no loop
// thread of theirs is started and nothing sleeps (a claim round's jobs run
// on the executor pool's threads; the test awaits their outcomes). The
// database is taken away by renaming it (new connections then fail), and
// given back by renaming it again.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "claim/claim_transaction.h"
#include "metrics/metrics_registry.h"
#include "metrics/worker_metrics.h"
#include "pg/connection.h"
#include "support/daemon_process.h"
#include "support/log_capture.h"
#include "support/manual_clock.h"
#include "support/test_cluster.h"
#include "worker/finisher.h"
#include "worker/handler_registry.h"
#include "worker/lease_keeper.h"
#include "worker/pruner.h"
#include "worker/queue_runner.h"
#include "worker/running_jobs.h"

namespace akadzed {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::seconds;
using test::LogCapture;

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A fresh migrated database that can be taken away and given back.
class RenamableDb {
 public:
  RenamableDb() : conninfo_(test::DirectConninfo(test::FreshDatabase())) {
    pg::Connection c = pg::Connection::Open(conninfo_);
    name_ = std::string(c.exec("SELECT current_database()").text(0, 0));
  }
  const std::string& conninfo() const { return conninfo_; }
  pg::Connection Connect() const { return pg::Connection::Open(conninfo_); }
  // Renames the database away (after ending its sessions) or back.
  void TakeAway() { Rename(name_, name_ + "_away"); }
  void GiveBack() { Rename(name_ + "_away", name_); }

 private:
  void Rename(const std::string& from, const std::string& to) {
    pg::Connection admin = pg::Connection::Open(test::Cluster().conninfo());
    admin.exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
               pg::Params().add(from));
    admin.exec("ALTER DATABASE \"" + from + "\" RENAME TO \"" + to + "\"");
  }
  std::string conninfo_;
  std::string name_;
};

TEST_CASE("a pruner round deletes old rows; a failed round backs off and its outage is measured on the "
          "clock", "[kit][direct]") {
  RenamableDb db;
  LogCapture logs;
  {
    pg::Connection c = db.Connect();
    c.exec("INSERT INTO akadze.jobs (task, state, finished_at) SELECT 't', 'succeeded',"
           " now() - interval '2 days' FROM generate_series(1, 5)");
    c.exec("INSERT INTO akadze.jobs (task, state, finished_at) VALUES ('t', 'succeeded', now())");
  }
  test::ManualClock clock;
  PruningConfig config;
  config.retention_us = 24LL * 3600 * 1'000'000;
  config.interval_us = 60'000'000;
  config.batch_size = 2;  // three batches for five rows
  Pruner pruner(db.conninfo(), milliseconds(5000), config, clock);

  CHECK(pruner.Round() == seconds(60));
  CHECK(Has(logs.Take(), "info prune jobs=5 periodic_runs=0 start_marks=0"));
  CHECK(db.Connect().exec("SELECT count(*) FROM akadze.jobs").int64(0, 0) == 1);

  db.TakeAway();
  const microseconds first = pruner.Round();
  CHECK(first >= milliseconds(500));  // 1 s, jittered
  CHECK(first <= milliseconds(1500));
  std::string text = logs.Take();
  CHECK(Has(text, "warning prune_failed | "));
  clock.Advance(seconds(42));
  const microseconds second = pruner.Round();
  CHECK(second >= seconds(1));  // doubled
  CHECK(second <= seconds(3));
  CHECK(Has(logs.Take(), "debug prune_failed | "));  // the outage is logged once
  db.GiveBack();
  clock.Advance(seconds(3));
  CHECK(pruner.Round() == seconds(60));
  CHECK(Has(logs.Take(), "info prune_recovered failures=2 outage_ms=45000"));
}

TEST_CASE("lease keeper rounds on a hand-moved clock: the lease ends exactly at its span, stops the "
          "jobs, and the next round registers a new id", "[kit][lease][direct]") {
  RenamableDb db;
  LogCapture logs;
  test::ManualClock clock;
  RunningJobs running;
  WorkerConfig timings;
  timings.heartbeat_interval_us = 1'000'000;
  timings.heartbeat_ttl_us = 10'000'000;
  const std::int64_t span_us = 6'000'000;
  WorkerIdentity me{RandomUuid(), "host", 1, {"default"}};
  LeaseKeeper keeper(db.conninfo(), me, timings, span_us, milliseconds(5000), running, nullptr, nullptr, clock);

  keeper.Register();
  CHECK(keeper.held());
  CHECK(keeper.worker_id() == me.id);
  // A job this worker runs, in the database and here.
  const std::int64_t job = db.Connect()
                               .exec("INSERT INTO akadze.jobs (task, state, run_count, worker_id, started_at)"
                                     " VALUES ('t', 'running', 1, $1::uuid, now()) RETURNING id",
                                     pg::Params().add(me.id))
                               .int64(0, 0);
  JobStop stop;
  running.Add(job, 1, &stop);

  // Heartbeats renew the lease from when each was sent.
  clock.Advance(seconds(5));
  keeper.RunRound();
  CHECK(keeper.last_round() == clock.Now());
  clock.Advance(microseconds(span_us) - microseconds(1));
  CHECK_FALSE(keeper.ExpireLeaseIfDue());  // one microsecond left
  CHECK(keeper.held());
  CHECK_FALSE(stop.requested());

  clock.Advance(microseconds(1));
  CHECK(keeper.ExpireLeaseIfDue());
  CHECK_FALSE(keeper.held());
  CHECK(stop.reason() == StopReason::kLeaseLost);
  CHECK(Has(logs.Take(), "error lease_lost worker=" + me.id + " stopped_jobs=1"));
  CHECK_FALSE(keeper.ExpireLeaseIfDue());  // once
  running.Remove(job, 1);

  // The next round takes a new id; the old one is never heartbeaten again.
  keeper.RunRound();
  CHECK(keeper.held());
  CHECK(keeper.worker_id() != me.id);
  std::string text = logs.Take();
  CHECK(Has(text, "lease_regained worker=" + keeper.worker_id()));
  CHECK(db.Connect()
            .exec("SELECT count(*) FROM akadze.workers WHERE id = $1::uuid", pg::Params().add(keeper.worker_id()))
            .int64(0, 0) == 1);

  // A round that fails is counted and logged once as an outage; the lease
  // still ends on the clock meanwhile.
  db.TakeAway();
  clock.Advance(seconds(1));
  keeper.RunRound();
  CHECK(Has(logs.Take(), "warning heartbeat_failed | "));
  clock.Advance(seconds(1));
  keeper.RunRound();
  CHECK(Has(logs.Take(), "debug heartbeat_failed | "));
  clock.Advance(microseconds(span_us));
  CHECK(keeper.ExpireLeaseIfDue());
  db.GiveBack();
  clock.Advance(seconds(2));
  keeper.RunRound();
  text = logs.Take();
  CHECK(Has(text, "info heartbeat_recovered failures=2 outage_ms=9000"));
  // After its own outage the keeper holds the rescue off for heartbeat_ttl.
  CHECK(Has(text, "rescue_held ms=10000"));
  CHECK(keeper.held());
}

// The slots a finisher frees, as the test's thread sees them.
class FreedSlots final : public SlotHolder {
 public:
  void FreeSlots(std::span<const std::int64_t> job_ids) override { ids.insert(ids.end(), job_ids.begin(), job_ids.end()); }
  std::vector<std::int64_t> ids;
};

// A job running under `worker_id` (run_count 1), as a claim leaves it.
ClaimedJob RunningJob(pg::Connection& c, const std::string& worker_id) {
  ClaimedJob job;
  job.id = c.exec("INSERT INTO akadze.jobs (task, state, run_count, worker_id, started_at)"
                  " VALUES ('t', 'running', 1, $1::uuid, now()) RETURNING id",
                  pg::Params().add(worker_id))
               .int64(0, 0);
  job.task = "t";
  job.queue = "default";
  job.run_count = 1;
  return job;
}

std::string StateOf(pg::Connection& c, std::int64_t id) {
  return std::string(c.exec("SELECT state FROM akadze.jobs WHERE id = $1", pg::Params().add(id)).text(0, 0));
}

TEST_CASE("finisher rounds on a hand-moved clock: a batch waits out its delay from its first finish, a "
          "failed write retries after the backoff, and past the stop's deadline the rest is given up",
          "[kit][finish][direct]") {
  RenamableDb db;
  LogCapture logs;
  test::ManualClock clock;
  MetricsRegistry registry;
  WorkerMetrics metrics(registry, {"default"});
  FinisherOptions options;
  options.batch_delay = milliseconds(50);
  Finisher finisher(db.conninfo(), milliseconds(5000), metrics, options, clock);
  FreedSlots slots;
  const std::string worker = RandomUuid();
  pg::Connection c = db.Connect();
  const ClaimedJob a = RunningJob(c, worker);
  const ClaimedJob b = RunningJob(c, worker);

  CHECK_FALSE(finisher.Round().next_round);  // nothing pending: waits for a Submit
  const auto first = clock.Now();
  finisher.Submit({a, worker, JobOutcome{}, 1.0, &slots});
  clock.Advance(milliseconds(20));
  finisher.Submit({b, worker, JobOutcome{}, 1.0, &slots});
  // The delay counts from the first finish, not the last.
  FinisherRound round = finisher.Round();
  CHECK(round.ended == 0);
  CHECK(round.next_round == first + milliseconds(50));
  clock.Advance(milliseconds(29));
  CHECK(finisher.Round().next_round == first + milliseconds(50));  // 1 ms early
  CHECK(StateOf(c, a.id) == "running");
  CHECK(finisher.statements() == 0);
  clock.Advance(milliseconds(1));
  round = finisher.Round();
  CHECK(round.ended == 2);
  CHECK(round.kept == 0);
  CHECK_FALSE(round.next_round);
  CHECK(finisher.statements() == 1);  // both in one statement
  CHECK(StateOf(c, a.id) == "succeeded");
  CHECK(StateOf(c, b.id) == "succeeded");
  CHECK(slots.ids == std::vector<std::int64_t>{a.id, b.id});

  // The database away: the batch is kept and retried after the backoff
  // (100 ms, jittered 50-150%), measured on the clock.
  const ClaimedJob d = RunningJob(c, worker);
  finisher.Submit({d, worker, JobOutcome{}, 1.0, &slots});
  clock.Advance(milliseconds(50));
  db.TakeAway();
  round = finisher.Round();
  CHECK(round.kept == 1);
  REQUIRE(round.next_round);
  CHECK(*round.next_round - clock.Now() >= milliseconds(50));
  CHECK(*round.next_round - clock.Now() <= milliseconds(150));
  CHECK(Has(logs.Take(), "warning finish_failed count=1 | "));
  db.GiveBack();
  clock.Advance(milliseconds(300));
  round = finisher.Round();
  CHECK(round.ended == 1);
  CHECK(Has(logs.Take(), "info finish_recovered failures=1 outage_ms=300"));
  c = db.Connect();
  CHECK(StateOf(c, d.id) == "succeeded");

  // Stopping with the database away: retried until the stop's deadline,
  // then given up (the rescue recovers the job) and its slot freed.
  const ClaimedJob e = RunningJob(c, worker);
  finisher.Submit({e, worker, JobOutcome{}, 1.0, &slots});
  db.TakeAway();
  finisher.Stop(clock.Now() + seconds(1));
  round = finisher.Round();  // a stop sends what is pending at once
  CHECK(round.kept == 1);
  CHECK_FALSE(round.done);
  clock.Advance(seconds(1));
  round = finisher.Round();
  CHECK(round.done);
  CHECK(round.ended == 1);
  CHECK(Has(logs.Take(), "error finish_unrecorded count=1 | "));
  CHECK(slots.ids.back() == e.id);
  db.GiveBack();
  CHECK(StateOf(c = db.Connect(), e.id) == "running");
}

// A handler that succeeds at once: a claimed job's slot stays busy until
// the test drives the finisher's round that records it.
class QuickHandler final : public JobHandler {
 public:
  JobOutcome Run(const ClaimedJob&, JobStop&, JobProgress*) override { return JobOutcome{}; }
  const char* kind() const override { return "test"; }
};

TEST_CASE("claim rounds on a hand-moved clock: a round claims up to the free slots and hands the jobs to "
          "the executor pool, the next is due within the poll interval, a failed one backs off",
          "[kit][claim][direct]") {
  RenamableDb db;
  LogCapture logs;
  test::ManualClock clock;
  MetricsRegistry registry;
  WorkerMetrics metrics(registry, {"default"});
  RunningJobs running;
  WorkerConfig timings;
  timings.poll_interval_us = 100'000;
  WorkerIdentity me{RandomUuid(), "host", 1, {"default"}};
  LeaseKeeper lease(db.conninfo(), me, timings, 60'000'000, milliseconds(5000), running, nullptr, nullptr, clock);
  lease.Register();
  Finisher finisher(db.conninfo(), milliseconds(5000), metrics, {}, clock);
  HandlerRegistry handlers(HandlerMap{{"t", std::make_shared<QuickHandler>()}});
  QueueConfig queue;
  queue.name = "default";
  queue.slots = 2;
  QueueRunner runner(queue, timings, db.conninfo(), milliseconds(5000), handlers, running, finisher, lease, metrics,
                     nullptr, clock);
  pg::Connection c = db.Connect();
  c.exec("INSERT INTO akadze.jobs (task, queue) SELECT 't', 'default' FROM generate_series(1, 3)");
  // Records what the executors submit, until `n` finishes ended.
  const auto finish = [&](std::size_t n) {
    std::size_t ended = 0;
    return test::WaitUntil([&] { return (ended += finisher.Round().ended) >= n; }, seconds(30));
  };
  const auto running_here = [&] {
    return c.exec("SELECT count(*) FROM akadze.jobs WHERE state = 'running' AND worker_id = $1::uuid",
                  pg::Params().add(me.id))
        .int64(0, 0);
  };

  ClaimRoundResult round = runner.ClaimRound();
  CHECK(round.kind == ClaimRoundResult::Kind::kClaimed);
  CHECK(round.free_slots == 2);
  CHECK(round.jobs == 2);
  CHECK(round.full);  // the next round starts at once
  CHECK(running_here() == 2);
  CHECK(Has(logs.Take(), "info claim queue=default jobs=2 free_slots=2"));
  CHECK(runner.held_jobs().ids.size() == 2);

  // Both slots are busy until their finishes are recorded: no claim, and
  // the next round is due within the poll interval (80-100%) of this one.
  round = runner.ClaimRound();
  CHECK(round.kind == ClaimRoundResult::Kind::kIdle);
  CHECK(round.free_slots == 0);
  CHECK(round.jobs == 0);
  CHECK_FALSE(round.full);
  CHECK(round.next_round - clock.Now() >= milliseconds(80));
  CHECK(round.next_round - clock.Now() <= milliseconds(100));

  REQUIRE(finish(2));
  CHECK(runner.busy_slots() == 0);
  round = runner.ClaimRound();
  CHECK(round.kind == ClaimRoundResult::Kind::kClaimed);
  CHECK(round.jobs == 1);  // the last one
  CHECK_FALSE(round.full);
  CHECK(round.next_round - clock.Now() >= milliseconds(80));
  CHECK(round.next_round - clock.Now() <= milliseconds(100));
  REQUIRE(finish(1));
  CHECK(c.exec("SELECT count(*) FROM akadze.jobs WHERE state = 'succeeded'").int64(0, 0) == 3);
  logs.Take();

  // The database away: the next round is due after the backoff, from
  // poll_interval (jittered 50-150%) doubling, and the outage is measured
  // on the clock.
  db.TakeAway();
  round = runner.ClaimRound();
  CHECK(round.kind == ClaimRoundResult::Kind::kFailed);
  CHECK(round.next_round - clock.Now() >= milliseconds(50));
  CHECK(round.next_round - clock.Now() <= milliseconds(150));
  CHECK(Has(logs.Take(), "warning claim_failed queue=default | "));
  clock.Advance(seconds(1));
  round = runner.ClaimRound();
  CHECK(round.kind == ClaimRoundResult::Kind::kFailed);
  CHECK(round.next_round - clock.Now() >= milliseconds(100));
  CHECK(round.next_round - clock.Now() <= milliseconds(300));
  CHECK(Has(logs.Take(), "debug claim_failed queue=default | "));  // the outage is logged once
  db.GiveBack();
  clock.Advance(seconds(2));
  round = runner.ClaimRound();
  CHECK(round.kind == ClaimRoundResult::Kind::kClaimed);
  CHECK(round.jobs == 0);
  CHECK(Has(logs.Take(), "info claim_recovered queue=default failures=2 outage_ms=3000"));
}

}  // namespace
}  // namespace akadzed
