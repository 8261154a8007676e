// Optional early wake-ups (worker.listen_notify): a connection that LISTENs
// on channel `akadze_jobs` and wakes the claim loop of the queue a
// notification names (its payload; an empty or unknown payload wakes every
// queue). Producers send `NOTIFY akadze_jobs, '<queue>'` after enqueuing (or
// a trigger does, docs/operations.md). Polling stays the source of truth:
// a missed notification only delays a job until the next poll_interval.
// LISTEN needs a session: not through PgBouncer in transaction mode. A
// listener that finds itself behind a pooler logs `listen_pooled` once.
//
// Thread-safety: Start/Stop from the owner only.
#pragma once

#include <functional>
#include <string>

#include "runtime/service_loop.h"

namespace akadzed {

namespace pg {
class Connection;
}

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

  static constexpr const char* kChannel = "akadze_jobs";

 private:
  void Loop();
  // Logs listen_pooled (once) when `conn` goes through a connection pooler.
  void WarnIfPooled(pg::Connection& conn);

  std::string conninfo_;
  std::function<void(const std::string&)> wake_;
  ServiceLoop loop_;  // the thread and its stop (stop_fd() wakes the poll)
  // Reconnects wait 0.5 s doubling up to 30 s, jittered; the database being
  // away is logged once per outage. Listener thread only.
  RoundGuard guard_;
  bool warned_pooled_ = false;  // listener thread only
};

}  // namespace akadzed
