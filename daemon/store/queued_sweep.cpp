#include "store/queued_sweep.h"

#include <optional>
#include <string>

#include <fmt/format.h>

#include "pg/params.h"
#include "pg/pg_error.h"
#include "pg/transaction.h"
#include "store/job_sql.h"

namespace akadzed {

const char* SweepReasonName(SweepReason reason) {
  return reason == SweepReason::kExpired ? "expired" : "cancel_requested";
}

namespace {

// $1 batch, $2 ids to leave alone, $3 only these ids (NULL: any). The
// Expired entry is also written by akadze.enqueue when it ends a dead holder
// of a unique_key (migrations/006_enqueue.sql): change both together. Each CTE
// reads its partial index in order; a job both cancel-requested and expired
// is in both and updated once.
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
      "  WHERE j.id = d.id AND j.state = 'queued'"
      "  RETURNING j.id, j.cancel_requested_at IS NOT NULL AS cancel_requested,"
      "   j.meta ->> 'traceparent' AS traceparent)"
      " SELECT id, cancel_requested, traceparent FROM swept ORDER BY id",
      AppendErrorSql("j.errors", "'Expired'",
                     "'expires_at ' || " + IsoTimestampSql("j.expires_at") +
                         " || ' passed before the job ran'"));
  return sql;
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
  const bool hooked = hooks && hooks->AnyFrom(JobState::kQueued);
  std::vector<std::int64_t> refused;        // by a hook, in this call
  std::vector<std::int64_t> left = exclude;  // $2: exclude and refused
  // One batch (or one job: `only`), with its hooks in its transaction; a
  // job a hook refuses is left out and the batch tried again without it.
  auto sweep = [&](const std::optional<std::int64_t>& only) {
    for (;;) {
      std::optional<pg::Transaction> tx;
      if (hooked) tx.emplace(conn);
      pg::Params params;
      params.add(batch).add_array(left);
      if (only) {
        params.add_array(std::vector<std::int64_t>{*only});
      } else {
        params.add(std::optional<std::string>());
      }
      pg::Result rows = conn.exec(SweepSql(), params);
      if (!tx) return ToSwept(rows);
      std::vector<std::int64_t> ids;
      for (int i = 0; i < rows.rows(); ++i) ids.push_back(rows.int64(i, 0));
      try {
        hooks->Fire(conn, JobState::kQueued, ids);
        tx->commit();
        return ToSwept(rows);
      } catch (const HookError& e) {
        tx->rollback();
        refused.push_back(e.job_id());
        left.push_back(e.job_id());
      }
    }
  };
  std::vector<SweptJob> swept;
  try {
    swept = sweep(std::nullopt);
  } catch (const pg::TransientError&) {
    throw;
  } catch (const pg::SqlError& e) {
    if (!pg::IsRowFaultSqlState(e.sqlstate())) throw;
    // A row made the statement fail for all: each sweepable job alone.
    pg::Result candidates = conn.exec(
        "(SELECT id FROM akadze.jobs WHERE state = 'queued' AND cancel_requested_at IS NOT NULL"
        "   AND id <> ALL($2::int8[]) ORDER BY id LIMIT $1::int)"
        " UNION"
        " (SELECT id FROM akadze.jobs WHERE state = 'queued' AND expires_at IS NOT NULL"
        "   AND expires_at <= now() AND id <> ALL($2::int8[]) ORDER BY expires_at, id LIMIT $1::int)"
        " ORDER BY id",
        pg::Params().add(batch).add_array(left));
    for (int i = 0; i < candidates.rows(); ++i) {
      const std::int64_t id = candidates.int64(i, 0);
      try {
        for (const SweptJob& job : sweep(id)) swept.push_back(job);
      } catch (const pg::TransientError&) {
        throw;
      } catch (const pg::SqlError& alone) {
        if (!pg::IsRowFaultSqlState(alone.sqlstate())) throw;
        if (skips) skips->unwritable.push_back(id);
      }
    }
  }
  if (skips) skips->refused.insert(skips->refused.end(), refused.begin(), refused.end());
  return swept;
}

}  // namespace akadzed
