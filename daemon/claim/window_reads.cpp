#include "claim/window_reads.h"

#include <algorithm>
#include <unordered_set>
#include <utility>

#include "pg/statement.h"
#include "store/job_sql.h"

namespace akadzed {

using pg::Statement;

namespace {

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
  return a + "id, " + a + "limit_key, " + a + "priority, " + MicrosSince2000Sql(a + "run_at") + " AS run_at_us, " +
         effective + " AS effective";
}


// The skip filter of a window.
std::string SkipFilter(Statement& st, const std::vector<std::string>& keys, bool skip_null) {
  std::string out;
  if (!keys.empty()) out += " AND (limit_key IS NULL OR limit_key <> ALL(" + st.bind_set(keys) + "::text[]))";
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

// `window_sql` (a read whose columns end with RowColumns(), after any
// leading ones) with the counts without locks of the keys it returns that
// `counts.known` does not hold, as kKeyCountColumns more columns (NULL on
// rows of known keys and of the NULL group), ordered by `order_by`.
std::string WithUnlockedCounts(Statement& st, const std::string& window_sql, const std::string& order_by,
                               const UnlockedCounts& counts) {
  std::vector<std::string> known_keys;
  if (counts.known) {
    known_keys.reserve(counts.known->size());
    for (const auto& [key, info] : *counts.known) known_keys.push_back(key);
  }
  const std::string known = st.bind_set(known_keys);
  const RunningFloorArgs floors = RunningFloorsArgs(counts.running);
  return "WITH w AS MATERIALIZED (" + window_sql + "), c AS (" +
         KeyCountsSql("SELECT DISTINCT limit_key FROM w WHERE limit_key IS NOT NULL AND limit_key <> ALL(" +
                          known + "::text[])",
                      st.bind(floors.floors) + "::jsonb", st.bind_array(floors.points) + "::xid8[]") +
         ") SELECT w.*, c.* FROM w LEFT JOIN c ON c.key = w.limit_key ORDER BY " + order_by;
}

// The counts WithUnlockedCounts() added to `r` (its rows' columns from
// `first`), into `counts`.
void TakeUnlockedCounts(const pg::Result& r, int first, UnlockedCounts& counts) {
  RecordRunningFloors(r, first, counts.running);
  for (int i = 0; i < r.rows(); ++i) {
    if (r.is_null(i, first)) continue;
    counts.counts.try_emplace(std::string(r.text(i, first)), KeyInfoAt(r, i, first));
  }
}

constexpr int kRowColumns = 5;  // RowColumns()

// One window of the single stream (no aging): the whole queue in index
// order, after `read.after` (nullopt: from the start), and, with a floor,
// past each floored level's floor: rows at or below a floor are the
// floor's own (ReadBelowFloor) and merged in by the reader. One index range
// per arm, so no arm steps over the entries below a floor: the rest of the
// cursor's level; then, level by level downwards, the levels between two
// floors (from their heads) and each floored level after its floor.
Statement WindowStatement(const ReadContext& ctx, const WindowRead& read, const ClaimFloor* floor,
                          const UnlockedCounts& counts) {
  Statement st;
  const std::string queue = st.bind(ctx.queue);
  const std::string limit = st.bind(read.limit);
  const std::string skip = SkipFilter(st, read.skip_keys, read.skip_null_key);
  const std::string from = " FROM akadze.jobs WHERE queue = " + queue + " AND " + kReadyJobSql + skip;
  const std::string inner = "SELECT *" + from;
  auto after_position = [&](const IndexPosition& p) {
    return " AND priority = " + st.bind(std::int64_t{p.priority}) + " AND (run_at, id) > (" +
           TimestampFromMicrosSql(st.bind(p.run_at_us)) + ", " + st.bind(p.id) + ") ORDER BY run_at, id LIMIT " + limit;
  };
  auto levels_between = [&](std::optional<std::int64_t> hi, std::optional<std::int64_t> lo) {
    std::string cond;
    if (hi) cond += " AND priority <= " + st.bind(*hi) + "::int";
    if (lo) cond += " AND priority >= " + st.bind(*lo) + "::int";
    return cond + " ORDER BY priority DESC, run_at, id LIMIT " + limit;
  };
  std::vector<std::string> arms;
  std::optional<std::int64_t> hi;  // the highest priority not covered yet (nullopt: no bound)
  if (read.after) {
    IndexPosition start = *read.after;
    if (const IndexPosition* f = floor ? floor->LevelFloor(start.priority) : nullptr; f && IndexBefore(start, *f)) {
      start = *f;
    }
    arms.push_back(inner + after_position(start));
    hi = std::int64_t{read.after->priority} - 1;
  }
  if (floor) {
    for (const IndexPosition& f : floor->levels) {
      if (hi && f.priority > *hi) continue;
      if (!hi || *hi > f.priority) arms.push_back(inner + levels_between(hi, std::int64_t{f.priority} + 1));
      arms.push_back(inner + after_position(f));
      hi = std::int64_t{f.priority} - 1;
    }
  }
  std::string sql;
  if (arms.empty()) {
    sql = "SELECT " + RowColumns(st, ctx) + from + " ORDER BY priority DESC, run_at, id LIMIT " + limit;
  } else {
    arms.push_back(inner + levels_between(hi, std::nullopt));
    sql = "SELECT " + RowColumns(st, ctx, "w") + " FROM (";
    for (std::size_t i = 0; i < arms.size(); ++i) sql += (i ? " UNION ALL (" : "(") + arms[i] + ")";
    sql += ") w ORDER BY w.priority DESC, w.run_at, w.id LIMIT " + limit;
  }
  st.sql = WithUnlockedCounts(st, sql, "w.priority DESC, w.run_at_us, w.id", counts);
  return st;
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
  const std::string ra = "(" + TimestampFromMicrosSql(st.bind(after.run_at_us)) + ", " + st.bind(after.id) + ")";
  std::vector<std::string> arms;
  if (through && through->priority == after.priority) {
    const std::string rx = "(" + TimestampFromMicrosSql(st.bind(through->run_at_us)) + ", " + st.bind(through->id) + ")";
    arms.push_back(base + " AND priority = " + pa + " AND (run_at, id) > " + ra + " AND (run_at, id) <= " +
                   rx + " ORDER BY run_at, id LIMIT " + limit);
  } else {
    arms.push_back(base + " AND priority = " + pa + " AND (run_at, id) > " + ra +
                   " ORDER BY run_at, id LIMIT " + limit);
    std::string lower = base + " AND priority <= " + pa + "::int - 1";
    if (through) {
      const std::string px = st.bind(std::int64_t{through->priority});
      const std::string rx = "(" + TimestampFromMicrosSql(st.bind(through->run_at_us)) + ", " + st.bind(through->id) + ")";
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
  std::vector<ReadyRow> starts = ToRows(tx.exec(st));
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
  pg::Result r = tx.exec(st);
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

// "300" or "0.25": microseconds as exact decimal seconds for numeric division.
std::string DecimalSeconds(std::int64_t micros) {
  std::string whole = std::to_string(micros / 1000000);
  std::string frac = std::to_string(micros % 1000000);
  frac = std::string(6 - frac.size(), '0') + frac;
  while (!frac.empty() && frac.back() == '0') frac.pop_back();
  return frac.empty() ? whole : whole + "." + frac;
}

}  // namespace

ReadContext MakeReadContext(const std::string& queue, std::optional<std::int64_t> aging_us) {
  return ReadContext{queue, aging_us ? DecimalSeconds(*aging_us) : ""};
}

WindowReader::WindowReader(pg::Transaction& tx, const ReadContext& ctx, double queued_rows, const ClaimFloor* floor,
                           std::vector<ReadyRow> below)
    : tx_(tx),
      ctx_(ctx),
      max_groups_(queued_rows < 0 ? kMaxKeyedGroups
                                  : std::min(kMaxKeyedGroups,
                                             static_cast<std::int64_t>(queued_rows / kRowsPerGroup))),
      floor_(floor && !floor->empty() ? floor : nullptr),
      below_(std::move(below)) {}

WindowReader::Window WindowReader::Read(const WindowRead& read, UnlockedCounts& counts) {
  if (!UseKeyed(read)) {
    const Statement st = WindowStatement(ctx_, read, floor_, counts);
    return FromResult(read, tx_.exec(st), counts);
  }
  Window w;
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
  last_window_ = w.rows;
  return w;
}

pg::Statement WindowReader::FirstStatement(const ReadContext& ctx, const WindowRead& read, const ClaimFloor* floor,
                                           const UnlockedCounts& counts) {
  return WindowStatement(ctx, read, floor && !floor->empty() ? floor : nullptr, counts);
}

WindowReader::Window WindowReader::FromResult(const WindowRead& read, const pg::Result& result,
                                             UnlockedCounts& counts) {
  Window w;
  w.rows = ToRows(result);
  TakeUnlockedCounts(result, kRowColumns, counts);
  w.exhausted = static_cast<std::int64_t>(w.rows.size()) < read.limit;
  if (floor_) MergeBelowFloor(read, below_, w.rows, w.exhausted);
  last_window_ = w.rows;
  return w;
}

bool WindowReader::UseKeyed(const WindowRead& read) {
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


// The priority levels present among the queue's queued rows, highest first,
// each with its first row in index order (ready or not): a skip scan over
// jobs_claim_idx, one index descent per level (each step asks for the first
// row below the previous level; `<= p - 1` rather than `< p`, which on the
// DESC column made each descent walk the previous level's entries).
pg::Statement FindLevelsStatement(const ReadContext& ctx) {
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
  return st;
}


// Windows of several level streams (aging) in one statement. A row is skipped
// only if every read skips its group: skipping less than allowed is safe.
std::vector<std::vector<ReadyRow>> ReadLevelWindows(pg::Transaction& tx, const ReadContext& ctx,
                                                    const std::vector<ReadyRow>& heads,
                                                    const std::vector<WindowRead>& reads,
                                                    UnlockedCounts& counts) {
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
           " AND (NOT s.has_after OR (run_at, id) > (" + TimestampFromMicrosSql("s.r") + ", s.i))"
           " ORDER BY run_at, id LIMIT s.lim) j";
  st.sql = WithUnlockedCounts(st, st.sql, "w.n, w.run_at_us, w.id", counts);
  pg::Result r = tx.exec(st);
  TakeUnlockedCounts(r, 1 + kRowColumns, counts);
  std::vector<std::vector<ReadyRow>> out(reads.size());
  std::vector<ReadyRow> rows = ToRows(r, 1);
  for (int i = 0; i < r.rows(); ++i) {
    out[static_cast<std::size_t>(r.int64(i, 0) - 1)].push_back(std::move(rows[static_cast<std::size_t>(i)]));
  }
  return out;
}

pg::Statement DeadEntriesStatement() {
  Statement st;
  st.sql = "SELECT (pg_stat_get_xact_tuples_returned('akadze.jobs_claim_idx'::regclass)"
           " - pg_stat_get_xact_tuples_fetched('akadze.jobs_claim_idx'::regclass))::int8";
  return st;
}

pg::Statement FloorSnapshotStatement() {
  Statement st;
  st.sql = "SELECT " + std::string(kFloorSnapshotSql) + ", " + kServerStartedSql + ", " + MicrosSince2000Sql("now()");
  return st;
}

std::string BelowFloorRowsSql(Statement& st, const std::string& queue, const ClaimFloor& floor, bool ready_only) {
  const SnapshotXids xids = ParseSnapshot(floor.snapshot).value_or(SnapshotXids{});
  const std::vector<std::string> in_progress = XidTexts(xids.in_progress);
  std::vector<std::int64_t> p, r, i;
  for (const IndexPosition& f : floor.levels) {
    p.push_back(f.priority);
    r.push_back(f.run_at_us);
    i.push_back(f.id);
  }
  // Each arm reads one index, and a generic plan has no other to choose
  // (job_sql.h): jobs_queued_xid_idx from xmax on and at each in-progress
  // transaction, jobs_pkey at each pinned id. OFFSET 0 keeps the lateral
  // subqueries lookups per value.
  const std::string by_xid = "SELECT id, limit_key, priority, run_at FROM akadze.jobs WHERE " +
                             std::string(ready_only ? kReadyByXidSql : "(state = 'queued') IS TRUE") +
                             " AND queue = " + queue;
  const std::string by_id = "SELECT id, limit_key, priority, run_at FROM akadze.jobs WHERE " +
                            std::string(ready_only ? kReadyByIdSql : "(state = 'queued') IS NOT FALSE") +
                            " AND (queue = " + queue + ") IS TRUE";
  return "SELECT w.id, w.limit_key, w.priority, w.run_at FROM ((" + by_xid + " AND queued_xid >= " +
         st.bind(std::to_string(xids.xmax)) + "::xid8) UNION (SELECT j.* FROM unnest(" +
         st.bind_array(in_progress) + "::xid8[]) AS x(xid) CROSS JOIN LATERAL (" + by_xid +
         " AND queued_xid = x.xid OFFSET 0) j) UNION (SELECT j.* FROM unnest(" + st.bind_array(floor.pinned) +
         "::int8[]) AS u(id) CROSS JOIN LATERAL (" + by_id + " AND id = u.id OFFSET 0) j)) w"
         " WHERE EXISTS (SELECT 1 FROM unnest(" + st.bind_array(p) + "::int[], " + st.bind_array(r) +
         "::int8[], " + st.bind_array(i) + "::int8[]) AS f(p, r, i)"
         " WHERE w.priority = f.p AND (w.run_at, w.id) <= (" + TimestampFromMicrosSql("f.r") + ", f.i))";
}

// The rows a floor names (claim_floor.h): queued and ready, at or below
// their level's floor, and either pinned or queued by a transaction the
// floor's snapshot does not see. Three small reads, their ids united,
// before the rows are ranked.
pg::Statement BelowFloorStatement(const ReadContext& ctx, const ClaimFloor& floor) {
  Statement st;
  const std::string queue = st.bind(ctx.queue);
  const std::string below = BelowFloorRowsSql(st, queue, floor, true);
  st.sql = "SELECT " + RowColumns(st, ctx, "w") + " FROM (" + below + ") w ORDER BY w.priority DESC, w.run_at, w.id";
  return st;
}

std::vector<ReadyRow> RowsFrom(const pg::Result& result) { return ToRows(result); }

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
              TimestampFromMicrosSql(st.bind(read.after->run_at_us)) + ", " + st.bind(read.after->id) + ")))";
  }
  if (read.through) {
    const std::string p = st.bind(std::int64_t{read.through->priority});
    st.sql += " AND (priority > " + p + " OR (priority = " + p + " AND (run_at, id) <= (" +
              TimestampFromMicrosSql(st.bind(read.through->run_at_us)) + ", " + st.bind(read.through->id) + ")))";
  }
  st.sql += " ORDER BY priority DESC, run_at, id";
  return ToRows(tx.exec(st));
}

}  // namespace akadzed
