#include "store/status_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "pg/transaction.h"
#include "store/job_sql.h"

namespace akadzed {

namespace {

// The hour the chart shows: 60 minutes, the last one now's.
constexpr const char* kChartMinutesSql =
    "generate_series(date_trunc('minute', now()) - interval '59 minutes',"
    " date_trunc('minute', now()), interval '1 minute')";

// The queues, one statement (their queued counts are the QueuedCounter's).
// Names, bounded: the known ones (the queues the workers serve, pauses,
// caps, stored claim floors) and those with queued jobs between them, found
// by a skip scan of jobs_claim_idx inside each gap between two known names
// (`queue > lower AND queue < upper`: a probe never enters a known queue's
// entries, where a held MVCC horizon keeps the dead entries of its claims);
// at most max_queues + 1 (one more says there may be more), those known
// only by a stored floor (`with_floors`: the role may read them) last: they
// are shown only with queued jobs. Per
// queue: pause, cap and running (RunningJobsOfWorkersSql). Limits are
// written into the text: a generic plan of a LIMIT parameter assumes a
// tenth of the table.
std::string QueuesSql(std::size_t max_queues, bool with_floors) {
  const auto probe = [](const std::string& lo, const std::string& hi) {
    return FirstInGapSql("queue", "j.state = 'queued'", lo, hi);
  };
  return
      "WITH RECURSIVE known(queue, served) AS (" + KnownQueuesSql(with_floors) + "),"
      // The gaps: before the first known name, between two, after the last
      // (one gap without bounds when none is known).
      " gaps(lo, hi) AS ("
      "  SELECT lag(queue) OVER (ORDER BY queue), queue FROM known"
      "  UNION ALL SELECT max(queue), NULL FROM known),"
      " found(queue, hi) AS ("
      "  SELECT " + probe("g.lo", "g.hi") + ", g.hi FROM gaps g"
      "  UNION ALL"
      "  SELECT " + probe("f.queue", "f.hi") + ", f.hi FROM found f WHERE f.queue IS NOT NULL),"
      " names AS (SELECT queue, bool_or(served) AS served FROM ("
      "  SELECT queue, served FROM known UNION ALL SELECT queue, true FROM found WHERE queue IS NOT NULL) n"
      "  GROUP BY queue ORDER BY bool_or(served) DESC, queue LIMIT " + std::to_string(max_queues + 1) + "),"
      // Running jobs, read once, each worker's past its running floor.
      " running AS (SELECT queue, count(*) AS n FROM " + RunningJobsOfWorkersSql() + " rj GROUP BY queue)"
      " SELECT q.queue, p.queue IS NOT NULL, " + IsoTimestampSql("p.paused_at") + ","
      " COALESCE(rn.n, 0), cap.max_running, q.served OR rn.n IS NOT NULL"
      " FROM names q"
      " LEFT JOIN akadze.queue_pauses p ON p.queue = q.queue"
      " LEFT JOIN akadze.queue_caps cap ON cap.queue = q.queue"
      " LEFT JOIN running rn ON rn.queue = q.queue"
      " ORDER BY q.served DESC, q.queue";
}

// The chart's rows: those of the last hour's 60 minutes (probes of the
// primary key: at most 60 rows per queue), the minute as epoch seconds; the
// caller puts them in the chart's slots (no date formatting per row on the
// server). The minutes as an array (= ANY): a range bound the generic plan
// cannot see makes it scan the whole day's rows.
const std::string& QueueMinutesSql() {
  static const std::string sql =
      std::string("SELECT queue, date_part('epoch', minute)::bigint, succeeded, failed, cancelled"
                  " FROM akadze.queue_minutes WHERE minute = ANY(ARRAY(SELECT ") +
      kChartMinutesSql + "))";
  return sql;
}

// Qualified names: ORDER BY finished_at would sort by the output column of
// that name (the ISO text), which no index serves. A failed row without
// finished_at (only a hand-written one) is left out: it would sort first.
std::string RecentFailuresSql(std::size_t max_failures) {
  return "SELECT j.id, j.task, j.queue, j.attempt, j.max_attempts, " + IsoTimestampSql("j.finished_at") + ","
         " CASE WHEN jsonb_typeof(j.errors) = 'array' THEN left(j.errors -> -1 ->> 'error', 200) END,"
         " CASE WHEN jsonb_typeof(j.errors) = 'array' THEN left(j.errors -> -1 ->> 'message', 500) END"
         " FROM akadze.jobs j WHERE j.state = 'failed' AND j.finished_at IS NOT NULL"
         " ORDER BY j.finished_at DESC, j.id DESC LIMIT " +
         std::to_string(max_failures);
}

}  // namespace

QueueSection ReadQueueSection(pg::Connection& conn, const QueuedCounter& count_queued,
                              const StatusReportOptions& options) {
  QueueSection section;
  // The statements this file owns go in one round trip.
  const std::string now_sql = "SELECT " + IsoTimestampSql("now()") + ", " + IsoTimestampSql("m") +
                              ", date_part('epoch', m)::bigint FROM " + kChartMinutesSql + " AS m ORDER BY m";
  const std::string queues_sql = QueuesSql(options.max_queues, CanReadTable(conn, "akadze.queue_floors"));
  const pg::Params none;
  const std::vector<pg::PipelinedStatement> statements = {
      {now_sql, &none}, {queues_sql, &none}, {QueueMinutesSql(), &none}};
  const std::vector<pg::Result> results = conn.pipeline(statements);

  std::vector<std::string> minutes;  // the chart's 60 minutes, oldest first
  std::int64_t last_minute = 0;      // the last one, epoch seconds
  const pg::Result& now = results[0];
  for (int i = 0; i < now.rows(); ++i) minutes.emplace_back(now.text(i, 1));
  if (now.rows() > 0) {
    section.generated_at = std::string(now.text(0, 0));
    last_minute = now.int64(now.rows() - 1, 2);
  }
  const pg::Result& r = results[1];
  std::vector<std::string> names;
  for (int i = 0; i < r.rows(); ++i) names.emplace_back(r.text(i, 0));
  const std::vector<QueuedCount> counts = count_queued(conn, names, options.count_cap);
  const std::int64_t cap = options.count_cap > 0 ? options.count_cap : INT64_MAX;
  // The served and found names come first, then those known only by a
  // stored floor, shown while they have queued jobs; by name after that.
  section.truncated = static_cast<std::size_t>(r.rows()) > options.max_queues;
  for (int i = 0; i < r.rows() && section.queues.size() < options.max_queues; ++i) {
    const QueuedCount& c = counts.at(static_cast<std::size_t>(i));
    if (!r.boolean(i, 5) && c.total == 0) continue;
    QueueStatus q;
    q.queue = std::string(r.text(i, 0));
    q.paused = r.boolean(i, 1);
    q.paused_at = r.optional_text(i, 2);
    q.running = r.int64(i, 3);
    q.max_running = r.optional_int64(i, 4);
    q.capped = c.total > cap;
    q.ready = std::min(c.ready, cap);
    q.scheduled = std::min(c.total - c.ready, cap);
    q.oldest_ready_age_seconds = c.oldest_ready_age_seconds;
    for (const std::string& m : minutes) q.finished_per_minute.push_back(MinuteCount{m, 0, 0, 0});
    section.queues.push_back(std::move(q));
  }
  std::sort(section.queues.begin(), section.queues.end(),
            [](const QueueStatus& a, const QueueStatus& b) { return a.queue < b.queue; });
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < section.queues.size(); ++i) index[section.queues[i].queue] = i;
  const pg::Result& m = results[2];
  const auto chart_minutes = static_cast<std::int64_t>(minutes.size());
  for (int i = 0; i < m.rows(); ++i) {
    const auto found = index.find(std::string(m.text(i, 0)));
    const std::int64_t slot = chart_minutes - 1 - (last_minute - m.int64(i, 1)) / 60;
    if (found == index.end() || slot < 0 || slot >= chart_minutes) continue;
    MinuteCount& c = section.queues[found->second].finished_per_minute[static_cast<std::size_t>(slot)];
    c.succeeded += m.int64(i, 2);
    c.failed += m.int64(i, 3);
    c.cancelled += m.int64(i, 4);
  }
  return section;
}

