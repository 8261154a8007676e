#include "store/prune.h"

#include "pg/params.h"
#include "pg/result.h"
#include "store/job_sql.h"
#include "store/lookup_plans.h"

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

// Start marks no window counts: older than the longest starts_window and a
// minute (an hour at least), oldest first and from the floor ($2) when
// `from_floor`, and as far in the future (no claim writes those: the
// index's other end), at most $1 in all, the old ones first. Returns how
// many went, the latest started_at of the old ones, whether the old end
// had fewer than $1 left to lock (so every mark before the bound that no
// other transaction held went), and that bound: the next floor.
std::string PruneMarksSql(bool from_floor) {
  return "WITH k AS MATERIALIZED (SELECT now() - keep AS old_before, now() + keep AS future_after FROM (SELECT"
         "   greatest((SELECT max(starts_window) FROM akadze.limits) + interval '1 minute', interval '1 hour') AS keep) x),"
         " old AS MATERIALIZED (SELECT ARRAY(SELECT ctid FROM akadze.limit_starts"
         "   WHERE started_at < (SELECT old_before FROM k)" +
         (from_floor ? " AND started_at >= " + TimestampFromMicrosSql("$2") : std::string()) +
         "   ORDER BY started_at LIMIT $1::int FOR UPDATE SKIP LOCKED) AS c),"
         " future AS MATERIALIZED (SELECT ARRAY(SELECT ctid FROM akadze.limit_starts"
         "   WHERE started_at > (SELECT future_after FROM k)"
         "   ORDER BY started_at DESC LIMIT $1::int FOR UPDATE SKIP LOCKED) AS c),"
         " gone AS (DELETE FROM akadze.limit_starts WHERE ctid = ANY((SELECT (old.c || future.c)[1:$1::int]"
         "   FROM old, future)::tid[]) RETURNING started_at)"
         " SELECT count(*), " + MicrosSince2000Sql("max(started_at) FILTER (WHERE started_at < now())") + ","
         "  (SELECT cardinality(c) FROM old) < $1::int, " + MicrosSince2000Sql("(SELECT old_before FROM k)") +
         " FROM gone";
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
  // count as a start for ever: it goes too. Both ends are read from
  // limit_starts_started_at_idx (migration 015), the old one oldest first
  // from the floor when there is one. Once the old end is done, the floor
  // is its bound: while a horizon is held, the marks the claims purged stay
  // in the index, dead, and age past the bound too (a hold longer than the
  // hour); the batches of later rounds start past them.
  static const std::string kMarksFromHead = PruneMarksSql(false);
  static const std::string kMarksFromFloor = PruneMarksSql(true);
  const bool marks_from_floor = floor != nullptr && floor->started_at_us.has_value();
  pg::Params mark_params;
  mark_params.add(batch);
  if (marks_from_floor) mark_params.add(*floor->started_at_us);
  // As index lookups, without bitmaps or sorts: a range of the index whose
  // bound is computed (the longest window) is costed as a few rows, and a
  // bitmap of it, sorted, read the whole range each batch.
  const pg::Result marks =
      ExecAsIndexLookups(conn, ", set_config('enable_bitmapscan', 'off', true), set_config('enable_sort', 'off', true)",
                         marks_from_floor ? kMarksFromFloor : kMarksFromHead, mark_params);
  counts.start_marks = marks.int64(0, 0);
  if (floor != nullptr) {
    if (marks.boolean(0, 2)) {
      floor->started_at_us = marks.int64(0, 3);
    } else if (!marks.is_null(0, 1)) {
      floor->started_at_us = marks.int64(0, 1);
    }
  }
  return counts;
}

}  // namespace akadzed
