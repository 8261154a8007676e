// Where the daemon's loops read the time: SteadyServiceClock() in the
// daemon, a clock moved by hand in tests (tests/support/manual_clock.h), so
// that a loop's round can be driven and checked without sleeping.
//
// Thread-safety: Now() may be called from any thread.
#pragma once

#include <chrono>

namespace akadzed {

class ServiceClock {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  virtual ~ServiceClock() = default;
  virtual time_point Now() const = 0;
};

// std::chrono::steady_clock: the daemon's clock.
const ServiceClock& SteadyServiceClock();

}  // namespace akadzed
