#include "claim/claim_transaction.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "claim/key_limits.h"
#include "pg/pg_error.h"
#include "pg/transaction.h"

namespace akadzed {

namespace {

// The ready predicate of SPEC §1 (the queue's pause is checked once per claim).
constexpr const char* kReady =
    "state = 'queued' AND run_at <= now() AND cancel_requested_at IS NULL"
    " AND (expires_at IS NULL OR expires_at > now())";

// Columns every read returns, in ReadyRow order.
constexpr const char* kRowColumns =
    "id, limit_key, priority, (EXTRACT(EPOCH FROM run_at) * 1000000)::int8 AS run_at_us";

// An IndexPosition's run_at as an exact timestamptz expression of parameter $n.
std::string Timestamp(int n) {
  return "('epoch'::timestamptz + $" + std::to_string(n) + "::int8 * interval '1 microsecond')";
}

std::vector<ReadyRow> ToRows(const pg::Result& r) {
  std::vector<ReadyRow> rows;
  rows.reserve(static_cast<std::size_t>(r.rows()));
  for (int i = 0; i < r.rows(); ++i) {
    ReadyRow row;
    row.id = r.int64(i, 0);
    row.limit_key = r.optional_text(i, 1);
    row.priority = static_cast<std::int32_t>(r.int64(i, 2));
    row.run_at_us = r.int64(i, 3);
    row.effective = row.priority;
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<ReadyRow> ReadWindow(pg::Transaction& tx, const std::string& queue,
                                 const WindowRead& read) {
  static const std::string skip =
      " AND (limit_key IS NULL OR limit_key <> ALL($2::text[]))"
      " AND (NOT $3::bool OR limit_key IS NOT NULL)";
  pg::Params params;
  params.add(queue).add_array(read.skip_keys).add(read.skip_null_key).add(read.limit);
  std::string sql;
  if (!read.after) {
    sql = std::string("SELECT ") + kRowColumns + " FROM akadze.jobs WHERE queue = $1 AND " +
          kReady + skip + " ORDER BY priority DESC, run_at, id LIMIT $4";
  } else {
    // Keyset continuation in two index ranges: the rest of the cursor's
    // priority level, then the lower levels.
    params.add(std::int64_t{read.after->priority})
        .add(read.after->run_at_us)
        .add(read.after->id);
    const std::string inner = std::string("SELECT id, limit_key, priority, run_at FROM akadze.jobs"
                                          " WHERE queue = $1 AND ") +
                              kReady + skip;
    sql = std::string("SELECT ") + kRowColumns + " FROM ((" + inner +
          " AND priority = $5 AND (run_at, id) > (" + Timestamp(6) +
          ", $7) ORDER BY run_at, id LIMIT $4) UNION ALL (" + inner +
          " AND priority < $5 ORDER BY priority DESC, run_at, id LIMIT $4)) w"
          " ORDER BY priority DESC, run_at, id LIMIT $4";
  }
  return ToRows(tx.exec(sql, params));
}

std::vector<ReadyRow> ReadCatchUp(pg::Transaction& tx, const std::string& queue,
                                  const CatchUpRead& read) {
  pg::Params params;
  params.add(queue).add(read.limit_key);
  IndexPosition after = read.after.value_or(IndexPosition{});
  IndexPosition through = read.through.value_or(IndexPosition{});
  params.add(!read.after.has_value())
      .add(std::int64_t{after.priority})
      .add(after.run_at_us)
      .add(after.id)
      .add(!read.through.has_value())
      .add(std::int64_t{through.priority})
      .add(through.run_at_us)
      .add(through.id);
  std::string sql = std::string("SELECT ") + kRowColumns +
                    " FROM akadze.jobs WHERE queue = $1 AND " + kReady +
                    " AND (limit_key = $2::text OR ($2::text IS NULL AND limit_key IS NULL))"
                    " AND ($3::bool OR priority < $4 OR (priority = $4 AND (run_at, id) > (" +
                    Timestamp(5) +
                    ", $6)))"
                    " AND ($7::bool OR priority > $8 OR (priority = $8 AND (run_at, id) <= (" +
                    Timestamp(9) + ", $10)))" + " ORDER BY priority DESC, run_at, id";
  return ToRows(tx.exec(sql, params));
}

// The advisory lock key of a limit key.
constexpr const char* kKeyLock = "hashtextextended('akadze.limit_key:' || k, 0)";

struct KeyInfo {
  std::int64_t allowed = 0;
  bool records_starts = false;  // its applicable row caps starts
};

// Reads each key's applicable limits and counts its running jobs and starts.
// With `purge`, also deletes start marks older than the key's window (only
// under the key's lock).
std::unordered_map<std::string, KeyInfo> CountKeys(pg::Transaction& tx,
                                                   const std::vector<std::string>& keys,
                                                   bool purge) {
  static const std::string kWith =
      "WITH k AS ("
      "  SELECT u.key, l.key IS NOT NULL AS has_row, l.max_running, l.max_starts, l.starts_window"
      "  FROM unnest($1::text[]) AS u(key)"
      "  LEFT JOIN LATERAL (SELECT * FROM akadze.limits l WHERE l.key IN (u.key, '*')"
      "                     ORDER BY l.key = '*' LIMIT 1) l ON true)";
  static const std::string kPurge =
      ", purge AS ("
      "  DELETE FROM akadze.limit_starts s USING k"
      "  WHERE s.key = k.key AND (k.starts_window IS NULL OR s.started_at <= now() - k.starts_window))";
  static const std::string kSelect =
      " SELECT k.key, k.has_row, k.max_running, k.max_starts,"
      "  CASE WHEN k.max_running IS NOT NULL THEN (SELECT count(*) FROM akadze.jobs j"
      "       WHERE j.state = 'running' AND j.limit_key = k.key) ELSE 0 END,"
      "  CASE WHEN k.max_starts IS NOT NULL THEN (SELECT count(*) FROM akadze.limit_starts s"
      "       WHERE s.key = k.key AND s.started_at > now() - k.starts_window) ELSE 0 END"
      " FROM k";
  pg::Result r = tx.exec(kWith + (purge ? kPurge : "") + kSelect, pg::Params().add_array(keys));
  std::unordered_map<std::string, KeyInfo> info;
  for (int i = 0; i < r.rows(); ++i) {
    ApplicableLimits limits;
    limits.exists = r.boolean(i, 1);
    limits.max_running = r.optional_int64(i, 2);
    limits.max_starts = r.optional_int64(i, 3);
    KeyCounts counts{r.int64(i, 4), r.int64(i, 5)};
    info[std::string(r.text(i, 0))] =
        KeyInfo{StartsAllowed(limits, counts), limits.exists && limits.max_starts.has_value()};
  }
  return info;
}

// Decides how many jobs each of `keys` may start in this claim.
//
// First a count without locks: a key that is held or at its limit there is
// skipped without being locked (a job finishing meanwhile is simply seen by a
// later claim, as if it had finished after this one). Keys that look free are
// locked, the first may wait when `may_wait`, the rest are try-locks, and
// counted again with a new statement, whose snapshot includes every claim
// that held a key's lock before us: no two claims see the same free slot. A
// key another claim holds gets allowed = 0.
std::unordered_map<std::string, KeyInfo> LockAndCountKeys(pg::Transaction& tx,
                                                          const std::vector<std::string>& keys,
                                                          bool* may_wait, int* locked_elsewhere) {
  std::unordered_map<std::string, KeyInfo> info = CountKeys(tx, keys, /*purge=*/false);
  std::vector<std::string> candidates;
  for (const std::string& key : keys) {
    if (info[key].allowed > 0) candidates.push_back(key);
  }
  std::vector<std::string> locked;
  if (*may_wait && !candidates.empty()) {
    tx.exec(std::string("SELECT pg_advisory_xact_lock(") + kKeyLock + ") FROM (SELECT $1::text AS k) x",
            pg::Params().add(candidates.front()));
    *may_wait = false;
    locked.push_back(candidates.front());
    candidates.erase(candidates.begin());
  }
  if (!candidates.empty()) {
    pg::Result r = tx.exec(std::string("SELECT k, pg_try_advisory_xact_lock(") + kKeyLock +
                               ") FROM unnest($1::text[]) WITH ORDINALITY AS u(k, n) ORDER BY n",
                           pg::Params().add_array(candidates));
    for (int i = 0; i < r.rows(); ++i) {
      std::string key(r.text(i, 0));
      if (r.boolean(i, 1)) {
        locked.push_back(std::move(key));
      } else {
        info[key] = KeyInfo{0, false};
        ++*locked_elsewhere;
      }
    }
  }
  if (locked.empty()) return info;
  // A new statement: its snapshot is taken after the locks were granted.
  for (auto& [key, value] : CountKeys(tx, locked, /*purge=*/true)) info[key] = value;
  return info;
}

}  // namespace

std::string RandomUuid() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uint64_t hi = rng();
  std::uint64_t lo = rng();
  hi = (hi & 0xFFFFFFFFFFFF0FFFULL) | 0x0000000000004000ULL;  // version 4
  lo = (lo & 0x3FFFFFFFFFFFFFFFULL) | 0x8000000000000000ULL;  // variant 10
  char buf[37];
  std::snprintf(buf, sizeof buf, "%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(hi >> 32),
                static_cast<unsigned>((hi >> 16) & 0xFFFF), static_cast<unsigned>(hi & 0xFFFF),
                static_cast<unsigned>(lo >> 48),
                static_cast<unsigned long long>(lo & 0xFFFFFFFFFFFFULL));
  return buf;
}

bool IsUuid(const std::string& text) {
  if (text.size() != 36) return false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (text[i] != '-') return false;
    } else if (!std::isxdigit(static_cast<unsigned char>(text[i]))) {
      return false;
    }
  }
  return true;
}

