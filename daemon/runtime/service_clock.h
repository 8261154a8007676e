// Where the daemon's loops read the time: SteadyServiceClock() in the
// daemon, a clock moved by hand in tests (tests/support/manual_clock.h), so
// that a loop's round can be driven and checked without sleeping. Now() is
// the steady time every interval, deadline and backoff is measured on;
// WallNow() the calendar time (the periodic scheduler's fire instants).
// The daemon makes one and hands it to every loop owner (worker/daemon.h).
//
// Thread-safety: Now() and WallNow() may be called from any thread.
#pragma once

#include <chrono>

namespace akadzed {

class ServiceClock {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  using wall_time_point = std::chrono::system_clock::time_point;
  virtual ~ServiceClock() = default;
  virtual time_point Now() const = 0;
  virtual wall_time_point WallNow() const = 0;
};

// The real clocks: std::chrono::steady_clock for Now(), and
// std::chrono::system_clock for WallNow().
const ServiceClock& SteadyServiceClock();

}  // namespace akadzed
