// Fuzz target: core/duration.h. Properties, for any input text:
//  - ParseDuration accepts only non-empty runs of digits and letters, gives
//    a value >= 0, and otherwise sets a one-line error;
//  - FormatDuration of an accepted value parses back to it, and is canonical
//    (formatting the re-parsed value gives the same text);
//  - parsing is additive: if a and b parse, a+b parses to their sum, or is
//    rejected exactly when the sum overflows;
//  - any int64 >= 0 (the input's first 8 bytes) survives format then parse,
//    and a negative one formats with '-' and does not parse.
#include <cctype>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "core/duration.h"
#include "fuzz_check.h"

namespace {

using akadzed::FormatDuration;
using akadzed::ParseDuration;

std::string Show(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) {
      out += c;
    } else {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return "'" + out + "'";
}

// Checks one text; returns its value when it parses.
std::optional<std::int64_t> CheckText(std::string_view text) {
  std::string error;
  const std::optional<std::int64_t> value = ParseDuration(text, &error);
  if (!value) {
    FUZZ_CHECK(!error.empty(), "rejected without a reason: " + Show(text));
    FUZZ_CHECK(akadzed::fuzz::IsOneLine(error), "reason is not one line: " + Show(error));
    FUZZ_CHECK(!ParseDuration(text).has_value(), "result depends on the error pointer");
    return std::nullopt;
  }
  FUZZ_CHECK(*value >= 0, "negative duration from " + Show(text));
  FUZZ_CHECK(!text.empty(), "empty text accepted");
  for (const char c : text) {
    FUZZ_CHECK(std::isalnum(static_cast<unsigned char>(c)), "accepted " + Show(text));
  }
  const std::string formatted = FormatDuration(*value);
  const std::optional<std::int64_t> again = ParseDuration(formatted);
  FUZZ_CHECK(again && *again == *value,
             Show(text) + " -> " + std::to_string(*value) + " -> " + formatted + " does not parse back");
  FUZZ_CHECK(FormatDuration(*again) == formatted, "not canonical: " + formatted);
  return value;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::optional<std::int64_t> whole = CheckText(text);

  // Additivity over a split chosen by the first byte.
  if (size > 0) {
    const std::size_t cut = data[0] % (size + 1);
    const std::optional<std::int64_t> a = ParseDuration(text.substr(0, cut));
    const std::optional<std::int64_t> b = ParseDuration(text.substr(cut));
    if (a && b) {
      const bool overflows = *a > std::numeric_limits<std::int64_t>::max() - *b;
      FUZZ_CHECK(overflows ? !whole.has_value() : whole.has_value() && *whole == *a + *b,
                 Show(text) + " split at " + std::to_string(cut) + ": " + std::to_string(*a) +
                     " + " + std::to_string(*b) + " != " +
                     (whole ? std::to_string(*whole) : std::string("rejected")));
    }
  }

  // Any microsecond count, through FormatDuration first.
  if (size >= sizeof(std::int64_t)) {
    std::int64_t micros;
    std::memcpy(&micros, data, sizeof micros);
    const std::string formatted = FormatDuration(micros);
    const std::optional<std::int64_t> back = ParseDuration(formatted);
    if (micros >= 0) {
      FUZZ_CHECK(back && *back == micros,
                 std::to_string(micros) + " -> " + formatted + " does not parse back");
    } else {
      FUZZ_CHECK(formatted.starts_with('-') && !back,
                 std::to_string(micros) + " -> " + formatted + " (negative) must not parse");
    }
  }
  return 0;
}
