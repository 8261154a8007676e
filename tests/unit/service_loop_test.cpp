// The service kit (runtime/service_loop.h): how RoundGuard sorts a failed
// round (outage, COMMIT in doubt, SQL error, other), the level each is
// logged at, the backoff, the outage measured on an injected clock; and
// ServiceLoop's start, stop, waits and last round; PeriodicService's guarded
// round (runtime/periodic_service.h).
#include <catch2/catch.hpp>

#include <poll.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "pg/pg_error.h"
#include "runtime/periodic_service.h"
#include "runtime/service_loop.h"
#include "support/log_capture.h"
#include "support/manual_clock.h"

namespace akadzed {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

RoundGuard Guard(const ServiceClock& clock) {
  return RoundGuard(clock, LoopBackoff(milliseconds(100), milliseconds(400)));
}

TEST_CASE("RoundGuard sorts failures and logs an outage once", "[kit]") {
  test::ManualClock clock;
  RoundGuard guard = Guard(clock);

  const RoundFailure first = guard.Failed(std::make_exception_ptr(pg::ConnectionError("server closed the connection\nunexpectedly", "08006")));
  CHECK(first.kind == RoundFailureKind::kOutage);
  CHECK(first.level == spdlog::level::warn);
  CHECK(first.message == "server closed the connection unexpectedly");
  CHECK(first.retry_in >= milliseconds(50));
  CHECK(first.retry_in <= milliseconds(150));

  clock.Advance(milliseconds(2500));
  const RoundFailure second = guard.Failed(std::make_exception_ptr(pg::ConnectionError("refused", "")));
  CHECK(second.kind == RoundFailureKind::kOutage);
  CHECK(second.level == spdlog::level::debug);  // the outage was logged already
  CHECK(second.retry_in >= milliseconds(100));  // doubled: 200 ms * [0.5, 1.5]
  CHECK(second.retry_in <= milliseconds(300));

  clock.Advance(milliseconds(500));
  auto ended = guard.Succeeded();
  REQUIRE(ended);
  CHECK(ended->failures == 2);
  CHECK(ended->ms == 3000);  // from the first failure, on the injected clock
  CHECK_FALSE(guard.Succeeded());

  // After a success the backoff starts over.
  CHECK(guard.Failed(std::make_exception_ptr(std::runtime_error("x"))).retry_in <= milliseconds(150));
}

TEST_CASE("RoundGuard: in doubt, transient, SQL and other errors", "[kit]") {
  test::ManualClock clock;
  RoundGuard guard = Guard(clock);
  const RoundFailure in_doubt = guard.Failed(std::make_exception_ptr(pg::InDoubtError("lost during COMMIT", "")));
  CHECK(in_doubt.kind == RoundFailureKind::kInDoubt);
  CHECK(in_doubt.level == spdlog::level::warn);
  const RoundFailure transient = guard.Failed(std::make_exception_ptr(pg::TransientError("deadlock detected", "40P01")));
  CHECK(transient.kind == RoundFailureKind::kSqlError);
  CHECK(transient.level == spdlog::level::warn);
  const RoundFailure sql = guard.Failed(std::make_exception_ptr(pg::SqlError("permission denied", "42501")));
  CHECK(sql.kind == RoundFailureKind::kSqlError);
  CHECK(sql.level == spdlog::level::err);
  const RoundFailure other = guard.Failed(std::make_exception_ptr(std::logic_error("bug")));
  CHECK(other.kind == RoundFailureKind::kOther);
  CHECK(other.level == spdlog::level::err);
  CHECK(guard.Failed(std::make_exception_ptr(42)).message == "unknown exception");
  CHECK(guard.failures() == 5);
  CHECK(std::string(RoundFailureKindName(RoundFailureKind::kInDoubt)) == "in_doubt");
  // The in-doubt failure counted as an outage, so the success ends one.
  auto ended = guard.Succeeded();
  REQUIRE(ended);
  CHECK(ended->failures == 1);
}

TEST_CASE("ServiceLoop: a stop wakes every wait, the stop fd and joins the threads", "[kit]") {
  test::ManualClock clock;
  ServiceLoop loop(clock);
  CHECK_FALSE(loop.started());
  const auto started_at = loop.last_round();
  clock.Advance(milliseconds(7));
  loop.MarkRound();
  CHECK(loop.last_round() - started_at == milliseconds(7));

  std::atomic<int> rounds{0};
  std::atomic<bool> returned{false};
  std::string thread_name;  // read after Stop joined the thread
  loop.Start("a long loop name", [&] {
    char name[16] = {};
    pthread_getname_np(pthread_self(), name, sizeof name);
    thread_name = name;
    while (!loop.Sleep(std::chrono::hours(1))) ++rounds;  // only a stop ends this wait
    returned = true;
  });
  std::atomic<bool> second_returned{false};
  loop.Start("second", [&] {
    MutexLock lock(loop.mu());
    loop.Wait(lock, [] { return false; });
    second_returned = loop.stop_requested_locked();
  });
  CHECK(loop.started());
  pollfd fd{loop.stop_fd(), POLLIN, 0};
  CHECK(poll(&fd, 1, 0) == 0);
  loop.Notify();  // a notify alone does not end a Sleep
  loop.Stop();
  CHECK(returned);
  CHECK(thread_name == "a long loop nam");  // the kernel keeps 15 bytes
  // Never cut inside a UTF-8 character: byte 15 is the second of "е".
  std::string cut;
  std::thread([&] {
    NameCurrentThread("claim очередь");
    char name[16] = {};
    pthread_getname_np(pthread_self(), name, sizeof name);
    cut = name;
  }).join();
  CHECK(cut == "claim очер");
  CHECK(second_returned);
  CHECK(rounds == 0);
  CHECK(poll(&fd, 1, 0) == 1);
  CHECK(loop.stop_requested());
  loop.Stop();  // idempotent
}

// A service whose rounds do what the test says next: throw, send nothing,
// or work.
class ScriptedService final : public PeriodicService {
 public:
  ScriptedService(Duty duty, const ServiceClock& clock) : PeriodicService(std::move(duty), clock) {}
  ~ScriptedService() override { Stop(); }
  std::exception_ptr next_error;
  bool next_sent = true;

