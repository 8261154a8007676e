// The pruner's, the lease keeper's and the lease's services' (the rescue,
// the queued sweep, progress, finish counts), the finisher's, a queue's
// claim, the notify listener's, the database gauges' and the periodic
// scheduler's rounds driven one by one on the test's thread, against a real
// PostgreSQL, with a clock the test moves by hand (support/manual_clock.h):
// no loop thread of theirs is started and nothing sleeps (a claim round's
// jobs run on the executor pool's threads; the test awaits their outcomes).
// The database is taken away by renaming it (new connections then fail),
// and given back by renaming it again.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "claim/claim_transaction.h"
#include "handlers/job_progress.h"
#include "metrics/db_gauges.h"
#include "metrics/exposition_writer.h"
#include "metrics/metrics_registry.h"
#include "metrics/worker_metrics.h"
#include "periodic/periodic_scheduler.h"
#include "pg/connection.h"
#include "support/daemon_process.h"
#include "support/log_capture.h"
#include "support/manual_clock.h"
#include "support/test_cluster.h"
#include "worker/finish_count_writer.h"
#include "worker/finish_tally.h"
#include "worker/finisher.h"
#include "worker/handler_registry.h"
#include "worker/job_rescuer.h"
#include "worker/lease_keeper.h"
#include "worker/notify_listener.h"
#include "worker/progress_writer.h"
#include "worker/pruner.h"
#include "worker/queue_runner.h"
#include "worker/queued_sweeper.h"
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

// What every round test starts from: a fresh database the test can take
// away, the log the rounds write, and the clock the test moves.
struct Rounds {
  RenamableDb db;
  LogCapture logs;
  test::ManualClock clock;
};

// And a lease keeper on it (a heartbeat a second, heartbeat_ttl 10 s, a
// lease of kSpanUs), with the running jobs it watches.
struct LeaseRounds : Rounds {
  static constexpr std::int64_t kSpanUs = 6'000'000;
  static WorkerConfig Timings() {
    WorkerConfig timings;
    timings.heartbeat_interval_us = 1'000'000;
    timings.heartbeat_ttl_us = 10'000'000;
    return timings;
  }
  RunningJobs running;
  WorkerConfig timings = Timings();
  WorkerIdentity me{RandomUuid(), "host", 1, {"default"}};
  LeaseKeeper keeper{db.conninfo(), me, timings, kSpanUs, milliseconds(5000), running, nullptr, clock};
};

// Or the lease keeper's connection alone, open as the keeper's first
// registration leaves it.
struct LeaseSessionRounds : Rounds {
  LeaseSessionRounds() { session.Run([](pg::Connection&) {}); }
  SharedDbSession session{db.conninfo(), "akadzed lease", milliseconds(5000)};
};

