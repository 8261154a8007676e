// The service kit: what every background loop of the daemon shares (the
// finisher, the claim loops, the lease keeper, the pruner, the periodic
// scheduler, the notify listener, the database gauges and the metrics
// listener's threads), in the spirit of
// River's startstop: one thread, one stop, the time of the last round for
// the watchdog, an injected clock, and one error guard (RoundGuard) that
// classifies a failed round as an outage, a COMMIT in doubt, an SQL error or
// anything else, with the backoff and the outage log.
//
//   ServiceClock  where a loop reads the time; SteadyServiceClock() in the
//                 daemon, a hand-moved clock in tests, so that a round can be
//                 driven and checked without sleeping.
//   ServiceLoop   the thread, its stop (a flag under the loop's mutex, a
//                 condition variable, and an eventfd for loops that poll a
//                 socket), Wait helpers that also wake on stop, and the time
//                 of the last round.
//   RoundGuard    a round's failure classified, counted and paced.
//
// A loop owns a ServiceLoop and a RoundGuard; its body is a plain
// `while (!loop.WaitFor(...)) { try { Round(); } catch (...) { guard... } }`
// and its Round() is a public function a test can call with the thread never
// started.
//
// Thread-safety: Start, Stop and RequestStop are for the loop's owner (one
// thread); StartLocked for the owner or the loop's own threads, with mu()
// held and before the stop; Notify, stop_requested, last_round and the Wait
// functions may be called from any thread. The loop's mutex (mu()) is the owner's to guard
// the state it shares with the thread; no other lock may be taken while it
// is held, except those the owner documents.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <spdlog/common.h>

#include "core/thread_annotations.h"
#include "runtime/outage_log.h"
#include "runtime/service_clock.h"
#include "runtime/loop_backoff.h"

namespace akadzed {

// Names the calling thread as `top -H`, `ps -L` and `perf` show it (the
// first 15 bytes): "claim <queue>", "exec <queue>", "finisher", ...
void NameCurrentThread(const std::string& name);

class ServiceLoop {
 public:
  using Duration = std::chrono::microseconds;

  explicit ServiceLoop(const ServiceClock& clock = SteadyServiceClock());
  // A loop whose mu() is `shared`, its owner's mutex (which must outlive
  // it), not one of its own: for two loops of one owner that guard one
  // state (a queue's claim loop and its executor pool, worker/executor_pool.h).
  // Each keeps its own stop, condition and threads.
  ServiceLoop(const ServiceClock& clock, Mutex& shared);
  // Stops and joins the thread if it still runs.
  ~ServiceLoop();
  ServiceLoop(const ServiceLoop&) = delete;
  ServiceLoop& operator=(const ServiceLoop&) = delete;

  // Runs `body` on a new thread named `name` (NameCurrentThread); it should
  // return soon after stop is requested (every Wait function returns true
  // then). A loop may start more than one thread (the lease keeper's
  // timer): they share the stop, the mutex and the condition, and Stop joins
  // them all.
  void Start(std::string name, std::function<void()> body) EXCLUDES(mu_);
  // Start for a caller that holds mu(): a pool whose threads start more of
  // their own (worker/executor_pool.h). Throws std::system_error when no
  // thread can be started; then nothing changed.
  void StartLocked(std::string name, std::function<void()> body) REQUIRES(mu_);
  // Requests the stop: sets the flag, wakes every Wait and signals stop_fd().
  void RequestStop() EXCLUDES(mu_);
  // RequestStop, then joins the threads (if any was started). Idempotent.
  void Stop() EXCLUDES(mu_);
  // True once Start was called. The _locked form requires mu().
  bool started() const EXCLUDES(mu_);
  bool started_locked() const REQUIRES(mu_) { return started_; }

  // The loop's mutex and condition: the owner guards the state it shares
  // with the thread by mu() and wakes the thread with Notify().
  Mutex& mu() const RETURN_CAPABILITY(mu_) { return mu_; }
  void Notify() { cv_.notify_all(); }
  // Tells clang's analysis that the caller holds mu() by another name: a
  // loop made on a shared mutex, or a callback its owner runs under it (it
  // cannot see that the two names are one mutex). Checks nothing at run
  // time.
  void AssertHeld() const ASSERT_CAPABILITY(mu_) {}

  // True once stop was requested. The _locked form requires mu().
  bool stop_requested() const EXCLUDES(mu_);
  bool stop_requested_locked() const REQUIRES(mu_) { return stopping_; }

