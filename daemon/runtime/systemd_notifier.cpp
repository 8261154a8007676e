#include "runtime/systemd_notifier.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <utility>

namespace akadzed {

SystemdNotifier SystemdNotifier::FromEnvironment() {
  SystemdNotifier n;
  const char* socket_path = std::getenv("NOTIFY_SOCKET");
  if (socket_path != nullptr && (socket_path[0] == '/' || socket_path[0] == '@') &&
      std::strlen(socket_path) < sizeof(sockaddr_un::sun_path)) {
    n.address_ = socket_path;
    if (n.address_[0] == '@') n.address_[0] = '\0';
    n.fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  }
  const char* usec = std::getenv("WATCHDOG_USEC");
  const char* pid = std::getenv("WATCHDOG_PID");
  if (usec != nullptr && (pid == nullptr || std::atol(pid) == getpid())) {
    long long value = std::atoll(usec);
    if (value > 0) n.watchdog_ = std::chrono::microseconds(value);
  }
  return n;
}

SystemdNotifier::SystemdNotifier(SystemdNotifier&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      address_(std::move(other.address_)),
      watchdog_(other.watchdog_) {}

SystemdNotifier& SystemdNotifier::operator=(SystemdNotifier&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    address_ = std::move(other.address_);
    watchdog_ = other.watchdog_;
  }
  return *this;
}

SystemdNotifier::~SystemdNotifier() {
  if (fd_ >= 0) close(fd_);
}

bool SystemdNotifier::Notify(std::string_view state) const {
  if (fd_ < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, address_.data(), address_.size());
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address_.size());
  return sendto(fd_, state.data(), state.size(), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&addr),
                len) == static_cast<ssize_t>(state.size());
}

}  // namespace akadzed
