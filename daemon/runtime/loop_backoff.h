// The wait between retries of a loop whose database calls fail: it doubles
// from `initial` up to `cap`, and each wait is drawn from 0.5 to 1.5 times
// the current value, so daemons that lost the database together (a restart,
// a failover) do not all come back at the same instant. Reset() after a
// success starts the next outage from `initial` again.
//
// It paces a loop's retries (RoundGuard), not a job's: the delay before a
// failed job runs again is akadze's rule, RetryBackoffSeconds in
// store/job_finish.h.
//
// Thread-safety: owned and used by one thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <random>

namespace akadzed {

class LoopBackoff {
 public:
  using Duration = std::chrono::microseconds;

  // Requires 0 < initial <= cap.
  LoopBackoff(Duration initial, Duration cap) : initial_(initial), cap_(cap), current_(initial) {}

  // The wait before the next retry; doubles the one after it (up to cap).
  Duration Next() {
    const auto wait = std::chrono::duration_cast<Duration>(current_ * spread_(rng_));
    current_ = std::min<Duration>(current_ * 2, cap_);
    return wait;
  }

  // After a success: the next failure waits about `initial` again.
  void Reset() { current_ = initial_; }

 private:
  Duration initial_;
  Duration cap_;
  Duration current_;
  std::mt19937_64 rng_{std::random_device{}()};
  std::uniform_real_distribution<double> spread_{0.5, 1.5};
};

}  // namespace akadzed
