#include "claim/claim_transaction.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "claim/key_limits.h"
#include "claim/keyed_window.h"
#include "core/job_sql.h"
#include "pg/pg_error.h"
#include "pg/transaction.h"

namespace akadzed {

namespace {

// A statement under construction: bind() appends a parameter and returns its
// placeholder, so SQL and parameters cannot drift apart.
class Statement {
 public:
  template <typename T>
  std::string bind(const T& value) {
    params_.add(value);
    return "$" + std::to_string(params_.size());
  }
  template <typename T>
  std::string bind_array(const T& values) {
    params_.add_array(values);
    return "$" + std::to_string(params_.size());
  }
  std::string sql;
  const pg::Params& params() const { return params_; }

 private:
  pg::Params params_;
};

// What every read of one claim shares.
struct ReadContext {
  std::string queue;
  // The aging interval in seconds as exact decimal text; empty without aging.
  std::string aging_seconds;
};

// run_at as microseconds since 2000-01-01 UTC (PostgreSQL's own epoch), for
// the planner. PostgreSQL keeps a timestamptz as exactly that int8, so every
// finite value fits (counted from 1970, 294276 AD would not), and
// '-infinity' and 'infinity', which the schema accepts (docs/reliability.md,
// "Extreme values"), are the int8 extremes, as PostgreSQL stores them: they
// keep their order, and Timestamp() maps every value back exactly.
std::string RunAtMicros(const std::string& column) {
  // EXTRACT(EPOCH FROM a timestamptz) goes through a double and rounds far
  // from 2000; from the interval since 2000 it is exact.
  return "(CASE WHEN isfinite(" + column + ") THEN (EXTRACT(EPOCH FROM " + column +
         " - '2000-01-01 00:00:00+00'::timestamptz) * 1000000)::int8 WHEN " + column +
         " > now() THEN 9223372036854775807::int8 ELSE (-9223372036854775807 - 1)::int8 END)";
}

// The columns of a ReadyRow. The effective priority is SPEC §2's formula,
// evaluated by PostgreSQL at the claim transaction's now(). A job's age is
// counted from run_at held within [the earliest timestamptz, now()]: a
// '-infinity' run_at ages as if enqueued in 4714 BC, a future one (never
// ready, but read as a level's first row) is not aged; now() - infinity
// would fail the statement for every row beside it.
std::string RowColumns(Statement& st, const ReadContext& ctx, const std::string& alias = "") {
  const std::string a = alias.empty() ? "" : alias + ".";
  std::string effective = a + "priority::int8";
  if (!ctx.aging_seconds.empty()) {
    effective = "(" + a + "priority + GREATEST(0, FLOOR(EXTRACT(EPOCH FROM (now() - " +
                PastTimestampSql(a + "run_at") + ")) / " + st.bind(ctx.aging_seconds) + "::numeric)))::int8";
  }
  return a + "id, " + a + "limit_key, " + a + "priority, " + RunAtMicros(a + "run_at") + " AS run_at_us, " +
         effective + " AS effective";
}

// The exact timestamptz RunAtMicros() made the int8 held by `param` from.
std::string Timestamp(const std::string& param) {
  return "(CASE " + param + "::int8 WHEN 9223372036854775807 THEN 'infinity'::timestamptz"
         " WHEN -9223372036854775807 - 1 THEN '-infinity'::timestamptz"
         // Whole days and the microseconds left, on a timestamp without time
         // zone: exact (an interval times a number goes through a double), and
         // no time zone's daylight saving shifts a day.
         " ELSE ('2000-01-01 00:00:00'::timestamp + make_interval(days => (" + param +
         "::int8 / 86400000000)::int, secs => (" + param + "::int8 % 86400000000) / 1000000.0))"
         " AT TIME ZONE 'UTC' END)";
}

// The skip filter of a window.
std::string SkipFilter(Statement& st, const std::vector<std::string>& keys, bool skip_null) {
  std::string out;
  if (!keys.empty()) out += " AND (limit_key IS NULL OR limit_key <> ALL(" + st.bind_array(keys) + "::text[]))";
  if (skip_null) out += " AND limit_key IS NOT NULL";
  return out;
}

std::vector<ReadyRow> ToRows(const pg::Result& r, int first_column = 0) {
  std::vector<ReadyRow> rows;
  rows.reserve(static_cast<std::size_t>(r.rows()));
  for (int i = 0; i < r.rows(); ++i) {
    ReadyRow row;
    row.id = r.int64(i, first_column);
    row.limit_key = r.optional_text(i, first_column + 1);
    row.priority = static_cast<std::int32_t>(r.int64(i, first_column + 2));
    row.run_at_us = r.int64(i, first_column + 3);
    row.effective = r.int64(i, first_column + 4);
    rows.push_back(std::move(row));
  }
  return rows;
}

// One window of the single stream (no aging): the whole queue in index order.
std::vector<ReadyRow> ReadWindow(pg::Transaction& tx, const ReadContext& ctx, const WindowRead& read) {
  Statement st;
  const std::string queue = st.bind(ctx.queue);
  const std::string limit = st.bind(read.limit);
  const std::string skip = SkipFilter(st, read.skip_keys, read.skip_null_key);
  const std::string from = " FROM akadze.jobs WHERE queue = " + queue + " AND " + kReadyJobSql + skip;
  if (!read.after) {
    st.sql = "SELECT " + RowColumns(st, ctx) + from + " ORDER BY priority DESC, run_at, id LIMIT " + limit;
  } else {
    // Keyset continuation in two index ranges: the rest of the cursor's
    // priority level, then the lower levels.
    const std::string p = st.bind(std::int64_t{read.after->priority});
    const std::string r = st.bind(read.after->run_at_us);
    const std::string i = st.bind(read.after->id);
    const std::string inner = "SELECT *" + from;
    st.sql = "SELECT " + RowColumns(st, ctx, "w") + " FROM ((" + inner + " AND priority = " + p +
             " AND (run_at, id) > (" + Timestamp(r) + ", " + i + ") ORDER BY run_at, id LIMIT " +
             limit + ") UNION ALL (" + inner + " AND priority <= " + p + "::int - 1 ORDER BY priority DESC, run_at, id LIMIT " + limit +
             ")) w ORDER BY w.priority DESC, w.run_at, w.id LIMIT " + limit;
  }
  return ToRows(tx.exec(st.sql, st.params()));
}

// ---- Reading around skipped groups (keyed_window.h) ----

// A keyed read is tried when the groups a window skips made up at least this
// share of the stream's previous window: a filtered walk of jobs_claim_idx
// would then step over at least as many rows as it returns.
constexpr double kKeyedSkipShare = 0.5;
// Enumerating the queue's groups and counting their keys costs about as much
// per group as a filtered walk spends on this many rows (measured with
// bench/claim_bench: ~25 us per group, 0.2-0.5 us per row). A queue with
// more groups than its queued rows (as estimated) / this is read by filtered
// windows only, as is one with more than kMaxKeyedGroups.
constexpr double kRowsPerGroup = 32;
constexpr std::int64_t kMaxKeyedGroups = 10000;

// The ready rows of one group (`group_cond`, over akadze.jobs' columns) after
// `after` and up to `through` (nullopt: no bound), in claim order, at most
// `limit` (an SQL expression): one jobs_claim_key_idx range per priority
// part, so the scan never steps over rows outside the range.
std::string GroupRangeSql(Statement& st, const ReadContext& ctx, const std::string& group_cond,
                          const IndexPosition& after, const std::optional<IndexPosition>& through,
                          const std::string& limit) {
  const std::string base = "SELECT * FROM akadze.jobs WHERE queue = " + st.bind(ctx.queue) + " AND " +
                           group_cond + " AND " + kReadyJobSql;
  const std::string pa = st.bind(std::int64_t{after.priority});
  const std::string ra = "(" + Timestamp(st.bind(after.run_at_us)) + ", " + st.bind(after.id) + ")";
  std::vector<std::string> arms;
  if (through && through->priority == after.priority) {
    const std::string rx = "(" + Timestamp(st.bind(through->run_at_us)) + ", " + st.bind(through->id) + ")";
    arms.push_back(base + " AND priority = " + pa + " AND (run_at, id) > " + ra + " AND (run_at, id) <= " +
                   rx + " ORDER BY run_at, id LIMIT " + limit);
  } else {
    arms.push_back(base + " AND priority = " + pa + " AND (run_at, id) > " + ra +
                   " ORDER BY run_at, id LIMIT " + limit);
    std::string lower = base + " AND priority <= " + pa + "::int - 1";
    if (through) {
      const std::string px = st.bind(std::int64_t{through->priority});
      const std::string rx = "(" + Timestamp(st.bind(through->run_at_us)) + ", " + st.bind(through->id) + ")";
      lower += " AND priority >= " + px + "::int + 1";
      arms.push_back(base + " AND priority = " + px + " AND (run_at, id) <= " + rx +
                     " ORDER BY run_at, id LIMIT " + limit);
    }
    arms.push_back(lower + " ORDER BY priority DESC, run_at, id LIMIT " + limit);
  }
  std::string sql = "SELECT * FROM (";
  for (std::size_t i = 0; i < arms.size(); ++i) sql += (i ? " UNION ALL (" : "(") + arms[i] + ")";
  return sql + ") w ORDER BY w.priority DESC, w.run_at, w.id LIMIT " + limit;
}

// Each group with queued rows in the queue, as its first row in index order
// (ready or not): a skip scan over jobs_claim_key_idx, one descent per key
// and one for the NULL-key group, reading the index only. nullopt when there
// are more than `max_groups`.
std::optional<std::vector<ReadyRow>> EnumerateGroups(pg::Transaction& tx, const ReadContext& ctx,
                                                     std::int64_t max_groups) {
  Statement st;
  const std::string queue = st.bind(ctx.queue);
  const std::string columns = "limit_key, priority, run_at, id";
  st.sql = "WITH RECURSIVE starts AS ("
           "  (SELECT " + columns + " FROM akadze.jobs WHERE queue = " + queue +
           "   AND state = 'queued' AND limit_key IS NOT NULL"
           "   ORDER BY limit_key, priority DESC, run_at, id LIMIT 1)"
           "  UNION ALL"
           "  SELECT n.* FROM starts s CROSS JOIN LATERAL ("
           "    SELECT " + columns + " FROM akadze.jobs j WHERE j.queue = " + queue +
           "    AND j.state = 'queued' AND j.limit_key > s.limit_key"
           "    ORDER BY j.limit_key, j.priority DESC, j.run_at, j.id LIMIT 1) n)"
           " (SELECT " + RowColumns(st, ctx, "starts") + " FROM starts LIMIT " + st.bind(max_groups + 1) + ")"
           " UNION ALL"
           " (SELECT " + RowColumns(st, ctx, "j") + " FROM akadze.jobs j WHERE j.queue = " + queue +
           "  AND j.state = 'queued' AND j.limit_key IS NULL ORDER BY j.priority DESC, j.run_at, j.id LIMIT 1)";
  std::vector<ReadyRow> starts = ToRows(tx.exec(st.sql, st.params()));
  const auto keys = std::count_if(starts.begin(), starts.end(), [](const ReadyRow& r) { return r.limit_key.has_value(); });
  if (keys > max_groups) return std::nullopt;
  return starts;
}

// For each group (with its row limit), its ready rows after `after` up to
// `through`, in claim order: one statement for all of them.
std::vector<std::vector<ReadyRow>> ReadGroupRanges(pg::Transaction& tx, const ReadContext& ctx,
                                                   const std::vector<GroupRowsRead>& groups,
                                                   const IndexPosition& after,
                                                   const std::optional<IndexPosition>& through) {
  std::vector<std::string> keys;
  std::vector<std::int64_t> limits;
  std::optional<std::int64_t> null_limit;
  for (const GroupRowsRead& g : groups) {
    if (g.key) {
      keys.push_back(*g.key);
      limits.push_back(g.limit);
    } else {
      null_limit = g.limit;
    }
  }
  Statement st;
  std::vector<std::string> parts;
  if (!keys.empty()) {
    const std::string unnest = "unnest(" + st.bind_array(keys) + "::text[], " + st.bind_array(limits) +
                               "::int8[]) WITH ORDINALITY AS u(k, lim, n)";
    const std::string range = GroupRangeSql(st, ctx, "limit_key = u.k", after, through, "u.lim");
    parts.push_back("SELECT u.n, " + RowColumns(st, ctx, "g") + " FROM " + unnest +
                    " CROSS JOIN LATERAL (" + range + ") g");
  }
  if (null_limit) {
    const std::string range = GroupRangeSql(st, ctx, "limit_key IS NULL", after, through, st.bind(*null_limit));
    parts.push_back("SELECT 0::int8, " + RowColumns(st, ctx, "g") + " FROM (" + range + ") g");
  }
  for (std::size_t i = 0; i < parts.size(); ++i) st.sql += (i ? " UNION ALL " : "") + parts[i];
  st.sql = "SELECT * FROM (" + st.sql + ") x ORDER BY 1, priority DESC, run_at_us, id";
  pg::Result r = tx.exec(st.sql, st.params());
  // Group n (1-based, in `keys` order) or 0 (NULL) back to the caller's order.
  std::vector<std::size_t> slot_of_n(keys.size() + 1, 0);
  {
    std::size_t next_key = 0;
    for (std::size_t i = 0; i < groups.size(); ++i) {
      if (groups[i].key) {
        slot_of_n[++next_key] = i;
      } else {
        slot_of_n[0] = i;
      }
    }
  }
  std::vector<std::vector<ReadyRow>> out(groups.size());
  std::vector<ReadyRow> rows = ToRows(r, 1);
  for (int i = 0; i < r.rows(); ++i) {
    out[slot_of_n[static_cast<std::size_t>(r.int64(i, 0))]].push_back(std::move(rows[static_cast<std::size_t>(i)]));
  }
  return out;
}

// Reads the windows of the single stream (no aging): through jobs_claim_idx,
// or, when skipped groups would make that walk long, around them through
// jobs_claim_key_idx (KeyedWindow). Both return rows the planner treats the
// same: every ready row of a group not skipped, after the frontier and up to
// the last row returned.
class WindowReader {
 public:
  // `queued_rows`: PostgreSQL's estimate of the queued rows (of every queue),
  // negative when it has none; it bounds the groups worth enumerating.
  WindowReader(pg::Transaction& tx, const ReadContext& ctx, double queued_rows)
      : tx_(tx),
        ctx_(ctx),
        max_groups_(queued_rows < 0 ? kMaxKeyedGroups
                                    : std::min(kMaxKeyedGroups,
                                               static_cast<std::int64_t>(queued_rows / kRowsPerGroup))) {}

