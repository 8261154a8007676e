#include "claim/claim_transaction.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "claim/key_locks.h"
#include "claim/window_reads.h"
#include "pg/pg_error.h"
#include "pg/transaction.h"
#include "store/job_row.h"
#include "store/job_sql.h"

namespace akadzed {

void ValidateClaimRequest(const ClaimRequest& request) {
  if (request.slots < 1) throw std::invalid_argument("slots must be at least 1");
  if (!request.worker_id.empty() && !IsUuid(request.worker_id)) {
    throw std::invalid_argument("worker id '" + request.worker_id + "' is not a UUID");
  }
  if (request.aging_us && *request.aging_us <= 0) {
    throw std::invalid_argument("aging interval must be positive");
  }
}

namespace {

double MillisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// ClaimRequest::lease_span_us as a condition: $<first> the span (NULL: no
// fence), $<first + 1> the worker id. clock_timestamp(), not now(): a
// statement that reaches the server late is judged by when it runs.
std::string LeaseFenceSql(int first) {
  const std::string span = "$" + std::to_string(first) + "::int8";
  const std::string worker = "$" + std::to_string(first + 1) + "::uuid";
  return "(" + span + " IS NULL OR EXISTS (SELECT 1 FROM akadze.workers w WHERE w.id = " + worker +
         " AND w.heartbeat_at >= clock_timestamp() - " + span + " * interval '1 microsecond'))";
}

// The claim of ClaimInTransaction. `one_at_a_time`: first wait for the
// queue's claim lock, so that claims of one queue run one after another.
ClaimResult Claim(pg::Transaction& tx, const ClaimRequest& request, bool one_at_a_time) {
  ValidateClaimRequest(request);
  const auto started = std::chrono::steady_clock::now();
  auto finish = [&](ClaimResult& r) { r.elapsed_ms = MillisecondsSince(started); };
  ClaimResult result;
  result.worker_id = request.worker_id.empty() ? RandomUuid() : request.worker_id;

  // RunClaim's claims of one queue run one at a time: each waits here, before
  // it reads anything, for the queue's claim lock (a transaction-level
  // advisory lock on 'akadze.claim_queue:' || queue), held to its COMMIT.
  // Claims running side by side all read the same head of the queue; on the
  // seed's load scenario (10 claimers, 20 keys under limits) they spent their
  // time on rows and keys the others had just taken: 511 jobs/s against 919
  // one at a time (docs/benchmarks.md, "The seed's load scenario").
  // The lock is waited for first, holding nothing else, so it adds no
  // deadlock: a claim waits for a key lock only while holding no key or row
  // lock, and never waits for a queue lock after taking a key.
  //
  // Window reads are small index range scans; a parallel plan chosen on a
  // bad row estimate only adds worker start-up (tens of ms) to a claim.
  // Nor JIT: a million-row queue makes the estimates of a keyed read's
  // per-group ranges large enough for JIT, which then compiles for ~20 ms a
  // statement that runs in one. The planner's estimate of queued rows
  // (jobs_claim_idx's entries) comes along: it tells whether reading around
  // skipped groups can pay off.
  pg::Result head = tx.exec(
      "SELECT set_config('max_parallel_workers_per_gather', '0', true), set_config('jit', 'off', true),"
      " CASE WHEN $2 THEN pg_advisory_xact_lock(hashtextextended('akadze.claim_queue:' || $1, 0)) END,"
      " EXISTS (SELECT 1 FROM akadze.queue_pauses WHERE queue = $1),"
      " (SELECT reltuples::float8 FROM pg_class WHERE oid = 'akadze.jobs_claim_idx'::regclass),"
      " " + LeaseFenceSql(3),
      pg::Params().add(request.queue).add(one_at_a_time).add(request.lease_span_us).add(result.worker_id));
  if (!head.boolean(0, 5)) {
    result.fenced = true;
    finish(result);
    return result;
  }
  if (head.boolean(0, 3)) {
    result.paused = true;
    finish(result);
    return result;
  }

  const ReadContext ctx = MakeReadContext(request.queue, request.aging_us);
  // Without aging the queue is one stream; with aging each priority level is
  // a stream of its own (within a level, effective priority never increases).
  std::vector<ReadyRow> heads;  // with aging: each level's first row
  ClaimPlannerOptions options;
  options.mode = request.mode;
  options.slots = request.slots;
  if (request.aging_us) {
    heads = FindLevels(tx, ctx);
    if (heads.empty()) {
      finish(result);
      return result;
    }
    options.stream_count = static_cast<int>(heads.size());
    // A level is read only when the plan needs it, usually for a few rows:
    // its first window is `slots` rows, doubling from there.
    options.first_window = request.slots;
  }
  result.streams = options.stream_count;
  ClaimPlanner planner(options);
  std::unordered_map<std::string, KeyInfo> keys;
  std::unordered_set<std::int64_t> locked_rows;
  bool holds_lock = false;

  // With aging, each level's first row tells the planner where the level
  // starts in claim order: levels that cannot reach the plan are never read.
  std::vector<WindowRead> reads;
  if (request.aging_us) {
    for (std::size_t s = 0; s < heads.size(); ++s) planner.SetStreamStart(static_cast<int>(s), heads[s]);
  } else {
    reads = planner.FirstReads();
  }
  std::vector<CatchUpRead> catch_ups;
  WindowReader window_reader(tx, ctx, head.is_null(0, 4) ? -1.0 : head.float64(0, 4));
  PlanStep step;
  for (;;) {
    for (const CatchUpRead& c : catch_ups) {
      std::vector<ReadyRow> rows = ReadCatchUp(tx, ctx, c);
      result.rows_read += static_cast<std::int64_t>(rows.size());
      planner.AddCatchUp(c, rows);
    }
    if (!reads.empty()) {
      std::vector<WindowReader::Window> windows;
      if (request.aging_us) {
        for (std::vector<ReadyRow>& rows : ReadLevelWindows(tx, ctx, heads, reads)) {
          windows.push_back(WindowReader::Window{std::move(rows), false, false});
        }
        for (std::size_t i = 0; i < reads.size(); ++i) {
          windows[i].exhausted = static_cast<std::int64_t>(windows[i].rows.size()) < reads[i].limit;
        }
      } else {
        for (const WindowRead& w : reads) windows.push_back(window_reader.Read(w));
      }
      for (std::size_t i = 0; i < reads.size(); ++i) {
        ++result.windows;
        if (windows[i].keyed) ++result.keyed_windows;
        result.rows_read += static_cast<std::int64_t>(windows[i].rows.size());
        planner.AddWindow(reads[i], windows[i].rows, windows[i].exhausted);
      }
    }
    // Keys the keyed read enumerated: those held or at their limit in a
    // count without locks get n = 0 now, as they would when their rows are
    // seen, so the next window skips them before reading any of their rows.
    if (std::vector<std::string> enumerated = window_reader.TakeEnumeratedKeys(); !enumerated.empty()) {
      std::erase_if(enumerated, [&](const std::string& k) { return keys.contains(k); });
      for (auto& [key, info] : CountKeys(tx, enumerated, /*purge=*/false)) {
        if (info.allowed > 0) continue;
        keys[key] = KeyInfo{0, false};
        planner.SetKeyAllowed(key, 0);
      }
    }
    std::vector<std::string> fresh = planner.KeysNeedingState();
    if (!fresh.empty()) {
      bool may_wait = !holds_lock;
      auto info = LockAndCountKeys(tx, fresh, &may_wait, &result.keys_locked_elsewhere);
      if (!may_wait) holds_lock = true;
      for (const std::string& key : fresh) {
        auto it = info.find(key);
        KeyInfo ki = it == info.end() ? KeyInfo{} : it->second;
        keys[key] = ki;
        planner.SetKeyAllowed(key, ki.allowed);
      }
    }
    step = planner.Plan();
    if (!step.settled) {
      reads = std::move(step.reads);
      catch_ups = std::move(step.catch_ups);
      continue;
    }
    std::vector<std::int64_t> to_lock;
    for (std::int64_t id : step.plan) {
      if (!locked_rows.contains(id)) to_lock.push_back(id);
    }
    if (to_lock.empty()) break;
    ++result.lock_rounds;
    pg::Result got = tx.exec(std::string("SELECT id FROM akadze.jobs WHERE id = ANY($1::int8[])"
                                         " AND queue = $2 AND id <> ALL($3::int8[]) AND ") +
                                 kReadyJobSql + " FOR UPDATE SKIP LOCKED",
                             pg::Params().add_array(to_lock).add(request.queue).add_array(request.exclude_ids));
    holds_lock = true;
    for (int i = 0; i < got.rows(); ++i) locked_rows.insert(got.int64(i, 0));
    std::vector<std::int64_t> missing;
    for (std::int64_t id : to_lock) {
      if (!locked_rows.contains(id)) missing.push_back(id);
    }
    if (missing.empty()) break;
    planner.RemoveRows(missing);
    reads.clear();
    catch_ups.clear();
  }
  // Every row we locked must still be planned (removal never evicts a planned
  // row); anything else is a planner bug, and the claim must not commit.
  if (locked_rows.size() != step.plan.size()) {
    throw std::logic_error("claim planner lost a locked row; claim rolled back");
  }

  // The keys whose claimed jobs each leave a start mark.
  std::vector<std::string> start_marks;
  for (std::int64_t id : step.plan) {
    const ReadyRow* row = planner.Find(id);
    if (row->limit_key && keys[*row->limit_key].records_starts &&
        std::find(start_marks.begin(), start_marks.end(), *row->limit_key) == start_marks.end()) {
      start_marks.push_back(*row->limit_key);
    }
  }

  if (!step.plan.empty()) {
    // A planned row whose run_count or attempt is at int4's maximum cannot
    // run: its fencing token (run_count + 1) or its attempt number cannot be
    // written. It is failed here as Unprocessable, its counters untouched,
    // instead of failing the statement for the rows beside it (which wedged
    // the queue). It counts no start and holds no slot.
    pg::Params params;
    params.add_array(step.plan).add(result.worker_id).add_array(start_marks);
    // The fence again, as this statement runs: the lease may have run out
    // since the head (a cut between the two), and nothing is claimed then.
    params.add(request.lease_span_us).add(result.worker_id);
    pg::Result claimed = tx.exec(
        "WITH plan AS ("
        "  SELECT id, run_count < 2147483647 AND attempt < 2147483647 AS runnable"
        "  FROM akadze.jobs WHERE id = ANY($1::int8[])),"
        " claimed AS ("
        "  UPDATE akadze.jobs j SET"
        "    state = CASE WHEN plan.runnable THEN 'running' ELSE 'failed' END,"
        "    run_count = j.run_count + plan.runnable::int,"
        "    worker_id = CASE WHEN plan.runnable THEN $2::uuid ELSE j.worker_id END,"
        // now(), as the start marks: started_at is when the job counts as
        // started for its key's rate (clock_timestamp() here made the fault
        // suite's audit see 6-8 starts in windows of 5).
        "    started_at = CASE WHEN plan.runnable THEN now() ELSE j.started_at END,"
        "    finished_at = CASE WHEN plan.runnable THEN j.finished_at ELSE now() END,"
        "    errors = CASE WHEN plan.runnable THEN j.errors ELSE " +
            AppendErrorSql("j.errors", "'Unprocessable'",
                           "CASE WHEN j.run_count = 2147483647 THEN 'run_count' ELSE 'attempt' END"
                           " || ' is at its maximum (2147483647): the job cannot run again'") +
            " END"
        "  FROM plan WHERE j.id = plan.id AND " + LeaseFenceSql(4) +
        "  RETURNING " + JobRowColumns(kJobRowForClaim, "j") + ", plan.runnable),"
        " marks AS (INSERT INTO akadze.limit_starts (key, started_at)"
        "           SELECT limit_key, now() FROM claimed"
        "           WHERE runnable AND limit_key = ANY($3::text[]))"
        " SELECT * FROM claimed",
        params);
    std::unordered_map<std::int64_t, ClaimedJob> by_id;
    const int runnable_column = JobRowColumnCount(kJobRowForClaim);
    for (int i = 0; i < claimed.rows(); ++i) {
      JobRow row = ReadJobRow(claimed, i, kJobRowForClaim);
      ClaimedJob job;
      job.id = row.id;
      job.task = std::move(row.task);
      job.queue = std::move(row.queue);
      job.limit_key = std::move(row.limit_key);
      if (!claimed.boolean(i, runnable_column)) {
        result.unprocessable.push_back(std::move(job));
        continue;
      }
      job.priority = row.priority;
      job.attempt = row.attempt;
      job.max_attempts = row.max_attempts;
      job.run_count = row.run_count;
      job.args_json = std::move(row.args_json);
      job.effective_priority = planner.Find(job.id)->effective;
      by_id.emplace(job.id, std::move(job));
    }
    for (std::int64_t id : step.plan) {
      if (auto it = by_id.find(id); it != by_id.end()) result.jobs.push_back(std::move(it->second));
    }
    // Every planned row is locked: only the fence leaves them all unchanged.
    result.fenced = claimed.rows() == 0;
  }
  finish(result);
  return result;
}

}  // namespace

ClaimResult ClaimInTransaction(pg::Transaction& tx, const ClaimRequest& request) {
  return Claim(tx, request, /*one_at_a_time=*/false);
}

ClaimResult RunClaim(pg::Connection& conn, const ClaimRequest& request) {
  ValidateClaimRequest(request);  // before BEGIN: a bad request costs no round trip
  const auto started = std::chrono::steady_clock::now();
  // The lock-then-recount rule needs each statement to see what claims that
  // held a key's lock before committed: READ COMMITTED, whatever the
  // role's or database's default isolation level is.
  pg::Transaction tx(conn, "BEGIN ISOLATION LEVEL READ COMMITTED");
  ClaimResult result = Claim(tx, request, /*one_at_a_time=*/true);
  if (request.before_commit && !request.dry_run && (!result.jobs.empty() || !result.unprocessable.empty())) {
    std::vector<std::int64_t> ids;
    for (const ClaimedJob& job : result.jobs) ids.push_back(job.id);
    for (const ClaimedJob& job : result.unprocessable) ids.push_back(job.id);
    request.before_commit(conn, ids);
  }
  if (request.dry_run) {
    tx.rollback();
  } else {
    tx.commit();
  }
  result.elapsed_ms = MillisecondsSince(started);  // the whole transaction, COMMIT included
  return result;
}

}  // namespace akadzed
