#include "claim/queue_counts.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>

#include "claim/stored_floor.h"
#include "claim/window_reads.h"
#include "pg/result.h"
#include "store/job_sql.h"

namespace akadzed {

pg::Statement QueueCountStatement(const std::string& queue, const ClaimFloor& floor, std::int64_t cap) {
  pg::Statement st;
  const std::string q = st.bind(queue);
  // The limit in the text: a generic plan of a LIMIT parameter assumes a
  // tenth of the table, and may scan it.
  const std::string limit = cap > 0 ? " LIMIT " + std::to_string(cap + 1) : std::string();
  const std::string queued = "SELECT run_at FROM akadze.jobs WHERE queue = " + q + " AND state = 'queued'";
  std::vector<IndexPosition> levels = floor.levels;
  std::sort(levels.begin(), levels.end(),
            [](const IndexPosition& a, const IndexPosition& b) { return a.priority > b.priority; });
  std::vector<std::string> arms;
  // The gaps between floored levels (nullopt: no bound), highest first.
  std::vector<std::pair<std::optional<std::int32_t>, std::optional<std::int32_t>>> gaps;
  std::optional<std::int32_t> above;
  for (const IndexPosition& f : levels) {
    gaps.emplace_back(above, f.priority);
    above = f.priority;
    arms.push_back("(" + queued + " AND priority = " + st.bind(std::int64_t{f.priority}) +
                   "::int AND (run_at, id) > (" + TimestampFromMicrosSql(st.bind(f.run_at_us)) + ", " +
                   st.bind(f.id) + ") ORDER BY run_at, id" + limit + ")");
  }
  gaps.emplace_back(above, std::nullopt);
  std::vector<std::string> oldest;  // one expression per gap
  for (const auto& [hi, lo] : gaps) {
    std::string bounds;
    if (hi) bounds += " AND priority < " + st.bind(std::int64_t{*hi}) + "::int";
    if (lo) bounds += " AND priority > " + st.bind(std::int64_t{*lo}) + "::int";
    arms.push_back("(" + queued + bounds + " ORDER BY priority DESC, run_at, id" + limit + ")");
    // The first run_at of each distinct priority of the gap, the 100
    // highest, as the skip scan of jobs_claim_idx that PostgreSQL lacks.
    const std::string where = " FROM akadze.jobs j WHERE j.queue = " + q + " AND j.state = 'queued'" + bounds;
    const std::string level = "SELECT j.priority" + where;
    const std::string level_first = "SELECT j.priority, 1" + where;
    oldest.push_back(
        "(WITH RECURSIVE pr(priority, depth) AS ("
        "   (" + level_first + " ORDER BY j.priority DESC LIMIT 1)"
        "   UNION ALL"
        "   SELECT (" + level + " AND j.priority < pr.priority ORDER BY j.priority DESC LIMIT 1), pr.depth + 1"
        "   FROM pr WHERE pr.priority IS NOT NULL AND pr.depth < 100)"
        " SELECT min(f.run_at) FROM pr CROSS JOIN LATERAL"
        "   (SELECT j.run_at FROM akadze.jobs j WHERE j.queue = " + q + " AND j.state = 'queued'"
        "    AND j.priority = pr.priority ORDER BY j.priority DESC, j.run_at LIMIT 1) f"
        " WHERE pr.priority IS NOT NULL AND f.run_at <= now())");
  }
  if (!levels.empty()) {
    arms.push_back("(SELECT b.run_at FROM (" + BelowFloorRowsSql(st, q, floor, false) + ") b)");
  }
  std::string rows;
  for (const std::string& arm : arms) rows += (rows.empty() ? "" : " UNION ALL ") + arm;
  std::string least = "min(a.run_at) FILTER (WHERE a.run_at <= now())";
  for (const std::string& o : oldest) least += ", " + o;
  st.sql = "SELECT c.total, c.ready, " + AgeSecondsSql("c.oldest") +
           " FROM (SELECT count(*) AS total, count(*) FILTER (WHERE a.run_at <= now()) AS ready,"
           " LEAST(" + least + ") AS oldest FROM (" + rows + ") a) c";
  return st;
}

std::vector<QueuedCount> CountQueuedJobs(pg::Connection& conn, const std::vector<std::string>& queues,
                                         std::int64_t cap) {
  std::vector<QueuedCount> counts(queues.size());
  if (queues.empty()) return counts;
  // The snapshot and server now, and whether the role may read the floors
  // (the admin role lacks the GRANT: counts from the heads, not an error
  // that would end the caller's transaction).
  const pg::Statement now = FloorSnapshotStatement();
  pg::Result r = conn.exec(now.sql + ", has_table_privilege('akadze.queue_floors', 'SELECT')", now.params());
  std::map<std::string, ClaimFloor> floors;
  if (r.boolean(0, 3)) floors = LoadQueueFloors(conn, queues, kCountFloorMaxAge);
  const std::string snapshot(r.text(0, 0));
  const std::string server(r.text(0, 1));
  std::vector<pg::Statement> statements;
  statements.reserve(queues.size());
  const ClaimFloor none;
  for (const std::string& queue : queues) {
    const auto it = floors.find(queue);
    const bool usable = it != floors.end() && FloorUsable(it->second, snapshot, server);
    statements.push_back(QueueCountStatement(queue, usable ? it->second : none, cap));
  }
  std::vector<pg::PipelinedStatement> pipelined;
  pipelined.reserve(statements.size());
  for (const pg::Statement& st : statements) pipelined.push_back({st.sql, &st.params(), st.prepare()});
  const std::vector<pg::Result> results = conn.pipeline(pipelined);
  for (std::size_t i = 0; i < results.size(); ++i) {
    const pg::Result& c = results[i];
    counts[i].total = c.int64(0, 0);
    counts[i].ready = c.int64(0, 1);
    if (!c.is_null(0, 2)) counts[i].oldest_ready_age_seconds = c.float64(0, 2);
  }
  return counts;
}

}  // namespace akadzed
