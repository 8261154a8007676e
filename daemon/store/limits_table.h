// Reads and writes of akadze.limits for the `akadzed limits` commands, and
// the limit keys in use for the metrics.
//
// Thread-safety: functions use the connection they are given.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pg/connection.h"

namespace akadzed {

struct LimitRow {
  std::string key;  // a limit key, or "*" for the default row
  std::optional<std::int64_t> max_running;
  std::optional<std::int64_t> max_starts;
  std::optional<std::int64_t> starts_window_us;
};

// Throws std::invalid_argument when the caps break the table's rules.
void ValidateLimit(const LimitRow& row);

// Inserts or replaces the row for row.key. Throws std::invalid_argument when
// the caps break the table's rules (max_running >= 1, max_starts >= 1,
// starts_window > 0, max_starts and starts_window together), before any SQL.
void SetLimit(pg::Connection& conn, const LimitRow& row);

// All rows, ordered by key.
std::vector<LimitRow> ListLimits(pg::Connection& conn);

// Deletes the row for `key`; returns false when there was none.
bool DeleteLimit(pg::Connection& conn, const std::string& key);

// A limit key with running jobs and an applicable akadze.limits row.
struct LimitKeyUse {
  std::string key;
  std::int64_t running = 0;
  std::optional<std::int64_t> max_running;  // the applicable row's cap, if any
};

// Limit keys with running jobs whose applicable akadze.limits row (own, else
// '*') exists, busiest first, at most `max_keys`; `*total` gets the number of
// such keys overall (left alone when there is none). Reads running jobs
// through jobs_running_key_xid_idx (kRunningWithKeySql).
std::vector<LimitKeyUse> ListLimitKeysInUse(pg::Connection& conn, std::size_t max_keys,
                                            std::int64_t* total);

// A limit key with queued jobs and no applicable akadze.limits row (neither
// its own nor '*'): the claim never starts its jobs (docs/claim.md), which
// shows only as lag, often from a mistyped limit_key.
struct HeldLimitKey {
  std::string key;
  std::int64_t queued = 0;  // its queued jobs, in every queue
  bool capped = false;      // more than the count cap: `queued` is the cap
};

// Held keys, most queued jobs first, at most `max_keys`; `*total` gets the
// number of held keys overall (left alone when there is none). With a '*'
// row no key is held and nothing is read. Otherwise one index probe per
// distinct (queue, limit_key) of queued jobs (a skip scan of
// jobs_claim_key_idx) and a count of each held key's queued jobs: never a
// scan of every queued job. `count_cap` > 0 counts at most count_cap + 1
// jobs per key and cuts each key's count at count_cap (`capped`); 0 counts
// them all.
std::vector<HeldLimitKey> ListHeldLimitKeys(pg::Connection& conn, std::size_t max_keys,
                                            std::int64_t* total, std::int64_t count_cap = 0);

}  // namespace akadzed