  struct Window {
    std::vector<ReadyRow> rows;
    bool exhausted = false;
    bool keyed = false;
  };

  Window Read(const WindowRead& read) {
    Window w;
    if (UseKeyed(read)) {
      w.keyed = true;
      std::vector<GroupKey> need = keyed_->GroupsNeedingHead(read);
      if (!need.empty()) {
        std::vector<GroupRowsRead> heads;
        for (GroupKey& key : need) heads.push_back(GroupRowsRead{std::move(key), 1});
        std::vector<std::vector<ReadyRow>> got = ReadGroupRanges(tx_, ctx_, heads, *read.after, std::nullopt);
        for (std::size_t i = 0; i < heads.size(); ++i) {
          keyed_->SetHead(heads[i].key, got[i].empty() ? std::nullopt : std::optional<ReadyRow>(got[i].front()));
        }
      }
      std::optional<KeyedRowsPlan> plan = keyed_->PlanRows(read);
      if (!plan) {
        w.exhausted = true;
      } else {
        std::vector<std::vector<ReadyRow>> got = ReadGroupRanges(tx_, ctx_, plan->groups, *read.after, plan->through);
        w.rows = keyed_->Merge(*plan, got);
      }
    } else {
      w.rows = ReadWindow(tx_, ctx_, read);
      w.exhausted = static_cast<std::int64_t>(w.rows.size()) < read.limit;
    }
    last_window_ = w.rows;
    return w;
  }

