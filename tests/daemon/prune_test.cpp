// Pruning (worker/pruner.h) against a real PostgreSQL: what goes, what
// stays, batches, and the daemon's pruner thread.
#include <catch2/catch.hpp>

#include <limits>

#include <signal.h>

#include "pg/connection.h"
#include "store/prune.h"
#include "support/daemon_process.h"
#include "support/held_horizon.h"
#include "support/index_stats.h"
#include "support/test_cluster.h"
#include "worker/pruner.h"

namespace akadzed {
namespace {

using namespace std::chrono_literals;


TEST_CASE("a prune batch deletes old finished jobs, periodic runs and start marks only",
          "[prune]") {
  pg::Connection conn = pg::Connection::Open(test::FreshDatabase());
  conn.exec(
      "INSERT INTO akadze.jobs (task, state, finished_at) SELECT 't', s, now() - age"
      " FROM unnest(ARRAY['succeeded', 'failed', 'cancelled']) AS s,"
      "      unnest(ARRAY[interval '10 days', interval '8 days', interval '1 day']) AS age");
  conn.exec("INSERT INTO akadze.jobs (task, state) VALUES ('t', 'queued'), ('t', 'running')");
  conn.exec("INSERT INTO akadze.periodic_runs (name, fire_at) VALUES"
            " ('p', now() - interval '9 days'), ('p', now() - interval '1 hour')");
  conn.exec("INSERT INTO akadze.limits (key, max_running, max_starts, starts_window)"
            " VALUES ('k', 1, 5, interval '2 hours')");
  conn.exec("INSERT INTO akadze.limit_starts (key, started_at) VALUES"
            " ('k', now() - interval '3 hours'), ('k', now() - interval '3 hours'),"
            " ('k', now() - interval '90 minutes')");
  const std::int64_t week = 7LL * 24 * 3600 * 1'000'000;

  PruneCounts first = PruneBatch(conn, week, 4);
  CHECK(first.jobs == 4);  // six old ones, a batch of four
  CHECK(first.periodic_runs == 1);
  CHECK(first.start_marks == 2);
  PruneCounts second = PruneBatch(conn, week, 4);
  CHECK(second.jobs == 2);
  CHECK(second.periodic_runs == 0);
  CHECK(second.start_marks == 0);
  CHECK(PruneBatch(conn, week, 4).jobs == 0);
  // Left: the three finished a day ago, the queued and the running job.
  CHECK(test::Count(conn, "SELECT count(*) FROM akadze.jobs") == 5);
  CHECK(test::Count(conn, "SELECT count(*) FROM akadze.jobs WHERE finished_at < now() - interval '2 days'") == 0);
  CHECK(test::Count(conn, "SELECT count(*) FROM akadze.periodic_runs") == 1);
  CHECK(test::Count(conn, "SELECT count(*) FROM akadze.limit_starts") == 1);
}

// The pruning floor (store/prune.h): batches read finished jobs from the
// latest finished_at the batches before deleted. What lies behind it and no
// batch deleted (here a job written later with an older finished_at) waits
// for a batch without the floor; infinite finished_at values are floors too.
TEST_CASE("a prune batch with a floor reads from it; a job behind it goes once the floor is dropped",
          "[prune][floor]") {
  pg::Connection conn = pg::Connection::Open(test::FreshDatabase());
  const std::int64_t week = 7LL * 24 * 3600 * 1'000'000;
  conn.exec("INSERT INTO akadze.jobs (task, state, finished_at) SELECT 't', 'succeeded',"
            " now() - interval '9 days' + g * interval '1 second' FROM generate_series(1, 10) g");
  conn.exec("INSERT INTO akadze.jobs (task, state, finished_at) VALUES ('t', 'failed', '-infinity')");
  PruneFloor floor;
  CHECK(PruneBatch(conn, week, 1, &floor).jobs == 1);  // -infinity first
  REQUIRE(floor.finished_at_us);
  CHECK(*floor.finished_at_us == std::numeric_limits<std::int64_t>::min());
  CHECK(PruneBatch(conn, week, 4, &floor).jobs == 4);
  const std::int64_t after_four = *floor.finished_at_us;
  // Written now with a finished_at older than the floor.
  conn.exec("INSERT INTO akadze.jobs (task, state, finished_at) VALUES ('t', 'cancelled', now() - interval '10 days')");
  CHECK(PruneBatch(conn, week, 100, &floor).jobs == 6);
  CHECK(*floor.finished_at_us > after_four);
  // A batch that deletes nothing leaves the floor where it was.
  const std::int64_t kept = *floor.finished_at_us;
  CHECK(PruneBatch(conn, week, 100, &floor).jobs == 0);
  REQUIRE(floor.finished_at_us);
  CHECK(*floor.finished_at_us == kept);
  CHECK(test::Count(conn, "SELECT count(*) FROM akadze.jobs") == 1);
  // Without the floor (as the pruner every 10 minutes), it goes.
  PruneFloor fresh;
  CHECK(PruneBatch(conn, week, 100, &fresh).jobs == 1);
  CHECK(test::Count(conn, "SELECT count(*) FROM akadze.jobs") == 0);
}

// The same floor for start marks: old ones oldest first from the latest
// started_at the batches before deleted, future ones from the index's other
// end, at most a batch in all.
TEST_CASE("prune batches read start marks from their floor; a mark behind it goes once the floor is dropped",
          "[prune][floor]") {
  pg::Connection conn = pg::Connection::Open(test::FreshDatabase());
  const std::int64_t week = 7LL * 24 * 3600 * 1'000'000;
  conn.exec("INSERT INTO akadze.limit_starts (key, started_at) SELECT 'k' || g % 3,"
            " now() - interval '3 hours' + g * interval '1 second' FROM generate_series(1, 10) g");
  conn.exec("INSERT INTO akadze.limit_starts (key, started_at) VALUES ('k', '-infinity'), ('k', 'infinity'),"
            " ('k', now() - interval '5 minutes')");
  PruneFloor floor;
  PruneCounts first = PruneBatch(conn, week, 4, &floor);
  CHECK(first.start_marks == 4);  // -infinity and three old ones: the old end first
  REQUIRE(floor.started_at_us);
  const std::int64_t after_four = *floor.started_at_us;
  CHECK(after_four > std::numeric_limits<std::int64_t>::min());
  CHECK(test::Count(conn, "SELECT count(*) FROM akadze.limit_starts WHERE started_at = 'infinity'") == 1);
  // Written now with a started_at older than the floor.
  conn.exec("INSERT INTO akadze.limit_starts (key, started_at) VALUES ('k', now() - interval '4 hours')");
  CHECK(PruneBatch(conn, week, 100, &floor).start_marks == 8);  // seven old ones and infinity
  CHECK(*floor.started_at_us > after_four);
  // Fewer than a batch were left: the floor is the bound of the marks no
  // window counts (an hour ago), and moves with it.
  const std::int64_t kept = *floor.started_at_us;
  CHECK(conn.exec("SELECT $1::int8 >= (EXTRACT(EPOCH FROM now() - interval '61 minutes' - '2000-01-01 00:00:00+00'"
                  "::timestamptz) * 1000000)::int8", pg::Params().add(kept)).boolean(0, 0));
  CHECK(PruneBatch(conn, week, 100, &floor).start_marks == 0);
  CHECK(*floor.started_at_us >= kept);
  // Left: the recent mark and the one behind the floor.
  CHECK(test::Count(conn, "SELECT count(*) FROM akadze.limit_starts") == 2);
  PruneFloor fresh;
  CHECK(PruneBatch(conn, week, 100, &fresh).start_marks == 1);
  CHECK(test::Count(conn, "SELECT count(*) FROM akadze.limit_starts") == 1);
}

// Issue 41, goal 2: while another session holds the horizon back, every
// job pruning deleted keeps a dead entry at the head of
// jobs_finished_at_idx. Batches with the floor read past them (from the
// head, each of 30 batches of 100 reads them all again).
TEST_CASE("under a held horizon prune batches with the floor read each dead entry once", "[prune][horizon]") {
  const std::string db = test::FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  pg::Connection report = pg::Connection::Open(db);
  pg::Connection stats = pg::Connection::Open(db);
  conn.exec("INSERT INTO akadze.jobs (task, state, finished_at) SELECT 't', 'succeeded',"
            " now() - interval '9 days' + g * interval '1 millisecond' FROM generate_series(1, 3000) g");
  test::HeldHorizon held(report);
  const std::int64_t week = 7LL * 24 * 3600 * 1'000'000;
  PruneFloor floor;
  // The first batch, from the head (its plan may read every entry that is
  // old enough, and sort them).
  REQUIRE(PruneBatch(conn, week, 100, &floor).jobs == 100);
  test::AwaitStatistics(conn, [&] { return test::IndexTuplesRead(stats, "akadze.jobs_finished_at_idx") >= 100; });
  const std::int64_t before = test::IndexTuplesRead(stats, "akadze.jobs_finished_at_idx");
  for (int i = 1; i < 30; ++i) REQUIRE(PruneBatch(conn, week, 100, &floor).jobs == 100);
  CHECK(PruneBatch(conn, week, 100, &floor).jobs == 0);
  test::AwaitStatistics(conn, [&] { return test::IndexTuplesRead(stats, "akadze.jobs_finished_at_idx") >= before + 2900; });
  // The next 29 batches: their own entries, and the last one deleted again
  // at each batch's start (from the head: every dead entry before, each).
  CHECK(test::IndexTuplesRead(stats, "akadze.jobs_finished_at_idx") - before <= 2900 + 30 * 3);
  held.release();
}

// Issue 41, goal 2: the claims purge each key's marks once its window has
// passed; while another session holds the horizon back, every one stays,
// dead. Pruning read the table whole each round (no index began with the
// time): every mark the claims purged since the hold began. It now reads
// only the marks no window counts (migration 015), from the floor past
// those it deleted, and once they are done from their bound: the marks
// purged during a hold longer than the hour lie before it, and a later
// round steps over none of them.
TEST_CASE("under a held horizon pruning reads the start marks the claims purged once at most", "[prune][horizon]") {
  const std::string db = test::FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  pg::Connection report = pg::Connection::Open(db);
  pg::Connection stats = pg::Connection::Open(db);
  const std::int64_t week = 7LL * 24 * 3600 * 1'000'000;
  conn.exec("INSERT INTO akadze.limits (key, max_running, max_starts, starts_window)"
            " VALUES ('k', 4, 10, interval '1 second')");
  // Purged under the hold: 3,000 whose window passed ten minutes ago, and
  // 3,000 three hours ago (a hold of more than the hour). Then 3,000 older
  // than any window that pruning deletes.
  conn.exec("INSERT INTO akadze.limit_starts (key, started_at) SELECT 'k' || g % 100,"
            " now() - interval '10 minutes' - g * interval '1 millisecond' FROM generate_series(1, 3000) g");
  conn.exec("INSERT INTO akadze.limit_starts (key, started_at) SELECT 'k' || g % 100,"
            " now() - interval '3 hours' - g * interval '1 millisecond' FROM generate_series(1, 3000) g");
  conn.exec("INSERT INTO akadze.limit_starts (key, started_at) SELECT 'k' || g % 100,"
            " now() - interval '2 hours' - g * interval '1 millisecond' FROM generate_series(1, 3000) g");
  test::HeldHorizon held(report);
  conn.exec("DELETE FROM akadze.limit_starts WHERE started_at > now() - interval '1 hour'"
            " OR started_at < now() - interval '150 minutes'");
  test::AwaitStatistics(conn, [&] { return test::TableRowsDeleted(stats, "akadze.limit_starts") == 6000; });
  const std::int64_t seq_read = test::TableRowsSeqRead(stats, "akadze.limit_starts");
  const std::int64_t by_key = test::IndexTuplesRead(stats, "akadze.limit_starts_key_started_at_idx");
  const std::int64_t scans = test::Scans(stats, "akadze.limit_starts_started_at_idx");
  const std::int64_t read = test::IndexTuplesRead(stats, "akadze.limit_starts_started_at_idx");
  PruneFloor floor;
  int batches = 0;
  for (std::int64_t n = -1; n != 0; ++batches) n = PruneBatch(conn, week, 100, &floor).start_marks;
  CHECK(batches == 31);
  // A backend's counts of the table and of each index are flushed apart
  // (an entry it cannot lock at once waits): await each one read below.
  test::AwaitStatistics(conn, [&] {
    return test::TableRowsDeleted(stats, "akadze.limit_starts") == 9000 &&
           test::Scans(stats, "akadze.limit_starts_started_at_idx") - scans >= 2 * 31;
  });
  CHECK(test::Scans(stats, "akadze.limit_starts_started_at_idx") - scans == 2 * 31);
  CHECK(test::TableRowsSeqRead(stats, "akadze.limit_starts") == seq_read);
  CHECK(test::IndexTuplesRead(stats, "akadze.limit_starts_key_started_at_idx") == by_key);
  // The first batch steps over the 3,000 purged three hours ago, once; each
  // batch reads its own 100 and the last one deleted again at its start
  // (the floor is inclusive), and the entries at the young end's edge.
  CHECK(test::IndexTuplesRead(stats, "akadze.limit_starts_started_at_idx") - read <= 6000 + 31 * 3);
  // The old end is done: the floor is its bound, past every dead entry.
  REQUIRE(floor.started_at_us);
  CHECK(conn.exec("SELECT $1::int8 >= (EXTRACT(EPOCH FROM now() - interval '61 minutes' - '2000-01-01 00:00:00+00'"
                  "::timestamptz) * 1000000)::int8", pg::Params().add(*floor.started_at_us)).boolean(0, 0));
  // The next round reads none of them.
  const std::int64_t next_read = test::IndexTuplesRead(stats, "akadze.limit_starts_started_at_idx");
  const std::int64_t next_scans = test::Scans(stats, "akadze.limit_starts_started_at_idx");
  CHECK(PruneBatch(conn, week, 100, &floor).start_marks == 0);
  test::AwaitStatistics(conn, [&] { return test::Scans(stats, "akadze.limit_starts_started_at_idx") >= next_scans + 2; });
  CHECK(test::IndexTuplesRead(stats, "akadze.limit_starts_started_at_idx") - next_read <= 3);
  // Counted last: a count(*) may be planned as an index-only scan of
  // limit_starts_started_at_idx (all 9,000 entries, dead ones too), and its
  // statistics may reach the view only after the reads above were taken
  // (a backend flushes them at most once a second). Before the round's
  // reads, it is the likely cause of the one failure seen (CI of 6ae4891,
  // under load: 9,000 read where the round reads at most 3).
  CHECK(test::Count(conn, "SELECT count(*) FROM akadze.limit_starts") == 0);
  held.release();
}

TEST_CASE("the daemon prunes finished jobs past the retention", "[prune][daemon]") {
  std::string db = test::FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  test::TempDir dir;
  std::string config = dir.Write(
      "akadzed.yaml",
      "queues:\n  - {name: default, slots: 1}\nhandlers:\n  t:\n    shell: {command: [\"true\"], kill_grace: 500ms}\n"
      "pruning: {retention: 1h, interval: 100ms, batch_size: 10}\n"
      "metrics: {listen: 127.0.0.1:0}\n"
      "logging: {level: info, format: logfmt}\n");
  conn.exec("INSERT INTO akadze.jobs (task, state, finished_at)"
            " SELECT 't', 'succeeded', now() - interval '2 hours' FROM generate_series(1, 25)");
  conn.exec("INSERT INTO akadze.jobs (task, state, finished_at) VALUES ('t', 'failed', now())");
  test::DaemonProcess daemon({"run", "--config", config, "--database-url", db}, {},
                             dir.path() + "/daemon.log");
  CHECK(test::WaitUntil([&] { return test::Count(conn, "SELECT count(*) FROM akadze.jobs") == 1; }, 30s));
  CHECK(daemon.WaitForLog("prune jobs=25 "));
  daemon.Signal(SIGTERM);
  CHECK(daemon.Wait() == 0);
}

}  // namespace
}  // namespace akadzed
