// The pruner's and the lease keeper's rounds driven one by one on the test's
// thread, against a real PostgreSQL, with a clock the test moves by hand
// (support/manual_clock.h): no thread of theirs is started and nothing
// sleeps. The database is taken away by renaming it (new connections then
// fail), and given back by renaming it again.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <sstream>
#include <string>

#include <spdlog/spdlog.h>

#include "claim/claim_transaction.h"
#include "pg/connection.h"
#include "support/log_capture.h"
#include "support/manual_clock.h"
#include "support/test_cluster.h"
#include "worker/lease_keeper.h"
#include "worker/pruner.h"
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

}  // namespace
}  // namespace akadzed
