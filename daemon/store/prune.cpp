#include "store/prune.h"

#include "pg/params.h"

namespace akadzed {

PruneCounts PruneBatch(pg::Connection& conn, std::int64_t retention_us, int batch) {
  pg::Params params;
  params.add(retention_us).add(batch);
  PruneCounts counts;
  // jobs_finished_at_idx covers exactly these rows, oldest first.
  counts.jobs = conn.exec(
      "DELETE FROM akadze.jobs WHERE id IN (SELECT id FROM akadze.jobs"
      "  WHERE state IN ('succeeded', 'failed', 'cancelled')"
      "    AND finished_at < now() - $1::bigint * interval '1 microsecond'"
      "  ORDER BY finished_at LIMIT $2::int FOR UPDATE SKIP LOCKED)",
      params).affected();
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
