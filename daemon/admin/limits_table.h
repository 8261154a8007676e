// Reads and writes of akadze.limits for the `akadzed limits` commands.
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

}  // namespace akadzed
