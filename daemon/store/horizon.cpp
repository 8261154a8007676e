#include "store/horizon.h"

#include <fmt/format.h>

#include "store/job_sql.h"

namespace akadzed {

namespace {

// The holders, oldest first, and their count (a window over all of them);
// the row set is as large as max_connections plus slots and prepared
// transactions at most. `start` is what age_seconds is measured from; a
// holder with a start younger than the minimum age is left out. The limit
// and the minimum age are written into the text: it changes with the
// options only.
std::string HorizonSql(const HorizonOptions& options) {
  return fmt::format(
      "WITH here AS (SELECT oid FROM pg_database WHERE datname = current_database()),"
      " holders AS ("
      "  SELECT 'backend' AS kind, a.pid::bigint AS pid, a.application_name, a.state, a.backend_type,"
      "   a.datname::text AS database, NULL::text AS slot_name, NULL::text AS slot_type,"
      "   NULL::text AS gid, NULL::text AS owner,"
      "   (CASE WHEN a.backend_xmin IS NULL OR (a.backend_xid IS NOT NULL AND age(a.backend_xid) > age(a.backend_xmin))"
      "         THEN a.backend_xid ELSE a.backend_xmin END)::text AS xmin,"
      "   CASE WHEN a.backend_xmin IS NULL THEN age(a.backend_xid)"
      "        WHEN a.backend_xid IS NULL THEN age(a.backend_xmin)"
      "        ELSE greatest(age(a.backend_xid), age(a.backend_xmin)) END AS xid_age,"
      "   a.xact_start AS start, a.backend_start, a.query_start, a.backend_type IS NULL AS hidden"
      "  FROM pg_stat_activity a"
      "  WHERE a.pid <> pg_backend_pid()"
      "   AND a.backend_type IS DISTINCT FROM 'autovacuum worker'"
      "   AND (a.backend_xid IS NOT NULL"
      "        OR (a.backend_xmin IS NOT NULL AND (a.datid IS NULL"
      "            OR (a.datid = (SELECT oid FROM here) AND a.backend_type IS DISTINCT FROM 'walsender'))))"
      "  UNION ALL"
      "  SELECT 'replication_slot', s.active_pid::bigint, NULL, CASE WHEN s.active THEN 'active' ELSE 'inactive' END,"
      "   NULL, s.database::text, s.slot_name::text, s.slot_type, NULL, NULL, s.xmin::text, age(s.xmin),"
      "   NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, false"
      "  FROM pg_replication_slots s WHERE s.xmin IS NOT NULL"
      "  UNION ALL"
      "  SELECT 'prepared_transaction', NULL, NULL, NULL, NULL, p.database::text, NULL, NULL,"
      "   p.gid, p.owner::text, p.transaction::text, age(p.transaction), p.prepared, NULL, NULL, false"
      "  FROM pg_prepared_xacts p),"
      " aged AS (SELECT h.*, {age} AS age_seconds FROM holders h)"
      " SELECT kind, pid, application_name, state, backend_type, database, slot_name, slot_type, gid, owner,"
      "  {start} AS start_iso, {backend_start} AS backend_start_iso, {query_start} AS query_start_iso,"
      "  age_seconds, xid_age, hidden, count(*) OVER () AS total, xmin"
      " FROM aged WHERE age_seconds IS NULL OR age_seconds >= {min_age}"
      " ORDER BY age_seconds DESC NULLS LAST, xid_age DESC, pid"
      " LIMIT {limit}",
      fmt::arg("age", AgeSecondsSql("h.start")), fmt::arg("start", IsoTimestampSql("start")),
      fmt::arg("backend_start", IsoTimestampSql("backend_start")),
      fmt::arg("query_start", IsoTimestampSql("query_start")),
      fmt::arg("min_age", options.min_age_seconds), fmt::arg("limit", options.max_holders));
}

}  // namespace

HorizonReport ReadHorizon(pg::Connection& conn, const HorizonOptions& options) {
  HorizonReport report;
  // The privilege, also when nothing holds the horizon (no row to carry it):
  // pg_has_role ... USAGE is having the role's privileges, which is what
  // pg_stat_activity asks (true for a superuser).
  const pg::Result r = conn.exec(
      "SELECT h.*, p.visible FROM (SELECT pg_has_role('pg_read_all_stats', 'USAGE') AS visible) p"
      " LEFT JOIN (" + HorizonSql(options) + ") h ON true");
  for (int i = 0; i < r.rows(); ++i) {
    report.stats_visible = r.boolean(i, 18);
    if (r.is_null(i, 0)) continue;  // no holder: the privilege's row only
    HorizonHolder h;
    h.kind = std::string(r.text(i, 0));
    h.pid = r.optional_int64(i, 1);
    h.application_name = r.optional_text(i, 2);
    h.state = r.optional_text(i, 3);
    h.backend_type = r.optional_text(i, 4);
    h.database = r.optional_text(i, 5);
    h.slot_name = r.optional_text(i, 6);
    h.slot_type = r.optional_text(i, 7);
    h.gid = r.optional_text(i, 8);
    h.owner = r.optional_text(i, 9);
    h.xact_start = r.optional_text(i, 10);
    h.backend_start = r.optional_text(i, 11);
    h.query_start = r.optional_text(i, 12);
    if (!r.is_null(i, 13)) h.age_seconds = r.float64(i, 13);
    h.xid_age = r.int64(i, 14);
    h.hidden = r.boolean(i, 15);
    report.holders_total = r.int64(i, 16);
    h.xmin = std::string(r.text(i, 17));
    report.holders.push_back(std::move(h));
  }
  return report;
}

std::int64_t ReadJobsDeadTuples(pg::Connection& conn) {
  return conn.exec("SELECT COALESCE(pg_stat_get_dead_tuples(to_regclass('akadze.jobs')), 0)").int64(0, 0);
}

}  // namespace akadzed
