#include "support/reference_claim.h"

namespace akadzed::test {

// running(K) is spelled `(r.state = 'running') IS TRUE`, the predicate of
// jobs_running_key_xid_idx (migration 010): the same rows as `state =
// 'running'`, which no index of a key's running jobs serves since 010, so
// that spelling counted each key by reading every running job of the
// cluster (a whole differential run 7x slower). Only the spelling follows
// the daemon's; what is counted is this file's own.
const std::string& ReferenceClaimSql() {
  static const std::string sql = R"SQL(
WITH ready AS (
  SELECT j.id, j.limit_key, j.priority, j.run_at,
         CASE WHEN $5::numeric IS NULL THEN j.priority
              ELSE j.priority + GREATEST(0, FLOOR(EXTRACT(EPOCH FROM (now() - j.run_at)) / $5::numeric))
         END AS effective
  FROM akadze.jobs j
  WHERE j.queue = $1
    AND j.state = 'queued'
    AND j.run_at <= now()
    AND j.cancel_requested_at IS NULL
    AND (j.expires_at IS NULL OR j.expires_at > now())
    AND NOT EXISTS (SELECT 1 FROM akadze.queue_pauses p WHERE p.queue = $1)
    AND NOT (j.id = ANY($4::int8[]))
),
ranked AS (
  SELECT r.*,
         row_number() OVER (PARTITION BY r.limit_key ORDER BY r.effective DESC, r.run_at, r.id) AS turn
  FROM ready r
),
keys AS (
  SELECT DISTINCT limit_key AS key FROM ready WHERE limit_key IS NOT NULL
),
applicable AS (
  SELECT k.key,
         COALESCE(own.key, dflt.key) IS NOT NULL AS has_row,
         CASE WHEN own.key IS NOT NULL THEN own.max_running ELSE dflt.max_running END AS max_running,
         CASE WHEN own.key IS NOT NULL THEN own.max_starts ELSE dflt.max_starts END AS max_starts,
         CASE WHEN own.key IS NOT NULL THEN own.starts_window ELSE dflt.starts_window END AS starts_window
  FROM keys k
  LEFT JOIN akadze.limits own ON own.key = k.key
  LEFT JOIN akadze.limits dflt ON dflt.key = '*'
),
allowed AS (
  SELECT a.key,
         CASE WHEN NOT a.has_row THEN 0
              ELSE GREATEST(0, LEAST(
                COALESCE(a.max_running - (SELECT count(*) FROM akadze.jobs r
                                          WHERE (r.state = 'running') IS TRUE AND r.limit_key = a.key),
                         9223372036854775807),
                COALESCE(a.max_starts - (SELECT count(*) FROM akadze.limit_starts s
                                         WHERE s.key = a.key AND s.started_at > now() - a.starts_window),
                         9223372036854775807)))
         END AS n
  FROM applicable a
)
SELECT ranked.id
FROM ranked
LEFT JOIN allowed ON allowed.key = ranked.limit_key
WHERE ranked.limit_key IS NULL OR ranked.turn <= allowed.n
ORDER BY CASE WHEN $3::bool THEN ranked.turn ELSE 0 END,
         ranked.effective DESC, ranked.run_at, ranked.id
LIMIT $2
)SQL";
  return sql;
}

std::vector<std::int64_t> ReferenceClaim(pg::Connection& conn, const ReferenceClaimRequest& request) {
  pg::Result r = conn.exec(ReferenceClaimSql(), pg::Params()
                                                    .add(request.queue)
                                                    .add(std::int64_t{request.slots})
                                                    .add(request.fair)
                                                    .add_array(request.absent_ids)
                                                    .add(request.aging_us
                                                             ? std::optional<std::string>(
                                                                   std::to_string(*request.aging_us) + "e-6")
                                                             : std::nullopt));
  std::vector<std::int64_t> ids;
  for (int i = 0; i < r.rows(); ++i) ids.push_back(r.int64(i, 0));
  return ids;
}

}  // namespace akadzed::test
