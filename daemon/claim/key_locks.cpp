#include "claim/key_locks.h"

#include "claim/key_limits.h"

namespace akadzed {

namespace {

// The advisory lock key of a limit key.
constexpr const char* kKeyLock = "hashtextextended('akadze.limit_key:' || k, 0)";

}  // namespace

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

}  // namespace akadzed
