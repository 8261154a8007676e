// Schedules of periodic jobs: when does a `cron` or `every` entry fire next.
//
// Pure logic only: no database, no clock reads, no threads. The caller passes
// the instant to search from and gets the next fire instant back, so every
// daemon that evaluates the same schedule from the same instant computes the
// same fire instants (what the leaderless scheduler relies on: one row in
// akadze.periodic_runs per fire instant).
//
// Time base: Unix time, UTC. Cron expressions are evaluated in UTC, or in
// the time zone a periodic entry names (NextFireAfterIn; never the
// process's local time zone), where daylight-saving transitions follow the
// rules stated there. `every` schedules are aligned to the Unix epoch:
// their fire instants are the multiples of the interval.
//
// Thread-safety: CronSchedule, EverySchedule and Schedule are immutable values
// once constructed; all their const member functions may be called from any
// number of threads at once. Copying is cheap (a few words and the text).
//
// Catch-up after downtime is the caller's business: to find the fires within
// a grace window, ask NextFireAfter(now - grace - 1) and step forward.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "periodic/time_zone.h"

namespace akadzed {

// A standard 5-field cron expression: minute hour day-of-month month
// day-of-week, separated by blanks.
//
// Each field is a comma-separated list of items; an item is `*`, a number
// `a`, a range `a-b` (a <= b), optionally followed by a step `/n` (n >= 1):
// `*/n`, `a-b/n`, and `a/n` (meaning `a-<field max>/n`). Months accept the
// names JAN..DEC, day-of-week accepts SUN..SAT (case-insensitive) and the
// numbers 0..7 where both 0 and 7 are Sunday. Ranges: minute 0-59, hour 0-23,
// day-of-month 1-31, month 1-12, day-of-week 0-7.
//
// Day rule (Vixie cron / cronie): if day-of-month or day-of-week is
// unrestricted, a day must match both fields (i.e. just the restricted one);
// if both are restricted, a day matches when EITHER field matches
// (`0 0 1 * MON` fires on the 1st and on every Monday). As in Vixie cron, a
// field counts as unrestricted when its text starts with `*` (`*` or `*/n`).
//
// Macros: @hourly (0 * * * *), @daily and @midnight (0 0 * * *), @weekly
// (0 0 * * 0), @monthly (0 0 1 * *), @yearly and @annually (0 0 1 1 *),
// case-insensitive. @reboot is not a schedule and is rejected.
class CronSchedule {
 public:
  // How far NextFireAfter looks ahead: 8 x 366 days, enough for `0 0 29 2 *`
  // across a century year that is not a leap year (2096-02-29 -> 2104-02-29).
  static constexpr std::int64_t kSearchHorizonSeconds = std::int64_t{8} * 366 * 86400;

  // Parses `text` (leading and trailing blanks ignored). Throws
  // std::invalid_argument with a one-line message naming the field and the
  // bad token, e.g.
  //   cron "61 * * * *": minute: 61 is out of range 0-59
  static CronSchedule Parse(std::string_view text);

  // The first fire instant (whole minute, Unix seconds, UTC) strictly after
  // `unix_seconds`. nullopt if there is none within kSearchHorizonSeconds
  // (e.g. `0 0 30 2 *` never fires), or if the search would leave the years
  // 1..9999. Cost: skips whole months, days and hours; at most ~1,000 cheap
  // steps (an impossible date searched over the whole horizon), typically a few.
  std::optional<std::int64_t> NextFireAfter(std::int64_t unix_seconds) const;