 private:
  bool Round() override {
    if (next_error) std::rethrow_exception(std::exchange(next_error, nullptr));
    return next_sent;
  }
};

TEST_CASE("PeriodicService: a guarded round logs <duty>_failed capped at its level, calls on_failure, "
          "ends an outage with <duty>_recovered, says nothing when it sent nothing, and marks each round",
          "[kit]") {
  test::LogCapture logs;
  test::ManualClock clock;
  std::vector<RoundFailureKind> failures;
  ScriptedService service({.name = "counts", .thread = "counts", .interval = milliseconds(100),
                           .level_cap = spdlog::level::warn,
                           .on_failure = [&](const RoundFailure& f) { failures.push_back(f.kind); }},
                          clock);

  service.next_error = std::make_exception_ptr(pg::SqlError("permission denied", "42501"));
  service.RunRound();
  CHECK(logs.Take() == "warning counts_failed | permission denied\n");  // error, capped at warn
  service.next_error = std::make_exception_ptr(pg::ConnectionError("server gone", "08006"));
  service.RunRound();
  CHECK(logs.Take() == "warning counts_failed | server gone\n");
  clock.Advance(milliseconds(250));
  service.next_error = std::make_exception_ptr(pg::ConnectionError("server gone", "08006"));
  service.RunRound();
  CHECK(logs.Take() == "debug counts_failed | server gone\n");  // the outage is logged once
  CHECK(failures == std::vector<RoundFailureKind>{RoundFailureKind::kSqlError, RoundFailureKind::kOutage,
                                                   RoundFailureKind::kOutage});

  clock.Advance(milliseconds(250));
  service.next_sent = false;
  service.RunRound();  // sent nothing: no success counted, nothing said
  CHECK(logs.Take().empty());
  CHECK(service.last_round() == clock.Now());
  clock.Advance(milliseconds(500));
  service.next_sent = true;
  service.RunRound();
  CHECK(logs.Take() == "info counts_recovered failures=2 outage_ms=1000\n");
  CHECK(service.last_round() == clock.Now());
  service.RunRound();
  CHECK(logs.Take().empty());
}

TEST_CASE("PeriodicService: a duty's name is a word of [a-z_], the log lines' event prefix", "[kit]") {
  test::ManualClock clock;
  const auto make = [&](const std::string& name) { ScriptedService service({.name = name, .thread = "x"}, clock); };
  CHECK_THROWS_AS(make("finish counts"), std::invalid_argument);
  CHECK_THROWS_AS(make("Finish"), std::invalid_argument);
  CHECK_THROWS_AS(make(""), std::invalid_argument);
  CHECK_NOTHROW(make("finish_counts"));
}

}  // namespace
}  // namespace akadzed
