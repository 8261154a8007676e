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
    " FROM (SELECT limit_key AS key, count(*) AS n FROM akadze.jobs"
    "   WHERE " + std::string(kRunningWithKeySql) + " GROUP BY limit_key) r"
    " LEFT JOIN akadze.limits own ON own.key = r.key"
    " LEFT JOIN akadze.limits star ON star.key = '*'"
    " WHERE own.key IS NOT NULL OR star.key IS NOT NULL"
    " ORDER BY r.n DESC, r.key LIMIT $1";

// ListHeldLimitKeys's statement, gated by the absence of a '*' row: the
// queues with queued jobs by a skip scan of jobs_claim_key_idx (one probe
// each), then each queue's distinct limit keys by a skip scan inside the
// queue (`limit_key > previous` stops before the queue's keyless jobs, which
// sort last, so jobs without a key are never read); the keys without a row
// of their own, each counted in the queues it has jobs in (up to $2 jobs per
// key; NULL: all).
constexpr const char* kHeldKeysSql =
    "WITH RECURSIVE queues(queue) AS ("
    "  (SELECT queue FROM akadze.jobs WHERE state = 'queued'"
    "      AND NOT EXISTS (SELECT 1 FROM akadze.limits WHERE key = '*')"
    "    ORDER BY queue LIMIT 1)"
    "  UNION ALL"
    "  SELECT (SELECT j.queue FROM akadze.jobs j WHERE j.state = 'queued' AND j.queue > q.queue"
    "          ORDER BY j.queue LIMIT 1)"
    "  FROM queues q WHERE q.queue IS NOT NULL),"
    " pairs(queue, limit_key) AS ("
    "  SELECT q.queue, (SELECT j.limit_key FROM akadze.jobs j WHERE j.state = 'queued' AND j.queue = q.queue"
    "                   AND j.limit_key IS NOT NULL ORDER BY j.limit_key LIMIT 1)"
    "  FROM queues q WHERE q.queue IS NOT NULL"
    "  UNION ALL"
    "  SELECT p.queue, (SELECT j.limit_key FROM akadze.jobs j WHERE j.state = 'queued' AND j.queue = p.queue"
    "                   AND j.limit_key > p.limit_key ORDER BY j.limit_key LIMIT 1)"
    "  FROM pairs p WHERE p.limit_key IS NOT NULL),"
    " held AS ("
    "  SELECT p.limit_key AS key, array_agg(p.queue) AS queues FROM pairs p"
    "  WHERE p.limit_key IS NOT NULL"
    "    AND NOT EXISTS (SELECT 1 FROM akadze.limits l WHERE l.key = p.limit_key) GROUP BY p.limit_key)"
    " SELECT key, n, count(*) OVER () FROM (SELECT h.key, (SELECT count(*) FROM (SELECT 1 FROM akadze.jobs j"
    "   WHERE j.state = 'queued' AND j.queue = ANY(h.queues) AND j.limit_key = h.key LIMIT $2) c) AS n"
    "  FROM held h) k"
    " ORDER BY n DESC, key LIMIT $1";

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
  pg::Result r = conn.exec(kHeldKeysSql, params);
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