ClaimResult RunClaim(pg::Connection& conn, const ClaimRequest& request) {
  if (request.slots < 1) throw std::invalid_argument("slots must be at least 1");
  if (!request.worker_id.empty() && !IsUuid(request.worker_id)) {
    throw std::invalid_argument("worker id '" + request.worker_id + "' is not a UUID");
  }
  const auto started = std::chrono::steady_clock::now();
  ClaimResult result;
  result.worker_id = request.worker_id.empty() ? RandomUuid() : request.worker_id;

  pg::Transaction tx(conn);
  pg::Result head = tx.exec("SELECT EXISTS (SELECT 1 FROM akadze.queue_pauses WHERE queue = $1)",
                            pg::Params().add(request.queue));
  if (head.boolean(0, 0)) {
    result.paused = true;
    tx.rollback();
    result.elapsed_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    return result;
  }

  ClaimPlannerOptions options;
  options.mode = request.mode;
  options.slots = request.slots;
  ClaimPlanner planner(options);
  std::unordered_map<std::string, KeyInfo> keys;
  std::unordered_set<std::int64_t> locked_rows;
  bool holds_lock = false;

  std::vector<WindowRead> reads = planner.FirstReads();
  std::vector<CatchUpRead> catch_ups;
  PlanStep step;
  for (;;) {
    for (const CatchUpRead& c : catch_ups) {
      std::vector<ReadyRow> rows = ReadCatchUp(tx, request.queue, c);
      result.rows_read += static_cast<std::int64_t>(rows.size());
      planner.AddCatchUp(c, rows);
    }
    for (const WindowRead& w : reads) {
      std::vector<ReadyRow> rows = ReadWindow(tx, request.queue, w);
      ++result.windows;
      result.rows_read += static_cast<std::int64_t>(rows.size());
      planner.AddWindow(w, rows, static_cast<std::int64_t>(rows.size()) < w.limit);
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
                                         " AND queue = $2 AND ") +
                                 kReady + " FOR UPDATE SKIP LOCKED",
                             pg::Params().add_array(to_lock).add(request.queue));
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

  std::vector<std::string> start_marks;
  for (std::int64_t id : step.plan) {
    const ReadyRow* row = planner.Find(id);
    if (row->limit_key && keys[*row->limit_key].records_starts) start_marks.push_back(*row->limit_key);
  }

  if (!step.plan.empty()) {
    pg::Params params;
    params.add_array(step.plan).add(result.worker_id).add_array(start_marks);
    pg::Result claimed = tx.exec(
        "WITH claimed AS ("
        "  UPDATE akadze.jobs SET state = 'running', run_count = run_count + 1,"
        "    worker_id = $2::uuid, started_at = now()"
        "  WHERE id = ANY($1::int8[])"
        "  RETURNING id, task, queue, limit_key, priority, attempt, max_attempts, run_count, args::text),"
        " marks AS (INSERT INTO akadze.limit_starts (key, started_at)"
        "           SELECT k, now() FROM unnest($3::text[]) AS k)"
        " SELECT * FROM claimed",
        params);
    std::unordered_map<std::int64_t, ClaimedJob> by_id;
    for (int i = 0; i < claimed.rows(); ++i) {
      ClaimedJob job;
      job.id = claimed.int64(i, 0);
      job.task = claimed.text(i, 1);
      job.queue = claimed.text(i, 2);
      job.limit_key = claimed.optional_text(i, 3);
      job.priority = static_cast<std::int32_t>(claimed.int64(i, 4));
      job.attempt = static_cast<std::int32_t>(claimed.int64(i, 5));
      job.max_attempts = static_cast<std::int32_t>(claimed.int64(i, 6));
      job.run_count = static_cast<std::int32_t>(claimed.int64(i, 7));
      job.args_json = claimed.text(i, 8);
      by_id.emplace(job.id, std::move(job));
    }
    for (std::int64_t id : step.plan) result.jobs.push_back(std::move(by_id.at(id)));
  }
  if (request.dry_run) {
    tx.rollback();
  } else {
    tx.commit();
  }
  result.elapsed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  return result;
}

}  // namespace akadzed
