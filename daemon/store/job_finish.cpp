#include "store/job_finish.h"

#include <algorithm>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>

#include "core/redact.h"
#include "pg/params.h"
#include "pg/transaction.h"
#include "store/job_sql.h"
#include "store/lookup_plans.h"

namespace akadzed {

namespace {

// The first `max_chars` characters of UTF-8 `text`.
std::string CutChars(const std::string& text, std::size_t max_chars) {
  std::size_t chars = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80 && chars++ == max_chars) {
      return text.substr(0, i);
    }
  }
  return text;
}

std::string StoredMessage(const std::string& message) {
  return CutChars(OneLine(RedactSecrets(message)), 500);
}

}  // namespace

std::int64_t RetryBackoffSeconds(std::int32_t attempt) {
  if (attempt <= 1) return 1;
  if (attempt > 9) return 300;
  return std::min<std::int64_t>(std::int64_t{1} << (attempt - 1), 300);
}

std::string NextStateSql(std::string_view kind) {
  // A job whose cancel was requested is never queued again: the claim skips
  // such jobs, so it would wait forever; it is cancelled instead. Counters
  // compare as int8: an attempt at int4's maximum (written by an
  // application) must not overflow the statement for the rows beside it.
  return fmt::format(
      "CASE {0} WHEN 'success' THEN 'succeeded' WHEN 'cancel' THEN 'cancelled'"
      " WHEN 'fail' THEN 'failed'"
      " WHEN 'retry' THEN CASE WHEN j.attempt::int8 + 1 >= j.max_attempts THEN 'failed'"
      "   WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled' ELSE 'queued' END"
      " ELSE CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled' ELSE 'queued' END END",
      kind);
}

