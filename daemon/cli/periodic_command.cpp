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

// Unix seconds as `YYYY-MM-DD HH:MM:SS` of UTC shifted by `offset_seconds`.
std::string Civil(std::int64_t unix_seconds, std::int64_t offset_seconds) {
  const time_t t = static_cast<time_t>(unix_seconds + offset_seconds);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char text[32];
  strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &tm);
  return text;
}

// `YYYY-MM-DDTHH:MM:SSZ` as Unix seconds; invalid_argument otherwise.
std::int64_t ParseUtc(const std::string& text) {
  struct tm tm {};
  const char* end = strptime(text.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm);
  if (end == nullptr || *end != '\0') {
    throw std::invalid_argument(
        fmt::format("--after \"{}\": expected a UTC time as YYYY-MM-DDTHH:MM:SSZ", text));
  }
  return static_cast<std::int64_t>(timegm(&tm));
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
    const std::string utc = Civil(s, 0);
    std::int64_t offset = 0;
    std::string abbreviation = "UTC";
    if (entry->schedule.zone) {
      const TimeZone::Period period = entry->schedule.zone->PeriodAt(s);
      offset = period.offset_seconds;
      abbreviation = period.abbreviation;
    }
    const std::string local = Civil(s, offset);
    if (o.json) {
      fires.push_back({{"utc", utc.substr(0, 10) + "T" + utc.substr(11) + "Z"},
                       {"local", local},
                       {"utc_offset_seconds", offset},
                       {"abbreviation", abbreviation}});
    } else {
      std::cout << utc.substr(0, 10) << "T" << utc.substr(11) << "Z  " << local << " " << abbreviation << "\n";
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
