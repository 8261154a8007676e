// A time zone of the system's database (/usr/share/zoneinfo, the tzdata
// package), for cron schedules evaluated in local time (periodic/schedule.h).
// Read through Howard Hinnant's date library (libdate-tz, built on Debian
// with USE_OS_TZDB: it reads the compiled zone files, so a tzdata update
// applies at the next start without a rebuild).
//
// What it answers: the period of constant UTC offset around an instant.
// Beyond the last transition the zone's file records (2037 for the zones
// with daylight saving time in Debian's files: the library does not read
// the file's rule for later years), the last period's offset holds.
//
// Thread-safety: an immutable value (a pointer into the library's database,
// which lives until exit and loads each zone's transitions once, under a
// std::once_flag); any number of threads may call PeriodAt at once.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace date {
class time_zone;
}

namespace akadzed {

class TimeZone {
 public:
  // The zone named `name` (an IANA name: "America/New_York", "UTC").
  // Throws std::invalid_argument with a one-line message when the database
  // has no such zone, or for `localtime` (the host's zone: hosts may
  // differ, and every daemon must compute the same fire instants), e.g.
  //   timezone "Mars/Olympus": not in the system's time zone database (/usr/share/zoneinfo)
  static TimeZone Locate(std::string_view name);

  // The period of one UTC offset that holds `unix_seconds`: [begin, end)
  // in Unix seconds, the offset (local = UTC + offset) and its
  // abbreviation ("EST").
  struct Period {
    std::int64_t begin = 0;
    std::int64_t end = 0;
    std::int64_t offset_seconds = 0;
    std::string abbreviation;
  };
  Period PeriodAt(std::int64_t unix_seconds) const;

  const std::string& Name() const;

 private:
  explicit TimeZone(const date::time_zone* zone) : zone_(zone) {}
  const date::time_zone* zone_;
};

}  // namespace akadzed
