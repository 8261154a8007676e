#include "periodic/time_zone.h"

#include <chrono>
#include <stdexcept>

#include <date/tz.h>
#include <fmt/format.h>

namespace akadzed {

TimeZone TimeZone::Locate(std::string_view name) {
  // The database's `localtime` is a link to the host's /etc/localtime:
  // daemons on hosts set to different zones would compute different fire
  // instants, and each would enqueue its own.
  if (name == "localtime") {
    throw std::invalid_argument(
        "timezone \"localtime\": the host's own zone, which may differ between hosts; name the zone "
        "(e.g. Europe/Berlin)");
  }
  try {
    const date::time_zone* zone = date::locate_zone(std::string(name));
    // Its file is read at the first lookup: here, at config load, so that
    // a schedule's evaluation reads memory only.
    zone->get_info(date::sys_seconds{});
    return TimeZone(zone);
  } catch (const std::runtime_error&) {
    // The library's message names the zone only: say where it looked.
    throw std::invalid_argument(
        fmt::format("timezone \"{}\": not in the system's time zone database (/usr/share/zoneinfo)", name));
  }
}

TimeZone::Period TimeZone::PeriodAt(std::int64_t unix_seconds) const {
  const date::sys_info info = zone_->get_info(date::sys_seconds{std::chrono::seconds{unix_seconds}});
  return Period{info.begin.time_since_epoch().count(), info.end.time_since_epoch().count(), info.offset.count(),
                info.abbrev};
}

const std::string& TimeZone::Name() const { return zone_->name(); }

}  // namespace akadzed
