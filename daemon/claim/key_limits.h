// How many more jobs one limit key may start in a claim (SPEC §2 "Limits").
//
// Pure arithmetic over the key's applicable limits row and its counts; the
// claim transaction reads those under the key's lock and hands the result to
// the ClaimPlanner.
//
// Thread-safety: pure functions and plain values.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>

namespace akadzed {

// "No cap": a key (or the NULL group) that may start any number of jobs.
inline constexpr std::int64_t kUnlimited = std::numeric_limits<std::int64_t>::max();

// The limits row that applies to a key: its own row, else the '*' row.
struct ApplicableLimits {
  bool exists = false;  // false: no own row and no '*' row: the key is held
  std::optional<std::int64_t> max_running;
  std::optional<std::int64_t> max_starts;
  std::optional<std::int64_t> starts_window_us;  // set exactly when max_starts is
};

// What the claim counted for the key after locking it.
struct KeyCounts {
  std::int64_t running = 0;  // running jobs with this key, in any queue
  std::int64_t starts = 0;   // starts of this key within the row's starts_window
};

// n = min(max_running - running, max_starts - starts), floor 0; a NULL cap is
// no cap; a key without an applicable row gets 0 (held). Returns kUnlimited
// when neither cap is set.
std::int64_t StartsAllowed(const ApplicableLimits& limits, const KeyCounts& counts);

}  // namespace akadzed