  // With `lock` holding mu(): waits until `ready()`, the stop, or the
  // timeout or deadline; returns true when stop was requested.
  //
  // `ready` runs with mu() held: a lambda reading guarded members says so
  // with REQUIRES(loop.mu()). (The condition calls it from the standard
  // library, where clang's analysis does not look, with mu() held; the
  // kit's own wrapper is exempt because clang cannot see that `this->mu_`
  // and the caller's `loop_.mu()` are one mutex.)
  template <typename Ready>
  bool WaitFor(MutexLock& lock, Duration timeout, Ready&& ready) REQUIRES(mu_) {
    cv_.wait_for(lock, timeout, [&]() NO_THREAD_SAFETY_ANALYSIS { return stopping_ || ready(); });
    return stopping_;
  }
  // `deadline` is on the loop's clock: the wait lasts from its Now() to
  // the deadline.
  template <typename Ready>
  bool WaitUntil(MutexLock& lock, ServiceClock::time_point deadline, Ready&& ready) REQUIRES(mu_) {
    cv_.wait_for(lock, deadline - clock_.Now(), [&]() NO_THREAD_SAFETY_ANALYSIS { return stopping_ || ready(); });
    return stopping_;
  }
  template <typename Ready>
  void Wait(MutexLock& lock, Ready&& ready) REQUIRES(mu_) {
    cv_.wait(lock, [&]() NO_THREAD_SAFETY_ANALYSIS { return stopping_ || ready(); });
  }
  // Waits until `ready()` or the timeout, NOT woken by the stop: for a loop
  // that keeps working for a while after stop is requested (the finisher
  // writes what is pending until its deadline).
  template <typename Ready>
  void WaitForIgnoringStop(MutexLock& lock, Duration timeout, Ready&& ready) REQUIRES(mu_) {
    cv_.wait_for(lock, timeout, std::forward<Ready>(ready));
  }
  // Sleeps `timeout` or until stop (or a Notify); returns true when stop
  // was requested.
  bool Sleep(Duration timeout) EXCLUDES(mu_);

  // An eventfd that turns readable once stop is requested: for loops that
  // wait in poll(2) on a socket (the notify listener).
  int stop_fd() const { return stop_fd_; }

  // Records that a round finished now (by the clock), for the watchdog.
  void MarkRound() EXCLUDES(mu_);
  // When the last round finished; the start time before the first.
  ServiceClock::time_point last_round() const EXCLUDES(mu_);

  const ServiceClock& clock() const { return clock_; }

 private:
  ServiceLoop(const ServiceClock& clock, Mutex* shared);

  const ServiceClock& clock_;
  mutable Mutex own_mu_;  // mu_ unless the loop was made on a shared mutex
  Mutex& mu_;
  CondVar cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  bool started_ GUARDED_BY(mu_) = false;
  ServiceClock::time_point last_round_ GUARDED_BY(mu_);
  int stop_fd_ = -1;
  std::vector<std::thread> threads_ GUARDED_BY(mu_);
};

// How a round failed.
enum class RoundFailureKind {
  kOutage,    // the server is away (pg::ConnectionError): waiting fixes it
  kInDoubt,   // the connection broke during COMMIT (pg::InDoubtError)
  kSqlError,  // the server refused a statement (pg::SqlError, pg::PgError)
  kOther,     // anything else (a bug, a hook's refusal, out of memory)
};

const char* RoundFailureKindName(RoundFailureKind kind);

struct RoundFailure {
  RoundFailureKind kind = RoundFailureKind::kOther;
  // The level to log it at: an outage's first failure warn, its others
  // debug (OutageLog); a COMMIT in doubt and a transient SQL error warn;
  // other SQL errors and the rest error.
  spdlog::level::level_enum level = spdlog::level::err;
  std::string message;                  // e.what() on one line
  std::chrono::microseconds retry_in{0};  // the backoff's next wait
};

// One error guard per loop: call Succeeded() after a round that worked and
// Failed() from its catch. The call sites keep their literal log messages
// (the log grammar test reads them): `<loop>_failed | <message>` at
// RoundFailure::level, and `<loop>_recovered failures=N outage_ms=T` from
// what Succeeded() returns.
//
// Thread-safety: owned and used by the loop's thread (and tests).
class RoundGuard {
 public:
  RoundGuard(const ServiceClock& clock, LoopBackoff backoff);

  // The round worked: resets the backoff; returns the outage it ends.
  std::optional<OutageLog::Ended> Succeeded();
  // The round threw `error` (std::current_exception() in the catch): classifies
  // it by pg::ErrorKindOf, counts an outage once (OutageLog), and says how
  // to log it and how long to wait before the next try.
  RoundFailure Failed(const std::exception_ptr& error);
  // A round that failed without an exception (e.g. a hook refused a finish).
  RoundFailure Failed(RoundFailureKind kind, std::string message);

  // Failures since the last success.
  std::int64_t failures() const { return failures_; }

 private:
  // Counts a failure of `kind` and says how to log it and when to retry.
  RoundFailure Classify(RoundFailureKind kind, bool transient, std::string message);

  OutageLog outage_;
  LoopBackoff backoff_;
  std::int64_t failures_ = 0;
};

}  // namespace akadzed