std::vector<FinishResult> FinishJobs(pg::Connection& conn, const std::string& worker_id,
                                     const std::vector<FinishRequest>& requests,
                                     const TransitionListener* hooks, FinishPlan plan) {
  std::vector<FinishResult> results(requests.size());
  if (requests.empty()) return results;
  // A success of a request that keeps no succeeded job is a DELETE (no new
  // row version, no index entries), in the same statement as the UPDATE of
  // the others; the two get disjoint rows, each its own unnest (a CTE both
  // read would be materialized, and its estimate of a few rows led the
  // planner to a nested loop over every running job of the worker). Not
  // with hooks from `running`, which must see the job succeeded first: then
  // every row is updated, and the deleted ones deleted after the hooks.
  const bool hooked = MayFire(hooks, JobState::kRunning);
  const bool any_deleted = std::any_of(requests.begin(), requests.end(),
                                       [](const FinishRequest& r) { return r.DeletesJob(); });
  const bool delete_in_statement = any_deleted && !hooked;
  std::vector<std::int64_t> ids, run_counts, deleted_ids, deleted_run_counts;
  std::vector<std::string> kinds;
  std::vector<std::optional<std::int64_t>> delays;
  std::vector<std::optional<std::string>> outputs, errors, messages, meta_patches;
  for (const FinishRequest& r : requests) {
    if (delete_in_statement && r.DeletesJob()) {
      deleted_ids.push_back(r.job_id);
      deleted_run_counts.push_back(r.run_count);
      continue;
    }
    const JobOutcome& o = r.outcome;
    ids.push_back(r.job_id);
    run_counts.push_back(r.run_count);
    kinds.push_back(OutcomeKindName(o.kind));
    delays.push_back(o.delay_us);
    outputs.push_back(o.kind == OutcomeKind::kSuccess ? o.result_json : std::nullopt);
    bool has_error = !o.error.empty();
    errors.push_back(has_error ? std::optional<std::string>(o.error) : std::nullopt);
    messages.push_back(has_error ? std::optional<std::string>(StoredMessage(o.message))
                                 : std::nullopt);
    meta_patches.push_back(o.meta_patch);
  }
  // `(j.state = 'running') IS TRUE`: no partial index of running jobs
  // serves the statement, only jobs_pkey by the requests' ids. With
  // `state = 'running'` the plans read jobs_running_worker_idx at the
  // worker's id and filtered it: under a held MVCC horizon every job the
  // worker ever ran leaves a dead entry there that the statistics do not
  // count (13 ms a batch after 60 s at 1,000 jobs/s; docs/claim.md,
  // "Floors", and store/job_sql.h).
  static const std::string kNewState = NextStateSql("f.kind");
  static const std::string kUpdate = fmt::format(
      " UPDATE akadze.jobs AS j SET"
      "  state = {0},"
      "  attempt = LEAST(j.attempt::int8 + (f.kind IN ('retry', 'fail'))::int, 2147483647)::int,"
      "  snoozes = LEAST(j.snoozes::int8 + (f.kind = 'snooze')::int, 2147483647)::int,"
      "  run_at = CASE"
      "    WHEN f.kind = 'snooze' THEN now() + f.delay_us * interval '1 microsecond'"
      "    WHEN f.kind = 'retry' AND j.attempt::int8 + 1 < j.max_attempts THEN now() + COALESCE("
      "      f.delay_us * interval '1 microsecond',"
      "      least(power(2, least(j.attempt, 9)), 300) * interval '1 second')"
      "    ELSE j.run_at END,"
      "  result = CASE WHEN f.kind = 'success' THEN f.result::jsonb ELSE j.result END,"
      // Progress the run reported last (handlers/job_progress.h); a meta
      // that is not an object (an application's) is left as it is.
      "  meta = CASE WHEN f.meta_patch IS NULL OR jsonb_typeof(j.meta) <> 'object' THEN j.meta"
      "    ELSE j.meta || f.meta_patch::jsonb END,"
      "  errors = CASE WHEN f.error IS NULL THEN j.errors ELSE {1} END,"
      "  worker_id = CASE WHEN {0} = 'queued' THEN NULL ELSE j.worker_id END,"
      "  finished_at = CASE WHEN {0} = 'queued' THEN NULL ELSE now() END"
      " FROM unnest($2::bigint[], $3::bigint[], $4::text[], $5::bigint[],"
      "   $6::text[], $7::text[], $8::text[], $9::text[])"
      "   AS f(id, run_count, kind, delay_us, result, error, message, meta_patch)"
      " WHERE j.id = f.id AND j.run_count = f.run_count AND j.worker_id = $1::uuid"
      "   AND (j.state = 'running') IS TRUE"
      " RETURNING j.id, j.state, j.attempt,"
      // run_at may be infinite (a job claimed at '-infinity' keeps it on
      // success): now() - infinity would fail the finish of every row.
      "   CASE WHEN j.run_at <= now() THEN 0::float8 WHEN isfinite(j.run_at)"
      "     THEN extract(epoch FROM j.run_at - now())::float8 ELSE 'Infinity'::float8 END",
      kNewState, AppendErrorSql("j.errors", "f.error", "f.message"));
  // The DELETE of the requests whose jobs go: the worker id, the ids and
  // the run counts are the parameters named {0}, {1} and {2}.
  static const std::string kDelete =
      "DELETE FROM akadze.jobs AS j"
      " USING unnest({1}::bigint[], {2}::bigint[]) AS g(id, run_count)"
      " WHERE j.id = g.id AND j.run_count = g.run_count AND j.worker_id = {0}::uuid"
      "   AND (j.state = 'running') IS TRUE"
      " RETURNING j.id, 'succeeded'::text AS state, j.attempt, 0::float8";
  static const std::string kDeletingSql = "WITH d AS (" + fmt::format(fmt::runtime(kDelete), "$1", "$10", "$11") + "),"
                                          " u AS (" + kUpdate + ")"
                                          " SELECT * FROM d UNION ALL SELECT * FROM u";
  // A batch that only deletes (a queue that keeps no succeeded job, all of
  // whose jobs succeeded: the common batch there) runs the DELETE alone,
  // whose planning costs a fraction of the UPDATE's beside it.
  static const std::string kDeleteOnlySql = fmt::format(fmt::runtime(kDelete), "$1", "$2", "$3");
  const bool delete_only = delete_in_statement && ids.empty();
  pg::Params params;
  params.add(worker_id);
  if (!delete_only) {
    params.add_array(ids).add_array(run_counts).add_array(kinds);
    params.add_array(delays).add_array(outputs).add_array(errors).add_array(messages);
    params.add_array(meta_patches);
  }
  if (delete_in_statement) params.add_array(deleted_ids).add_array(deleted_run_counts);
  // With hooks the update and the hooks share a transaction; without, the
  // one statement is its own.
  std::optional<pg::Transaction> tx;
  if (hooked) tx.emplace(conn);
  // Planned for each batch unless the worker runs few jobs: the generic plan
  // of a prepared statement walks all of the worker's running jobs (the
  // header, FinishPlan).
  const std::string& sql = delete_only ? kDeleteOnlySql : delete_in_statement ? kDeletingSql : kUpdate;
  pg::Result rows;
  if (plan == FinishPlan::kPrepared && !tx) {
    // The prepared statement's generic plan (forced: no custom plans first),
    // made on the connection's first finish as index lookups (job_sql.h,
    // kIndexLookupPlansSql): in the transaction of the statement, sent with
    // it and its COMMIT.
    rows = ExecAsIndexLookups(conn, ", set_config('plan_cache_mode', 'force_generic_plan', true)", sql, params);
  } else {
    rows = plan == FinishPlan::kPrepared ? conn.exec(sql, params) : conn.exec_replanned(sql, params);
  }
  std::unordered_map<std::int64_t, int> row_of;
  for (int i = 0; i < rows.rows(); ++i) row_of[rows.int64(i, 0)] = i;
  if (tx) {
    std::vector<std::int64_t> applied;
    for (int i = 0; i < rows.rows(); ++i) applied.push_back(rows.int64(i, 0));
    hooks->Fire(conn, JobState::kRunning, applied);
    if (any_deleted) {
      // The hooks saw them succeed; now they go: the rows of such requests
      // this statement wrote as succeeded, fenced again (a hook may have
      // changed a job in this transaction).
      for (const FinishRequest& r : requests) {
        auto it = row_of.find(r.job_id);
        if (r.DeletesJob() && it != row_of.end() && rows.text(it->second, 1) == "succeeded") {
          deleted_ids.push_back(r.job_id);
          deleted_run_counts.push_back(r.run_count);
        }
      }
      if (!deleted_ids.empty()) {
        conn.exec("DELETE FROM akadze.jobs AS j USING unnest($1::bigint[], $2::bigint[]) AS g(id, run_count)"
                  " WHERE j.id = g.id AND j.run_count = g.run_count AND j.worker_id = $3::uuid"
                  "   AND j.state = 'succeeded'",
                  pg::Params().add_array(deleted_ids).add_array(deleted_run_counts).add(worker_id));
      }
    }
    tx->commit();
  }
  for (std::size_t k = 0; k < requests.size(); ++k) {
    FinishResult& out = results[k];
    out.job_id = requests[k].job_id;
    auto it = row_of.find(out.job_id);
    if (it == row_of.end()) continue;
    out.applied = true;
    out.state = JobStateFromText(rows.text(it->second, 1));
    out.attempt = static_cast<std::int32_t>(rows.int64(it->second, 2));
    out.run_in_s = rows.float64(it->second, 3);
  }
  return results;
}

}  // namespace akadzed
