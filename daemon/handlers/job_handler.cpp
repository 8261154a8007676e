#include "handlers/job_handler.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <system_error>

namespace akadzed {

JobStop::JobStop() : fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
}

JobStop::~JobStop() { close(fd_); }

void JobStop::Reset() {
  // The fd was written only by the Request that set the reason.
  if (reason_.exchange(StopReason::kNone, std::memory_order_acq_rel) == StopReason::kNone) return;
  std::uint64_t count = 0;
  [[maybe_unused]] ssize_t n = read(fd_, &count, sizeof count);
}

void JobStop::Request(StopReason reason) {
  StopReason expected = StopReason::kNone;
  if (reason == StopReason::kNone) return;
  if (reason_.compare_exchange_strong(expected, reason, std::memory_order_acq_rel)) {
    std::uint64_t one = 1;
    // Cannot fail short of a closed fd; the atomic already carries the reason.
    [[maybe_unused]] ssize_t n = write(fd_, &one, sizeof one);
  }
}

}  // namespace akadzed
