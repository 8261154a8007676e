// RunningJobs: runs are keyed by (job id, run_count), so a job rescued from
// this daemon and claimed here again has two runs that both stay stoppable.
#include <catch2/catch.hpp>

#include <poll.h>

#include "worker/running_jobs.h"

namespace akadzed {
namespace {

TEST_CASE("two runs of one job are stopped and removed separately", "[running]") {
  RunningJobs running;
  JobStop first, second;
  running.Add(7, 1, &first);
  running.Add(7, 2, &second);
  CHECK(running.size() == 2);
  CHECK(running.RequestStop(7, 1, StopReason::kLeaseLost));
  CHECK(first.reason() == StopReason::kLeaseLost);
  CHECK_FALSE(second.requested());
  running.Remove(7, 1);
  CHECK(running.Snapshot() == std::vector<std::pair<std::int64_t, std::int32_t>>{{7, 2}});
  CHECK_FALSE(running.RequestStop(7, 1, StopReason::kCancelRequested));
  CHECK(running.RequestStop(7, 2, StopReason::kCancelRequested));
  CHECK(second.reason() == StopReason::kCancelRequested);
}

// An executor keeps one stop handle for all its jobs (executor_pool.h, job_runner.cpp).
TEST_CASE("a stop handle reset for the next job is as new: no reason, its fd quiet until the next request",
          "[running]") {
  const auto readable = [](const JobStop& stop) {
    pollfd fd{stop.wake_fd(), POLLIN, 0};
    return poll(&fd, 1, 0) == 1;
  };
  JobStop stop;
  stop.Reset();  // a handle never requested stays as it is
  CHECK_FALSE(stop.requested());
  CHECK_FALSE(readable(stop));
  stop.Request(StopReason::kCancelRequested);
  stop.Request(StopReason::kShutdown);  // the first reason wins
  CHECK(stop.reason() == StopReason::kCancelRequested);
  CHECK(readable(stop));
  stop.Reset();
  CHECK_FALSE(stop.requested());
  CHECK_FALSE(readable(stop));
  stop.Request(StopReason::kLeaseLost);
  CHECK(stop.reason() == StopReason::kLeaseLost);
  CHECK(readable(stop));
}

TEST_CASE("a latched stop reaches runs added later; the first reason wins", "[running]") {
  RunningJobs running;
  JobStop before, after, unlatched;
  running.Add(1, 1, &before);
  CHECK(running.RequestStopAll(StopReason::kLeaseLost) == 1);
  running.Add(2, 1, &unlatched);
  CHECK_FALSE(unlatched.requested());
  CHECK(running.RequestStopAll(StopReason::kShutdown, /*latch=*/true) == 2);
  CHECK(before.reason() == StopReason::kLeaseLost);
  running.Add(3, 1, &after);
  CHECK(after.reason() == StopReason::kShutdown);
}

}  // namespace
}  // namespace akadzed
