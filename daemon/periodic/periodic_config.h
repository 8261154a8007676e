// What periodic[] in the config file says (docs/configuration.md): the
// periodic room owns it; config/ only parses into it.
#pragma once

#include <cstdint>
#include <string>

#include "periodic/schedule.h"

namespace akadzed {

// One periodic entry: a job of `task` enqueued at every fire instant of
// `schedule`, by whichever daemon records the fire first in
// akadze.periodic_runs.
struct PeriodicConfig {
  std::string name;                              // key in periodic_runs
  Schedule schedule = Schedule{EverySchedule(60'000'000), std::nullopt};
  std::string task;                              // defaults to the name
  std::string queue = "default";
  std::string args_json = "{}";                  // `args:` mapping as JSON
  int priority = 0;                              // -32768..32767
  int max_attempts = 3;                          // >= 1
  // false: no new job while the previous one of this entry is queued or
  // running (unique_key 'periodic:<name>').
  bool overlap = true;
  // A fire older than this is skipped, never backfilled (a daemon that was
  // down for a day does not enqueue a day of jobs).
  std::int64_t grace_us = 60'000'000;
  int line = 0;
};

}  // namespace akadzed
