// One guarded periodic round: what the lease's four services (the rescue,
// the queued sweep, the progress and finish count writers; worker/) share.
// A service derives from PeriodicService and writes only its Round(); the
// base runs it every `interval` on a thread of its own (ServiceLoop), and
// RunRound() guards it (RoundGuard):
//
//   - a round that sent nothing (Round() returned false: nothing to write,
//     the connection not open, ...) says nothing of the database: no
//     success is counted, no line is logged;
//   - a round that worked ends an outage: `<duty>_recovered failures=N
//     outage_ms=T` at info;
//   - a round that threw is logged as `<duty>_failed | <message>` at the
//     guard's level (an outage at warn once, then debug), capped at
//     Duty::level_cap, and handed to Duty::on_failure;
//   - either way the round is marked (last_round(), for the watchdog).
//
// `<duty>` is Duty::name, a word of [a-z_] (checked when made: the log
// grammar test reads the two lines here with the name as their event's
// prefix).
//
// A derived class's destructor calls Stop(): its thread calls Round(), which
// reads the derived members, and those go before the base's destructor runs.
//
// Thread-safety: Start and Stop from the owner only; RunRound is what the
// thread calls (tests call it with the thread never started); last_round()
// from any thread.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include <spdlog/common.h>

#include "runtime/service_clock.h"
#include "runtime/service_loop.h"

namespace akadzed {

class PeriodicService {
 public:
  struct Duty {
    std::string name;    // the log lines' prefix: "rescue" -> rescue_failed, rescue_recovered
    std::string thread;  // the thread's name (NameCurrentThread)
    std::chrono::microseconds interval{1'000'000};  // between rounds; also the backoff's wait
    // The highest level a failure is logged at (progress and finish counts:
    // warn, as what failed is kept for a later round).
    spdlog::level::level_enum level_cap = spdlog::level::critical;
    // Called with each failure, before its line is logged (may be empty).
    std::function<void(const RoundFailure&)> on_failure = nullptr;
  };

  virtual ~PeriodicService();
  PeriodicService(const PeriodicService&) = delete;
  PeriodicService& operator=(const PeriodicService&) = delete;

  // Starts the thread: a round every Duty::interval, until Stop.
  void Start();
  // Stops and joins the thread (if started). Idempotent.
  void Stop();
  // One round, guarded and logged as above.
  void RunRound();
  ServiceClock::time_point last_round() const { return loop_.last_round(); }

 protected:
  // Throws std::invalid_argument when duty.name is not a word of [a-z_].
  PeriodicService(Duty duty, const ServiceClock& clock);

  const ServiceClock& clock() const { return loop_.clock(); }

 private:
  // True when it sent its statements (and they worked); false when it had
  // none to send or skipped them (the connection not open, ...). Throws
  // what failed.
  virtual bool Round() = 0;

  const Duty duty_;
  RoundGuard guard_;  // the loop thread only
  ServiceLoop loop_;
};

}  // namespace akadzed
