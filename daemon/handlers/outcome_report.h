// The outcome report a shell handler may write to fd 3 (docs/handlers.md,
// "Reporting an outcome"): one JSON object such as {"result": ...} or
// {"outcome": "retry", "delay": "30s", "error": "...", "message": "..."},
// parsed into a JobOutcome or rejected with a one-line reason.
//
// Thread-safety: a pure function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/job_outcome.h"
#include "handlers/job_progress.h"

namespace akadzed {

// The most a handler may write to fd 3; the shell handler stops collecting
// there and reports the run with too_big.
inline constexpr std::size_t kMaxOutcomeReportBytes = 1 << 20;
// Deeper reports are refused before parsing (dump() recurses per level).
inline constexpr std::size_t kMaxOutcomeReportDepth = 512;
// The longest delay a report may ask for: 365 days.
inline constexpr std::int64_t kMaxOutcomeDelayUs = 365LL * 86'400 * 1'000'000;

struct OutcomeReport {
  bool present = false;     // the child wrote something other than whitespace
  std::string invalid;      // non-empty: why the report is rejected (one line)
  bool explicit_kind = false;
  JobOutcome outcome;       // kind (kSuccess unless explicit), result, delay, error, message
};

// Parses what the handler wrote to fd 3. `too_big`: it wrote more than
// kMaxOutcomeReportBytes (and `text` was dropped). Only whitespace (or
// nothing) is no report: present = false. Never throws except bad_alloc.
OutcomeReport ParseOutcomeReport(std::string_view text, bool too_big);

// Deepest nesting of arrays and objects in JSON text, strings skipped: a
// text deeper than kMaxOutcomeReportDepth is refused before it is parsed
// (a parsed document is destroyed and dumped recursively).
std::size_t JsonNestingDepth(std::string_view text);

// One line of fd 3 (without its newline): false when it is not a progress
// line (not by itself a JSON object, an empty one, or one with a key other
// than "progress" and "meta": then it belongs to the outcome report). True
// for a progress line, with `*report` filled, or `*invalid` saying why it
// is refused (docs/handlers.md, "Reporting progress").
bool ParseProgressLine(std::string_view line, ProgressReport* report, std::string* invalid);

}  // namespace akadzed
