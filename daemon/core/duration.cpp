#include "core/duration.h"
#include "core/redact.h"

#include <array>
#include <cctype>
#include <limits>

namespace akadzed {

namespace {

struct Unit {
  std::string_view name;
  std::int64_t micros;
};

constexpr std::array<Unit, 6> kUnits = {{{"us", 1},
                                         {"ms", 1000},
                                         {"s", 1000000},
                                         {"m", 60 * 1000000LL},
                                         {"h", 3600 * 1000000LL},
                                         {"d", 86400 * 1000000LL}}};

// `text` in single quotes for a message, cut to 80 bytes, with control bytes
// as \xNN: the reason must stay one line whatever the text holds (a YAML
// scalar can hold a newline; found by tests/fuzz/fuzz_duration.cpp).
std::string Quote(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "'";
  for (const char c : TruncateUtf8(text, 80)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      out += {'\\', 'x', kHex[u >> 4], kHex[u & 15]};
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::optional<std::int64_t> Fail(std::string* error, std::string message) {
  if (error != nullptr) *error = std::move(message);
  return std::nullopt;
}

}  // namespace

std::optional<std::int64_t> ParseDuration(std::string_view text, std::string* error) {
  if (text.empty()) return Fail(error, "empty duration");
  std::int64_t total = 0;
  std::size_t i = 0;
  const std::string quoted = Quote(text);
  while (i < text.size()) {
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) {
      return Fail(error, "invalid duration " + quoted + ": expected a number at position " +
                             std::to_string(i + 1) + " (examples: 500ms, 30s, 5m, 1h30m)");
    }
    std::int64_t number = 0;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
      if (number > (std::numeric_limits<std::int64_t>::max() - 9) / 10) {
        return Fail(error, "invalid duration " + quoted + ": too large");
      }
      number = number * 10 + (text[i] - '0');
      ++i;
    }
    std::size_t unit_start = i;
    while (i < text.size() && std::isalpha(static_cast<unsigned char>(text[i]))) ++i;
    std::string_view unit = text.substr(unit_start, i - unit_start);
    if (unit.empty()) {
      return Fail(error, "invalid duration " + quoted +
                             ": missing unit (use us, ms, s, m, h or d, e.g. 30s)");
    }
    const Unit* found = nullptr;
    for (const Unit& u : kUnits) {
      if (u.name == unit) found = &u;
    }
    if (found == nullptr) {
      return Fail(error, "invalid duration " + quoted + ": unknown unit '" + std::string(unit) +
                             "' (use us, ms, s, m, h or d)");
    }
    if (number > std::numeric_limits<std::int64_t>::max() / found->micros ||
        total > std::numeric_limits<std::int64_t>::max() - number * found->micros) {
      return Fail(error, "invalid duration " + quoted + ": too large");
    }
    total += number * found->micros;
  }
  return total;
}

std::string FormatDuration(std::int64_t micros) {
  if (micros == 0) return "0s";
  std::string out;
  if (micros < 0) {
    // Not parseable back (durations are never negative); shown for messages.
    out = "-";
    micros = micros == std::numeric_limits<std::int64_t>::min() ? std::numeric_limits<std::int64_t>::max()
                                                                : -micros;
  }
  for (auto it = kUnits.rbegin(); it != kUnits.rend(); ++it) {
    std::int64_t n = micros / it->micros;
    if (n == 0) continue;
    out += std::to_string(n) + std::string(it->name);
    micros -= n * it->micros;
  }
  return out;
}

}  // namespace akadzed