StatusReport ReadStatusReport(pg::Connection& conn, const QueuedCounter& count_queued,
                              const StatusReportOptions& options) {
  StatusReport report;
  report.count_cap = options.count_cap;
  // Generic plans (pg::Transaction::Plans::kGeneric): the connection keeps
  // its statements prepared, and none of these plans depends on a
  // parameter's value, so a page read every few seconds plans each
  // statement once instead of every time (planning was a fifth of a read on
  // 1,000,000 jobs). No JIT: a generic plan's estimates can cross
  // jit_above_cost, and compiling took 25 ms of a 5 ms read. BEGIN goes with
  // the SET.
  pg::Transaction tx(conn, "BEGIN READ ONLY", pg::Transaction::Begin::kWithFirstStatement,
                     pg::Transaction::Plans::kGeneric);
  tx.exec(fmt::format("SET LOCAL statement_timeout = {}; SET LOCAL jit = off",
                      std::max<std::int64_t>(options.statement_timeout_ms, 0)));
  QueueSection section = ReadQueueSection(conn, count_queued, options);
  report.generated_at = std::move(section.generated_at);
  report.queues = std::move(section.queues);
  report.queues_truncated = section.truncated;
  const pg::Result f = conn.exec(RecentFailuresSql(options.max_failures), pg::Params());
  for (int i = 0; i < f.rows(); ++i) {
    report.recent_failures.push_back(RecentFailure{f.int64(i, 0), std::string(f.text(i, 1)), std::string(f.text(i, 2)),
                                                   f.int64(i, 3), f.int64(i, 4), f.optional_text(i, 5),
                                                   f.optional_text(i, 6), f.optional_text(i, 7)});
  }
  report.limits = ListLimitUse(conn);
  report.held_keys =
      ListHeldLimitKeys(conn, options.max_held_keys, &report.held_keys_total, options.count_cap);
  report.workers = ListWorkers(conn);
  report.horizon = ReadHorizon(conn);
  tx.commit();
  return report;
}

