// The sd_notify protocol without libsystemd: datagrams like "READY=1" to the
// socket systemd names in $NOTIFY_SOCKET (systemd's
// notify-selfcontained-example.c is the model), and the watchdog interval
// from $WATCHDOG_USEC.
//
// Thread-safety: Notify may be called from any thread (one sendto each).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace akadzed {

class SystemdNotifier {
 public:
  // Reads NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID. Not under systemd
  // (no NOTIFY_SOCKET): Notify does nothing.
  static SystemdNotifier FromEnvironment();

  SystemdNotifier() = default;
  SystemdNotifier(const SystemdNotifier&) = delete;
  SystemdNotifier& operator=(const SystemdNotifier&) = delete;
  SystemdNotifier(SystemdNotifier&& other) noexcept;
  SystemdNotifier& operator=(SystemdNotifier&& other) noexcept;
  ~SystemdNotifier();

  bool enabled() const { return fd_ >= 0; }

  // Sends `state` (newline-separated assignments, e.g. "READY=1\nSTATUS=up").
  // Returns false when the datagram could not be sent; never throws.
  bool Notify(std::string_view state) const;

  // How often systemd expects WATCHDOG=1, when it asked for it (for us).
  std::optional<std::chrono::microseconds> watchdog_interval() const { return watchdog_; }

 private:
  int fd_ = -1;
  std::string address_;  // sockaddr_un path; '\0'-prefixed for abstract
  std::optional<std::chrono::microseconds> watchdog_;
};

}  // namespace akadzed
