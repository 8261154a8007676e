#include "claim/key_locks.h"

#include <unordered_set>

#include "claim/key_limits.h"
#include "store/job_sql.h"

namespace akadzed {

namespace {

// The advisory lock key of a limit key.
constexpr const char* kKeyLock = "hashtextextended('akadze.limit_key:' || k, 0)";

}  // namespace

// The applicable limits row of each key of `keys_sql` (u.key), or NULLs.
std::string ApplicableLimitsSql(const std::string& keys_sql) {
  return "SELECT u.key, l.key IS NOT NULL AS has_row, l.max_running, l.max_starts, l.starts_window"
         " FROM (" + keys_sql + ") AS u(key)"
         " LEFT JOIN LATERAL (SELECT * FROM akadze.limits l WHERE l.key IN (u.key, '*')"
         "                    ORDER BY l.key = '*' LIMIT 1) l ON true";
}

std::string KeyCountsSql(const std::string& keys_sql, const std::string& floors_sql, const std::string& points_sql) {
  // The key's running rows (core/running_floor.h): without a
  // floor, all of them through jobs_running_key_xid_idx; with one, the rows
  // its count found, by id through jobs_pkey (`IS NOT FALSE` implies no
  // partial index's predicate), and the rows made running since, by a
  // range and by points of that index (a lookup per point: lateral, and
  // OFFSET 0 keeps it from being flattened into a join that reads the key's
  // entries to match them, which a plan did). The floors' jsonb is read once
  // per statement (an InitPlan) and each key's floor taken out of it once
  // (OFFSET 0: inlined into each arm, `->` copied the object once per use);
  // each arm's test of fl.has depends on the key's row alone, so the plan
  // runs only the arms that apply.
  const std::string of_key = std::string(" AND limit_key = k.key AND ") + kRunningWithKeySql;
  const std::string running_ids =
      "ARRAY(SELECT id FROM akadze.jobs WHERE NOT fl.has" + of_key +
      " UNION SELECT id FROM akadze.jobs WHERE fl.has" + of_key + " AND running_xid >= fl.from_xid"
      " UNION SELECT j.id FROM unnest(CASE WHEN fl.has THEN (SELECT " + points_sql + ") END) AS p(x)"
      "   CROSS JOIN LATERAL (SELECT id FROM akadze.jobs WHERE running_xid = p.x" + of_key + " OFFSET 0) j"
      " UNION SELECT id FROM akadze.jobs WHERE id = ANY(fl.pinned)"
      "   AND (state = 'running') IS NOT FALSE AND limit_key = k.key)";
  return "SELECT k.key, k.has_row, k.max_running, k.max_starts, cardinality(r.ids)::int8 AS running,"
         // A claim whose transaction is over a minute old counts every capped
         // key as full (see PurgeStartsSql).
         "  CASE WHEN k.max_starts IS NULL THEN 0"
         "       WHEN clock_timestamp() - now() >= interval '1 minute' THEN k.max_starts"
         "       ELSE (SELECT count(*) FROM akadze.limit_starts s"
         "       WHERE s.key = k.key AND s.started_at > now() - k.starts_window"
         "         AND s.started_at <= now() + k.starts_window + interval '1 minute') END AS starts,"
         "  r.ids, " + std::string(kFloorSnapshotSql) +
         " FROM (" + ApplicableLimitsSql(keys_sql) + ") k"
         " CROSS JOIN LATERAL (SELECT f IS NOT NULL AS has, (f ->> 'x')::xid8 AS from_xid,"
         "   ARRAY(SELECT jsonb_array_elements_text(f -> 'i')::int8) AS pinned"
         "   FROM (SELECT (SELECT " + floors_sql + ") -> k.key AS f) x OFFSET 0) fl"
         " CROSS JOIN LATERAL (SELECT CASE WHEN k.max_running IS NULL THEN '{}'::int8[] ELSE " + running_ids +
         " END AS ids) r";
}

KeyInfo KeyInfoAt(const pg::Result& r, int row, int first) {
  ApplicableLimits limits;
  limits.exists = r.boolean(row, first + 1);
  limits.max_running = r.optional_int64(row, first + 2);
  limits.max_starts = r.optional_int64(row, first + 3);
  KeyCounts counts{r.int64(row, first + 4), r.int64(row, first + 5)};
  return KeyInfo{StartsAllowed(limits, counts), limits.exists && limits.max_starts.has_value()};
}

void RecordRunningFloors(const pg::Result& r, int first, RunningFloors* floors) {
  if (floors == nullptr) return;
  std::optional<SnapshotXids> snapshot;
  for (int i = 0; i < r.rows(); ++i) {
    // No count here (a key the claim knew), or no running cap: nothing read.
    if (r.is_null(i, first) || r.is_null(i, first + 2)) continue;
    if (!snapshot) {
      snapshot = ParseSnapshot(r.text(i, first + 7));
      if (!snapshot) return;
    }
    RecordRunningFloor(*floors, std::string(r.text(i, first)), RunningFloorAfter(*snapshot, r.int64_array(i, first + 6)));
  }
}

std::string PurgeStartsSql(const std::string& keys_param) {
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
  // Only the marks of the last 10 seconds before that cutoff go: the older
  // ones an earlier claim's purge of the key deleted (a key claimed less
  // often than that keeps them a while), or pruning deletes (an hour past
  // the largest window, store/prune.cpp). The deleted ones stay in the
  // index as dead entries while a held horizon keeps them, and a purge
  // that read the key's marks from the first would step over every one of
  // them. Each range is an index range of its own; the marks are deleted
  // by ctid. A key with no start cap loses every mark.
  const std::string marks = "SELECT m.ctid FROM akadze.limit_starts m WHERE m.key = k.key";
  return "DELETE FROM akadze.limit_starts s WHERE s.ctid = ANY(ARRAY("
         "SELECT x.ctid FROM (" + ApplicableLimitsSql("SELECT unnest(" + keys_param + ")") + ") k"
         " CROSS JOIN LATERAL (" + marks +
         "   AND m.started_at >= CASE WHEN k.starts_window IS NULL THEN '-infinity'::timestamptz"
         "                       ELSE now() - k.starts_window - interval '70 seconds' END"
         "   AND m.started_at <= CASE WHEN k.starts_window IS NULL THEN 'infinity'::timestamptz"
         "                       ELSE now() - k.starts_window - interval '1 minute' END"
         " UNION ALL " + marks + " AND k.starts_window IS NOT NULL"
         "   AND m.started_at > now() + k.starts_window + interval '1 minute') x))";
}

std::unordered_map<std::string, KeyInfo> CountKeys(pg::Transaction& tx, const std::vector<std::string>& keys,
                                                   RunningFloors* floors) {
  static const std::string sql = KeyCountsSql("SELECT unnest($1::text[])", "$2::jsonb", "$3::xid8[]");
  const RunningFloorArgs args = RunningFloorsArgs(floors, &keys);
  pg::Result r = tx.exec(sql, pg::Params().add_array(keys).add(args.floors).add_array(args.points));
  RecordRunningFloors(r, 0, floors);
  std::unordered_map<std::string, KeyInfo> info;
  for (int i = 0; i < r.rows(); ++i) info[std::string(r.text(i, 0))] = KeyInfoAt(r, i, 0);
  return info;
}

// Locks `keys` and counts them again, in one round trip: the first lock
// may wait when `may_wait`, the rest are try-locks, and the count is a
// statement of its own after them, so its snapshot is taken after the locks
// were granted and includes every claim that held a key's lock before us:
// no two claims see the same free slot. The count covers every key; only
// those locked are believed. A key another claim holds gets allowed = 0.
KeyLockRound::KeyLockRound(std::vector<std::string> keys, bool may_wait, RunningFloors* floors)
    : keys_(std::move(keys)), may_wait_(may_wait), floors_(floors) {
  tried_.assign(keys_.begin() + (may_wait_ ? 1 : 0), keys_.end());
  first_.add(keys_.front());
  rest_.add_array(tried_);
  const RunningFloorArgs args = RunningFloorsArgs(floors_, &keys_);
  all_.add_array(keys_).add(args.floors).add_array(args.points);
}

int KeyLockRound::statement_count() const { return (may_wait_ ? 1 : 0) + (tried_.empty() ? 0 : 1) + 1; }

void KeyLockRound::AddStatements(std::vector<pg::PipelinedStatement>& out) const {
  static const std::string kWait =
      std::string("SELECT pg_advisory_xact_lock(") + kKeyLock + ") FROM (SELECT $1::text AS k) x";
  // The keys got go into akadzed.claim_keys as well (SpeculativeKeysSql):
  // a try-lock in a later statement could not tell a lock held since this
  // statement from one got just then, after that statement's snapshot.
  static const std::string kTry =
      std::string("WITH t AS MATERIALIZED (SELECT k, n, pg_try_advisory_xact_lock(") + kKeyLock +
      ") AS got FROM unnest($1::text[]) WITH ORDINALITY AS u(k, n)),"
      " c AS (SELECT set_config('akadzed.claim_keys',"
      "   (SELECT coalesce(json_agg(k) FILTER (WHERE got), '[]')::text FROM t), true))"
      " SELECT t.k, t.got FROM t CROSS JOIN c ORDER BY t.n";
  static const std::string kCount = KeyCountsSql("SELECT unnest($1::text[])", "$2::jsonb", "$3::xid8[]");
  if (may_wait_) out.push_back({kWait, &first_});
  if (!tried_.empty()) out.push_back({kTry, &rest_});
  out.push_back({kCount, &all_});
}

std::unordered_map<std::string, KeyInfo> KeyLockRound::Read(std::span<const pg::Result> results,
                                                            int* locked_elsewhere,
                                                            std::vector<std::string>* locked) const {
  std::unordered_map<std::string, KeyInfo> info;
  std::unordered_set<std::string> held(locked->begin(), locked->end());
  if (may_wait_) {
    held.insert(keys_.front());
    locked->push_back(keys_.front());
  }
  if (!tried_.empty()) {
    const pg::Result& r = results[may_wait_ ? 1 : 0];
    for (int i = 0; i < r.rows(); ++i) {
      std::string key(r.text(i, 0));
      if (r.boolean(i, 1)) {
        held.insert(key);
        locked->push_back(std::move(key));
      } else {
        ++*locked_elsewhere;
      }
    }
  }
  const pg::Result& counted = results[static_cast<std::size_t>(statement_count() - 1)];
  RecordRunningFloors(counted, 0, floors_);
  for (int i = 0; i < counted.rows(); ++i) {
    std::string key(counted.text(i, 0));
    if (held.contains(key)) info[key] = KeyInfoAt(counted, i, 0);
  }
  for (const std::string& key : keys_) info.try_emplace(key, KeyInfo{0, false});
  return info;
}

std::unordered_map<std::string, KeyInfo> LockAndCountKeys(pg::Transaction& tx,
                                                          const std::vector<std::string>& keys,
                                                          bool* may_wait, int* locked_elsewhere,
                                                          std::vector<std::string>* locked, RunningFloors* floors) {
  if (keys.empty()) return {};
  const KeyLockRound round(keys, *may_wait, floors);
  std::vector<pg::PipelinedStatement> statements;
  round.AddStatements(statements);
  std::vector<pg::Result> results = tx.pipeline(statements);
  *may_wait = false;
  return round.Read(results, locked_elsewhere, locked);
}

std::string SpeculativeKeysSql(const std::string& keys_param, const std::string& counts_param,
                               const std::string& waited_param, const std::string& marks_param,
                               const std::string& floors_param, const std::string& points_param) {
  // The allowance is StartsAllowed (key_limits.h) in SQL.
  return "SELECT coalesce(bool_and(h.held AND CASE WHEN c.has_row IS NOT TRUE THEN 0"
         "   ELSE GREATEST(LEAST(coalesce(c.max_running - c.running, 9223372036854775807),"
         "                       coalesce(c.max_starts - c.starts, 9223372036854775807)), 0) END >= p.n"
         // The start marks were decided on the row the count without locks
         // saw: a row changed since (a max_starts set or removed) fails the
         // check, or the claim would start jobs without marking them.
         "   AND (c.max_starts IS NOT NULL) = (p.key = ANY(" + marks_param + "))), true) AS ok,"
         " coalesce(array_agg(p.key) FILTER (WHERE h.held), '{}') AS held"
         " FROM unnest(" + keys_param + ", " + counts_param + ") AS p(key, n)"
         " CROSS JOIN LATERAL (SELECT p.key = " + waited_param + " IS TRUE"
         "   OR p.key IN (SELECT jsonb_array_elements_text(coalesce(nullif("
         "        current_setting('akadzed.claim_keys', true), ''), '[]')::jsonb)) AS held) h"
         " LEFT JOIN (" + KeyCountsSql("SELECT unnest(" + keys_param + ")", floors_param, points_param) + ") c ON c.key = p.key";
}

}  // namespace akadzed
