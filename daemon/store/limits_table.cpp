#include "store/limits_table.h"

#include <stdexcept>
#include <string>

#include "store/job_sql.h"

namespace akadzed {

void ValidateLimit(const LimitRow& row) {
  if (row.key.empty()) throw std::invalid_argument("limit key must not be empty");
  if (row.max_running && *row.max_running < 1) {
    throw std::invalid_argument("--max-running must be at least 1");
  }
  if (row.max_starts && *row.max_starts < 1) {
    throw std::invalid_argument("--max-starts must be at least 1");
  }
  if (row.max_starts.has_value() != row.starts_window_us.has_value()) {
    throw std::invalid_argument("--max-starts and --starts-window go together");
  }
  if (row.starts_window_us && *row.starts_window_us <= 0) {
    throw std::invalid_argument("--starts-window must be positive");
  }
  // limits_starts_window_max_check (migration 005): PostgreSQL compares
  // interval '100 years' as 1,200 months of 30 days.
  if (row.starts_window_us && *row.starts_window_us > std::int64_t{36000} * 86400 * 1000000) {
    throw std::invalid_argument("--starts-window must be at most 100 years");
  }
}

void SetLimit(pg::Connection& conn, const LimitRow& row) {
  ValidateLimit(row);
  conn.exec(
      "INSERT INTO akadze.limits (key, max_running, max_starts, starts_window)"
      " VALUES ($1, $2::int, $3::int, $4::int8 * interval '1 microsecond')"
      " ON CONFLICT (key) DO UPDATE SET max_running = EXCLUDED.max_running,"
      "   max_starts = EXCLUDED.max_starts, starts_window = EXCLUDED.starts_window",
      pg::Params().add(row.key).add(row.max_running).add(row.max_starts).add(row.starts_window_us));
}

std::vector<LimitRow> ListLimits(pg::Connection& conn) {
  pg::Result r = conn.exec(
      "SELECT key, max_running, max_starts,"
      " (EXTRACT(EPOCH FROM starts_window) * 1000000)::int8 FROM akadze.limits ORDER BY key");
  std::vector<LimitRow> rows;
  for (int i = 0; i < r.rows(); ++i) {
    rows.push_back(LimitRow{std::string(r.text(i, 0)), r.optional_int64(i, 1),
                            r.optional_int64(i, 2), r.optional_int64(i, 3)});
  }
  return rows;
}

bool DeleteLimit(pg::Connection& conn, const std::string& key) {
  return conn.exec("DELETE FROM akadze.limits WHERE key = $1", pg::Params().add(key)).affected() > 0;
}

namespace {

// ListLimitKeysInUse's statement: each key with the row's running cap and the
// number of such keys overall.
const std::string kLimitKeysSql =
    "SELECT r.key, r.n,"
    " CASE WHEN own.key IS NOT NULL THEN own.max_running ELSE star.max_running END,"
    " count(*) OVER ()"
    " FROM (SELECT limit_key AS key, count(*) AS n FROM " + RunningJobsOfWorkersSql() + " rj"
    "   WHERE limit_key IS NOT NULL GROUP BY limit_key) r"
    " LEFT JOIN akadze.limits own ON own.key = r.key"
    " LEFT JOIN akadze.limits star ON star.key = '*'"
    " WHERE own.key IS NOT NULL OR star.key IS NOT NULL"
    " ORDER BY r.n DESC, r.key LIMIT $1";

// ListHeldLimitKeys's statement, gated by the absence of a '*' row: the
// queues with queued jobs (the known ones, kKnownQueuesSql, and a skip scan
// of jobs_claim_idx between them), then in each queue the distinct limit
// keys between two keys that have a row of their own (a skip scan of
// jobs_claim_key_idx inside each gap: a key with a row is not held, and its
// entries, where a held MVCC horizon keeps the dead entries of its claims,
// are never entered; keyless jobs sort last, after every bound, and are
// never read); the keys found, each counted in the queues it has jobs in
// (up to $2 jobs per key; NULL: all). A held key's jobs are never claimed,
// so its entries are live.
std::string HeldKeysSql(bool with_floors) {
  return
      "WITH RECURSIVE star AS (SELECT EXISTS (SELECT 1 FROM akadze.limits WHERE key = '*') AS set),"
      " known AS (SELECT queue FROM (" + KnownQueuesSql(with_floors) + ") k WHERE NOT (SELECT set FROM star)),"
      " qgaps(lo, hi) AS (SELECT lag(queue) OVER (ORDER BY queue), queue FROM known"
      "  UNION ALL SELECT max(queue), NULL FROM known HAVING NOT (SELECT set FROM star)),"
      " qfound(queue, hi) AS ("
      "  SELECT " + FirstInGapSql("queue", "j.state = 'queued'", "g.lo", "g.hi") + ", g.hi FROM qgaps g"
      "  UNION ALL"
      "  SELECT " + FirstInGapSql("queue", "j.state = 'queued'", "f.queue", "f.hi") + ", f.hi"
      "  FROM qfound f WHERE f.queue IS NOT NULL),"
      " queues AS (SELECT queue FROM known UNION SELECT queue FROM qfound WHERE queue IS NOT NULL),"
      " rowed AS (SELECT key FROM akadze.limits),"
      " kgaps(lo, hi) AS (SELECT lag(key) OVER (ORDER BY key), key FROM rowed"
      "  UNION ALL SELECT max(key), NULL FROM rowed),"
      " pairs(queue, limit_key, hi) AS ("
      "  SELECT q.queue, " + FirstInGapSql("limit_key", "j.state = 'queued' AND j.queue = q.queue", "g.lo", "g.hi") +
      ", g.hi FROM queues q CROSS JOIN kgaps g"
      "  UNION ALL"
      "  SELECT p.queue, " + FirstInGapSql("limit_key", "j.state = 'queued' AND j.queue = p.queue", "p.limit_key", "p.hi") +
      ", p.hi FROM pairs p WHERE p.limit_key IS NOT NULL),"
      " held AS ("
      "  SELECT p.limit_key AS key, array_agg(p.queue) AS queues FROM pairs p"
      "  WHERE p.limit_key IS NOT NULL"
      "    AND NOT EXISTS (SELECT 1 FROM akadze.limits l WHERE l.key = p.limit_key) GROUP BY p.limit_key)"
      // Each held key's jobs, queue by queue: an equality on both leading
      // columns of jobs_claim_key_idx (`queue = ANY(...)` was read through
      // jobs_claim_idx, every job of the queues filtered by key).
      " SELECT key, n, count(*) OVER () FROM (SELECT h.key, (SELECT count(*) FROM (SELECT 1"
      "   FROM unnest(h.queues) AS hq(queue) CROSS JOIN LATERAL (SELECT 1 FROM akadze.jobs j"
      "     WHERE j.state = 'queued' AND j.queue = hq.queue AND j.limit_key = h.key LIMIT $2) x LIMIT $2) c) AS n"
      "  FROM held h) k"
      " ORDER BY n DESC, key LIMIT $1";
}

}  // namespace

std::vector<HeldLimitKey> ListHeldLimitKeys(pg::Connection& conn, std::size_t max_keys,
                                            std::int64_t* total, std::int64_t count_cap) {
  pg::Params params;
  params.add(static_cast<std::int64_t>(max_keys));
  if (count_cap > 0) {
    params.add(count_cap + 1);
  } else {
    params.add_null();
  }
  static const std::string with_floors = HeldKeysSql(true);
  static const std::string without = HeldKeysSql(false);
  // Planned without sorts: a probe for a queue's next key is an index scan
  // of jobs_claim_key_idx in key order, but with statistics that take the
  // queue for a few rows (a table that just grew, before autovacuum's
  // ANALYZE) jobs_claim_idx and a sort cost the same, and that plan read
  // the queue's every entry for each probe (1 to 2 s a scrape with 1,000
  // limit rows, then the statement timeout). Local to the transaction (the
  // pipeline's own, outside one), and set back to what it was after. Both
  // callers run it with JIT off: the sort no plan avoids (the keys by count)
  // costs it past jit_above_cost.
  const pg::Params none;
  const std::vector<pg::PipelinedStatement> statements = {
      {"SELECT set_config('akadzed.enable_sort_before', current_setting('enable_sort'), true),"
       " set_config('enable_sort', 'off', true)",
       &none},
      {CanReadTable(conn, "akadze.queue_floors") ? with_floors : without, &params},
      {"SELECT set_config('enable_sort', current_setting('akadzed.enable_sort_before'), true)", &none}};
  const std::vector<pg::Result> results = conn.pipeline(statements);
  const pg::Result& r = results[1];
  std::vector<HeldLimitKey> keys;
  for (int i = 0; i < r.rows(); ++i) {
    HeldLimitKey key{std::string(r.text(i, 0)), r.int64(i, 1)};
    if (count_cap > 0 && key.queued > count_cap) {
      key.queued = count_cap;
      key.capped = true;
    }
    keys.push_back(std::move(key));
    *total = r.int64(i, 2);
  }
  return keys;
}

std::vector<LimitKeyUse> ListLimitKeysInUse(pg::Connection& conn, std::size_t max_keys,
                                            std::int64_t* total) {
  pg::Result r = conn.exec(kLimitKeysSql, pg::Params().add(static_cast<std::int64_t>(max_keys)));
  std::vector<LimitKeyUse> keys;
  for (int i = 0; i < r.rows(); ++i) {
    keys.push_back({std::string(r.text(i, 0)), r.int64(i, 1), r.optional_int64(i, 2)});
    *total = r.int64(i, 3);
  }
  return keys;
}

}  // namespace akadzed
