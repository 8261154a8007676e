#include "store/status_report.h"

#include <fmt/format.h>

#include <map>

#include "pg/transaction.h"
#include "store/job_sql.h"

namespace akadzed {

namespace {

// The hour the chart shows: 60 minutes, the last one now's.
constexpr const char* kChartMinutesSql =
    "generate_series(date_trunc('minute', now()) - interval '59 minutes',"
    " date_trunc('minute', now()), interval '1 minute')";

// Queue names, bounded: a skip scan of jobs_claim_idx (one probe per queue
// with queued jobs), running jobs, pauses, the chart's hour, live workers.
const std::string& QueueNamesSql() {
  static const std::string sql =
      "WITH RECURSIVE queued(queue) AS ("
      "  (SELECT queue FROM akadze.jobs WHERE state = 'queued' ORDER BY queue LIMIT 1)"
      "  UNION ALL"
      "  SELECT (SELECT j.queue FROM akadze.jobs j WHERE j.state = 'queued' AND j.queue > q.queue"
      "          ORDER BY j.queue LIMIT 1)"
      "  FROM queued q WHERE q.queue IS NOT NULL)"
      " SELECT queue FROM ("
      "  SELECT queue FROM queued WHERE queue IS NOT NULL"
      "  UNION SELECT queue FROM akadze.jobs WHERE state = 'running'"
      "  UNION SELECT queue FROM akadze.queue_pauses"
      "  UNION SELECT queue FROM akadze.queue_minutes"
      "    WHERE minute >= date_trunc('minute', now()) - interval '59 minutes'"
      "  UNION SELECT unnest(queues) FROM akadze.workers) names"
      " ORDER BY queue LIMIT $1";
  return sql;
}

// Per queue: pause, ready/scheduled from the first cap + 1 entries of its
// range of jobs_claim_idx, running, and the oldest ready run_at from one
// probe per distinct priority (at most 100).
const std::string& QueueCountsSql() {
  static const std::string sql =
      "SELECT q.queue, p.queue IS NOT NULL, " + IsoTimestampSql("p.paused_at") + ","
      " c.total, c.ready,"
      " (SELECT count(*) FROM akadze.jobs r WHERE r.state = 'running' AND r.queue = q.queue),"
      " " + AgeSecondsSql("o.oldest") +
      " FROM unnest($1::text[]) AS q(queue)"
      " LEFT JOIN akadze.queue_pauses p ON p.queue = q.queue"
      " CROSS JOIN LATERAL (SELECT count(*) AS total, count(*) FILTER (WHERE s.run_at <= now()) AS ready"
      "   FROM (SELECT j.run_at FROM akadze.jobs j WHERE j.state = 'queued' AND j.queue = q.queue"
      "         LIMIT $2) s) c"
      " CROSS JOIN LATERAL (WITH RECURSIVE pr(priority, depth) AS ("
      "     (SELECT j.priority, 1 FROM akadze.jobs j WHERE j.state = 'queued' AND j.queue = q.queue"
      "      ORDER BY j.priority DESC LIMIT 1)"
      "     UNION ALL"
      "     SELECT (SELECT j.priority FROM akadze.jobs j WHERE j.state = 'queued' AND j.queue = q.queue"
      "             AND j.priority < pr.priority ORDER BY j.priority DESC LIMIT 1), pr.depth + 1"
      "     FROM pr WHERE pr.priority IS NOT NULL AND pr.depth < 100)"
      "   SELECT min(f.run_at) AS oldest FROM pr CROSS JOIN LATERAL"
      "     (SELECT j.run_at FROM akadze.jobs j WHERE j.state = 'queued' AND j.queue = q.queue"
      "      AND j.priority = pr.priority ORDER BY j.priority DESC, j.run_at LIMIT 1) f"
      "   WHERE pr.priority IS NOT NULL AND f.run_at <= now()) o"
      " ORDER BY q.queue";
  return sql;
}

// The chart's rows: slot 0..59 (oldest first) per queue with finishes.
const std::string& QueueMinutesSql() {
  static const std::string sql =
      "SELECT queue, 59 - (EXTRACT(EPOCH FROM date_trunc('minute', now()) - minute) / 60)::int,"
      " sum(succeeded)::bigint, sum(failed)::bigint, sum(cancelled)::bigint"
      " FROM akadze.queue_minutes"
      " WHERE minute >= date_trunc('minute', now()) - interval '59 minutes'"
      "   AND minute <= date_trunc('minute', now()) AND queue = ANY($1::text[])"
      " GROUP BY queue, minute";
  return sql;
}

const std::string& RecentFailuresSql() {
  static const std::string sql =
      "SELECT id, task, queue, attempt, max_attempts, " + IsoTimestampSql("finished_at") + ","
      " CASE WHEN jsonb_typeof(errors) = 'array' THEN left(errors -> -1 ->> 'error', 200) END,"
      " CASE WHEN jsonb_typeof(errors) = 'array' THEN left(errors -> -1 ->> 'message', 500) END"
      " FROM akadze.jobs WHERE state = 'failed'"
      " ORDER BY finished_at DESC, id DESC LIMIT $1";
  return sql;
}

}  // namespace

StatusReport ReadStatusReport(pg::Connection& conn, const StatusReportOptions& options) {
  StatusReport report;
  report.count_cap = options.count_cap;
  pg::Transaction tx(conn, "BEGIN READ ONLY");
  if (options.statement_timeout_ms > 0) {
    tx.exec(fmt::format("SET LOCAL statement_timeout = {}", options.statement_timeout_ms));
  }
  std::vector<std::string> minutes;  // the chart's 60 minutes, oldest first
  {
    pg::Result r = tx.exec("SELECT " + IsoTimestampSql("now()") + ", " + IsoTimestampSql("m") + " FROM " +
                           kChartMinutesSql + " AS m ORDER BY m");
    for (int i = 0; i < r.rows(); ++i) minutes.emplace_back(r.text(i, 1));
    if (r.rows() > 0) report.generated_at = std::string(r.text(0, 0));
  }
  std::vector<std::string> names;
  {
    pg::Result r = tx.exec(QueueNamesSql(),
                           pg::Params().add(static_cast<std::int64_t>(options.max_queues) + 1));
    for (int i = 0; i < r.rows(); ++i) names.emplace_back(r.text(i, 0));
    if (names.size() > options.max_queues) {
      names.resize(options.max_queues);
      report.queues_truncated = true;
    }
  }
  std::map<std::string, std::size_t> index;
  if (!names.empty()) {
    pg::Result r = tx.exec(QueueCountsSql(), pg::Params().add_array(names).add(options.count_cap + 1));
    for (int i = 0; i < r.rows(); ++i) {
      QueueStatus q;
      q.queue = std::string(r.text(i, 0));
      q.paused = r.boolean(i, 1);
      q.paused_at = r.optional_text(i, 2);
      const std::int64_t total = r.int64(i, 3);
      q.capped = total > options.count_cap;
      q.ready = std::min(r.int64(i, 4), options.count_cap);
      q.scheduled = std::min(total - r.int64(i, 4), options.count_cap);
      q.running = r.int64(i, 5);
      if (!r.is_null(i, 6)) q.oldest_ready_age_seconds = r.float64(i, 6);
      for (const std::string& m : minutes) q.finished_per_minute.push_back(MinuteCount{m, 0, 0, 0});
      index[q.queue] = report.queues.size();
      report.queues.push_back(std::move(q));
    }
    pg::Result m = tx.exec(QueueMinutesSql(), pg::Params().add_array(names));
    for (int i = 0; i < m.rows(); ++i) {
      const auto found = index.find(std::string(m.text(i, 0)));
      const std::int64_t slot = m.int64(i, 1);
      if (found == index.end() || slot < 0 || slot >= static_cast<std::int64_t>(minutes.size())) continue;
      MinuteCount& c = report.queues[found->second].finished_per_minute[static_cast<std::size_t>(slot)];
      c.succeeded = m.int64(i, 2);
      c.failed = m.int64(i, 3);
      c.cancelled = m.int64(i, 4);
    }
  }
  report.limits = ListLimitUse(conn);
  report.held_keys = ListHeldLimitKeys(conn, options.max_held_keys, &report.held_keys_total);
  report.workers = ListWorkers(conn);
  {
    pg::Result r = tx.exec(RecentFailuresSql(),
                           pg::Params().add(static_cast<std::int64_t>(options.max_failures)));
    for (int i = 0; i < r.rows(); ++i) {
      report.recent_failures.push_back(RecentFailure{r.int64(i, 0), std::string(r.text(i, 1)),
                                                     std::string(r.text(i, 2)), r.int64(i, 3), r.int64(i, 4),
                                                     r.optional_text(i, 5), r.optional_text(i, 6),
                                                     r.optional_text(i, 7)});
    }
  }
  tx.commit();
  return report;
}

void AddQueueMinutes(pg::Connection& conn, const std::string& worker_id,
                     const std::vector<QueueFinishCount>& counts) {
  std::vector<std::string> queues;
  std::vector<std::int64_t> succeeded;
  std::vector<std::int64_t> failed;
  std::vector<std::int64_t> cancelled;
  for (const QueueFinishCount& c : counts) {
    queues.push_back(c.queue);
    succeeded.push_back(c.succeeded);
    failed.push_back(c.failed);
    cancelled.push_back(c.cancelled);
  }
  conn.exec(
      "WITH pruned AS (DELETE FROM akadze.queue_minutes WHERE minute < now() - interval '1 day')"
      " INSERT INTO akadze.queue_minutes AS m (minute, queue, worker_id, succeeded, failed, cancelled)"
      " SELECT date_trunc('minute', now()), c.queue, $1::uuid, c.s, c.f, c.x"
      " FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::bigint[]) AS c(queue, s, f, x)"
      " ON CONFLICT (minute, queue, worker_id) DO UPDATE SET"
      " succeeded = m.succeeded + EXCLUDED.succeeded, failed = m.failed + EXCLUDED.failed,"
      " cancelled = m.cancelled + EXCLUDED.cancelled",
      pg::Params().add(worker_id).add_array(queues).add_array(succeeded).add_array(failed).add_array(cancelled));
}

}  // namespace akadzed
