#include "store/periodic_runs.h"

#include "pg/params.h"

namespace akadzed {

std::int64_t TransactionNowUs(pg::Transaction& tx) {
  return tx.exec("SELECT (extract(epoch FROM now()) * 1000000)::int8").int64(0, 0);
}

FireInsert InsertFire(pg::Transaction& tx, const PeriodicJob& job, std::int64_t fire_at_us) {
  pg::Result r = tx.exec(
      "WITH fire AS ("
      "  INSERT INTO akadze.periodic_runs (name, fire_at)"
      "  VALUES ($1, to_timestamp($2::int8 / 1000000.0)) ON CONFLICT DO NOTHING RETURNING fire_at),"
      " job AS ("
      "  INSERT INTO akadze.jobs (task, args, queue, priority, max_attempts, unique_key)"
      "  SELECT $3, $4::jsonb, $5, $6::smallint, $7::int, $8 FROM fire"
      "  ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state IN ('queued', 'running')"
      "  DO NOTHING RETURNING id)"
      " SELECT (SELECT count(*) FROM fire), (SELECT id FROM job)",
      pg::Params()
          .add(job.name)
          .add(fire_at_us)
          .add(job.task)
          .add(job.args_json)
          .add(job.queue)
          .add(job.priority)
          .add(job.max_attempts)
          .add(job.unique_key));
  FireInsert out;
  out.fire_recorded = r.int64(0, 0) != 0;
  out.job_id = r.optional_int64(0, 1);
  return out;
}

void LinkFireJob(pg::Transaction& tx, const std::string& name, std::int64_t fire_at_us,
                 std::int64_t job_id) {
  tx.exec("UPDATE akadze.periodic_runs SET job_id = $3"
          " WHERE name = $1 AND fire_at = to_timestamp($2::int8 / 1000000.0)",
          pg::Params().add(name).add(fire_at_us).add(job_id));
}

}  // namespace akadzed
