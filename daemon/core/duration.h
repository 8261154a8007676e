// Durations as operators write them: "250ms", "30s", "5m", "1h30m", "2d".
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace akadzed {

// Parses a sequence of <integer><unit> parts (units: us, ms, s, m, h, d) into
// microseconds. Returns nullopt and sets *error (if given) to a one-line
// reason for anything else: no unit, unknown unit, overflow, empty text.
std::optional<std::int64_t> ParseDuration(std::string_view text, std::string* error = nullptr);

// Formats microseconds back into the shortest text ParseDuration accepts.
std::string FormatDuration(std::int64_t micros);

}  // namespace akadzed
