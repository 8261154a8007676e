// Fuzz target: periodic/schedule.h's cron expressions. The input is the
// expression, optionally followed by a newline and a decimal Unix time to
// search from (without one, a few fixed instants are used). Properties:
//  - CronSchedule::Parse either succeeds or throws std::invalid_argument with
//    a one-line message starting with `cron `; the trimmed text parses again
//    to the same schedule;
//  - NextFireAfter(t) is a whole minute strictly after t, within the search
//    horizon, Matches() it, and no minute in between matches (checked for
//    the first kScanMinutes); searching from any instant in between finds the
//    same fire; nullopt only when no minute matches within the scan either;
//  - Matches(minute) agrees with NextFireAfter(minute - 1) == minute;
//  - Schedule::NextFireAfterUs agrees with NextFireAfter at microsecond scale.
#include <charconv>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "periodic/schedule.h"

namespace {

using akadzed::CronSchedule;

// The years 1..9999 (schedule.h: outside them NextFireAfter gives nullopt).
constexpr std::int64_t kMinInstant = -62135596800;
constexpr std::int64_t kMaxInstant = 253402300799;
// How many minutes after the search start are checked one by one.
constexpr std::int64_t kScanMinutes = 1500;

std::int64_t FloorMinute(std::int64_t t) { return (t >= 0 ? t / 60 : (t - 59) / 60) * 60; }

std::string Describe(const CronSchedule& s, std::int64_t t) {
  return "cron '" + s.Text() + "' from " + std::to_string(t);
}

void CheckFrom(const CronSchedule& s, const CronSchedule& reparsed, std::int64_t t) {
  const std::optional<std::int64_t> next = s.NextFireAfter(t);
  FUZZ_CHECK(reparsed.NextFireAfter(t) == next, Describe(s, t) + ": re-parsed text differs");
  if (t < kMinInstant || t > kMaxInstant) {
    FUZZ_CHECK(!next, Describe(s, t) + ": a fire outside the years 1..9999");
    return;
  }
  if (next) {
    const std::string what = Describe(s, t) + " -> " + std::to_string(*next);
    FUZZ_CHECK(*next > t, what + ": not after the start");
    FUZZ_CHECK(*next % 60 == 0, what + ": not a whole minute");
    FUZZ_CHECK(*next - t <= CronSchedule::kSearchHorizonSeconds + 60, what + ": beyond the horizon");
    FUZZ_CHECK(*next <= kMaxInstant, what + ": after year 9999");
    FUZZ_CHECK(s.Matches(*next), what + ": Matches() is false for the fire");
    FUZZ_CHECK(s.Matches(*next + 59), what + ": Matches() is false later in the fire's minute");
    const std::int64_t middle = t + (*next - t) / 2;
    FUZZ_CHECK(s.NextFireAfter(middle) == next, what + ": searching from " + std::to_string(middle) +
                                                    " finds another fire");
    FUZZ_CHECK(s.NextFireAfter(*next - 1) == next, what + ": searching from fire-1 differs");
    const akadzed::Schedule schedule{s};
    FUZZ_CHECK(schedule.NextFireAfterUs(t * 1'000'000 + 999'999) == *next * 1'000'000,
               what + ": NextFireAfterUs disagrees");
  }
  // No minute strictly between t and the fire matches (scan a bounded prefix).
  const std::int64_t end = next ? *next : kMaxInstant + 1;
  std::int64_t minute = FloorMinute(t) + 60;
  for (std::int64_t i = 0; i < kScanMinutes && minute < end; ++i, minute += 60) {
    FUZZ_CHECK(!s.Matches(minute), Describe(s, t) + ": minute " + std::to_string(minute) +
                                       " matches but the next fire is " +
                                       (next ? std::to_string(*next) : std::string("none")));
  }
  // Matches() of the start's own minute agrees with a search from just before it.
  const std::int64_t own = FloorMinute(t);
  if (own - 1 >= kMinInstant) {
    FUZZ_CHECK(s.Matches(own) == (s.NextFireAfter(own - 1) == own),
               Describe(s, t) + ": Matches(" + std::to_string(own) + ") disagrees with NextFireAfter");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t newline = input.find('\n');
  const std::string_view text = input.substr(0, newline);

  std::optional<CronSchedule> schedule;
  try {
    schedule = CronSchedule::Parse(text);
  } catch (const std::invalid_argument& e) {
    const std::string_view message = e.what();
    FUZZ_CHECK(message.starts_with("cron "), std::string("message: ") + e.what());
    FUZZ_CHECK(akadzed::fuzz::IsOneLine(message), std::string("message not one line: ") + e.what());
    return 0;
  }
  std::optional<CronSchedule> reparsed;
  try {
    reparsed = CronSchedule::Parse(schedule->Text());
  } catch (const std::invalid_argument& e) {
    FUZZ_CHECK(false, "'" + schedule->Text() + "' does not parse again: " + e.what());
  }

  std::vector<std::int64_t> starts;
  if (newline != std::string_view::npos) {
    const std::string_view rest = input.substr(newline + 1);
    std::int64_t t = 0;
    const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), t);
    if (ec == std::errc() && end != rest.data()) starts.push_back(t);
  }
  if (starts.empty()) {
    // 1970, 2024-02-29 23:59:30, 2099-12-31 23:59, a negative instant (1900).
    starts = {0, 1709251170, 4102444740, -2208988800};
  }
  for (const std::int64_t t : starts) CheckFrom(*schedule, *reparsed, t);
  return 0;
}
