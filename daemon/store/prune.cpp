#include "store/prune.h"

#include "pg/params.h"
#include "pg/result.h"
#include "store/job_sql.h"

namespace akadzed {

namespace {

// jobs_finished_at_idx covers exactly these rows, oldest first; from the
// floor ($3) on, when `from_floor` (a statement of its own: a generic plan
// of `$3 IS NULL OR ...` could not read a range).
std::string PruneJobsSql(bool from_floor) {
  return "WITH gone AS (DELETE FROM akadze.jobs WHERE id IN (SELECT id FROM akadze.jobs"
         "  WHERE state IN ('succeeded', 'failed', 'cancelled')"
         "    AND finished_at < now() - $1::bigint * interval '1 microsecond'" +
         (from_floor ? " AND finished_at >= " + TimestampFromMicrosSql("$3") : std::string()) +
         "  ORDER BY finished_at LIMIT $2::int FOR UPDATE SKIP LOCKED) RETURNING finished_at)"
         " SELECT count(*), " + MicrosSince2000Sql("max(finished_at)") + " FROM gone";
}

}  // namespace

PruneCounts PruneBatch(pg::Connection& conn, std::int64_t retention_us, int batch, PruneFloor* floor) {
  pg::Params params;
  params.add(retention_us).add(batch);
  PruneCounts counts;
  static const std::string kFromHead = PruneJobsSql(false);
  static const std::string kFromFloor = PruneJobsSql(true);
  const bool from_floor = floor != nullptr && floor->finished_at_us.has_value();
  pg::Params job_params;
  job_params.add(retention_us).add(batch);
  if (from_floor) job_params.add(*floor->finished_at_us);
  const pg::Result jobs = conn.exec(from_floor ? kFromFloor : kFromHead, job_params);
  counts.jobs = jobs.int64(0, 0);
  if (floor != nullptr && !jobs.is_null(0, 1)) floor->finished_at_us = jobs.int64(0, 1);
  counts.periodic_runs = conn.exec(
      "DELETE FROM akadze.periodic_runs WHERE (name, fire_at) IN (SELECT name, fire_at"
      "  FROM akadze.periodic_runs WHERE fire_at < now() - $1::bigint * interval '1 microsecond'"
      "  LIMIT $2::int FOR UPDATE SKIP LOCKED)",
      params).affected();
  // A mark counts only within its key's starts_window; keep an hour at least
  // so that a window added meanwhile still sees recent starts, and a minute
  // past the longest window, as the claim's own purge does (a claim that
  // began up to a minute ago counts from its own now()). A mark as far in
  // the future was not written by a claim (each writes its now()) and would
  // count as a start for ever: it goes too.
  counts.start_marks = conn.exec(
      "DELETE FROM akadze.limit_starts WHERE ctid = ANY(ARRAY(SELECT ctid FROM akadze.limit_starts,"
      "  (SELECT greatest((SELECT max(starts_window) FROM akadze.limits) + interval '1 minute',"
      "                   interval '1 hour') AS keep) k"
      "  WHERE started_at < now() - k.keep OR started_at > now() + k.keep"
      "  LIMIT $1::int FOR UPDATE OF limit_starts SKIP LOCKED))",
      pg::Params().add(batch)).affected();
  return counts;
}

}  // namespace akadzed
