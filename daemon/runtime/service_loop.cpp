#include "runtime/service_loop.h"

#include <pthread.h>

#include <algorithm>

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>
#include <utility>

#include "core/redact.h"
#include "pg/pg_error.h"

namespace akadzed {

namespace {

class SteadyClock final : public ServiceClock {
 public:
  time_point Now() const override { return std::chrono::steady_clock::now(); }
  wall_time_point WallNow() const override { return std::chrono::system_clock::now(); }
};

}  // namespace

const ServiceClock& SteadyServiceClock() {
  static const SteadyClock clock;
  return clock;
}

ServiceLoop::ServiceLoop(const ServiceClock& clock) : ServiceLoop(clock, nullptr) {}

ServiceLoop::ServiceLoop(const ServiceClock& clock, Mutex& shared) : ServiceLoop(clock, &shared) {}

ServiceLoop::ServiceLoop(const ServiceClock& clock, Mutex* shared)
    : clock_(clock), mu_(shared != nullptr ? *shared : own_mu_), last_round_(clock.Now()) {
  stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
}

ServiceLoop::~ServiceLoop() {
  Stop();
  close(stop_fd_);
}

void NameCurrentThread(const std::string& name) {
  // The kernel keeps 15 bytes and a NUL; a longer name is refused whole.
  // Cut on a character boundary (never inside a UTF-8 sequence).
  std::size_t n = std::min<std::size_t>(name.size(), 15);
  if (n < name.size()) {
    while (n > 0 && (static_cast<unsigned char>(name[n]) & 0xC0) == 0x80) --n;
  }
  pthread_setname_np(pthread_self(), name.substr(0, n).c_str());
}

void ServiceLoop::Start(std::string name, std::function<void()> body) {
  MutexLock lock(mu_);
  StartLocked(std::move(name), std::move(body));
}

void ServiceLoop::StartLocked(std::string name, std::function<void()> body) {
  threads_.emplace_back([name = std::move(name), body = std::move(body)] {
    NameCurrentThread(name);
    body();
  });
  last_round_ = clock_.Now();
  started_ = true;
}

void ServiceLoop::RequestStop() {
  {
    MutexLock lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  std::uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(stop_fd_, &one, sizeof one);
}

void ServiceLoop::Stop() {
  RequestStop();
  // No thread starts once the stop is requested (the owner's rule), so
  // every one started is in this list.
  std::vector<std::thread> threads;
  {
    MutexLock lock(mu_);
    threads.swap(threads_);
  }
  for (std::thread& thread : threads) {
    if (thread.joinable()) thread.join();
  }
}

bool ServiceLoop::started() const {
  MutexLock lock(mu_);
  return started_;
}

bool ServiceLoop::stop_requested() const {
  MutexLock lock(mu_);
  return stopping_;
}

bool ServiceLoop::Sleep(Duration timeout) {
  MutexLock lock(mu_);
  return WaitFor(lock, timeout, [] { return false; });
}

void ServiceLoop::MarkRound() {
  const auto now = clock_.Now();
  MutexLock lock(mu_);
  last_round_ = now;
}

ServiceClock::time_point ServiceLoop::last_round() const {
  MutexLock lock(mu_);
  return last_round_;
}

const char* RoundFailureKindName(RoundFailureKind kind) {
  switch (kind) {
    case RoundFailureKind::kOutage: return "outage";
    case RoundFailureKind::kInDoubt: return "in_doubt";
    case RoundFailureKind::kSqlError: return "sql";
    case RoundFailureKind::kOther: return "other";
  }
  return "other";
}

RoundGuard::RoundGuard(const ServiceClock& clock, LoopBackoff backoff)
    : outage_(clock), backoff_(std::move(backoff)) {}

std::optional<OutageLog::Ended> RoundGuard::Succeeded() {
  failures_ = 0;
  backoff_.Reset();
  return outage_.Success();
}

RoundFailure RoundGuard::Failed(const std::exception_ptr& error) {
  std::string message = "unknown exception";
  try {
    if (error) std::rethrow_exception(error);
  } catch (const std::exception& e) {
    message = OneLine(e.what());
  } catch (...) {
  }
  switch (pg::ErrorKindOf(error)) {
    case pg::ErrorKind::kInDoubt: return Classify(RoundFailureKind::kInDoubt, false, std::move(message));
    case pg::ErrorKind::kConnection: return Classify(RoundFailureKind::kOutage, false, std::move(message));
    case pg::ErrorKind::kTransient: return Classify(RoundFailureKind::kSqlError, true, std::move(message));
    case pg::ErrorKind::kRowFault:
    case pg::ErrorKind::kSql: return Classify(RoundFailureKind::kSqlError, false, std::move(message));
    case pg::ErrorKind::kOther: break;
  }
  return Classify(RoundFailureKind::kOther, false, std::move(message));
}

RoundFailure RoundGuard::Failed(RoundFailureKind kind, std::string message) {
  return Classify(kind, false, std::move(message));
}

RoundFailure RoundGuard::Classify(RoundFailureKind kind, bool transient, std::string message) {
  ++failures_;
  RoundFailure f;
  f.kind = kind;
  f.message = std::move(message);
  switch (kind) {
    case RoundFailureKind::kOutage: f.level = outage_.Failure(); break;
    // The connection broke, so the server may be away too; but what became
    // of the COMMIT is the news, at warn each time.
    case RoundFailureKind::kInDoubt: outage_.Failure(); f.level = spdlog::level::warn; break;
    case RoundFailureKind::kSqlError: f.level = transient ? spdlog::level::warn : spdlog::level::err; break;
    case RoundFailureKind::kOther: f.level = spdlog::level::err; break;
  }
  f.retry_in = backoff_.Next();
  return f;
}

}  // namespace akadzed