TEST_CASE_METHOD(Rounds, "a pruner round deletes old rows; a failed round backs off and its outage is measured "
                 "on the clock", "[kit][direct]") {
  {
    pg::Connection c = db.Connect();
    c.exec("INSERT INTO akadze.jobs (task, state, finished_at) SELECT 't', 'succeeded',"
           " now() - interval '2 days' FROM generate_series(1, 5)");
    c.exec("INSERT INTO akadze.jobs (task, state, finished_at) VALUES ('t', 'succeeded', now())");
  }
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

TEST_CASE_METHOD(LeaseRounds, "lease keeper rounds on a hand-moved clock: the lease ends exactly at its span, "
                 "stops the jobs, and the next round registers a new id", "[kit][lease][direct]") {
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
  clock.Advance(microseconds(kSpanUs) - microseconds(1));
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
  clock.Advance(microseconds(kSpanUs));
  CHECK(keeper.ExpireLeaseIfDue());
  db.GiveBack();
  clock.Advance(seconds(2));
  keeper.RunRound();
  text = logs.Take();
  CHECK(Has(text, "info heartbeat_recovered failures=2 outage_ms=9000"));
  CHECK(keeper.held());
  CHECK_FALSE(keeper.heartbeat_failing());
  CHECK(keeper.outages_ended() == 1);
}

// A worker that stopped heartbeating an hour ago, with a running job.
std::int64_t DeadWorkersJob(const RenamableDb& db) {
  pg::Connection c = db.Connect();
  const std::string dead = std::string(
      c.exec("INSERT INTO akadze.workers (id, hostname, pid, queues, heartbeat_at)"
             " VALUES (gen_random_uuid(), 'gone', 1, '{default}', now() - interval '1 hour') RETURNING id")
          .text(0, 0));
  return c.exec("INSERT INTO akadze.jobs (task, state, run_count, worker_id, started_at)"
                " VALUES ('t', 'running', 1, $1::uuid, now() - interval '1 hour') RETURNING id",
                pg::Params().add(dead))
      .int64(0, 0);
}

std::string StateOf(const RenamableDb& db, std::int64_t id) {
  return std::string(
      db.Connect().exec("SELECT state || ' attempt=' || attempt FROM akadze.jobs WHERE id = $1", pg::Params().add(id))
          .text(0, 0));
}

TEST_CASE_METHOD(LeaseRounds, "a rescue round requeues a dead worker's job, never while the heartbeat fails, "
                 "and holds off for heartbeat_ttl after an outage", "[kit][lease][rescue][direct]") {
  JobRescuer rescuer(keeper.session(), keeper, timings, nullptr, clock);
  keeper.Register();
  // A job of this (live) worker is never rescued.
  const std::int64_t mine = db.Connect()
                                .exec("INSERT INTO akadze.jobs (task, state, run_count, worker_id, started_at)"
                                      " VALUES ('t', 'running', 1, $1::uuid, now()) RETURNING id",
                                      pg::Params().add(me.id))
                                .int64(0, 0);
  const std::int64_t lost = DeadWorkersJob(db);

  rescuer.RunRound();
  std::string text = logs.Take();
  CHECK(Has(text, "warning rescue job=" + std::to_string(lost) + " lost_worker="));
  CHECK(StateOf(db, lost) == "queued attempt=1");
  CHECK(StateOf(db, mine) == "running attempt=0");
  CHECK(rescuer.last_round() == clock.Now());

  // The heartbeat fails: no rescue (this daemon may be the one cut off),
  // and none for heartbeat_ttl after it works again.
  db.TakeAway();
  keeper.RunRound();
  CHECK(keeper.heartbeat_failing());
  rescuer.RunRound();  // skipped without a statement: no rescue_failed
  text = logs.Take();
  CHECK(Has(text, "heartbeat_failed"));
  CHECK_FALSE(Has(text, "rescue_failed"));
  db.GiveBack();
  const std::int64_t later = DeadWorkersJob(db);
  clock.Advance(seconds(1));
  keeper.RunRound();
  rescuer.RunRound();
  CHECK(Has(logs.Take(), "info rescue_held ms=10000"));
  CHECK(StateOf(db, later) == "running attempt=0");
  clock.Advance(seconds(10) - microseconds(1));
  rescuer.RunRound();
  CHECK(StateOf(db, later) == "running attempt=0");
  clock.Advance(microseconds(1));
  rescuer.RunRound();
  CHECK(StateOf(db, later) == "queued attempt=1");
  CHECK_FALSE(Has(logs.Take(), "rescue_held"));  // once per outage

  // Its own outage (its statement found the server gone): logged once, and
  // held off too; while the connection is not open its rounds send nothing.
  db.TakeAway();
  rescuer.RunRound();
  CHECK(Has(logs.Take(), "warning rescue_failed | "));
  clock.Advance(seconds(3));
  rescuer.RunRound();
  text = logs.Take();
  INFO(text);
  CHECK(text.empty());  // the keeper reopens the connection, and logs the outage
  db.GiveBack();
  const std::int64_t third = DeadWorkersJob(db);
  keeper.RunRound();
  clock.Advance(seconds(1));
  rescuer.RunRound();
  CHECK(Has(logs.Take(), "info rescue_held ms=10000"));
  CHECK(StateOf(db, third) == "running attempt=0");
  clock.Advance(seconds(10));
  rescuer.RunRound();
  CHECK(Has(logs.Take(), "info rescue_recovered failures=1 outage_ms=14000"));
  CHECK(StateOf(db, third) == "queued attempt=1");
}

TEST_CASE_METHOD(LeaseSessionRounds, "a sweep round ends cancel-requested and expired queued jobs; its outage is "
                 "logged once", "[kit][lease][sweep][direct]") {
  QueuedSweeper sweeper(session, seconds(1), nullptr, nullptr, clock);
  auto insert = [&](const std::string& columns, const std::string& values) {
    return db.Connect()
        .exec("INSERT INTO akadze.jobs (" + columns + ") VALUES (" + values + ") RETURNING id")
        .int64(0, 0);
  };
  const std::int64_t cancel = insert("task, cancel_requested_at", "'c', now()");
  const std::int64_t expired = insert("task, expires_at", "'e', now() - interval '1 minute'");
  const std::int64_t ready = insert("task", "'r'");

  sweeper.RunRound();
  CHECK(Has(logs.Take(), "info swept cancel_requested=1 expired=1"));
  CHECK(StateOf(db, cancel) == "cancelled attempt=0");
  CHECK(StateOf(db, expired) == "cancelled attempt=0");
  CHECK(StateOf(db, ready) == "queued attempt=0");
  sweeper.RunRound();
  CHECK_FALSE(Has(logs.Take(), "swept"));  // nothing left

  db.TakeAway();
  sweeper.RunRound();
  CHECK(Has(logs.Take(), "warning sweep_failed | "));
  clock.Advance(seconds(2));
  sweeper.RunRound();  // the connection is not open: nothing sent, nothing said
  CHECK(logs.Take().empty());
  db.GiveBack();
  session.Run([](pg::Connection&) {});  // as the lease keeper's next round reopens it
  const std::int64_t again = insert("task, cancel_requested_at", "'c', now()");
  clock.Advance(seconds(1));
  sweeper.RunRound();
  const std::string text = logs.Take();
  CHECK(Has(text, "info sweep_recovered failures=1 outage_ms=3000"));
  CHECK(Has(text, "info swept cancel_requested=1 expired=0"));
  CHECK(StateOf(db, again) == "cancelled attempt=0");
  CHECK(sweeper.last_round() == clock.Now());
}

TEST_CASE_METHOD(LeaseRounds, "a progress round writes what running jobs reported into their meta, once, and "
                 "nothing while the lease is lost", "[kit][lease][progress][direct]") {
  ProgressWriter writer(keeper.session(), keeper, running, seconds(1), clock);
  keeper.Register();
  const std::int64_t job = db.Connect()
                               .exec("INSERT INTO akadze.jobs (task, state, run_count, worker_id, started_at)"
                                     " VALUES ('t', 'running', 1, $1::uuid, now()) RETURNING id",
                                     pg::Params().add(me.id))
                               .int64(0, 0);
  JobStop stop;
  JobProgress progress;
  running.Add(job, 1, &stop, &progress);
  auto meta = [&] {
    return std::string(
        db.Connect().exec("SELECT meta::text FROM akadze.jobs WHERE id = $1", pg::Params().add(job)).text(0, 0));
  };

  writer.RunRound();  // nothing reported yet
  CHECK(meta() == "{}");
  REQUIRE(progress.Report({0.25, nlohmann::json{{"rows", 10}}}).empty());
  writer.RunRound();
  CHECK(meta() == R"({"rows": 10, "progress": 0.25})");
  CHECK(running.Progress().empty());  // written: nothing pending
  CHECK(writer.last_round() == clock.Now());

  // The lease ran out: the old id's jobs are being stopped; nothing is written.
  REQUIRE(progress.Report({0.5, std::nullopt}).empty());
  clock.Advance(microseconds(kSpanUs));
  REQUIRE(keeper.ExpireLeaseIfDue());
  writer.RunRound();
  CHECK(meta() == R"({"rows": 10, "progress": 0.25})");
  CHECK(running.Progress().size() == 1);  // still pending, for the finish
  CHECK_FALSE(Has(logs.Take(), "progress_failed"));
}

TEST_CASE_METHOD(LeaseSessionRounds, "a finish-count round adds the finisher's counts to queue_minutes, and puts "
                 "them back when the database is away", "[kit][lease][status][direct]") {
  FinishTally tally;
  FinishCountWriter writer(session, tally, seconds(1), clock);
  auto counted = [&] {
    return std::string(db.Connect()
                           .exec("SELECT COALESCE(sum(succeeded), 0) || '/' || COALESCE(sum(failed), 0) || '/' ||"
                                 " COALESCE(sum(cancelled), 0) FROM akadze.queue_minutes WHERE queue = 'default'")
                           .text(0, 0));
  };
  writer.RunRound();  // nothing to write
  CHECK(counted() == "0/0/0");
  tally.Add("default", JobState::kSucceeded);
  tally.Add("default", JobState::kSucceeded);
  tally.Add("default", JobState::kFailed);
  writer.RunRound();
  CHECK(counted() == "2/1/0");
  CHECK(tally.Take().empty());

  tally.Add("default", JobState::kCancelled);
  db.TakeAway();
  writer.RunRound();
  CHECK(Has(logs.Take(), "warning finish_counts_failed | "));
  db.GiveBack();
  writer.RunRound();  // the connection is not open: kept, nothing said
  CHECK(logs.Take().empty());
  session.Run([](pg::Connection&) {});  // as the lease keeper's next round reopens it
  clock.Advance(seconds(5));
  writer.RunRound();  // the counts were put back: written now
  CHECK(Has(logs.Take(), "info finish_counts_recovered failures=1 outage_ms=5000"));
  CHECK(counted() == "2/1/1");
  CHECK(writer.last_round() == clock.Now());
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

TEST_CASE_METHOD(Rounds, "finisher rounds on a hand-moved clock: a batch waits out its delay from its first "
                 "finish, a failed write retries after the backoff, and past the stop's deadline the rest is "
                 "given up", "[kit][finish][direct]") {
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

TEST_CASE_METHOD(Rounds, "claim rounds on a hand-moved clock: a round claims up to the free slots and hands "
                 "the jobs to the executor pool, the next is due within the poll interval, a failed one backs "
                 "off", "[kit][claim][direct]") {
  MetricsRegistry registry;
  WorkerMetrics metrics(registry, {"default"});
  RunningJobs running;
  WorkerConfig timings;
  timings.poll_interval_us = 100'000;
  WorkerIdentity me{RandomUuid(), "host", 1, {"default"}};
  LeaseKeeper lease(db.conninfo(), me, timings, 60'000'000, milliseconds(5000), running, nullptr, clock);
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

TEST_CASE_METHOD(Rounds, "notify listener rounds: LISTEN wakes every queue once, a notification wakes its "
                 "queue, a broken connection is an outage logged once, and a later round listens again",
                 "[kit][listen][direct]") {
  std::vector<std::string> woken;
  NotifyListener listener(db.conninfo(), [&](const std::string& queue) { woken.push_back(queue); }, clock);
  ListenRound round = listener.Round(0);
  CHECK(round.kind == ListenRound::Kind::kListening);
  CHECK(woken == std::vector<std::string>{""});  // anything enqueued before: every queue
  CHECK(Has(logs.Take(), "info listen channel=akadze_jobs"));

  db.Connect().exec("NOTIFY akadze_jobs, 'reports'");
  int notifications = 0;  // each round returns once the socket has something
  for (int i = 0; i < 10 && notifications == 0; ++i) notifications += listener.Round(10'000).notifications;
  CHECK(notifications == 1);
  CHECK(woken == std::vector<std::string>{"", "reports"});
  CHECK(listener.Round(0).notifications == 0);  // nothing more, no wait

  // The server ends the session: the next rounds read the end of the
  // connection (the server's last words first, maybe).
  db.TakeAway();
  for (int i = 0; i < 10 && round.kind != ListenRound::Kind::kFailed; ++i) round = listener.Round(10'000);
  REQUIRE(round.kind == ListenRound::Kind::kFailed);
  CHECK(round.retry_in >= milliseconds(250));  // 500 ms, jittered
  CHECK(round.retry_in <= milliseconds(750));
  CHECK(Has(logs.Take(), "warning listen_failed | "));
  round = listener.Round(0);  // cannot connect
  CHECK(round.kind == ListenRound::Kind::kFailed);
  CHECK(round.retry_in >= milliseconds(500));  // doubled
  CHECK(Has(logs.Take(), "debug listen_failed | "));  // the outage is logged once
  db.GiveBack();
  clock.Advance(seconds(3));
  round = listener.Round(0);
  CHECK(round.kind == ListenRound::Kind::kListening);
  CHECK(Has(logs.Take(), "info listen_recovered channel=akadze_jobs failures=2 outage_ms=3000"));
  CHECK(woken == std::vector<std::string>{"", "reports", ""});  // what came meanwhile: every queue
}

TEST_CASE_METHOD(Rounds, "database gauge rounds: a read serves scrapes while younger than max_age by the "
                 "clock; reads that start or stop failing are logged once", "[kit][metrics][direct]") {
  db.Connect().exec("INSERT INTO akadze.jobs (task, queue) SELECT 't', 'default' FROM generate_series(1, 3)");
  DbGauges gauges(db.conninfo(), {"default", "empty"}, {.max_age = milliseconds(1000)}, clock);
  const auto scrape = [&] {
    ExpositionWriter out;
    gauges.Write(out);
    return out.Take();
  };
  CHECK(Has(scrape(), "akadzed_database_up 0"));  // no read yet, and no thread to make one

  gauges.ReadRound();
  std::string text = scrape();
  CHECK(Has(text, "akadzed_database_up 1"));
  CHECK(Has(text, "akadzed_ready 1"));
  CHECK(Has(text, "akadzed_jobs{queue=\"default\",state=\"queued\"} 3"));
  CHECK(Has(text, "akadzed_jobs{queue=\"empty\",state=\"queued\"} 0"));
  CHECK_FALSE(gauges.NotReady().has_value());
  clock.Advance(milliseconds(1000));
  CHECK(Has(scrape(), "akadzed_database_up 1"));  // max_age old: still served
  clock.Advance(milliseconds(1));
  CHECK(Has(scrape(), "akadzed_database_up 0"));  // older: a new read is needed
  CHECK(logs.Take().empty());

  db.TakeAway();
  gauges.ReadRound();
  CHECK(Has(logs.Take(), "warning metrics_database_failed | "));
  CHECK(Has(scrape(), "akadzed_database_up 0"));
  CHECK(gauges.NotReady().has_value());
  gauges.ReadRound();
  CHECK(logs.Take().empty());  // once, not once per read
  db.GiveBack();
  gauges.ReadRound();
  CHECK(Has(logs.Take(), "info metrics_database_ok"));
  CHECK(Has(scrape(), "akadzed_database_up 1"));
  CHECK_FALSE(gauges.NotReady().has_value());
}

TEST_CASE_METHOD(Rounds, "periodic scheduler rounds: a due fire enqueues one job, the next round none; a "
                 "failed round retries after about a second, its outage measured on the clock",
                 "[kit][periodic][direct]") {
  PeriodicConfig entry;
  entry.name = "hourly";
  entry.task = "t";
  entry.schedule = Schedule::Every("1h");
  entry.grace_us = 2LL * 3600 * 1'000'000;  // the last hour's fire is always within it
  PeriodicScheduler scheduler(db.conninfo(), milliseconds(5000), {entry}, clock);
  const auto jobs = [&] { return db.Connect().exec("SELECT count(*) FROM akadze.jobs WHERE task = 't'").int64(0, 0); };

  ServiceClock::time_point next = scheduler.Round();
  CHECK(Has(logs.Take(), "info periodic_enqueued name=hourly fire_at="));
  CHECK(jobs() == 1);
  CHECK(next - clock.Now() >= milliseconds(10));  // the next round within a second
  CHECK(next - clock.Now() <= seconds(1));
  scheduler.Round();
  CHECK(jobs() == 1);  // this fire is done
  CHECK_FALSE(Has(logs.Take(), "periodic_enqueued"));

  // An hour later by the clock the next fire is due; the database is away.
  db.TakeAway();
  clock.Advance(std::chrono::hours(1));
  next = scheduler.Round();
  CHECK(Has(logs.Take(), "warning periodic_failed | "));
  CHECK(next - clock.Now() >= milliseconds(500));  // 1 s, jittered
  CHECK(next - clock.Now() <= milliseconds(1500));
  db.GiveBack();
  clock.Advance(seconds(2));
  scheduler.Round();
  CHECK(Has(logs.Take(), "info periodic_recovered failures=1 outage_ms=2000"));
}

}  // namespace
}  // namespace akadzed
