// The reference claim of SPEC §2, written as one full-scan SQL query: rank the
// whole queue at once, drop jobs past their key's n, order by (turn if fair)
// then claim order, take `slots`. This is what akadze 0.5.0 ran; tests compare
// akadzed's windowed claim against it and the benchmark times it.
//
// It is deliberately independent of daemon/claim/: nothing here calls the
// planner or shares its SQL.
//
// Thread-safety: uses the connection it is given.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pg/connection.h"

namespace akadzed::test {

struct ReferenceClaimRequest {
  std::string queue;
  int slots = 1;
  bool fair = false;
  // Rows to treat as absent (locked by another transaction).
  std::vector<std::int64_t> absent_ids;
  // Aging interval in microseconds (SPEC §2's effective priority); nullopt: none.
  std::optional<std::int64_t> aging_us;
};

// The SQL text, parameters: $1 queue, $2 slots, $3 fair (bool), $4 absent ids
// (int8[]), $5 aging interval in seconds (numeric, NULL: no aging).
const std::string& ReferenceClaimSql();

// Runs the reference query and returns job ids in claim order. Evaluated at
// the statement's now(); run it in the same transaction as the claim under
// test (or right after it) so both see the same ready set.
std::vector<std::int64_t> ReferenceClaim(pg::Connection& conn, const ReferenceClaimRequest& request);

}  // namespace akadzed::test
