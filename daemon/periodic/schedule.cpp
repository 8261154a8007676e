#include "periodic/schedule.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include <fmt/format.h>

#include "core/duration.h"

namespace akadzed {
namespace {

constexpr std::int64_t kSecondsPerDay = 86400;
// 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z.
constexpr std::int64_t kMinInstant = -62135596800;
constexpr std::int64_t kMaxInstant = 253402300799;

std::int64_t FloorDiv(std::int64_t a, std::int64_t b) {
  std::int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

struct CivilDate {
  std::int64_t year;
  int month;  // 1..12
  int day;    // 1..31
};

// Howard Hinnant's days_from_civil / civil_from_days (proleptic Gregorian).
std::int64_t DaysFromCivil(std::int64_t y, int m, int d) {
  y -= m <= 2 ? 1 : 0;
  const std::int64_t era = FloorDiv(y, 400);
  const std::int64_t yoe = y - era * 400;
  const std::int64_t mp = (m + 9) % 12;
  const std::int64_t doy = (153 * mp + 2) / 5 + d - 1;
  const std::int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

CivilDate CivilFromDays(std::int64_t z) {
  z += 719468;
  const std::int64_t era = FloorDiv(z, 146097);
  const std::int64_t doe = z - era * 146097;
  const std::int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const std::int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const std::int64_t mp = (5 * doy + 2) / 153;
  const int d = static_cast<int>(doy - (153 * mp + 2) / 5 + 1);
  const int m = static_cast<int>(mp < 10 ? mp + 3 : mp - 9);
  return CivilDate{yoe + era * 400 + (m <= 2 ? 1 : 0), m, d};
}

// 0 = Sunday; 1970-01-01 (day 0) was a Thursday.
int WeekdayFromDays(std::int64_t z) {
  return static_cast<int>(((z % 7) + 7 + 4) % 7);
}

// The lowest set bit at position >= from, or -1.
int NextBit(std::uint64_t bits, int from) {
  if (from >= 64) return -1;
  const std::uint64_t rest = bits & (~std::uint64_t{0} << from);
  return rest == 0 ? -1 : std::countr_zero(rest);
}

// Quotes text for an error message, keeping it on one line.
std::string Quote(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7f) {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsBlank(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsBlank(s.back())) s.remove_suffix(1);
  return s;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

struct FieldSpec {
  const char* name;
  int min;
  int max;  // highest value accepted in the text (7 for day-of-week)
  const std::array<const char*, 12>* names;  // names[i] is value names_base + i
  int names_base;
  int names_count;
};

constexpr std::array<const char*, 12> kMonthNames = {"jan", "feb", "mar", "apr", "may", "jun",
                                                     "jul", "aug", "sep", "oct", "nov", "dec"};
constexpr std::array<const char*, 12> kWeekdayNames = {"sun", "mon", "tue", "wed", "thu", "fri",
                                                       "sat", "",    "",    "",    "",    ""};

constexpr std::array<FieldSpec, 5> kFields = {{
    {"minute", 0, 59, nullptr, 0, 0},
    {"hour", 0, 23, nullptr, 0, 0},
    {"day-of-month", 1, 31, nullptr, 0, 0},
    {"month", 1, 12, &kMonthNames, 1, 12},
    {"day-of-week", 0, 7, &kWeekdayNames, 0, 7},
}};

class FieldParser {
 public:
  FieldParser(std::string_view expression, const FieldSpec& spec)
      : expression_(expression), spec_(spec) {}

  // Returns the bit set of the values of `field` (bit v for value v).
  std::uint64_t Parse(std::string_view field) const {
    std::uint64_t bits = 0;
    std::size_t start = 0;
    while (true) {
      const std::size_t comma = field.find(',', start);
      const std::string_view item =
          field.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
      if (item.empty()) Fail(fmt::format("empty list item in {}", Quote(field)));
      bits |= ParseItem(item);
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    return bits;
  }

 private:
  [[noreturn]] void Fail(const std::string& why) const {
    throw std::invalid_argument(fmt::format("cron {}: {}: {}", Quote(expression_), spec_.name, why));
  }

  std::uint64_t ParseItem(std::string_view item) const {
    std::string_view base = item;
    int step = 1;
    bool has_step = false;
    if (const std::size_t slash = item.find('/'); slash != std::string_view::npos) {
      base = item.substr(0, slash);
      const std::string_view step_text = item.substr(slash + 1);
      const std::optional<int> parsed = ParseNumber(step_text);
      if (!parsed) Fail(fmt::format("step {} in {} is not a number", Quote(step_text), Quote(item)));
      if (*parsed < 1) Fail(fmt::format("step {} in {} must be at least 1", *parsed, Quote(item)));
      step = *parsed;
      has_step = true;
    }
    int low = spec_.min;
    int high = spec_.max;
    if (base == "*") {
      // the whole range
    } else if (const std::size_t dash = base.find('-'); dash != std::string_view::npos) {
      if (dash == 0 || dash + 1 == base.size()) Fail(fmt::format("incomplete range {}", Quote(item)));
      low = ParseValue(base.substr(0, dash));
      high = ParseValue(base.substr(dash + 1));
      if (low > high) {
        Fail(fmt::format("range {} is reversed (the start must not exceed the end)", Quote(base)));
      }
    } else {
      low = ParseValue(base);
      high = has_step ? spec_.max : low;  // `a/n` means `a-max/n`
    }
    std::uint64_t bits = 0;
    for (int v = low; v <= high; v += step) bits |= std::uint64_t{1} << v;
    return bits;
  }

  // A number or a name, within the field's range.
  int ParseValue(std::string_view token) const {
    if (token.empty()) Fail("missing value");  // e.g. "/5"
    if (const std::optional<int> number = ParseNumber(token)) {
      if (*number < spec_.min || *number > spec_.max) {
        Fail(fmt::format("{} is out of range {}-{}", token, spec_.min, spec_.max));
      }
      return *number;
    }
    if (spec_.names != nullptr) {
      const std::string lower = Lower(token);
      for (int i = 0; i < spec_.names_count; ++i) {
        if (lower == (*spec_.names)[static_cast<std::size_t>(i)]) return spec_.names_base + i;
      }
      Fail(fmt::format("{} is not a number or a {} name", Quote(token),
                       spec_.names == &kMonthNames ? "month (JAN-DEC)" : "weekday (SUN-SAT)"));
    }
    Fail(fmt::format("{} is not a number", Quote(token)));
  }

  // Decimal digits only; values beyond 9999 are reported as out of range.
  std::optional<int> ParseNumber(std::string_view token) const {
    if (token.empty()) return std::nullopt;
    int value = 0;
    for (const char c : token) {
      if (c < '0' || c > '9') return std::nullopt;
      value = value * 10 + (c - '0');
      if (value > 9999) value = 9999;
    }
    return value;
  }

  std::string_view expression_;
  const FieldSpec& spec_;
};

std::optional<std::string_view> ExpandMacro(std::string_view text) {
  struct Macro {
    const char* name;
    const char* expansion;
  };
  static constexpr std::array<Macro, 7> kMacros = {{
      {"@hourly", "0 * * * *"},
      {"@daily", "0 0 * * *"},
      {"@midnight", "0 0 * * *"},
      {"@weekly", "0 0 * * 0"},
      {"@monthly", "0 0 1 * *"},
      {"@yearly", "0 0 1 1 *"},
      {"@annually", "0 0 1 1 *"},
  }};
  const std::string lower = Lower(text);
  for (const Macro& macro : kMacros) {
    if (lower == macro.name) return std::string_view(macro.expansion);
  }
  return std::nullopt;
}

}  // namespace

CronSchedule CronSchedule::Parse(std::string_view text) {
  const std::string_view trimmed = Trim(text);
  CronSchedule schedule;
  schedule.text_ = std::string(trimmed);
  if (trimmed.empty()) {
    throw std::invalid_argument(fmt::format("cron {}: empty expression", Quote(text)));
  }
  std::string_view body = trimmed;
  if (trimmed.front() == '@') {
    const std::optional<std::string_view> expansion = ExpandMacro(trimmed);
    if (!expansion) {
      throw std::invalid_argument(fmt::format(
          "cron {}: unknown macro {} (known: @hourly @daily @midnight @weekly @monthly @yearly "
          "@annually)",
          Quote(trimmed), Quote(trimmed)));
    }
    body = *expansion;
  }

  std::array<std::string_view, 5> fields;
  std::size_t count = 0;
  std::size_t pos = 0;
  while (pos < body.size()) {
    while (pos < body.size() && IsBlank(body[pos])) ++pos;
    if (pos >= body.size()) break;
    std::size_t end = pos;
    while (end < body.size() && !IsBlank(body[end])) ++end;
    if (count < fields.size()) fields[count] = body.substr(pos, end - pos);
    ++count;
    pos = end;
  }
  if (count != fields.size()) {
    throw std::invalid_argument(fmt::format(
        "cron {}: expected 5 fields (minute hour day-of-month month day-of-week), got {}",
        Quote(trimmed), count));
  }

  std::array<std::uint64_t, 5> bits{};
  for (std::size_t i = 0; i < fields.size(); ++i) {
    bits[i] = FieldParser(trimmed, kFields[i]).Parse(fields[i]);
  }
  schedule.minutes_ = bits[0];
  schedule.hours_ = static_cast<std::uint32_t>(bits[1]);
  schedule.days_ = static_cast<std::uint32_t>(bits[2]);
  schedule.months_ = static_cast<std::uint16_t>(bits[3]);
  std::uint64_t weekdays = bits[4];
  if ((weekdays & (std::uint64_t{1} << 7)) != 0) weekdays |= 1;  // 7 is Sunday, as 0
  schedule.weekdays_ = static_cast<std::uint8_t>(weekdays & 0x7f);
  schedule.days_star_ = fields[2].front() == '*';
  schedule.weekdays_star_ = fields[4].front() == '*';
  schedule.hours_star_ = fields[1].front() == '*';
  return schedule;
}

bool CronSchedule::DayMatches(int day_of_month, int month, int weekday) const {
  if ((months_ & (1u << month)) == 0) return false;
  const bool dom = (days_ & (1u << day_of_month)) != 0;
  const bool dow = (weekdays_ & (1u << weekday)) != 0;
  if (days_star_ || weekdays_star_) return dom && dow;
  return dom || dow;
}

bool CronSchedule::Matches(std::int64_t unix_seconds) const {
  const std::int64_t day = FloorDiv(unix_seconds, kSecondsPerDay);
  const std::int64_t second_of_day = unix_seconds - day * kSecondsPerDay;
  const int hour = static_cast<int>(second_of_day / 3600);
  const int minute = static_cast<int>(second_of_day % 3600 / 60);
  const CivilDate date = CivilFromDays(day);
  return (minutes_ & (std::uint64_t{1} << minute)) != 0 && (hours_ & (1u << hour)) != 0 &&
         DayMatches(date.day, date.month, WeekdayFromDays(day));
}

std::optional<std::int64_t> CronSchedule::NextFireAfter(std::int64_t unix_seconds) const {
  if (unix_seconds < kMinInstant || unix_seconds > kMaxInstant) return std::nullopt;
  const std::int64_t start = FloorDiv(unix_seconds, 60) * 60 + 60;  // next whole minute
  const std::int64_t limit = std::min(unix_seconds + kSearchHorizonSeconds, kMaxInstant);

  std::int64_t day = FloorDiv(start, kSecondsPerDay);
  const std::int64_t second_of_day = start - day * kSecondsPerDay;
  int hour = static_cast<int>(second_of_day / 3600);
  int minute = static_cast<int>(second_of_day % 3600 / 60);

  // Each step either returns or moves forward to the start of the next
  // candidate month, day or hour; the day loop runs at most ~31 times a month.
  while (day * kSecondsPerDay <= limit) {
    const CivilDate date = CivilFromDays(day);
    if ((months_ & (1u << date.month)) == 0) {
      const int next_month = NextBit(months_, date.month + 1);
      day = next_month < 0 ? DaysFromCivil(date.year + 1, std::countr_zero(months_), 1)
                           : DaysFromCivil(date.year, next_month, 1);
      hour = 0;
      minute = 0;
      continue;
    }
    if (!DayMatches(date.day, date.month, WeekdayFromDays(day))) {
      ++day;
      hour = 0;
      minute = 0;
      continue;
    }
    const int next_hour = NextBit(hours_, hour);
    if (next_hour < 0) {
      ++day;
      hour = 0;
      minute = 0;
      continue;
    }
    if (next_hour != hour) {
      hour = next_hour;
      minute = 0;
    }
    const int next_minute = NextBit(minutes_, minute);
    if (next_minute < 0) {
      ++hour;
      minute = 0;
      if (hour == 24) {
        ++day;
        hour = 0;
      }
      continue;
    }
    const std::int64_t fire = day * kSecondsPerDay + hour * 3600 + next_minute * 60;
    if (fire > limit) return std::nullopt;
    return fire;
  }
  return std::nullopt;
}

bool CronSchedule::ShownBefore(const TimeZone& zone, const TimeZone::Period& period, std::int64_t local) {
  if (period.begin <= kMinInstant) return false;
  const TimeZone::Period before = zone.PeriodAt(period.begin - 1);
  // The clock went back at period.begin: it showed the times from
  // period.begin + period.offset up to period.begin + before.offset once
  // already.
  return before.offset_seconds > period.offset_seconds && local < period.begin + before.offset_seconds;
}

std::optional<std::int64_t> CronSchedule::NextFireAfterIn(const TimeZone& zone, std::int64_t unix_seconds) const {
  if (unix_seconds < kMinInstant || unix_seconds > kMaxInstant) return std::nullopt;
  const std::int64_t limit = std::min(unix_seconds + kSearchHorizonSeconds, kMaxInstant);
  // Within one period of the zone the clock is UTC + offset, one to one, so
  // the UTC search over the clock's seconds finds its next fire minute;
  // past the period's end the search goes on in the next period, from the
  // clock's reading at its start. Each pass returns, moves past a time
  // shown twice (a minute later), or moves to the next period: a few dozen
  // passes over the horizon at most.
  TimeZone::Period period = zone.PeriodAt(unix_seconds);
  std::int64_t from_local = unix_seconds + period.offset_seconds;
  for (int pass = 0; pass < 4096; ++pass) {
    const std::optional<std::int64_t> local = NextFireAfter(from_local);
    if (!local) return std::nullopt;
    const std::int64_t instant = *local - period.offset_seconds;
    if (instant < period.end) {
      // After unix_seconds: the first period's clock reading is past its
      // own, and a later period begins after it.
      if (instant > limit) return std::nullopt;
      if (!hours_star_ && ShownBefore(zone, period, *local)) {
        from_local = *local;
        continue;
      }
      return instant;
    }
    const TimeZone::Period next = zone.PeriodAt(period.end);
    // The clock jumps from period.end + period.offset to period.end +
    // next.offset: a time it skips fires at the jump.
    if (!hours_star_ && next.offset_seconds > period.offset_seconds && *local < period.end + next.offset_seconds) {
      return period.end <= limit ? std::optional<std::int64_t>(period.end) : std::nullopt;
    }
    if (period.end > limit) return std::nullopt;
    from_local = period.end + next.offset_seconds - 1;
    period = next;
  }
  return std::nullopt;
}

EverySchedule::EverySchedule(std::int64_t interval_us) : interval_us_(interval_us) {
  if (interval_us <= 0) {
    throw std::invalid_argument(
        fmt::format("every: interval must be positive, got {} microseconds", interval_us));
  }
}

EverySchedule EverySchedule::Parse(std::string_view text) {
  const std::string_view trimmed = Trim(text);
  std::string error;
  const std::optional<std::int64_t> interval = ParseDuration(trimmed, &error);
  if (!interval) throw std::invalid_argument(fmt::format("every {}: {}", Quote(trimmed), error));
  if (*interval <= 0) {
    throw std::invalid_argument(fmt::format("every {}: interval must be positive", Quote(trimmed)));
  }
  return EverySchedule(*interval);
}

std::optional<std::int64_t> EverySchedule::NextFireAfter(std::int64_t unix_us) const {
  // unix_us + (interval - unix_us mod interval), without overflowing near INT64_MIN.
  std::int64_t remainder = unix_us % interval_us_;
  if (remainder < 0) remainder += interval_us_;
  const std::int64_t gap = interval_us_ - remainder;  // 1..interval
  if (unix_us > std::numeric_limits<std::int64_t>::max() - gap) return std::nullopt;
  return unix_us + gap;
}

std::optional<std::int64_t> Schedule::NextFireAfterUs(std::int64_t unix_us) const {
  return std::visit(
      [this, unix_us](const auto& r) -> std::optional<std::int64_t> {
        if constexpr (std::is_same_v<std::decay_t<decltype(r)>, CronSchedule>) {
          // Cron fires on whole seconds F, and F*1e6 > unix_us iff F > floor(unix_us / 1e6).
          const std::int64_t after = FloorDiv(unix_us, 1'000'000);
          const std::optional<std::int64_t> fire = zone ? r.NextFireAfterIn(*zone, after) : r.NextFireAfter(after);
          if (!fire) return std::nullopt;
          return *fire * 1'000'000;
        } else {
          return r.NextFireAfter(unix_us);
        }
      },
      rule);
}

std::string Schedule::Describe() const {
  return std::visit(
      [this](const auto& r) -> std::string {
        if constexpr (std::is_same_v<std::decay_t<decltype(r)>, CronSchedule>) {
          return zone ? fmt::format("cron {} in {}", Quote(r.Text()), zone->Name()) : fmt::format("cron {}", Quote(r.Text()));
        } else {
          return fmt::format("every {}", FormatDuration(r.IntervalUs()));
        }
      },
      rule);
}

}  // namespace akadzed
