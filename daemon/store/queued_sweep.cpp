#include "store/queued_sweep.h"

#include <optional>
#include <string>

#include <fmt/format.h>

#include "pg/params.h"
#include "pg/pg_error.h"
#include "store/job_sql.h"
#include "store/lookup_plans.h"
#include "store/poison_rows.h"

namespace akadzed {

const char* SweepReasonName(SweepReason reason) {
  return reason == SweepReason::kExpired ? "expired" : "cancel_requested";
}

namespace {

// $1 batch, $2 ids to leave alone, $3 only these ids (NULL: any). The
// Expired entry is also written by akadze.enqueue when it ends a dead holder
// of a unique_key (migrations/006_enqueue.sql): change both together. Each CTE
// reads its partial index in order; a job both cancel-requested and expired
// is in both and updated once. The UPDATE finds its rows by id through
// jobs_pkey: `IS NOT FALSE` (the same rows, state being NOT NULL) implies no
// partial index's predicate. Spelled `state = 'queued'`, a plan read every
// entry of jobs_claim_key_idx to join them, and under a held horizon those
// are every job that was queued since: 168,000 buffers a sweep after 3
// minutes at 1,000 jobs/s (docs/claim.md, "Floors"). The plan settings
// (RunPlanned, not with hooks) keep the expired CTE on
// jobs_queued_expires_idx, the one index in its order: costed on live rows,
// a scan of a claim index and a sort looked as cheap.
const std::string& SweepSql() {
  static const std::string sql = fmt::format(
      "WITH cancel AS ("
      "  SELECT id FROM akadze.jobs WHERE state = 'queued' AND cancel_requested_at IS NOT NULL"
      "    AND id <> ALL($2::int8[]) AND ($3::int8[] IS NULL OR id = ANY($3::int8[]))"
      "  ORDER BY id LIMIT $1::int FOR UPDATE SKIP LOCKED),"
      " expired AS ("
      "  SELECT id FROM akadze.jobs WHERE state = 'queued' AND expires_at IS NOT NULL"
      "    AND expires_at <= now()"
      "    AND id <> ALL($2::int8[]) AND ($3::int8[] IS NULL OR id = ANY($3::int8[]))"
      "  ORDER BY expires_at, id LIMIT $1::int FOR UPDATE SKIP LOCKED),"
      " swept AS ("
      "  UPDATE akadze.jobs AS j SET state = 'cancelled', finished_at = now(),"
      "   errors = CASE WHEN j.cancel_requested_at IS NULL THEN {} ELSE j.errors END"
      "  FROM (SELECT id FROM cancel UNION SELECT id FROM expired) AS d"
      "  WHERE j.id = d.id AND (j.state = 'queued') IS NOT FALSE"
      "  RETURNING j.id, j.cancel_requested_at IS NOT NULL AS cancel_requested,"
      "   j.meta ->> 'traceparent' AS traceparent)"
      " SELECT id, cancel_requested, traceparent FROM swept ORDER BY id",
      AppendErrorSql("j.errors", "'Expired'",
                     "'expires_at ' || " + IsoTimestampSql("j.expires_at") +
                         " || ' passed before the job ran'"));
  return sql;
}

// `sql` as index lookups and without a sort (store/lookup_plans.h). In the
// hooks' transaction (`hooked`) it plans as the server says, as a hooked
// claim does: the settings would reach the hooks' own statements.
pg::Result RunPlanned(pg::Connection& conn, bool hooked, const std::string& sql, const pg::Params& params) {
  if (hooked) return conn.exec(sql, params);
  return ExecAsIndexLookups(conn, ", set_config('enable_sort', 'off', true)", sql, params);
}

std::vector<SweptJob> ToSwept(const pg::Result& rows) {
  std::vector<SweptJob> out;
  for (int i = 0; i < rows.rows(); ++i) {
    out.push_back({rows.int64(i, 0),
                   rows.boolean(i, 1) ? SweepReason::kCancelRequested : SweepReason::kExpired,
                   rows.optional_text(i, 2)});
  }
  return out;
}

}  // namespace

std::vector<SweptJob> SweepQueuedJobs(pg::Connection& conn, int batch,
                                      const TransitionListener* hooks,
                                      const std::vector<std::int64_t>& exclude, SweepSkips* skips) {
  std::vector<std::int64_t> refused;  // by a hook, in this call
  const bool hooked = MayFire(hooks, JobState::kQueued);  // as RunWithHooks decides
  // One batch (or one job: `only`), with its hooks in its transaction; a
  // job a hook refuses is left out and the batch tried again without it.
  auto sweep = [&](const std::optional<std::int64_t>& only) {
    return ToSwept(RunWithHooks(conn, hooks, JobState::kQueued, refused, [&] {
      std::vector<std::int64_t> left = exclude;  // $2: exclude and refused
      left.insert(left.end(), refused.begin(), refused.end());
      pg::Params params;
      params.add(batch).add_array(left);
      if (only) {
        params.add_array(std::vector<std::int64_t>{*only});
      } else {
        params.add(std::optional<std::string>());
      }
      return RunPlanned(conn, hooked, SweepSql(), params);
    }));
  };
  std::vector<SweptJob> swept;
  // A row made the statement fail for all: each sweepable job alone.
  IsolatePoisonRows(
      [&] { swept = sweep(std::nullopt); },
      [&] {
        std::vector<std::int64_t> left = exclude;
        left.insert(left.end(), refused.begin(), refused.end());
        pg::Result candidates = RunPlanned(
            conn, false,
            "(SELECT id FROM akadze.jobs WHERE state = 'queued' AND cancel_requested_at IS NOT NULL"
            "   AND id <> ALL($2::int8[]) ORDER BY id LIMIT $1::int)"
            " UNION"
            " (SELECT id FROM akadze.jobs WHERE state = 'queued' AND expires_at IS NOT NULL"
            "   AND expires_at <= now() AND id <> ALL($2::int8[]) ORDER BY expires_at, id LIMIT $1::int)"
            " ORDER BY id",
            pg::Params().add(batch).add_array(left));
        std::vector<std::int64_t> ids;
        for (int i = 0; i < candidates.rows(); ++i) ids.push_back(candidates.int64(i, 0));
        return ids;
      },
      [&](std::int64_t id) {
        for (const SweptJob& job : sweep(id)) swept.push_back(job);
      },
      [&](std::int64_t id, const pg::RowFaultError&) {
        if (skips) skips->unwritable.push_back(id);
        return PoisonedRow::kLeave;
      });
  if (skips) skips->refused.insert(skips->refused.end(), refused.begin(), refused.end());
  return swept;
}

}  // namespace akadzed
