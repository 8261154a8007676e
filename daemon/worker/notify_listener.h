// Optional early wake-ups (worker.listen_notify): a connection that LISTENs
// on channel `akadze_jobs` and wakes the claim loop of the queue a
// notification names (its payload; an empty or unknown payload wakes every
// queue). Producers send `NOTIFY akadze_jobs, '<queue>'` after enqueuing (or
// a trigger does, docs/operations.md). Polling stays the source of truth:
// a missed notification only delays a job until the next poll_interval.
// LISTEN needs a session: not through PgBouncer in transaction mode. A
// listener that finds itself behind a pooler logs `listen_pooled` once.
//
// Its thread runs Round() until the stop, pausing a failed one's backoff:
// Round() is public, so a test drives it on its own thread, on a clock it
// moves, with no thread of the listener started.
//
// Thread-safety: Start/Stop from the owner only; Round from the listener's
// thread (or a test's, with the thread never started).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "runtime/service_loop.h"

namespace akadzed {

namespace pg {
class Connection;
}

// What one round of the listener did.
struct ListenRound {
  enum class Kind {
    kListening,  // LISTEN holds; `notifications` woke their queues
    kFailed,     // the connection failed (listen_failed logged); retry after `retry_in`
    kStopped,    // the stop was requested
  };
  Kind kind = Kind::kListening;
  int notifications = 0;
  std::chrono::microseconds retry_in{0};
};

class NotifyListener {
 public:
  // `wake(queue)` is called on the listener's thread; "" means every queue.
  NotifyListener(std::string conninfo, std::function<void(const std::string&)> wake,
                 const ServiceClock& clock = SteadyServiceClock());
  ~NotifyListener();
  NotifyListener(const NotifyListener&) = delete;
  NotifyListener& operator=(const NotifyListener&) = delete;

  void Start();
  void Stop();

  // One round: (re)opens the connection and LISTENs if it has none
  // (`listen` or `listen_recovered` logged, and one wake for every queue:
  // anything enqueued meanwhile), then waits up to `timeout_ms` (-1: no
  // limit) for the socket or the stop, and wakes the queue each
  // notification names. A failure drops the connection and is logged
  // (listen_failed, an outage once).
  ListenRound Round(int timeout_ms);

  static constexpr const char* kChannel = "akadze_jobs";

 private:
  void Loop();
  // Logs listen_pooled (once) when `conn` goes through a connection pooler.
  void WarnIfPooled(pg::Connection& conn);

  std::string conninfo_;
  std::function<void(const std::string&)> wake_;
  std::unique_ptr<pg::Connection> conn_;  // listening; null until (re)opened. Listener thread only
  ServiceLoop loop_;  // the thread and its stop (stop_fd() wakes the poll)
  // Reconnects wait 0.5 s doubling up to 30 s, jittered; the database being
  // away is logged once per outage. Listener thread only.
  RoundGuard guard_;
  bool warned_pooled_ = false;  // listener thread only
};

}  // namespace akadzed