  // The first fire instant strictly after `unix_seconds` with the fields
  // read as the wall clock of `zone` (Unix seconds). The clock of a zone
  // skips an hour (spring) and repeats one (autumn); what fires then:
  // - A schedule that names its hours (the hour field does not start with
  //   `*`: `30 2 * * *`, `0 8 * * 1-5`) fires once for each of its times
  //   a day. A time the clock skips fires at the instant the clock jumps
  //   (02:30 in New York's spring: at 03:00 EDT, 07:00 UTC; several times
  //   in the skipped hour are that one instant, one fire); a time the
  //   clock shows twice fires the first time only (01:30 EDT).
  // - A schedule whose hour field starts with `*` (`*/15 * * * *`,
  //   `0 */2 * * *`) follows the clock as it reads: nothing fires in the
  //   hour that is skipped, and the repeated hour fires twice, so the real
  //   time between fires stays what it is when they are an hour or less
  //   apart (`0 */2 * * *` has a gap of 3 hours at each change).
  // nullopt as NextFireAfter (the horizon counted from `unix_seconds`).
  std::optional<std::int64_t> NextFireAfterIn(const TimeZone& zone, std::int64_t unix_seconds) const;

  // True if the minute containing `unix_seconds` (UTC) is a fire minute.
  bool Matches(std::int64_t unix_seconds) const;

  // The expression as given to Parse, trimmed (macros stay as written).
  const std::string& Text() const { return text_; }

 private:
  CronSchedule() = default;

  bool DayMatches(int day_of_month, int month, int weekday) const;
  // True if the wall-clock time `local` of `period` (seconds, the fields'
  // clock) is also one of the period before it: the second time the clock
  // shows it.
  static bool ShownBefore(const TimeZone& zone, const TimeZone::Period& period, std::int64_t local);

  std::string text_;
  std::uint64_t minutes_ = 0;  // bit m: minute m, 0..59
  std::uint32_t hours_ = 0;    // bit h: hour h, 0..23
  std::uint32_t days_ = 0;     // bit d: day-of-month d, 1..31
  std::uint16_t months_ = 0;   // bit m: month m, 1..12
  std::uint8_t weekdays_ = 0;  // bit w: weekday w, 0..6, 0 = Sunday
  bool days_star_ = false;     // day-of-month field starts with '*'
  bool weekdays_star_ = false; // day-of-week field starts with '*'
  bool hours_star_ = false;    // hour field starts with '*'
};

// Fires every `interval` microseconds, at the multiples of the interval since
// the Unix epoch (an `every: 1h` entry fires on the hour, UTC).
class EverySchedule {
 public:
  // Throws std::invalid_argument unless interval_us > 0.
  explicit EverySchedule(std::int64_t interval_us);

  // Parses a duration as core/duration.h does ("30s", "5m", "1h30m").
  // Throws std::invalid_argument with a one-line message for a bad or
  // non-positive duration, e.g.  every "0s": interval must be positive
  static EverySchedule Parse(std::string_view text);

  // The first multiple of the interval strictly after `unix_us` (Unix
  // microseconds). nullopt only when that would overflow int64.
  std::optional<std::int64_t> NextFireAfter(std::int64_t unix_us) const;

  std::int64_t IntervalUs() const { return interval_us_; }

 private:
  std::int64_t interval_us_;
};

// Either kind, as a periodic entry of the configuration holds it.
struct Schedule {
  std::variant<CronSchedule, EverySchedule> rule;
  // A cron rule's clock (config: `timezone`); UTC without one. An `every`
  // rule has none (config load refuses one).
  std::optional<TimeZone> zone;

  // Throw std::invalid_argument as CronSchedule::Parse / EverySchedule::Parse.
  static Schedule Cron(std::string_view text) { return Schedule{CronSchedule::Parse(text), std::nullopt}; }
  static Schedule Every(std::string_view text) { return Schedule{EverySchedule::Parse(text), std::nullopt}; }

  // The first fire instant strictly after `unix_us`, in Unix microseconds;
  // nullopt as the rule's NextFireAfter.
  std::optional<std::int64_t> NextFireAfterUs(std::int64_t unix_us) const;

  // One line for logs and the admin CLI: `cron "*/5 * * * *"`,
  // `cron "0 8 * * 1-5" in America/New_York` or `every 30s`.
  std::string Describe() const;
};

}  // namespace akadzed
