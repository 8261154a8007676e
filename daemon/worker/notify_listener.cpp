#include "worker/notify_listener.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <memory>
#include <system_error>

#include <spdlog/spdlog.h>

#include "core/redact.h"
#include "pg/connection.h"
#include "pg/pg_error.h"

namespace akadzed {

NotifyListener::NotifyListener(std::string conninfo, std::function<void(const std::string&)> wake,
                               const ServiceClock& clock)
    : conninfo_(std::move(conninfo)),
      wake_(std::move(wake)),
      loop_(clock),
      guard_(clock, LoopBackoff(std::chrono::milliseconds(500), std::chrono::seconds(30))) {}

NotifyListener::~NotifyListener() { Stop(); }

void NotifyListener::Start() { loop_.Start("listener", [this] { Loop(); }); }

void NotifyListener::Stop() { loop_.Stop(); }

void NotifyListener::WarnIfPooled(pg::Connection& conn) {
  if (warned_pooled_) return;
  // Through a pooler, the backend pid libpq got at login is the pooler's own
  // (PgBouncer sends a random cancel key), not the server process that ran
  // LISTEN. In PgBouncer's transaction pooling that process goes back to the
  // pool after LISTEN and no notification ever reaches us: the daemon still
  // works, by polling only. Session pooling delivers them, so warn, not refuse.
  if (!conn.pooled()) return;
  warned_pooled_ = true;
  spdlog::warn("listen_pooled channel={} | the connection goes through a pooler (PgBouncer?): "
               "LISTEN only works with session pooling; with transaction pooling no "
               "notification arrives and jobs wait for poll_interval. Set "
               "worker.listen_notify: false, or point the daemon at PostgreSQL directly",
               kChannel);
}

void NotifyListener::Loop() {
  for (;;) {
    const ListenRound round = Round(-1);
    if (round.kind == ListenRound::Kind::kStopped) return;
    // Reconnect after a pause, unless stopped meanwhile.
    if (round.kind == ListenRound::Kind::kFailed && loop_.Sleep(round.retry_in)) return;
  }
}

ListenRound NotifyListener::Round(int timeout_ms) {
  ListenRound round;
  try {
    if (!conn_) {
      auto conn = std::make_unique<pg::Connection>(pg::Connection::Open(conninfo_, "akadzed listen"));
      conn->exec(std::string("LISTEN ") + kChannel);
      WarnIfPooled(*conn);
      conn_ = std::move(conn);
      if (auto ended = guard_.Succeeded()) {
        spdlog::info("listen_recovered channel={} failures={} outage_ms={}", kChannel, ended->failures,
                     ended->ms);
      } else {
        spdlog::info("listen channel={}", kChannel);
      }
      // Anything enqueued while we were not listening: one wake for all.
      wake_("");
    }
    pollfd fds[2] = {{PQsocket(conn_->raw()), POLLIN, 0}, {loop_.stop_fd(), POLLIN, 0}};
    if (poll(fds, 2, timeout_ms) < 0) {
      if (errno == EINTR) return round;
      throw std::system_error(errno, std::generic_category(), "poll");
    }
    if (fds[1].revents != 0) {
      round.kind = ListenRound::Kind::kStopped;
      return round;
    }
    if (fds[0].revents == 0) return round;  // the timeout
    if (PQconsumeInput(conn_->raw()) == 0) {
      // The connection broke under us: the first failure of an outage.
      throw pg::ConnectionError(RedactSecrets(PQerrorMessage(conn_->raw()), conninfo_), "");
    }
    while (PGnotify* n = PQnotifies(conn_->raw())) {
      std::unique_ptr<PGnotify, decltype(&PQfreemem)> owned(n, &PQfreemem);
      ++round.notifications;
      wake_(n->extra != nullptr ? n->extra : "");
    }
    loop_.MarkRound();
  } catch (const std::exception&) {
    conn_.reset();
    const RoundFailure f = guard_.Failed(std::current_exception());
    spdlog::log(f.level, "listen_failed | {}", f.message);
    round.kind = ListenRound::Kind::kFailed;
    round.retry_in = f.retry_in;
  }
  return round;
}

}  // namespace akadzed