  // The queue's keys, once, when the first keyed read enumerated them (then
  // empty): the claim counts them ahead of their rows.
  std::vector<std::string> TakeEnumeratedKeys() { return std::exchange(enumerated_, {}); }

 private:
  // Whether `read` goes through KeyedWindow (enumerating the keys the first
  // time). Once a claim reads keyed, it stays keyed.
  bool UseKeyed(const WindowRead& read) {
    if (keyed_) return true;
    if (keyed_refused_ || max_groups_ < 1 || !read.after || last_window_.empty()) return false;
    if (read.skip_keys.empty() && !read.skip_null_key) return false;
    const std::unordered_set<std::string> skipped(read.skip_keys.begin(), read.skip_keys.end());
    std::size_t in_skipped = 0;
    for (const ReadyRow& r : last_window_) {
      if (r.limit_key ? skipped.contains(*r.limit_key) : read.skip_null_key) ++in_skipped;
    }
    if (static_cast<double>(in_skipped) < kKeyedSkipShare * static_cast<double>(last_window_.size())) {
      return false;
    }
    std::optional<std::vector<ReadyRow>> starts = EnumerateGroups(tx_, ctx_, max_groups_);
    if (!starts) {
      keyed_refused_ = true;
      return false;
    }
    for (const ReadyRow& start : *starts) {
      if (start.limit_key) enumerated_.push_back(*start.limit_key);
    }
    keyed_.emplace(*starts);
    return true;
  }

