// The bookkeeping that logs a loop's database outage once, not once per
// retry. The first connection failure of an outage is logged at warn with the
// error, further failures while it lasts at debug, and the first success
// after it as one info line with the outage's length and failure count. So a
// PostgreSQL restart costs each loop two lines at info level, however long it
// lasts and however often the loop retries. Only connection-level errors
// (pg::ConnectionError: the server is away) make an outage; callers log other
// errors each time, as waiting does not fix them.
//
// The call sites keep their literal messages (the log grammar test reads
// them): the level of a failure's line comes from Failure(), and a success
// that ends an outage is logged as `<loop>_recovered ... failures=N
// outage_ms=T` from what Success() returns.
//
// The time comes from a ServiceClock (runtime/service_clock.h).
//
// Thread-safety: owned and used by one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

#include <spdlog/common.h>

#include "runtime/service_clock.h"

namespace akadzed {

class OutageLog {
 public:
  explicit OutageLog(const ServiceClock& clock = SteadyServiceClock()) : clock_(&clock) {}

  struct Ended {
    std::int64_t failures = 0;
    std::int64_t ms = 0;  // from the first failure to this success
  };

  // Counts a connection failure; returns the level to log it at: warn for
  // the first of an outage, debug for the others.
  spdlog::level::level_enum Failure() {
    if (failures_++ > 0) return spdlog::level::debug;
    since_ = clock_->Now();
    return spdlog::level::warn;
  }

  // Counts a success; returns the outage it ends, if one was going on.
  std::optional<Ended> Success() {
    if (failures_ == 0) return std::nullopt;
    Ended ended{failures_, std::chrono::duration_cast<std::chrono::milliseconds>(
                               clock_->Now() - since_)
                               .count()};
    failures_ = 0;
    return ended;
  }

  std::int64_t failures() const { return failures_; }

 private:
  const ServiceClock* clock_;
  std::int64_t failures_ = 0;
  std::chrono::steady_clock::time_point since_{};
};

}  // namespace akadzed