void AddQueueMinutes(pg::Connection& conn, const std::vector<QueueFinishCount>& counts) {
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
  // Rows are locked in queue order (the INSERT's ORDER BY): daemons adding
  // to the same minute wait on each other at most for one statement, never
  // in a cycle. Old rows another round is deleting are skipped, not waited for.
  conn.exec(
      "WITH pruned AS (DELETE FROM akadze.queue_minutes WHERE (minute, queue) IN"
      "   (SELECT minute, queue FROM akadze.queue_minutes WHERE minute < now() - interval '1 day'"
      "    FOR UPDATE SKIP LOCKED))"
      " INSERT INTO akadze.queue_minutes AS m (minute, queue, succeeded, failed, cancelled)"
      " SELECT date_trunc('minute', now()), c.queue, c.s, c.f, c.x"
      " FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[]) AS c(queue, s, f, x)"
      " ORDER BY c.queue"
      " ON CONFLICT (minute, queue) DO UPDATE SET"
      " succeeded = m.succeeded + EXCLUDED.succeeded, failed = m.failed + EXCLUDED.failed,"
      " cancelled = m.cancelled + EXCLUDED.cancelled",
      pg::Params().add_array(queues).add_array(succeeded).add_array(failed).add_array(cancelled));
}

}  // namespace akadzed