  pg::Transaction& tx_;
  const ReadContext& ctx_;
  std::optional<KeyedWindow> keyed_;
  const std::int64_t max_groups_;
  bool keyed_refused_ = false;
  std::vector<std::string> enumerated_;
  std::vector<ReadyRow> last_window_;
};

// The priority levels present among the queue's queued rows, highest first,
// each with its first row in index order (ready or not): a skip scan over
// jobs_claim_idx, one index descent per level (each step asks for the first
// row below the previous level; `<= p - 1` rather than `< p`, which on the
// DESC column made each descent walk the previous level's entries).
std::vector<ReadyRow> FindLevels(pg::Transaction& tx, const ReadContext& ctx) {
  Statement st;
  const std::string queue = st.bind(ctx.queue);
  st.sql = "WITH RECURSIVE heads AS ("
           "  (SELECT id, limit_key, priority, run_at FROM akadze.jobs"
           "   WHERE queue = " + queue + " AND state = 'queued'"
           "   ORDER BY priority DESC, run_at, id LIMIT 1)"
           "  UNION ALL"
           "  SELECT n.* FROM heads h CROSS JOIN LATERAL ("
           "    SELECT j.id, j.limit_key, j.priority, j.run_at FROM akadze.jobs j"
           "    WHERE j.queue = " + queue + " AND j.state = 'queued' AND j.priority <= h.priority - 1"
           "    ORDER BY j.priority DESC, j.run_at, j.id LIMIT 1) n)"
           " SELECT " + RowColumns(st, ctx, "heads") + " FROM heads ORDER BY heads.priority DESC";
  return ToRows(tx.exec(st.sql, st.params()));
}

// Windows of several level streams (aging) in one statement. A row is skipped
// only if every read skips its group: skipping less than allowed is safe.
std::vector<std::vector<ReadyRow>> ReadLevelWindows(pg::Transaction& tx, const ReadContext& ctx,
                                                    const std::vector<ReadyRow>& heads,
                                                    const std::vector<WindowRead>& reads) {
  std::vector<std::int64_t> level, after_run_at, after_id, limit;
  std::vector<std::string> has_after;
  std::vector<std::string> skip_keys = reads.front().skip_keys;
  bool skip_null = true;
  for (const WindowRead& w : reads) {
    level.push_back(heads[static_cast<std::size_t>(w.stream)].priority);
    has_after.push_back(w.after ? "t" : "f");
    after_run_at.push_back(w.after ? w.after->run_at_us : 0);
    after_id.push_back(w.after ? w.after->id : 0);
    limit.push_back(w.limit);
    std::vector<std::string> common;
    for (const std::string& k : skip_keys) {
      if (std::find(w.skip_keys.begin(), w.skip_keys.end(), k) != w.skip_keys.end()) common.push_back(k);
    }
    skip_keys = std::move(common);
    skip_null = skip_null && w.skip_null_key;
  }
  Statement st;
  const std::string queue = st.bind(ctx.queue);
  std::vector<std::optional<std::string>> has_after_opt(has_after.begin(), has_after.end());
  const std::string streams = "unnest(" + st.bind_array(level) + "::int[], " +
                              st.bind_array(has_after_opt) + "::bool[], " + st.bind_array(after_run_at) +
                              "::int8[], " + st.bind_array(after_id) + "::int8[], " +
                              st.bind_array(limit) + "::int8[]) WITH ORDINALITY AS s(p, has_after, r, i, lim, n)";
  const std::string skip = SkipFilter(st, skip_keys, skip_null);
  st.sql = "SELECT s.n, " + RowColumns(st, ctx, "j") + " FROM " + streams +
           " CROSS JOIN LATERAL (SELECT * FROM akadze.jobs WHERE queue = " + queue +
           " AND priority = s.p AND " + kReadyJobSql + skip +
           " AND (NOT s.has_after OR (run_at, id) > (" + Timestamp("s.r") + ", s.i))"
           " ORDER BY run_at, id LIMIT s.lim) j ORDER BY s.n, j.run_at, j.id";
  pg::Result r = tx.exec(st.sql, st.params());
  std::vector<std::vector<ReadyRow>> out(reads.size());
  std::vector<ReadyRow> rows = ToRows(r, 1);
  for (int i = 0; i < r.rows(); ++i) {
    out[static_cast<std::size_t>(r.int64(i, 0) - 1)].push_back(std::move(rows[static_cast<std::size_t>(i)]));
  }
  return out;
}

// The rows of one group the planner skipped and needs after all.
std::vector<ReadyRow> ReadCatchUp(pg::Transaction& tx, const ReadContext& ctx, const CatchUpRead& read) {
  Statement st;
  st.sql = "SELECT " + RowColumns(st, ctx) + " FROM akadze.jobs WHERE queue = " + st.bind(ctx.queue) +
           " AND " + kReadyJobSql;
  if (read.limit_key) {
    st.sql += " AND limit_key = " + st.bind(*read.limit_key);
  } else {
    st.sql += " AND limit_key IS NULL";
  }
  if (read.after) {
    const std::string p = st.bind(std::int64_t{read.after->priority});
    st.sql += " AND (priority < " + p + " OR (priority = " + p + " AND (run_at, id) > (" +
              Timestamp(st.bind(read.after->run_at_us)) + ", " + st.bind(read.after->id) + ")))";
  }
  if (read.through) {
    const std::string p = st.bind(std::int64_t{read.through->priority});
    st.sql += " AND (priority > " + p + " OR (priority = " + p + " AND (run_at, id) <= (" +
              Timestamp(st.bind(read.through->run_at_us)) + ", " + st.bind(read.through->id) + ")))";
  }
  st.sql += " ORDER BY priority DESC, run_at, id";
  return ToRows(tx.exec(st.sql, st.params()));
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
  // A mark is purged only a minute after it left its window. A claim counts
  // marks younger than ITS now() - window, and a claim that began earlier
  // may take a key's lock after one that began later and purged (found by
  // tests/faults/load_test.cpp: 6 starts in a window of 5). Purging at the
  // purger's now() - window deleted marks the earlier claim still had to
  // count. With the margin, a claim whose now() is less than a minute old
  // never misses one; an older claim (its transaction began over a minute
  // before this count) counts every capped key as full and starts nothing
  // of it.
  // A mark later than now() + window + 1 minute was not written by a claim
  // (each writes its own now(), and a claim's transaction is under a minute
  // old or it counts the key as full): an application wrote it, e.g. at
  // 'infinity', where it would count as a start for ever. It is not counted,
  // and purged like an old one.
  static const std::string kPurge =
      ", purge AS ("
      "  DELETE FROM akadze.limit_starts s USING k"
      "  WHERE s.key = k.key AND (k.starts_window IS NULL"
      "    OR s.started_at <= now() - k.starts_window - interval '1 minute'"
      "    OR s.started_at > now() + k.starts_window + interval '1 minute'))";
  static const std::string kSelect =
      " SELECT k.key, k.has_row, k.max_running, k.max_starts,"
      "  CASE WHEN k.max_running IS NOT NULL THEN (SELECT count(*) FROM akadze.jobs j"
      "       WHERE j.state = 'running' AND j.limit_key = k.key) ELSE 0 END,"
      "  CASE WHEN k.max_starts IS NULL THEN 0"
      "       WHEN clock_timestamp() - now() >= interval '1 minute' THEN k.max_starts"
      "       ELSE (SELECT count(*) FROM akadze.limit_starts s"
      "       WHERE s.key = k.key AND s.started_at > now() - k.starts_window"
      "         AND s.started_at <= now() + k.starts_window + interval '1 minute') END"
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

namespace {

// "300" or "0.25": microseconds as exact decimal seconds for numeric division.
std::string DecimalSeconds(std::int64_t micros) {
  std::string whole = std::to_string(micros / 1000000);
  std::string frac = std::to_string(micros % 1000000);
  frac = std::string(6 - frac.size(), '0') + frac;
  while (!frac.empty() && frac.back() == '0') frac.pop_back();
  return frac.empty() ? whole : whole + "." + frac;
}

}  // namespace

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

}  // namespace

namespace {

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

