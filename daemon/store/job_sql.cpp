#include "store/job_sql.h"

#include <fmt/format.h>

#include "pg/params.h"
#include "pg/result.h"

namespace akadzed {

std::string AppendErrorSql(std::string_view errors, std::string_view error,
                           std::string_view message) {
  return fmt::format(
      "(SELECT COALESCE(jsonb_agg(e ORDER BY n), '[]'::jsonb) FROM"
      " (SELECT e, n FROM jsonb_array_elements({} || jsonb_build_array(jsonb_build_object("
      "'error', {}::text, 'message', {}::text))) WITH ORDINALITY AS x(e, n)"
      " ORDER BY n DESC LIMIT 10) AS last_errors)",
      errors, error, message);
}

std::string PastTimestampSql(std::string_view column) {
  return fmt::format("LEAST(GREATEST({}, '4714-11-24 00:00:00+00 BC'::timestamptz), now())", column);
}

std::string MicrosSince2000Sql(std::string_view column) {
  return fmt::format(
      "(CASE WHEN isfinite({0}) THEN (EXTRACT(EPOCH FROM {0} - '2000-01-01 00:00:00+00'::timestamptz) * 1000000)::int8"
      " WHEN {0} > now() THEN 9223372036854775807::int8 WHEN {0} < now() THEN (-9223372036854775807 - 1)::int8 END)",
      column);
}

std::string TimestampFromMicrosSql(std::string_view param) {
  return fmt::format(
      "(CASE {0}::int8 WHEN 9223372036854775807 THEN 'infinity'::timestamptz"
      " WHEN -9223372036854775807 - 1 THEN '-infinity'::timestamptz"
      // Whole days and the microseconds left, on a timestamp without time
      // zone: exact (an interval times a number goes through a double), and
      // no time zone's daylight saving shifts a day.
      " ELSE ('2000-01-01 00:00:00'::timestamp + make_interval(days => ({0}::int8 / 86400000000)::int,"
      " secs => ({0}::int8 % 86400000000) / 1000000.0)) AT TIME ZONE 'UTC' END)",
      param);
}

std::string IsoTimestampSql(std::string_view column) {
  // 'infinity' and '-infinity' as themselves (to_char gives NULL for them).
  return fmt::format(
      "CASE WHEN isfinite({0}) THEN to_char({0} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
      " ELSE {0}::text END",
      column);
}

std::string AgeSecondsSql(std::string_view column) {
  return fmt::format("(CASE WHEN {0} IS NOT NULL THEN EXTRACT(EPOCH FROM now() - {1})::float8 END)", column,
                     PastTimestampSql(column));
}

std::string KnownQueuesSql(bool with_floors) {
  return std::string("SELECT queue, bool_or(served) AS served FROM ("
                     "  SELECT queue, true AS served FROM akadze.queue_pauses"
                     "  UNION ALL SELECT queue, true FROM akadze.queue_caps"
                     "  UNION ALL SELECT unnest(queues), true FROM akadze.workers") +
         (with_floors ? "  UNION ALL SELECT queue, false FROM akadze.queue_floors" : "") +
         ") k WHERE queue IS NOT NULL GROUP BY queue";
}

bool CanReadTable(pg::Connection& conn, const std::string& table) {
  return conn.exec("SELECT has_table_privilege($1, 'SELECT')", pg::Params().add(table)).boolean(0, 0);
}

std::string FirstInGapSql(std::string_view column, std::string_view where, std::string_view lo,
                          std::string_view hi) {
  const auto arm = [&](bool has_lo, bool has_hi) {
    std::string cond = fmt::format("{0} IS {1}NULL AND {2} IS {3}NULL", lo, has_lo ? "NOT " : "", hi,
                                   has_hi ? "NOT " : "");
    if (has_lo) cond += fmt::format(" AND j.{} > {}", column, lo);
    if (has_hi) cond += fmt::format(" AND j.{} < {}", column, hi);
    if (!has_lo && !has_hi) cond += fmt::format(" AND j.{} IS NOT NULL", column);
    return fmt::format("(SELECT j.{0} FROM akadze.jobs j WHERE {1} AND {2} ORDER BY j.{0} LIMIT 1)", column, where,
                       cond);
  };
  return "COALESCE(" + arm(true, true) + ", " + arm(true, false) + ", " + arm(false, true) + ", " +
         arm(false, false) + ")";
}

std::string RunningJobsOfWorkerSql(std::string_view worker_id, std::string_view stored_floor) {
  // The floor, when usable: an object of version 1, of this worker and this
  // server, with arrays of well-formed points and ids and a from_xid that
  // transaction ids have not gone back past (CASEs: a cast or an array
  // function is evaluated only after its check). The reads below cast the
  // elements of a usable floor only.
  const std::string floor = fmt::format(
      "CASE WHEN jsonb_typeof({0}) = 'object' AND {0} -> 'v' = '1'::jsonb"
      " AND {0} ->> 'w' = {1}::text AND {0} ->> 's' = {2}"
      " AND jsonb_typeof({0} -> 'p') = 'array' AND jsonb_typeof({0} -> 'i') = 'array'"
      " AND ({0} ->> 'x') ~ '^[0-9]{{1,19}}$'"
      // Every point and id well-formed too: a floor read without one of
      // them would miss that job, and the rescue would never find it.
      " THEN CASE WHEN NOT EXISTS (SELECT 1 FROM jsonb_array_elements({0} -> 'p') AS p(e)"
      "   WHERE jsonb_typeof(p.e) <> 'string' OR NOT (p.e #>> '{{}}') ~ '^[0-9]{{1,19}}$')"
      " AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements({0} -> 'i') AS i(e)"
      "   WHERE CASE WHEN jsonb_typeof(i.e) <> 'number' THEN true"
      "   ELSE (i.e::text::numeric) <> trunc(i.e::text::numeric)"
      "     OR (i.e::text::numeric) NOT BETWEEN -9223372036854775808 AND 9223372036854775807 END)"
      " THEN CASE WHEN ({0} ->> 'x')::xid8 <= pg_snapshot_xmax(pg_current_snapshot()) THEN {0} END END END",
      stored_floor, worker_id, kServerStartedSql);
  // Three reads with a floor, each through one index (OFFSET 0 keeps the
  // lateral ones lookups per value): the range from from_xid and each point
  // through jobs_running_worker_idx (worker_id, running_xid), each id
  // through jobs_pkey (`IS NOT FALSE` implies no partial index); one without.
  // The points and ids are unnested from arrays: the planner takes an
  // array for 10 elements where a jsonb function is 100 rows, and with 100
  // a plan of many workers cost past jit_above_cost (a second of JIT for a
  // rescue that reads a few rows).
  return fmt::format(
      "(SELECT r.* FROM (SELECT {1} AS f) fl CROSS JOIN LATERAL ("
      "   SELECT j.id, j.queue, j.limit_key, j.worker_id FROM akadze.jobs j"
      "   WHERE fl.f IS NOT NULL AND j.worker_id = {0} AND j.state = 'running'"
      "     AND j.running_xid >= (fl.f ->> 'x')::xid8"
      "   UNION"
      "   SELECT j.* FROM unnest(ARRAY(SELECT jsonb_array_elements_text(CASE WHEN fl.f IS NOT NULL THEN fl.f -> 'p' END)))"
      "     AS p(x)"
      "   CROSS JOIN LATERAL (SELECT j.id, j.queue, j.limit_key, j.worker_id FROM akadze.jobs j"
      "     WHERE j.worker_id = {0} AND j.state = 'running'"
      "       AND j.running_xid = p.x::xid8 OFFSET 0) j"
      "   UNION"
      "   SELECT j.* FROM unnest(ARRAY(SELECT jsonb_array_elements(CASE WHEN fl.f IS NOT NULL THEN fl.f -> 'i' END)))"
      "     AS i(e)"
      "   CROSS JOIN LATERAL (SELECT j.id, j.queue, j.limit_key, j.worker_id FROM akadze.jobs j"
      "     WHERE j.id = (i.e::text::numeric)::int8"
      "       AND j.worker_id = {0} AND (j.state = 'running') IS NOT FALSE OFFSET 0) j"
      "   UNION ALL"
      "   SELECT j.id, j.queue, j.limit_key, j.worker_id FROM akadze.jobs j"
      "   WHERE fl.f IS NULL AND j.worker_id = {0} AND j.state = 'running') r)",
      worker_id, floor);
}

std::string QueueRunningJobsSql(std::string_view queue, const QueueRunningFloorSql* floor) {
  // The ranges' bounds: registered workers (their stored floors along,
  // for a count without a floor), then each one's next.
  const std::string bounds =
      floor != nullptr && floor->with_stops
          ? fmt::format("SELECT id, NULL::jsonb AS running_floor FROM akadze.workers"
                        " UNION SELECT id, NULL FROM (SELECT id FROM akadze.worker_stops"
                        "   ORDER BY stopped_at DESC LIMIT {}) s",
                        kQueueCountStops)
          : std::string("SELECT id, running_floor FROM akadze.workers");
  const std::string ws = "WITH ws AS MATERIALIZED (SELECT id, running_floor, lead(id) OVER (ORDER BY id) AS next"
                         " FROM (" + bounds + ") b)";
  // Each arm one index range (OFFSET 0 in a lateral one: a lookup per
  // bound, not a join that reads the entries whole).
  const auto of = [&](std::string_view where) {
    return fmt::format("SELECT id FROM akadze.jobs WHERE state = 'running' AND {} AND queue = {}", where, queue);
  };
  if (floor == nullptr) {
    return ws + " " + of("worker_id IS NULL") +
           " UNION ALL " + of("worker_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM ws)") +
           " UNION ALL " + of("worker_id < (SELECT id FROM ws ORDER BY id LIMIT 1)") +
           " UNION ALL SELECT x.id FROM ws CROSS JOIN LATERAL (SELECT r.id FROM " +
           RunningJobsOfWorkerSql("ws.id", "ws.running_floor") + " r WHERE r.queue = " + std::string(queue) +
           "   UNION ALL " + of("worker_id > ws.id AND worker_id < ws.next") +
           "   UNION ALL " + of("ws.next IS NULL AND worker_id > ws.id") + " OFFSET 0) x";
  }
  // The rows S did not see, in the range `where`: from from_xid on, and at
  // the points (usually none: the arm is then not run).
  const auto since = [&](std::string_view where) {
    return of(fmt::format("{} AND running_xid >= {}", where, floor->from_xid)) + " UNION ALL " +
           of(fmt::format("cardinality({0}) > 0 AND {1} AND running_xid = ANY({0})", floor->points, where));
  };
  return ws + " SELECT id FROM akadze.jobs WHERE id = ANY(" + floor->ids + ")"
         " AND (state = 'running') IS NOT FALSE AND queue = " + std::string(queue) +
         " UNION " + since("worker_id IS NULL") +
         " UNION " + since("worker_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM ws)") +
         " UNION " + since("worker_id < (SELECT id FROM ws ORDER BY id LIMIT 1)") +
         " UNION SELECT x.id FROM ws CROSS JOIN LATERAL (" + since("worker_id >= ws.id AND worker_id < ws.next") +
         "   UNION ALL " + since("ws.next IS NULL AND worker_id >= ws.id") + " OFFSET 0) x";
}

const std::string& RunningJobsOfWorkersSql() {
  static const std::string sql = "(SELECT r.queue, r.limit_key, r.worker_id FROM akadze.workers w"
                                 " CROSS JOIN LATERAL " + RunningJobsOfWorkerSql("w.id", "w.running_floor") + " r)";
  return sql;
}

}  // namespace akadzed
