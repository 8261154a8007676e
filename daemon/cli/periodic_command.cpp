// `akadzed periodic next NAME`: a periodic entry's next fire instants, as the
// daemon's scheduler computes them (Schedule::NextFireAfterUs), to check a
// schedule before it runs: a cron in a time zone across a daylight-saving
// change, a day-of-month that does not come every month.
#include <time.h>

#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "config/config.h"
#include "core/config_error.h"
#include "periodic/schedule.h"

namespace akadzed::cli {
namespace {

struct PeriodicNextOptions {
  std::string config_path;
  std::string name;
  int count = 5;
  std::string after;  // "" = now
  bool json = false;
};

// Unix seconds of UTC shifted by `offset_seconds`, as `YYYY-MM-DD`
// `separator` `HH:MM:SS` (years 1-9999: the schedules' range).
std::string Civil(std::int64_t unix_seconds, std::int64_t offset_seconds, char separator) {
  const time_t t = static_cast<time_t>(unix_seconds + offset_seconds);
  struct tm tm {};
  gmtime_r(&t, &tm);
  return fmt::format("{:04}-{:02}-{:02}{}{:02}:{:02}:{:02}", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, separator,
                     tm.tm_hour, tm.tm_min, tm.tm_sec);
}

// `YYYY-MM-DDTHH:MM:SSZ` as Unix seconds; invalid_argument otherwise,
// also for a time that does not exist (02-30, 24:00, 23:59:60), which the
// parse alone would carry over into the next day.
std::int64_t ParseUtc(const std::string& text) {
  struct tm tm {};
  const char* end = strptime(text.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm);
  const std::int64_t seconds = static_cast<std::int64_t>(timegm(&tm));
  if (end == nullptr || *end != '\0' || Civil(seconds, 0, 'T') + "Z" != text) {
    throw std::invalid_argument(
        fmt::format("--after \"{}\": expected a UTC time as YYYY-MM-DDTHH:MM:SSZ", text));
  }
  return seconds;
}

int PeriodicNext(const PeriodicNextOptions& o) {
  DaemonConfig config;
  try {
    config = LoadConfigFile(o.config_path);
  } catch (const ConfigError& e) {
    PrintError("akadzed periodic next", e.what());
    return kExitConfig;
  }
  const PeriodicConfig* entry = nullptr;
  std::string names;
  for (const PeriodicConfig& p : config.periodic) {
    if (p.name == o.name) entry = &p;
    names += (names.empty() ? "" : ", ") + p.name;
  }
  if (entry == nullptr) {
    throw std::invalid_argument(fmt::format("no periodic entry \"{}\" in {} (entries: {})", o.name, o.config_path,
                                            names.empty() ? "none" : names));
  }
  std::int64_t from_us = o.after.empty() ? static_cast<std::int64_t>(time(nullptr)) * 1'000'000
                                         : ParseUtc(o.after) * 1'000'000;
  nlohmann::json fires = nlohmann::json::array();
  if (!o.json) std::cout << entry->name << ": " << entry->schedule.Describe() << "\n";
  for (int i = 0; i < o.count; ++i) {
    const std::optional<std::int64_t> next = entry->schedule.NextFireAfterUs(from_us);
    if (!next) {
      if (!o.json) std::cout << "(no further fire within the search horizon)\n";
      break;
    }
    from_us = *next;
    const std::int64_t s = *next / 1'000'000;
    const std::string utc = Civil(s, 0, 'T') + "Z";
    std::int64_t offset = 0;
    std::string abbreviation = "UTC";
    if (entry->schedule.zone) {
      const TimeZone::Period period = entry->schedule.zone->PeriodAt(s);
      offset = period.offset_seconds;
      abbreviation = period.abbreviation;
    }
    const std::string local = Civil(s, offset, ' ');
    if (o.json) {
      fires.push_back({{"utc", utc},
                       {"local", local},
                       {"utc_offset_seconds", offset},
                       {"abbreviation", abbreviation}});
    } else {
      std::cout << utc << "  " << local << " " << abbreviation << "\n";
    }
  }
  if (o.json) {
    std::cout << nlohmann::json{{"name", entry->name}, {"schedule", entry->schedule.Describe()}, {"fires", fires}}
                     .dump()
              << "\n";
  }
  std::cout.flush();
  return kExitOk;
}

}  // namespace

void AddPeriodicCommand(CLI::App& app, Action& action) {
  CLI::App* periodic = app.add_subcommand("periodic", "Check periodic entries' schedules");
  periodic->require_subcommand(1);
  auto options = std::make_shared<PeriodicNextOptions>();
  CLI::App* next = periodic->add_subcommand(
      "next", "Print the next fire instants of a periodic entry, in UTC and in its time zone");
  next->add_option("name", options->name, "The entry's name (its key under periodic:)")->required();
  next->add_option("--config,-c", options->config_path, "YAML config file (docs/configuration.md)")->required();
  next->add_option("--count,-n", options->count, "How many fire instants (1-1000)")
      ->check(CLI::Range(1, 1000));
  next->add_option("--after", options->after, "Start after this UTC time (YYYY-MM-DDTHH:MM:SSZ), not now");
  next->add_flag("--json", options->json, "One JSON object: name, schedule, fires [{utc, local, ...}]");
  next->callback([&action, options] {
    action = [options] { return RunCommand("akadzed periodic next", [&] { return PeriodicNext(*options); }); };
  });
}

}  // namespace akadzed::cli