  ReadContext ctx{request.queue, request.aging_us ? DecimalSeconds(*request.aging_us) : ""};
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
        "  RETURNING j.id, j.task, j.queue, j.limit_key, j.priority, j.attempt, j.max_attempts, j.run_count,"
        "    CASE WHEN plan.runnable THEN j.args::text END, plan.runnable),"
        " marks AS (INSERT INTO akadze.limit_starts (key, started_at)"
        "           SELECT limit_key, now() FROM claimed"
        "           WHERE runnable AND limit_key = ANY($3::text[]))"
        " SELECT * FROM claimed",
        params);
    std::unordered_map<std::int64_t, ClaimedJob> by_id;
    for (int i = 0; i < claimed.rows(); ++i) {
      ClaimedJob job;
      job.id = claimed.int64(i, 0);
      job.task = claimed.text(i, 1);
      job.queue = claimed.text(i, 2);
      job.limit_key = claimed.optional_text(i, 3);
      if (!claimed.boolean(i, 9)) {
        result.unprocessable.push_back(std::move(job));
        continue;
      }
      job.priority = static_cast<std::int32_t>(claimed.int64(i, 4));
      job.attempt = static_cast<std::int32_t>(claimed.int64(i, 5));
      job.max_attempts = static_cast<std::int32_t>(claimed.int64(i, 6));
      job.run_count = static_cast<std::int32_t>(claimed.int64(i, 7));
      job.args_json = claimed.text(i, 8);
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
