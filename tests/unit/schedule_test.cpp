// Periodic schedules: cron parsing and next-fire search, epoch-aligned `every`.
//
// Cron is evaluated in UTC (see periodic/schedule.h) unless an entry names a
// time zone: in UTC daylight-saving time is irrelevant by construction (a
// fire on a DST switch day of the US or EU zones is exactly one day after
// the previous); in a zone, the skipped and the repeated hour follow the
// rules of CronSchedule::NextFireAfterIn, checked at both changes of a year
// in both hemispheres, for a 30-minute change, and against a brute force.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "periodic/schedule.h"

namespace akadzed {
namespace {

using std::chrono::days;
using std::chrono::sys_days;
using std::chrono::year_month_day;

// Unix seconds of a UTC wall-clock time (std::chrono, independent of the
// implementation's own calendar code).
std::int64_t Utc(int y, unsigned mo, unsigned d, int h = 0, int mi = 0, int s = 0) {
  const sys_days date{std::chrono::year{y} / std::chrono::month{mo} / std::chrono::day{d}};
  return date.time_since_epoch().count() * 86400 + h * 3600 + mi * 60 + s;
}

std::optional<std::int64_t> Next(std::string_view cron, std::int64_t after) {
  return CronSchedule::Parse(cron).NextFireAfter(after);
}

std::string ParseError(std::string_view cron) {
  try {
    CronSchedule::Parse(cron);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_CASE("cron: every minute fires strictly after the instant", "[schedule]") {
  const std::int64_t t = Utc(2026, 11, 30, 1, 25);
  CHECK(Next("* * * * *", t) == t + 60);
  CHECK(Next("* * * * *", t - 1) == t);
  CHECK(Next("* * * * *", t + 59) == t + 60);
  CHECK(Next("  *\t* * *  *\n", t) == t + 60);  // blanks around and between fields
}

TEST_CASE("cron: numbers, ranges, steps and lists", "[schedule]") {
  const std::int64_t t = Utc(2026, 1, 1, 10, 7);
  CHECK(Next("5 * * * *", t) == Utc(2026, 1, 1, 11, 5));
  CHECK(Next("*/15 * * * *", t) == Utc(2026, 1, 1, 10, 15));
  CHECK(Next("10-20/5 * * * *", t) == Utc(2026, 1, 1, 10, 10));
  CHECK(Next("10-20/5 * * * *", Utc(2026, 1, 1, 10, 20)) == Utc(2026, 1, 1, 11, 10));
  CHECK(Next("50/5 * * * *", t) == Utc(2026, 1, 1, 10, 50));  // a/n = a-59/n
  CHECK(Next("50/5 * * * *", Utc(2026, 1, 1, 10, 55)) == Utc(2026, 1, 1, 11, 50));
  CHECK(Next("1,2,3 * * * *", t) == Utc(2026, 1, 1, 11, 1));
  CHECK(Next("0 9-17 * * *", Utc(2026, 1, 1, 17, 0)) == Utc(2026, 1, 2, 9, 0));
  CHECK(Next("0 */6 * * *", t) == Utc(2026, 1, 1, 12, 0));
  CHECK(Next("30 1,13 * * *", Utc(2026, 1, 1, 13, 30)) == Utc(2026, 1, 2, 1, 30));
  CHECK(Next("0 0 1-3,25/2 * *", Utc(2026, 1, 3)) == Utc(2026, 1, 25));
  CHECK(Next("0 0 1-3,25/2 * *", Utc(2026, 1, 25)) == Utc(2026, 1, 27));
  CHECK(Next("0 0 1 */3 *", Utc(2026, 2, 1)) == Utc(2026, 4, 1));
  CHECK(Next("*/100 * * * *", t) == Utc(2026, 1, 1, 11, 0));  // a step beyond the range: just the start
  CHECK(Next("7 7 7 7 *", t) == Utc(2026, 7, 7, 7, 7));
  CHECK(Next("0 0 1 1 *", Utc(2026, 12, 31, 23, 59, 30)) == Utc(2027, 1, 1));
}

TEST_CASE("cron: month and weekday names, any case", "[schedule]") {
  const std::int64_t t = Utc(2026, 1, 1);  // a Thursday
  CHECK(Next("0 0 1 JAN,jul *", t) == Utc(2026, 7, 1));
  CHECK(Next("0 0 1 Feb-Apr *", Utc(2026, 3, 1)) == Utc(2026, 4, 1));
  CHECK(Next("0 0 1 feb-apr *", Utc(2026, 4, 1)) == Utc(2027, 2, 1));
  CHECK(Next("0 0 * * mon-FRI", t) == Utc(2026, 1, 2));        // Friday
  CHECK(Next("0 0 * * mon-FRI", Utc(2026, 1, 2)) == Utc(2026, 1, 5));  // over the weekend
  CHECK(Next("0 0 * * SAT,sun", t) == Utc(2026, 1, 3));
  CHECK(Next("0 0 * * Wed", t) == Utc(2026, 1, 7));
  CHECK(Next("0 0 * DEC SUN", t) == Utc(2026, 12, 6));
}

TEST_CASE("cron: day-of-week 7 is Sunday, as 0", "[schedule]") {
  const std::int64_t t = Utc(2026, 1, 1);
  const std::int64_t sunday = Utc(2026, 1, 4);
  CHECK(Next("0 0 * * 0", t) == sunday);
  CHECK(Next("0 0 * * 7", t) == sunday);
  CHECK(Next("0 0 * * 6-7", Utc(2026, 1, 3)) == sunday);
  CHECK(Next("0 0 * * 5-7", t) == Utc(2026, 1, 2));
  CHECK(Next("0 0 * * 0-7", t) == Utc(2026, 1, 2));
  for (std::int64_t from = t; from < t + 30 * 86400; from += 86400) {
    CHECK(Next("0 12 * * 7", from) == Next("0 12 * * 0", from));
  }
}

TEST_CASE("cron: day-of-month OR day-of-week when both are restricted", "[schedule]") {
  // January 2026: the 2nd and 9th are Fridays, the 13th a Tuesday.
  std::vector<std::int64_t> fires;
  std::int64_t t = Utc(2026, 1, 1);
  for (int i = 0; i < 4; ++i) {
    t = *Next("0 0 13 * FRI", t);
    fires.push_back(t);
  }
  CHECK(fires == std::vector<std::int64_t>{Utc(2026, 1, 2), Utc(2026, 1, 9), Utc(2026, 1, 13),
                                           Utc(2026, 1, 16)});
  // Only one restricted: that one decides.
  CHECK(Next("0 0 13 * *", Utc(2026, 1, 1)) == Utc(2026, 1, 13));
  CHECK(Next("0 0 * * FRI", Utc(2026, 1, 1)) == Utc(2026, 1, 2));
  // A list or range is restricted even when it covers everything (Vixie).
  CHECK(Next("0 0 1-31 * MON", Utc(2026, 1, 1)) == Utc(2026, 1, 2));
  // Vixie: a field starting with '*' counts as unrestricted, so `*/10` with
  // MON means both: days 1, 11, 21, 31 that are Mondays (2026-05-11).
  CHECK(Next("0 0 */10 * MON", Utc(2026, 1, 1)) == Utc(2026, 5, 11));
  // The month must still match.
  CHECK(Next("0 0 13 FEB FRI", Utc(2026, 1, 1)) == Utc(2026, 2, 6));
}

TEST_CASE("cron: evaluated in UTC, so DST switches change nothing", "[schedule]") {
  // 2026-03-08 (US) and 2026-03-29 / 2026-10-25 (EU) are DST switch days in
  // local zones; in UTC every day has 24 hours and 02:30 exists exactly once.
  for (const std::int64_t day : {Utc(2026, 3, 8), Utc(2026, 3, 29), Utc(2026, 10, 25),
                                  Utc(2026, 11, 1)}) {
    const std::int64_t fire = *Next("30 2 * * *", day - 86400);
    CHECK(fire == day - 86400 + 2 * 3600 + 1800);
    CHECK(*Next("30 2 * * *", fire) == fire + 86400);
  }
}

TEST_CASE("cron: leap years and February 29", "[schedule]") {
  CHECK(Next("0 0 29 2 *", Utc(2025, 1, 1)) == Utc(2028, 2, 29));
  CHECK(Next("0 0 29 2 *", Utc(2028, 2, 29)) == Utc(2032, 2, 29));
  CHECK(Next("0 0 29 2 *", Utc(2000, 1, 1)) == Utc(2000, 2, 29));  // 2000 is a leap year
  // 2100 is not a leap year: eight years between two Feb 29ths, still found.
  CHECK(Next("0 0 29 2 *", Utc(2096, 3, 1)) == Utc(2104, 2, 29));
  CHECK(Next("59 23 28 2 *", Utc(2028, 2, 28, 23, 59)) == Utc(2029, 2, 28, 23, 59));
  CHECK(Next("0 0 1 3 *", Utc(2028, 2, 28)) == Utc(2028, 3, 1));
  CHECK(Next("0 0 * 2 *", Utc(2028, 2, 28)) == Utc(2028, 2, 29));
  CHECK(Next("0 0 * 2 *", Utc(2027, 2, 28)) == Utc(2028, 2, 1));
}

TEST_CASE("cron: end of month", "[schedule]") {
  CHECK(Next("0 0 31 * *", Utc(2026, 4, 1)) == Utc(2026, 5, 31));
  CHECK(Next("0 0 31 * *", Utc(2026, 5, 31)) == Utc(2026, 7, 31));
  CHECK(Next("0 0 30 * *", Utc(2026, 2, 1)) == Utc(2026, 3, 30));
  CHECK(Next("0 0 28-31 * *", Utc(2026, 2, 28)) == Utc(2026, 3, 28));
  CHECK(Next("0 0 31 DEC *", Utc(2026, 12, 31)) == Utc(2027, 12, 31));
}

TEST_CASE("cron: schedules that never fire give nullopt", "[schedule]") {
  CHECK_FALSE(Next("0 0 30 2 *", Utc(2026, 1, 1)).has_value());
  CHECK_FALSE(Next("0 0 31 2 *", Utc(2026, 1, 1)).has_value());
  CHECK_FALSE(Next("0 0 31 4,6,9,11 *", Utc(2026, 1, 1)).has_value());
  CHECK_FALSE(Next("* * * * *", Utc(9999, 12, 31, 23, 59)).has_value());  // beyond year 9999
  // But with a weekday too, the OR rule makes it fire.
  CHECK(Next("0 0 30 2 MON", Utc(2026, 1, 1)) == Utc(2026, 2, 2));
}

TEST_CASE("cron: macros", "[schedule]") {
  const std::int64_t t = Utc(2026, 1, 1, 10, 7);  // a Thursday
  CHECK(Next("@hourly", t) == Utc(2026, 1, 1, 11));
  CHECK(Next("@daily", t) == Utc(2026, 1, 2));
  CHECK(Next("@midnight", t) == Utc(2026, 1, 2));
  CHECK(Next("@weekly", t) == Utc(2026, 1, 4));
  CHECK(Next("@monthly", t) == Utc(2026, 2, 1));
  CHECK(Next("@yearly", t) == Utc(2027, 1, 1));
  CHECK(Next("@ANNUALLY", t) == Utc(2027, 1, 1));
  CHECK(CronSchedule::Parse(" @Daily ").Text() == "@Daily");
  CHECK(ParseError("@reboot") ==
        "cron \"@reboot\": unknown macro \"@reboot\" (known: @hourly @daily @midnight @weekly "
        "@monthly @yearly @annually)");
}

TEST_CASE("cron: errors name the field and the bad token", "[schedule]") {
  CHECK(ParseError("61 * * * *") == "cron \"61 * * * *\": minute: 61 is out of range 0-59");
  CHECK(ParseError("* 24 * * *") == "cron \"* 24 * * *\": hour: 24 is out of range 0-23");
  CHECK(ParseError("* * 0 * *") == "cron \"* * 0 * *\": day-of-month: 0 is out of range 1-31");
  CHECK(ParseError("* * 32 * *") == "cron \"* * 32 * *\": day-of-month: 32 is out of range 1-31");
  CHECK(ParseError("* * * 13 *") == "cron \"* * * 13 *\": month: 13 is out of range 1-12");
  CHECK(ParseError("* * * 0 *") == "cron \"* * * 0 *\": month: 0 is out of range 1-12");
  CHECK(ParseError("* * * * 8") == "cron \"* * * * 8\": day-of-week: 8 is out of range 0-7");
  CHECK(ParseError("1-70 * * * *") == "cron \"1-70 * * * *\": minute: 70 is out of range 0-59");
  CHECK(ParseError("99999999999 * * * *") ==
        "cron \"99999999999 * * * *\": minute: 99999999999 is out of range 0-59");

  CHECK(ParseError("*/0 * * * *") ==
        "cron \"*/0 * * * *\": minute: step 0 in \"*/0\" must be at least 1");
  CHECK(ParseError("* 1-5/0 * * *") ==
        "cron \"* 1-5/0 * * *\": hour: step 0 in \"1-5/0\" must be at least 1");
  CHECK(ParseError("*/x * * * *") ==
        "cron \"*/x * * * *\": minute: step \"x\" in \"*/x\" is not a number");
  CHECK(ParseError("*/ * * * *") ==
        "cron \"*/ * * * *\": minute: step \"\" in \"*/\" is not a number");

  CHECK(ParseError("30-10 * * * *") ==
        "cron \"30-10 * * * *\": minute: range \"30-10\" is reversed (the start must not exceed "
        "the end)");
  CHECK(ParseError("* * * DEC-JAN *") ==
        "cron \"* * * DEC-JAN *\": month: range \"DEC-JAN\" is reversed (the start must not "
        "exceed the end)");
  CHECK(ParseError("* * * * FRI-MON") ==
        "cron \"* * * * FRI-MON\": day-of-week: range \"FRI-MON\" is reversed (the start must "
        "not exceed the end)");

  CHECK(ParseError("abc * * * *") == "cron \"abc * * * *\": minute: \"abc\" is not a number");
  CHECK(ParseError("* * * * * ") == "(no error)");
  CHECK(ParseError("* x * * *") == "cron \"* x * * *\": hour: \"x\" is not a number");
  CHECK(ParseError("* * L * *") == "cron \"* * L * *\": day-of-month: \"L\" is not a number");
  CHECK(ParseError("* * * FOO *") ==
        "cron \"* * * FOO *\": month: \"FOO\" is not a number or a month (JAN-DEC) name");
  CHECK(ParseError("* * * * MONDAY") ==
        "cron \"* * * * MONDAY\": day-of-week: \"MONDAY\" is not a number or a weekday "
        "(SUN-SAT) name");
  CHECK(ParseError("jan * * * *") == "cron \"jan * * * *\": minute: \"jan\" is not a number");
  CHECK(ParseError("* * * * -1") == "cron \"* * * * -1\": day-of-week: incomplete range \"-1\"");
  CHECK(ParseError("1- * * * *") == "cron \"1- * * * *\": minute: incomplete range \"1-\"");
  CHECK(ParseError("1,,2 * * * *") ==
        "cron \"1,,2 * * * *\": minute: empty list item in \"1,,2\"");
  CHECK(ParseError("1, * * * *") == "cron \"1, * * * *\": minute: empty list item in \"1,\"");
  CHECK(ParseError("? * * * *") == "cron \"? * * * *\": minute: \"?\" is not a number");
  CHECK(ParseError("5# * * * *") == "cron \"5# * * * *\": minute: \"5#\" is not a number");

  CHECK(ParseError("* * * *") ==
        "cron \"* * * *\": expected 5 fields (minute hour day-of-month month day-of-week), got 4");
  CHECK(ParseError("0 * * * * *") ==
        "cron \"0 * * * * *\": expected 5 fields (minute hour day-of-month month day-of-week), "
        "got 6");
  CHECK(ParseError("") == "cron \"\": empty expression");
  CHECK(ParseError("   ") == "cron \"   \": empty expression");
  // Messages stay on one line whatever the text holds.
  const std::string multi = ParseError("* * *\n* 99");
  CHECK(multi == "cron \"* * *\\x0a* 99\": day-of-week: 99 is out of range 0-7");
  CHECK(multi.find('\n') == std::string::npos);
}

TEST_CASE("every: epoch-aligned fire instants", "[schedule]") {
  const EverySchedule every30(30'000'000);
  CHECK(every30.NextFireAfter(0) == 30'000'000);
  CHECK(every30.NextFireAfter(29'999'999) == 30'000'000);
  CHECK(every30.NextFireAfter(30'000'000) == 60'000'000);
  CHECK(every30.NextFireAfter(-1) == 0);
  CHECK(every30.NextFireAfter(-30'000'000) == 0);
  CHECK(every30.NextFireAfter(-30'000'001) == -30'000'000);
  // Two daemons asking at different instants agree on the instants.
  const std::int64_t now = Utc(2026, 11, 30, 1, 25, 17) * 1'000'000 + 123'456;
  CHECK(*every30.NextFireAfter(now) == Utc(2026, 11, 30, 1, 25, 30) * 1'000'000);
  CHECK(*every30.NextFireAfter(now + 5'000'000) == Utc(2026, 11, 30, 1, 25, 30) * 1'000'000);

  const EverySchedule hourly = EverySchedule::Parse("1h");
  CHECK(hourly.IntervalUs() == 3'600'000'000);
  CHECK(*hourly.NextFireAfter(now) == Utc(2026, 11, 30, 2) * 1'000'000);

  const EverySchedule odd(7);
  CHECK(odd.NextFireAfter(13) == 14);
  CHECK(odd.NextFireAfter(14) == 21);
  CHECK(odd.NextFireAfter(INT64_MAX - 3) == INT64_MAX);
  CHECK_FALSE(odd.NextFireAfter(INT64_MAX).has_value());
  CHECK(every30.NextFireAfter(INT64_MIN).has_value());
  CHECK(EverySchedule(1).NextFireAfter(INT64_MIN) == INT64_MIN + 1);
}

TEST_CASE("every: bad intervals are rejected", "[schedule]") {
  CHECK_THROWS_AS(EverySchedule(0), std::invalid_argument);
  CHECK_THROWS_AS(EverySchedule(-5), std::invalid_argument);
  CHECK_THROWS_WITH(EverySchedule::Parse("0s"), "every \"0s\": interval must be positive");
  CHECK_THROWS_WITH(EverySchedule::Parse("30"), Catch::Matchers::StartsWith("every \"30\": ") &&
                                                    Catch::Matchers::Contains("missing unit"));
  CHECK_THROWS_AS(EverySchedule::Parse(""), std::invalid_argument);
  CHECK_THROWS_AS(EverySchedule::Parse("abc"), std::invalid_argument);
}

TEST_CASE("schedule: one shape for both kinds", "[schedule]") {
  const Schedule cron = Schedule::Cron("*/5 * * * *");
  const Schedule every = Schedule::Every("30s");
  CHECK(cron.Describe() == "cron \"*/5 * * * *\"");
  CHECK(every.Describe() == "every 30s");
  const std::int64_t base = Utc(2026, 1, 1, 10, 5) * 1'000'000;
  CHECK(cron.NextFireAfterUs(base - 1) == base);
  CHECK(cron.NextFireAfterUs(base) == base + 300'000'000);
  CHECK(cron.NextFireAfterUs(base + 1) == base + 300'000'000);
  CHECK(cron.NextFireAfterUs(base - 1'000'001) == base);
  CHECK(every.NextFireAfterUs(base) == base + 30'000'000);
  CHECK_FALSE(Schedule::Cron("0 0 30 2 *").NextFireAfterUs(base).has_value());
  CHECK(std::holds_alternative<CronSchedule>(cron.rule));
  CHECK_THROWS_AS(Schedule::Cron("61 * * * *"), std::invalid_argument);
  CHECK_THROWS_AS(Schedule::Every("-"), std::invalid_argument);
  // Values: copies are independent and usable from any thread.
  const Schedule copy = cron;
  CHECK(copy.NextFireAfterUs(base) == cron.NextFireAfterUs(base));
}

// ---- Randomized cross-check against a brute-force matcher -----------------

struct FieldModel {
  int lo;
  int hi;  // accepted in text (7 for day-of-week)
  const char* const* names;  // value -> name, or nullptr
  int names_count;
};

constexpr const char* kMonthNames[] = {"", "jan", "feb", "mar", "apr", "may", "jun",
                                       "jul", "aug", "sep", "oct", "nov", "dec"};
constexpr const char* kDayNames[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};

struct Expected {
  std::string text;
  std::uint64_t bits[5] = {};
  bool star[5] = {};
};

class Generator {
 public:
  explicit Generator(std::uint64_t seed) : rng_(seed) {}

  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool Chance(int percent) { return Uniform(1, 100) <= percent; }

  std::string Value(const FieldModel& f, int v) {
    if (f.names != nullptr && v < f.names_count && f.names[v][0] != '\0' && Chance(30)) {
      std::string name = f.names[v];
      for (char& c : name) {
        if (Chance(50)) c = static_cast<char>(c - 'a' + 'A');
      }
      return name;
    }
    return std::to_string(v);
  }

  // A value biased towards the edges, where the bugs live.
  int Pick(const FieldModel& f, int field) {
    if (field == 2 && Chance(30)) return Uniform(28, 31);
    if (field == 3 && Chance(20)) return 2;
    if (Chance(20)) return Chance(50) ? f.lo : f.hi;
    return Uniform(f.lo, f.hi);
  }

  void Field(const FieldModel& f, int field, Expected* out) {
    std::string text;
    std::uint64_t bits = 0;
    const int items = Chance(35) ? 0 : Uniform(1, 3);
    if (items == 0) {
      if (Chance(75)) {
        text = "*";
        for (int v = f.lo; v <= f.hi; ++v) bits |= std::uint64_t{1} << v;
      } else {
        const int step = Uniform(1, f.hi - f.lo + 2);
        text = "*/" + std::to_string(step);
        for (int v = f.lo; v <= f.hi; v += step) bits |= std::uint64_t{1} << v;
      }
    }
    for (int i = 0; i < items; ++i) {
      if (i > 0) text += ',';
      const int kind = Uniform(0, 9);
      int a = Pick(f, field);
      int b = Pick(f, field);
      if (a > b) std::swap(a, b);
      int step = 1;
      if (kind < 4) {  // a
        text += Value(f, a);
        b = a;
      } else if (kind < 6) {  // a-b
        text += Value(f, a) + "-" + Value(f, b);
      } else if (kind < 8) {  // a-b/n
        step = Uniform(1, 10);
        text += Value(f, a) + "-" + Value(f, b) + "/" + std::to_string(step);
      } else if (kind < 9) {  // a/n
        step = Uniform(1, 10);
        text += Value(f, a) + "/" + std::to_string(step);
        b = f.hi;
      } else {  // */n inside a list
        step = Uniform(1, 10);
        text += "*/" + std::to_string(step);
        a = f.lo;
        b = f.hi;
      }
      for (int v = a; v <= b; v += step) bits |= std::uint64_t{1} << v;
    }
    if (field == 4 && (bits & (1u << 7)) != 0) bits = (bits | 1) & 0x7f;
    out->bits[field] = bits;
    out->star[field] = text[0] == '*';
    if (!out->text.empty()) out->text += ' ';
    out->text += text;
  }

  Expected Expression() {
    static const FieldModel kModels[5] = {{0, 59, nullptr, 0},
                                          {0, 23, nullptr, 0},
                                          {1, 31, nullptr, 0},
                                          {1, 12, kMonthNames, 13},
                                          {0, 7, kDayNames, 7}};
    Expected e;
    for (int field = 0; field < 5; ++field) Field(kModels[field], field, &e);
    return e;
  }

  std::int64_t Instant(std::int64_t lo, std::int64_t hi) {
    std::int64_t t = std::uniform_int_distribution<std::int64_t>(lo, hi)(rng_);
    if (Chance(20)) t -= ((t % 60) + 60) % 60;  // exactly on a minute
    return t;
  }

 private:
  std::mt19937_64 rng_;
};

bool Has(std::uint64_t bits, unsigned v) { return (bits >> v) & 1; }

// Minute by minute with std::chrono's calendar; whole days that cannot match
// are skipped, minutes within a matching day are all tried.
std::optional<std::int64_t> BruteForce(const Expected& e, std::int64_t after) {
  const std::int64_t limit = after + CronSchedule::kSearchHorizonSeconds;
  std::int64_t m = (after >= 0 ? after / 60 : (after - 59) / 60) * 60 + 60;
  while (m <= limit) {
    const std::int64_t day = m >= 0 ? m / 86400 : (m - 86399) / 86400;
    const sys_days date{days{day}};
    const year_month_day ymd{date};
    const unsigned weekday = std::chrono::weekday{date}.c_encoding();
    const bool dom = Has(e.bits[2], static_cast<unsigned>(ymd.day()));
    const bool dow = Has(e.bits[4], weekday);
    const bool day_ok = Has(e.bits[3], static_cast<unsigned>(ymd.month())) &&
                        ((e.star[2] || e.star[4]) ? (dom && dow) : (dom || dow));
    if (!day_ok) {
      m = (day + 1) * 86400;
      continue;
    }
    const std::int64_t second_of_day = m - day * 86400;
    if (Has(e.bits[1], static_cast<unsigned>(second_of_day / 3600)) &&
        Has(e.bits[0], static_cast<unsigned>(second_of_day % 3600 / 60))) {
      return m;
    }
    m += 60;
  }
  return std::nullopt;
}

TEST_CASE("cron: randomized cross-check against brute force", "[schedule]") {
  Generator gen(20261130);
  const std::int64_t lo = Utc(1995, 1, 1);
  const std::int64_t hi = Utc(2110, 1, 1);  // spans 2000 (leap) and 2100 (not)
  int fired = 0;
  int never = 0;
  for (int i = 0; i < 4000; ++i) {
    const Expected e = gen.Expression();
    CronSchedule schedule = CronSchedule::Parse("@daily");
    REQUIRE_NOTHROW(schedule = CronSchedule::Parse(e.text));
    std::int64_t t = gen.Instant(lo, hi);
    // Follow a few consecutive fires, as the scheduler would.
    for (int k = 0; k < 3; ++k) {
      const std::optional<std::int64_t> want = BruteForce(e, t);
      const std::optional<std::int64_t> got = schedule.NextFireAfter(t);
      INFO("cron \"" << e.text << "\" after " << t);
      REQUIRE(got == want);
      if (!got) {
        ++never;
        break;
      }
      ++fired;
      CHECK(schedule.Matches(*got));
      t = gen.Chance(50) ? *got : *got + gen.Uniform(-59, 59);
    }
  }
  CHECK(fired > 5000);
  CHECK(never > 0);  // some impossible dates (Feb 30, Apr 31) were generated
}

// ---- cron in a time zone ----

std::optional<std::int64_t> NextIn(std::string_view zone, std::string_view cron, std::int64_t after) {
  return CronSchedule::Parse(cron).NextFireAfterIn(TimeZone::Locate(zone), after);
}

// The fires strictly after `after`, following each from the last.
std::vector<std::int64_t> FiresIn(std::string_view zone, std::string_view cron, std::int64_t after, int n) {
  std::vector<std::int64_t> out;
  for (int i = 0; i < n; ++i) {
    const std::optional<std::int64_t> f = NextIn(zone, cron, after);
    if (!f) break;
    out.push_back(*f);
    after = *f;
  }
  return out;
}

TEST_CASE("cron in a zone: its clock's times, standard and summer", "[schedule][timezone]") {
  // 08:00 on weekdays in New York: 13:00 UTC in winter, 12:00 in summer.
  CHECK(NextIn("America/New_York", "0 8 * * 1-5", Utc(2026, 12, 8)) == Utc(2026, 12, 8, 13));
  CHECK(NextIn("America/New_York", "0 8 * * 1-5", Utc(2026, 7, 1)) == Utc(2026, 7, 1, 12));
  // Friday 2026-12-11 13:00 UTC, then Monday 2026-12-14.
  CHECK(NextIn("America/New_York", "0 8 * * 1-5", Utc(2026, 12, 11, 13)) == Utc(2026, 12, 14, 13));
  // A zone 5:45 ahead, with no daylight saving time.
  CHECK(NextIn("Asia/Kathmandu", "0 9 * * *", Utc(2026, 12, 8)) == Utc(2026, 12, 8, 3, 15));
  // The day-of-month is the clock's: 00:30 on the 1st in Tokyo is the
  // 30th or 31st in UTC.
  CHECK(NextIn("Asia/Tokyo", "30 0 1 * *", Utc(2026, 12, 8)) == Utc(2026, 12, 31, 15, 30));
  CHECK(NextIn("UTC", "30 2 * * *", Utc(2026, 3, 8)) == Next("30 2 * * *", Utc(2026, 3, 8)));
  CHECK(CronSchedule::Parse("30 2 * * *").NextFireAfterIn(TimeZone::Locate("UTC"), Utc(9999, 12, 31, 23, 59)) ==
        std::nullopt);
}

TEST_CASE("cron in a zone: the hour the clock skips", "[schedule][timezone]") {
  // New York, 2026-03-08: 02:00 EST (07:00 UTC) is 03:00 EDT.
  // Named hours: 02:30 fires once, at the jump; the days around at 02:30.
  CHECK(FiresIn("America/New_York", "30 2 * * *", Utc(2026, 3, 7), 3) ==
        std::vector<std::int64_t>{Utc(2026, 3, 7, 7, 30), Utc(2026, 3, 8, 7), Utc(2026, 3, 9, 6, 30)});
  // Several times in the skipped hour are one instant: one fire.
  CHECK(FiresIn("America/New_York", "0,20,40 2 * * *", Utc(2026, 3, 8), 2) ==
        std::vector<std::int64_t>{Utc(2026, 3, 8, 7), Utc(2026, 3, 9, 6)});
  // A time past the skipped hour fires as it reads.
  CHECK(NextIn("America/New_York", "30 3 * * *", Utc(2026, 3, 8)) == Utc(2026, 3, 8, 7, 30));
  // The clock as it reads: nothing in the skipped hour, 30 minutes of real
  // time between fires throughout.
  CHECK(FiresIn("America/New_York", "*/30 * * * *", Utc(2026, 3, 8, 6), 4) ==
        std::vector<std::int64_t>{Utc(2026, 3, 8, 6, 30), Utc(2026, 3, 8, 7), Utc(2026, 3, 8, 7, 30),
                                  Utc(2026, 3, 8, 8)});
  CHECK(NextIn("America/New_York", "30 */1 * * *", Utc(2026, 3, 8, 6, 30)) == Utc(2026, 3, 8, 7, 30));
  // The southern hemisphere: Sydney, 2026-10-04, 02:00 AEST (16:00 UTC the
  // day before) is 03:00 AEDT.
  CHECK(NextIn("Australia/Sydney", "30 2 * * *", Utc(2026, 10, 3, 12)) == Utc(2026, 10, 3, 16));
  // Lord Howe Island moves its clock by 30 minutes: 02:00 is 02:30.
  CHECK(NextIn("Australia/Lord_Howe", "15 2 * * *", Utc(2026, 10, 3, 12)) == Utc(2026, 10, 3, 15, 30));
  CHECK(NextIn("Australia/Lord_Howe", "45 2 * * *", Utc(2026, 10, 3, 12)) == Utc(2026, 10, 3, 15, 45));
}

TEST_CASE("cron in a zone: the hour the clock shows twice", "[schedule][timezone]") {
  // New York, 2026-11-01: 02:00 EDT (06:00 UTC) is 01:00 EST.
  // Named hours: 01:30 fires the first time only (EDT), the next day as EST.
  CHECK(FiresIn("America/New_York", "30 1 * * *", Utc(2026, 10, 31), 3) ==
        std::vector<std::int64_t>{Utc(2026, 10, 31, 5, 30), Utc(2026, 11, 1, 5, 30), Utc(2026, 11, 2, 6, 30)});
  // Asked from inside the second pass: not again that day.
  CHECK(NextIn("America/New_York", "30 1 * * *", Utc(2026, 11, 1, 6, 10)) == Utc(2026, 11, 2, 6, 30));
  CHECK(FiresIn("America/New_York", "*/20 1 * * *", Utc(2026, 11, 1, 5, 30), 3) ==
        std::vector<std::int64_t>{Utc(2026, 11, 1, 5, 40), Utc(2026, 11, 2, 6), Utc(2026, 11, 2, 6, 20)});
  // The clock as it reads: the repeated hour fires twice, 30 minutes of
  // real time between fires throughout.
  CHECK(FiresIn("America/New_York", "*/30 * * * *", Utc(2026, 11, 1, 4, 45), 6) ==
        std::vector<std::int64_t>{Utc(2026, 11, 1, 5), Utc(2026, 11, 1, 5, 30), Utc(2026, 11, 1, 6),
                                  Utc(2026, 11, 1, 6, 30), Utc(2026, 11, 1, 7), Utc(2026, 11, 1, 7, 30)});
  // Sydney, 2026-04-05: 03:00 AEDT (16:00 UTC the day before) is 02:00
  // AEST. 02:30 fires at 02:30 AEDT only.
  CHECK(FiresIn("Australia/Sydney", "30 2 * * *", Utc(2026, 4, 4, 12), 2) ==
        std::vector<std::int64_t>{Utc(2026, 4, 4, 15, 30), Utc(2026, 4, 5, 16, 30)});
  // Lord Howe, 2026-04-05: 02:00 (+11) is 01:30 (+10:30).
  CHECK(FiresIn("Australia/Lord_Howe", "45 1 * * *", Utc(2026, 4, 4, 12), 2) ==
        std::vector<std::int64_t>{Utc(2026, 4, 4, 14, 45), Utc(2026, 4, 5, 15, 15)});
}

TEST_CASE("cron in a zone: past the zone file's last transition the last offset holds", "[schedule][timezone]") {
  // Debian's zone files list New York's transitions up to 2037; the library
  // reads no rule for later years (periodic/time_zone.h). Pinned so that a
  // reader that applies the rule shows up here, and docs/configuration.md
  // is changed with it.
  CHECK(NextIn("America/New_York", "0 12 1 7 *", Utc(2037, 1, 1)) == Utc(2037, 7, 1, 16));
  CHECK(NextIn("America/New_York", "0 12 1 7 *", Utc(2040, 1, 1)) == Utc(2040, 7, 1, 17));
}

TEST_CASE("time zones: unknown names are refused in one line", "[schedule][timezone]") {
  try {
    TimeZone::Locate("Mars/Olympus");
    FAIL("no error");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()) ==
          "timezone \"Mars/Olympus\": not in the system's time zone database (/usr/share/zoneinfo)");
  }
  CHECK_THROWS_AS(TimeZone::Locate(""), std::invalid_argument);
  CHECK_THROWS_AS(TimeZone::Locate("../../etc/passwd"), std::invalid_argument);
  // The host's zone: refused, hosts may differ.
  try {
    TimeZone::Locate("localtime");
    FAIL("no error");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).starts_with("timezone \"localtime\": the host's own zone"));
  }
  CHECK(TimeZone::Locate("Europe/Berlin").Name() == "Europe/Berlin");
}

// The rules of NextFireAfterIn, minute by minute from the zone's periods:
// each UTC minute whose clock reading matches fires, except (named hours) a
// reading the clock showed before, and at each jump forward (named hours)
// once when a skipped reading matches.
std::optional<std::int64_t> BruteForceIn(const TimeZone& zone, const CronSchedule& cron, bool hours_named,
                                          std::int64_t after, std::int64_t span) {
  const std::int64_t start = (after / 60) * 60 - 4 * 3600;  // readings shown before `after` too
  std::set<std::int64_t> shown;
  for (std::int64_t s = start; s <= after + span; s += 60) {
    const TimeZone::Period p = zone.PeriodAt(s);
    const std::int64_t local = s + p.offset_seconds;
    bool fires = false;
    if (s == p.begin) {
      const TimeZone::Period before = zone.PeriodAt(s - 1);
      for (std::int64_t skipped = s + before.offset_seconds; skipped < local; skipped += 60) {
        if (hours_named && cron.Matches(skipped)) fires = true;
      }
    }
    if (cron.Matches(local) && (!hours_named || !shown.count(local))) fires = true;
    shown.insert(local);
    if (fires && s > after) return s;
  }
  return std::nullopt;
}

TEST_CASE("cron in a zone: randomized cross-check against brute force", "[schedule][timezone]") {
  std::mt19937_64 rng(20261208);
  const std::vector<std::string> zones = {"America/New_York", "Europe/London", "Australia/Sydney",
                                          "Australia/Lord_Howe", "America/Santiago", "Asia/Kathmandu"};
  // Schedules that fire at least once a day, named hours or not.
  const std::vector<std::pair<std::string, bool>> crons = {
      {"30 2 * * *", true},   {"0 1 * * *", true},    {"*/20 1,2,3 * * *", true}, {"45 0-4 * * *", true},
      {"*/15 * * * *", false}, {"30 * * * *", false},  {"0 */2 * * *", false},     {"*/7 * * * *", false},
      {"15 2 * * *", true},   {"0 23 * * *", true}};
  // Instants near the changes of 2026-2028 in both hemispheres, and
  // anywhere.
  std::vector<std::int64_t> changes;
  for (const std::string& name : zones) {
    const TimeZone zone = TimeZone::Locate(name);
    for (std::int64_t t = Utc(2026, 1, 1); t < Utc(2029, 1, 1);) {
      const TimeZone::Period p = zone.PeriodAt(t);
      if (p.end >= Utc(2029, 1, 1)) break;
      changes.push_back(p.end);
      t = p.end;
    }
  }
  REQUIRE(changes.size() > 20);
  int checked = 0;
  for (int i = 0; i < 3000; ++i) {
    const std::string& name = zones[rng() % zones.size()];
    const TimeZone zone = TimeZone::Locate(name);
    const auto& [text, named] = crons[rng() % crons.size()];
    const CronSchedule cron = CronSchedule::Parse(text);
    std::int64_t t = rng() % 4 == 0 ? Utc(2026, 1, 1) + static_cast<std::int64_t>(rng() % (3 * 365 * 86400))
                                    : changes[rng() % changes.size()] - 3 * 3600 +
                                          static_cast<std::int64_t>(rng() % (6 * 3600));
    for (int k = 0; k < 4; ++k) {
      const std::optional<std::int64_t> want = BruteForceIn(zone, cron, named, t, 2 * 86400);
      const std::optional<std::int64_t> got = cron.NextFireAfterIn(zone, t);
      INFO(name << " cron \"" << text << "\" after " << t);
      REQUIRE(want.has_value());
      REQUIRE(got == want);
      ++checked;
      t = rng() % 2 == 0 ? *got : *got + static_cast<std::int64_t>(rng() % 119) - 59;
    }
  }
  CHECK(checked == 12000);
}

}  // namespace
}  // namespace akadzed
