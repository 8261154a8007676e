#include "store/worker_lease.h"

#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "pg/params.h"
#include "pg/pg_error.h"
#include "pg/transaction.h"
#include "store/job_finish.h"
#include "store/job_sql.h"
#include "store/lookup_plans.h"
#include "store/poison_rows.h"

namespace akadzed {

void RegisterWorker(pg::Connection& conn, const WorkerIdentity& worker) {
  conn.exec(
      "INSERT INTO akadze.workers (id, hostname, pid, queues) VALUES ($1::uuid, $2, $3, $4::text[])"
      " ON CONFLICT (id) DO UPDATE SET hostname = excluded.hostname, pid = excluded.pid,"
      "   queues = excluded.queues, heartbeat_at = now()",
      pg::Params().add(worker.id).add(worker.hostname).add(worker.pid).add_array(worker.queues));
}

std::optional<std::string> StoredRunningFloorJson(const OwnedJobsFloor& floor, const std::string& worker_id) {
  if (floor.worker_id.empty() || floor.worker_id != worker_id || floor.server_started.empty()) return std::nullopt;
  const nlohmann::json points = XidTexts(floor.running.points);
  nlohmann::json out = {{"v", 1},
                        {"w", worker_id},
                        {"s", floor.server_started},
                        {"x", std::to_string(floor.running.from_xid)},
                        {"p", points},
                        {"i", floor.running.ids}};
  return out.dump();
}

bool Heartbeat(pg::Connection& conn, const std::string& worker_id, std::optional<std::int64_t> lease_span_us,
               const OwnedJobsFloor* floor) {
  // Only a floor read through this connection: one read before a reconnect
  // may be of a server that lost transactions since (a crash with
  // synchronous_commit off hands their ids out again).
  const std::optional<std::string> stored =
      floor && floor->connection == conn.serial() ? StoredRunningFloorJson(*floor, worker_id) : std::nullopt;
  return conn.exec("UPDATE akadze.workers SET heartbeat_at = now(), running_floor = COALESCE($3::jsonb, running_floor)"
                   " WHERE id = $1::uuid AND ($2::int8 IS NULL"
                   " OR heartbeat_at >= clock_timestamp() - $2::int8 * interval '1 microsecond')",
                   pg::Params().add(worker_id).add(lease_span_us).add(stored))
             .affected() == 1;
}

void RecordWorkerStops(pg::Connection& conn, const std::vector<std::string>& worker_ids, const RunningFloor& floor) {
  if (worker_ids.empty()) return;
  const std::vector<std::string> points = XidTexts(floor.points);
  // A stop already recorded stays: it is as true as this one. Stops older
  // than a day go.
  // Jobs still running under them (floor.ids) were made running before the
  // floor's snapshot: the stop's from_xid goes back to the earliest of their
  // running_xid, so that the range every akadzed's rescue reads for a stop
  // (this one's and older ones', which know no other column) finds them. A
  // job running without a running_xid could not be found so: no stop.
  conn.exec("WITH pruned AS (DELETE FROM akadze.worker_stops WHERE stopped_at < now() - interval '1 day'),"
            " left_running AS (SELECT running_xid FROM akadze.jobs"
            "   WHERE id = ANY($4::int8[]) AND (state = 'running') IS TRUE)"
            " INSERT INTO akadze.worker_stops (id, from_xid, points)"
            " SELECT id, LEAST($2::xid8, (SELECT min(running_xid) FROM left_running)), $3::xid8[]"
            " FROM unnest($1::uuid[]) AS u(id)"
            " WHERE NOT EXISTS (SELECT 1 FROM left_running WHERE running_xid IS NULL)"
            " ON CONFLICT (id) DO NOTHING",
            pg::Params().add_array(worker_ids).add(std::to_string(floor.from_xid)).add_array(points).add_array(
                floor.ids));
}

void DeregisterWorker(pg::Connection& conn, const std::string& worker_id, OwnedJobsFloor* floor) {
  OwnedJobsFloor own;
  if (floor == nullptr) floor = &own;
  // Its stop is recorded with the jobs still running under it too (the
  // rescue's, after the ttl): from the earliest of their running_xid.
  OwnedRunningJobs(conn, worker_id, 0, floor);
  if (floor->worker_id == worker_id) {
    // Only saves the rescue reads: the row goes even when the stop cannot be
    // written (the role lacks its GRANT).
    try {
      RecordWorkerStops(conn, {worker_id}, floor->running);
    } catch (const pg::SqlError&) {
    }
  }
  conn.exec("DELETE FROM akadze.workers WHERE id = $1::uuid", pg::Params().add(worker_id));
}

namespace {

// The read's snapshot and server, then the jobs: one row with NULL job
// columns when there are none. $1 worker, $2 settled_us; `of_worker` is the
// WHERE clause that finds the jobs (as `j`).
std::string OwnedJobsSql(const std::string& of_worker) {
  return std::string("SELECT s.snap, s.server, j.id, j.run_count, j.cancel_requested_at IS NOT NULL,"
                     " COALESCE(j.started_at < now() - $2::bigint * interval '1 microsecond', true)"
                     " FROM (SELECT ") + kFloorSnapshotSql + " AS snap, " + kServerStartedSql + " AS server) s"
         " LEFT JOIN LATERAL (SELECT j.id, j.run_count, j.cancel_requested_at, j.started_at"
         "   FROM akadze.jobs j WHERE " + of_worker + ") j ON true";
}

}  // namespace

std::vector<OwnedJob> OwnedRunningJobs(pg::Connection& conn, const std::string& worker_id,
                                       std::int64_t settled_us, OwnedJobsFloor* floor) {
  // Without a floor of this connection: the worker's stored floor
  // (akadze.workers.running_floor, which its heartbeats keep), read and
  // checked as every other process reads it (RunningJobsOfWorkerSql: the
  // same worker and server, transaction ids not gone back), or its entries
  // whole when none is usable. Safe after a reconnect, a crash of the
  // server among them: the row is as durable as the commits its snapshot
  // saw (docs/claim.md, "Running floors"). Each job it finds is read again
  // by id through jobs_pkey for the columns the keeper needs.
  static const std::string kStored = OwnedJobsSql(
      "j.id IN (SELECT r.id FROM " +
      RunningJobsOfWorkerSql("$1::uuid", "(SELECT w.running_floor FROM akadze.workers w WHERE w.id = $1::uuid)") +
      " r) AND j.worker_id = $1::uuid AND (j.state = 'running') IS TRUE");
  // With one: the ids the last read found, and the entries from from_xid
  // on ($3) and at each point ($4, a lookup each: OFFSET 0 keeps it from
  // being flattened into a join that reads all the worker's entries), by id
  // through jobs_pkey. `IS TRUE` is the same test as `state = 'running'`
  // but implies no partial index's predicate, so no plan reads the
  // worker's entries whole to check them.
  static const std::string kSince = OwnedJobsSql(
      "j.id IN (SELECT id FROM akadze.jobs WHERE worker_id = $1::uuid AND state = 'running'"
      "           AND running_xid >= $3::xid8"
      "         UNION ALL SELECT x.id FROM unnest($4::xid8[]) AS p(x) CROSS JOIN LATERAL"
      "           (SELECT id FROM akadze.jobs WHERE worker_id = $1::uuid AND state = 'running'"
      "            AND running_xid = p.x OFFSET 0) x"
      "         UNION ALL SELECT unnest($5::int8[]))"
      " AND j.worker_id = $1::uuid AND (j.state = 'running') IS TRUE");
  const bool since = floor != nullptr && !floor->worker_id.empty() && floor->worker_id == worker_id &&
                     floor->connection == conn.serial();
  pg::Result rows;
  if (since) {
    const std::vector<std::string> points = XidTexts(floor->running.points);
    // Plans of lookups: estimates made on live rows must not turn the id
    // list into a scan.
    rows = ExecAsIndexLookups(conn, "", kSince,
                              pg::Params()
                                  .add(worker_id)
                                  .add(settled_us)
                                  .add(std::to_string(floor->running.from_xid))
                                  .add_array(points)
                                  .add_array(floor->running.ids));
  }
  if (!since || rows.rows() == 0 || rows.text(0, 1) != floor->server_started) {
    rows = ExecAsIndexLookups(conn, "", kStored, pg::Params().add(worker_id).add(settled_us));
  }
  std::vector<OwnedJob> jobs;
  std::vector<std::int64_t> ids;
  for (int i = 0; i < rows.rows(); ++i) {
    if (rows.is_null(i, 2)) continue;
    jobs.push_back({rows.int64(i, 2), static_cast<std::int32_t>(rows.int64(i, 3)), rows.boolean(i, 4),
                    rows.boolean(i, 5)});
    ids.push_back(jobs.back().id);
  }
  if (floor != nullptr && rows.rows() > 0) {
    if (const std::optional<SnapshotXids> s = ParseSnapshot(rows.text(0, 0))) {
      *floor = OwnedJobsFloor{worker_id, std::string(rows.text(0, 1)), RunningFloorAfter(*s, std::move(ids)),
                              conn.serial()};
    } else {
      *floor = OwnedJobsFloor{};
    }
  }
  return jobs;
}

std::vector<OwnedJob> OwnedRunningJobsOfQueue(pg::Connection& conn, const std::string& worker_id,
                                              const std::string& queue,
                                              const std::vector<std::int64_t>& except) {
  pg::Result rows = conn.exec(
      "SELECT id, run_count FROM akadze.jobs WHERE worker_id = $1::uuid AND state = 'running'"
      " AND queue = $2 AND id <> ALL($3::int8[])",
      pg::Params().add(worker_id).add(queue).add_array(except));
  std::vector<OwnedJob> jobs;
  for (int i = 0; i < rows.rows(); ++i) {
    jobs.push_back({rows.int64(i, 0), static_cast<std::int32_t>(rows.int64(i, 1)), false, false});
  }
  return jobs;
}

std::vector<std::int64_t> WriteJobProgress(pg::Connection& conn, const std::string& worker_id,
                                           const std::vector<ProgressWrite>& writes,
                                           std::vector<std::int64_t>* dropped) {
  constexpr const char* kSql =
      // Rows another transaction holds (its finish, a cancel) are skipped,
      // never waited for: the round must not stall on them.
      "UPDATE akadze.jobs AS j SET meta = j.meta || p.patch::jsonb"
      " FROM (SELECT x.id, p.patch FROM akadze.jobs AS x"
      "   JOIN unnest($2::int8[], $3::int8[], $4::text[]) AS p(id, run_count, patch)"
      "     ON x.id = p.id AND x.run_count = p.run_count"
      "   WHERE x.state = 'running' AND x.worker_id = $1::uuid AND jsonb_typeof(x.meta) = 'object'"
      "   FOR NO KEY UPDATE OF x SKIP LOCKED) AS p"
      " WHERE j.id = p.id"
      " RETURNING j.id";
  auto write = [&](std::size_t from, std::size_t to) {
    std::vector<std::int64_t> ids, run_counts;
    std::vector<std::string> patches;
    for (std::size_t i = from; i < to; ++i) {
      ids.push_back(writes[i].job_id);
      run_counts.push_back(writes[i].run_count);
      patches.push_back(writes[i].patch_json);
    }
    pg::Result rows = conn.exec(
        kSql, pg::Params().add(worker_id).add_array(ids).add_array(run_counts).add_array(patches));
    std::vector<std::int64_t> written;
    for (int i = 0; i < rows.rows(); ++i) written.push_back(rows.int64(i, 0));
    return written;
  };
  if (writes.empty()) return {};
  std::vector<std::int64_t> written;
  IsolatePoisonRows([&] { written = write(0, writes.size()); },
                    [&] {
                      std::vector<std::size_t> each(writes.size());
                      for (std::size_t i = 0; i < each.size(); ++i) each[i] = i;
                      return each;
                    },
                    [&](std::size_t i) {
                      for (std::int64_t id : write(i, i + 1)) written.push_back(id);
                    },
                    [&](std::size_t i, const pg::RowFaultError&) {
                      if (dropped) dropped->push_back(writes[i].job_id);
                      return PoisonedRow::kLeave;
                    });
  return written;
}

namespace {

// Running jobs whose worker is dead: its row's heartbeat is older than the
// ttl ($1), or it has no row and the job started more than the ttl ago or
// more than the ttl in the future (no claim writes that: an application
// did, and the job would otherwise never be rescued). $2: jobs to leave
// alone; $3: only these jobs (NULL: all).
//
// The candidates are read from jobs_running_worker_idx without the entries
// of live workers: the jobs without a worker, the ranges between the
// registered worker ids (ids with no row), and the dead workers' own; of a
// worker whose stop is recorded (akadze.worker_stops), only its jobs made
// running from the stop's from_xid on (migration 012; a stop with jobs left
// running starts at the earliest of theirs). Under
// a held horizon a live worker's entries are every job it ran since the
// horizon was held, dead and kept; reading them all (an anti-join of every
// running row to akadze.workers) took 115 ms and 16,000 buffers a round
// after 9 minutes at 1,000 jobs/s, growing with the hold. A dead worker's
// jobs are read past the running floor its last heartbeat stored (migration
// 014: the ids its last reconcile found, its jobs made running since from
// the floor's from_xid on and at its points), its entries whole only
// without a usable one (a worker of an older akadzed, one that died before
// the heartbeat after its first reconcile, any after a server restart). What is read now grows only with the
// jobs of workers that stopped without a stop recorded (one that could not
// write it: its role lacks the GRANT; an akadze worker), and with those a
// stopped worker ran after the earliest job it left running. Each candidate is then found by id through jobs_pkey (`IS NOT
// FALSE`: no partial index) and checked with the predicate above, under the
// caller's lock; the caller's UPDATE finds its rows by id the same way
// (spelled `state = 'running'`, a plan costed on live rows joined through
// all of jobs_running_worker_idx instead).
const std::string& LostSql() {
  static const std::string sql = std::string(
    "SELECT j.id, j.worker_id FROM akadze.jobs j LEFT JOIN akadze.workers w ON w.id = j.worker_id"
    "  WHERE j.id = ANY(ARRAY("
    // The bounds of the ranges: the registered workers (dead or not), and
    // the stopped ones without a row (akadze.worker_stops, read before:
    // $4-$7, ReadWorkerStops) whose floor is not past the transactions
    // there are (a hand-written row could be).
    "    WITH ws AS MATERIALIZED (SELECT id, lead(id) OVER (ORDER BY id) AS next, dead, from_xid, points,"
    "        running_floor FROM ("
    "      SELECT id, heartbeat_at < now() - $1::bigint * interval '1 microsecond' AS dead,"
    "        NULL::xid8 AS from_xid, NULL::xid8[] AS points, running_floor FROM akadze.workers"
    "      UNION ALL SELECT s.id, NULL, s.from_xid,"
    "        ARRAY(SELECT p.x FROM unnest($6::uuid[], $7::xid8[]) AS p(w, x) WHERE p.w = s.id), NULL::jsonb"
    "        FROM unnest($4::uuid[], $5::xid8[]) AS s(id, from_xid)"
    "        WHERE s.from_xid <= pg_snapshot_xmax(pg_current_snapshot())"
    "        AND NOT EXISTS (SELECT 1 FROM akadze.workers r WHERE r.id = s.id)) b)"
    "    SELECT id FROM akadze.jobs WHERE state = 'running' AND worker_id IS NULL"
    "    UNION ALL SELECT id FROM akadze.jobs WHERE state = 'running' AND worker_id IS NOT NULL"
    "      AND NOT EXISTS (SELECT 1 FROM ws)"
    "    UNION ALL SELECT x.id FROM (SELECT (SELECT id FROM ws ORDER BY id LIMIT 1) AS first,"
    "      (SELECT id FROM ws ORDER BY id DESC LIMIT 1) AS last) b CROSS JOIN LATERAL ("
    "      SELECT id FROM akadze.jobs WHERE state = 'running' AND worker_id < b.first"
    "      UNION ALL SELECT id FROM akadze.jobs WHERE state = 'running' AND worker_id > b.last OFFSET 0) x"
    // A dead worker's jobs, past the running floor its last heartbeat
    // stored (migration 014): its entries whole only without one.
    "    UNION ALL SELECT d.id FROM (SELECT id, running_floor FROM ws WHERE dead) dw CROSS JOIN LATERAL ")
    + RunningJobsOfWorkerSql("dw.id", "dw.running_floor") + " d"
    "    UNION ALL SELECT x.id FROM ws CROSS JOIN LATERAL ("
    "      SELECT id FROM akadze.jobs WHERE state = 'running' AND worker_id > ws.id AND worker_id < ws.next"
    // A stopped worker's jobs made running since its stop: a range, and a
    // lookup per point (OFFSET 0: not flattened into a join that reads
    // the id's entries whole).
    "      UNION ALL SELECT id FROM akadze.jobs WHERE ws.from_xid IS NOT NULL AND state = 'running'"
    "        AND worker_id = ws.id AND running_xid >= ws.from_xid"
    "      UNION ALL SELECT y.id FROM unnest(ws.points) AS p(x) CROSS JOIN LATERAL"
    "        (SELECT id FROM akadze.jobs WHERE state = 'running' AND worker_id = ws.id"
    "         AND running_xid = p.x OFFSET 0) y"
    "      OFFSET 0) x))"
    "    AND (j.state = 'running') IS NOT FALSE AND j.id <> ALL($2::int8[])"
    "    AND ($3::int8[] IS NULL OR j.id = ANY($3::int8[]))"
    "    AND (w.id IS NOT NULL AND w.heartbeat_at < now() - $1::bigint * interval '1 microsecond'"
    "      OR w.id IS NULL AND (COALESCE(j.started_at, '-infinity') < now() - $1::bigint * interval '1 microsecond'"
    "        OR j.started_at > now() + $1::bigint * interval '1 microsecond'))";
  return sql;
}

std::vector<RescuedJob> ToRescued(const pg::Result& rows, const char* error) {
  std::vector<RescuedJob> out;
  for (int i = 0; i < rows.rows(); ++i) {
    out.push_back({rows.int64(i, 0), std::string(rows.text(i, 1)), JobStateFromText(rows.text(i, 2)), error,
                   rows.optional_text(i, 3)});
  }
  return out;
}

// akadze.worker_stops as LostSql()'s $4-$7: ids and floors, then a (id,
// point) pair per point.
struct WorkerStops {
  std::vector<std::string> ids, from_xids, point_ids, points;
};

// Nothing when the role may not read the table (its GRANT is missing,
// docs/security.md): the rescue then reads those workers' entries whole, as
// before migration 012, rather than not at all.
WorkerStops ReadWorkerStops(pg::Connection& conn) {
  WorkerStops stops;
  try {
    const pg::Result r = conn.exec(
        "SELECT s.id::text, s.from_xid::text, p.x::text FROM akadze.worker_stops s"
        " LEFT JOIN LATERAL unnest(s.points) AS p(x) ON true ORDER BY s.id");
    for (int i = 0; i < r.rows(); ++i) {
      std::string id(r.text(i, 0));
      if (stops.ids.empty() || stops.ids.back() != id) {
        stops.ids.push_back(id);
        stops.from_xids.emplace_back(r.text(i, 1));
      }
      if (!r.is_null(i, 2)) {
        stops.point_ids.push_back(id);
        stops.points.emplace_back(r.text(i, 2));
      }
    }
  } catch (const pg::SqlError& e) {
    if (e.sqlstate() != "42501") throw;
  }
  return stops;
}

pg::Params& AddStops(pg::Params& params, const WorkerStops& stops) {
  return params.add_array(stops.ids).add_array(stops.from_xids).add_array(stops.point_ids).add_array(stops.points);
}

}  // namespace

std::vector<RescuedJob> RescueLostJobs(pg::Connection& conn, std::int64_t ttl_us,
                                       const TransitionListener* hooks,
                                       std::vector<std::int64_t>* skipped) {
  // A heartbeat more than the ttl in the future (a hand-written row, or a
  // server clock set back) would keep its worker alive for ever: it is set
  // to now(), so the worker is dead after the ttl unless it heartbeats.
  conn.exec(
      "UPDATE akadze.workers SET heartbeat_at = now() WHERE id IN (SELECT w.id FROM akadze.workers w"
      "  WHERE w.heartbeat_at > now() + $1::bigint * interval '1 microsecond' FOR UPDATE SKIP LOCKED)",
      pg::Params().add(ttl_us));
  // RETURNING sees new values only: the lost worker comes from the CTE.
  // Counters saturate at int4's maximum rather than fail the statement for
  // every row beside the one an application wrote at the limit.
  static const std::string kSql = fmt::format(
      "WITH lost AS ({2} FOR UPDATE OF j SKIP LOCKED),"
      " rescued AS ("
      "  UPDATE akadze.jobs AS j SET"
      "   attempt = LEAST(j.attempt::int8 + 1, 2147483647)::int,"
      "   state = {0},"
      "   errors = {1},"
      "   finished_at = CASE WHEN {0} = 'queued' THEN NULL ELSE now() END,"
      "   worker_id = CASE WHEN {0} = 'queued' THEN NULL ELSE j.worker_id END"
      "  FROM lost WHERE j.id = lost.id AND (j.state = 'running') IS NOT FALSE"
      "  RETURNING j.id, COALESCE(lost.worker_id::text, '') AS lost_worker, j.state,"
      "   j.meta ->> 'traceparent' AS traceparent)"
      " SELECT id, lost_worker, state, traceparent FROM rescued ORDER BY id",
      // A rescue is a failed run without a backoff.
      NextStateSql("'retry'"), AppendErrorSql("j.errors", "'WorkerLost'",
                     "'worker ' || COALESCE(lost.worker_id::text, '(none)')"
                     " || ' stopped heartbeating for ' || ($1::bigint / 1000000) || 's'"),
      LostSql());
  // With hooks, the rescue and its hooks share a transaction; a job a hook
  // refuses stays running (its hook_failed is logged) and the others are
  // rescued without it.
  std::vector<std::int64_t> refused;
  const WorkerStops stops = ReadWorkerStops(conn);
  auto rescue = [&](const std::optional<std::int64_t>& only) {
    return RunWithHooks(conn, hooks, JobState::kRunning, refused, [&] {
      pg::Params params;
      params.add(ttl_us).add_array(refused);
      if (only) {
        params.add_array(std::vector<std::int64_t>{*only});
      } else {
        params.add(std::optional<std::string>());
      }
      return ExecWithoutJit(conn, kSql, AddStops(params, stops));
    });
  };
  // One row makes the statement fail for all: each lost job alone, and one
  // that still fails is failed as Unprocessable; one that cannot even be
  // failed is skipped (logged by the caller) and tried again next round.
  // The server's state (a timeout, a read-only server) is not a row's: the
  // next round tries again.
  struct Lost {
    std::int64_t id = 0;
    std::optional<std::string> failed_with;  // the SQLSTATE its rescue failed with: fail it instead
  };
  std::vector<RescuedJob> rescued;
  IsolatePoisonRows(
      [&] { rescued = ToRescued(rescue(std::nullopt), "WorkerLost"); },
      [&] {
        pg::Params params;
        params.add(ttl_us).add_array(refused).add(std::optional<std::string>());
        pg::Result lost = ExecWithoutJit(conn, LostSql(), AddStops(params, stops));
        std::vector<Lost> each;
        for (int i = 0; i < lost.rows(); ++i) each.push_back({lost.int64(i, 0), std::nullopt});
        return each;
      },
      [&](const Lost& job) {
        if (!job.failed_with) {
          for (RescuedJob& r : ToRescued(rescue(job.id), "WorkerLost")) rescued.push_back(std::move(r));
          return;
        }
        // Still lost (the same predicate, SKIP LOCKED): never a job that
        // was rescued and claimed again meanwhile. No hooks: the row
        // failed with them already.
        pg::Result rows = ExecWithoutJit(conn,
            std::string("UPDATE akadze.jobs AS j SET state = 'failed', finished_at = now(), errors = ") +
                AppendErrorSql("j.errors", "'Unprocessable'",
                               "'the rescue could not record this job (SQLSTATE ' || $8 || ')'") +
                " FROM (" + LostSql() + " FOR UPDATE OF j SKIP LOCKED) lost"
                " WHERE j.id = lost.id AND (j.state = 'running') IS NOT FALSE"
                " RETURNING j.id, COALESCE(lost.worker_id::text, ''), j.state, j.meta ->> 'traceparent'",
            [&] {
              pg::Params params;
              params.add(ttl_us).add_array(refused).add_array(std::vector<std::int64_t>{job.id});
              AddStops(params, stops).add(*job.failed_with);
              return params;
            }());
        for (RescuedJob& r : ToRescued(rows, "Unprocessable")) rescued.push_back(std::move(r));
      },
      [&](Lost& job, const pg::RowFaultError& error) {
        if (!job.failed_with) {
          job.failed_with = error.sqlstate().empty() ? std::string("none") : error.sqlstate();
          return PoisonedRow::kTryAgain;
        }
        if (skipped) skipped->push_back(job.id);
        return PoisonedRow::kLeave;
      });
  // SKIP LOCKED: a row its worker is heartbeating right now is not dead.
  // The statement saw no job running under the workers it removes: their
  // stops are recorded with its snapshot (the rescue then reads only what
  // runs under them since).
  // Its running jobs are read past its stored floor, as LostSql's.
  static const std::string kRemoveDead =
      "WITH gone AS (DELETE FROM akadze.workers WHERE id IN (SELECT w.id FROM akadze.workers w"
      "  WHERE w.heartbeat_at < now() - $1::bigint * interval '1 microsecond'"
      "    AND NOT EXISTS (SELECT 1 FROM " + RunningJobsOfWorkerSql("w.id", "w.running_floor") + " r)"
      "  FOR UPDATE SKIP LOCKED) RETURNING id)"
      " SELECT gone.id::text, " + std::string(kFloorSnapshotSql) + " FROM gone";
  pg::Result gone = ExecWithoutJit(conn, kRemoveDead, pg::Params().add(ttl_us));
  if (gone.rows() > 0) {
    if (const std::optional<SnapshotXids> s = ParseSnapshot(gone.text(0, 1))) {
      std::vector<std::string> ids;
      for (int i = 0; i < gone.rows(); ++i) ids.emplace_back(gone.text(i, 0));
      // Only saves reads: a stop that cannot be written (the role lacks
      // its GRANT) is not the round's failure.
      try {
        RecordWorkerStops(conn, ids, RunningFloorAfter(*s, {}));
      } catch (const pg::SqlError&) {
      }
    }
  }
  return rescued;
}

}  // namespace akadzed
