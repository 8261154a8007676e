// A ServiceClock (runtime/service_clock.h) that moves only when a test moves
// it: a loop's round driven with it reads exactly the times the test set,
// with no sleep.
//
// Thread-safety: Now() and Advance() may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>

#include "runtime/service_clock.h"

namespace akadzed::test {

class ManualClock final : public ServiceClock {
 public:
  // Starts at the real clocks' now, so that times it hands out compare
  // sensibly with real ones; Advance moves both its times together.
  ManualClock()
      : start_(std::chrono::steady_clock::now()),
        wall_start_(std::chrono::system_clock::now()),
        now_(start_.time_since_epoch().count()) {}

  time_point Now() const override { return time_point(time_point::duration(now_.load())); }
  wall_time_point WallNow() const override {
    return wall_start_ + std::chrono::duration_cast<wall_time_point::duration>(Now() - start_);
  }
  void Advance(std::chrono::microseconds by) {
    now_ += std::chrono::duration_cast<time_point::duration>(by).count();
  }

 private:
  const time_point start_;
  const wall_time_point wall_start_;
  std::atomic<time_point::rep> now_;
};

}  // namespace akadzed::test
