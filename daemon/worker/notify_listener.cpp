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

void NotifyListener::Loop() {
  auto retry = std::chrono::milliseconds(500);
  for (;;) {
    int wait_ms = static_cast<int>(retry.count());
    try {
      pg::Connection conn = pg::Connection::Open(conninfo_, "akadzed listen");
      conn.exec(std::string("LISTEN ") + kChannel);
      spdlog::info("listen channel={}", kChannel);
      retry = std::chrono::milliseconds(500);
      // Anything enqueued while we were not listening: one wake for all.
      wake_("");
      for (;;) {
        pollfd fds[2] = {{PQsocket(conn.raw()), POLLIN, 0}, {stop_fd_, POLLIN, 0}};
        if (poll(fds, 2, -1) < 0 && errno != EINTR) break;
        if (fds[1].revents != 0) return;
        if (PQconsumeInput(conn.raw()) == 0) {
          spdlog::warn("listen_failed | {}", OneLine(RedactSecrets(PQerrorMessage(conn.raw()), conninfo_)));
          break;
        }
        while (PGnotify* n = PQnotifies(conn.raw())) {
          std::unique_ptr<PGnotify, decltype(&PQfreemem)> owned(n, &PQfreemem);
          wake_(n->extra != nullptr ? n->extra : "");
        }
      }
    } catch (const pg::PgError& e) {
      spdlog::warn("listen_failed | {}", OneLine(e.what()));
    }
    // Reconnect after a pause, unless stopped meanwhile.
    pollfd stop{stop_fd_, POLLIN, 0};
    if (poll(&stop, 1, wait_ms) > 0) return;
    retry = std::min<std::chrono::milliseconds>(retry * 2, std::chrono::seconds(30));
  }
}

}  // namespace akadzed
