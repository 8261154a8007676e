#include "worker/worker_lease.h"

#include <optional>

#include <fmt/format.h>

#include "pg/params.h"
#include "pg/transaction.h"
#include "worker/job_finish.h"

namespace akadzed {

void RegisterWorker(pg::Connection& conn, const WorkerIdentity& worker) {
  conn.exec(
      "INSERT INTO akadze.workers (id, hostname, pid, queues) VALUES ($1::uuid, $2, $3, $4::text[])"
      " ON CONFLICT (id) DO UPDATE SET hostname = excluded.hostname, pid = excluded.pid,"
      "   queues = excluded.queues, heartbeat_at = now()",
      pg::Params().add(worker.id).add(worker.hostname).add(worker.pid).add_array(worker.queues));
}

bool Heartbeat(pg::Connection& conn, const std::string& worker_id) {
  return conn.exec("UPDATE akadze.workers SET heartbeat_at = now() WHERE id = $1::uuid",
                   pg::Params().add(worker_id))
             .affected() == 1;
}

void DeregisterWorker(pg::Connection& conn, const std::string& worker_id) {
  conn.exec("DELETE FROM akadze.workers WHERE id = $1::uuid", pg::Params().add(worker_id));
}

std::vector<OwnedJob> OwnedRunningJobs(pg::Connection& conn, const std::string& worker_id) {
  pg::Result rows = conn.exec(
      "SELECT id, run_count, cancel_requested_at IS NOT NULL FROM akadze.jobs"
      " WHERE worker_id = $1::uuid AND state = 'running'",
      pg::Params().add(worker_id));
  std::vector<OwnedJob> jobs;
  for (int i = 0; i < rows.rows(); ++i) {
    jobs.push_back({rows.int64(i, 0), static_cast<std::int32_t>(rows.int64(i, 1)),
                    rows.boolean(i, 2)});
  }
  return jobs;
}

std::vector<RescuedJob> RescueLostJobs(pg::Connection& conn, std::int64_t ttl_us,
                                       const TransitionHooks* hooks) {
  // RETURNING sees new values only: the lost worker comes from the CTE.
  static const std::string kSql = fmt::format(
      "WITH lost AS ("
      "  SELECT j.id, j.worker_id FROM akadze.jobs j LEFT JOIN akadze.workers w ON w.id = j.worker_id"
      "  WHERE j.state = 'running' AND j.id <> ALL($2::int8[])"
      "    AND (w.id IS NOT NULL AND w.heartbeat_at < now() - $1::bigint * interval '1 microsecond'"
      "      OR w.id IS NULL AND COALESCE(j.started_at, '-infinity')"
      "         < now() - $1::bigint * interval '1 microsecond')"
      "  FOR UPDATE OF j SKIP LOCKED),"
      " rescued AS ("
      "  UPDATE akadze.jobs AS j SET"
      "   attempt = j.attempt + 1,"
      "   state = {0},"
      "   errors = {1},"
      "   finished_at = CASE WHEN {0} = 'queued' THEN NULL ELSE now() END,"
      "   worker_id = CASE WHEN {0} = 'queued' THEN NULL ELSE j.worker_id END"
      "  FROM lost WHERE j.id = lost.id AND j.state = 'running'"
      "  RETURNING j.id, COALESCE(lost.worker_id::text, '') AS lost_worker, j.state)"
      " SELECT id, lost_worker, state FROM rescued ORDER BY id",
      // A rescue is a failed run without a backoff.
      NextStateSql("'retry'"), AppendErrorSql("j.errors", "'WorkerLost'",
                     "'worker ' || COALESCE(lost.worker_id::text, '(none)')"
                     " || ' stopped heartbeating for ' || ($1::bigint / 1000000) || 's'"));
  // With hooks, the rescue and its hooks share a transaction; a job a hook
  // refuses stays running (its hook_failed is logged) and the others are
  // rescued without it.
  const bool hooked = hooks && hooks->AnyFrom("running");
  std::vector<std::int64_t> refused;
  pg::Result rows;
  for (;;) {
    std::optional<pg::Transaction> tx;
    if (hooked) tx.emplace(conn);
    rows = conn.exec(kSql, pg::Params().add(ttl_us).add_array(refused));
    if (!tx) break;
    std::vector<std::int64_t> ids;
    for (int i = 0; i < rows.rows(); ++i) ids.push_back(rows.int64(i, 0));
    try {
      hooks->Fire(conn, "running", ids);
      tx->commit();
      break;
    } catch (const HookError& e) {
      tx->rollback();
      refused.push_back(e.job_id());
    }
  }
  std::vector<RescuedJob> rescued;
  for (int i = 0; i < rows.rows(); ++i) {
    rescued.push_back({rows.int64(i, 0), std::string(rows.text(i, 1)), std::string(rows.text(i, 2))});
  }
  // SKIP LOCKED: a row its worker is heartbeating right now is not dead.
  conn.exec(
      "DELETE FROM akadze.workers WHERE id IN (SELECT w.id FROM akadze.workers w"
      "  WHERE w.heartbeat_at < now() - $1::bigint * interval '1 microsecond'"
      "    AND NOT EXISTS (SELECT 1 FROM akadze.jobs j WHERE j.worker_id = w.id AND j.state = 'running')"
      "  FOR UPDATE SKIP LOCKED)",
      pg::Params().add(ttl_us));
  return rescued;
}

}  // namespace akadzed
