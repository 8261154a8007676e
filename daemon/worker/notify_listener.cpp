#include "worker/notify_listener.h"

#include <poll.h>
#include <sys/eventfd.h>
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
#include "runtime/outage_log.h"
#include "runtime/retry_backoff.h"

namespace akadzed {

NotifyListener::NotifyListener(std::string conninfo, std::function<void(const std::string&)> wake)
    : conninfo_(std::move(conninfo)), wake_(std::move(wake)) {
  stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
}

NotifyListener::~NotifyListener() {
  Stop();
  close(stop_fd_);
}

void NotifyListener::Start() { thread_ = std::thread([this] { Loop(); }); }

void NotifyListener::Stop() {
  std::uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(stop_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
}

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
  // Reconnects wait 0.5 s doubling up to 30 s, jittered; the database being
  // away is logged once per outage (runtime/outage_log.h).
  RetryBackoff backoff(std::chrono::milliseconds(500), std::chrono::seconds(30));
  OutageLog outage;
  for (;;) {
    try {
      pg::Connection conn = pg::Connection::Open(conninfo_, "akadzed listen");
      conn.exec(std::string("LISTEN ") + kChannel);
      WarnIfPooled(conn);
      if (auto ended = outage.Success()) {
        spdlog::info("listen_recovered channel={} failures={} outage_ms={}", kChannel, ended->failures,
                     ended->ms);
      } else {
        spdlog::info("listen channel={}", kChannel);
      }
      backoff.Reset();
      // Anything enqueued while we were not listening: one wake for all.
      wake_("");
      for (;;) {
        pollfd fds[2] = {{PQsocket(conn.raw()), POLLIN, 0}, {stop_fd_, POLLIN, 0}};
        if (poll(fds, 2, -1) < 0 && errno != EINTR) break;
        if (fds[1].revents != 0) return;
        if (PQconsumeInput(conn.raw()) == 0) {
          // The connection broke under us: the first failure of an outage.
          spdlog::log(outage.Failure(), "listen_failed | {}",
                      OneLine(RedactSecrets(PQerrorMessage(conn.raw()), conninfo_)));
          break;
        }
        while (PGnotify* n = PQnotifies(conn.raw())) {
          std::unique_ptr<PGnotify, decltype(&PQfreemem)> owned(n, &PQfreemem);
          wake_(n->extra != nullptr ? n->extra : "");
        }
      }
    } catch (const pg::ConnectionError& e) {
      spdlog::log(outage.Failure(), "listen_failed | {}", OneLine(e.what()));
    } catch (const pg::PgError& e) {
      spdlog::warn("listen_failed | {}", OneLine(e.what()));
    }
    // Reconnect after a pause, unless stopped meanwhile.
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(backoff.Next());
    pollfd stop{stop_fd_, POLLIN, 0};
    if (poll(&stop, 1, static_cast<int>(wait.count())) > 0) return;
  }
}

}  // namespace akadzed
