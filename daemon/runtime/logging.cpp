#include "runtime/logging.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <spdlog/sinks/base_sink.h>
// base_sink's definitions: the compiled spdlog instantiates it only for
// std::mutex and null_mutex, and this sink's lock is the annotated Mutex.
#include <spdlog/sinks/base_sink-inl.h>
#include <spdlog/spdlog.h>

#include "core/config_error.h"
#include "core/thread_annotations.h"
#include "runtime/log_line.h"

namespace akadzed {

namespace {

// Writes each formatted record with one write(2) to a descriptor: stderr,
// or a log file this sink owns. Replace swaps the descriptor under the
// sink's lock (base_sink's mutex_, which base_sink holds around sink_it_).
class FdSink final : public spdlog::sinks::base_sink<Mutex> {
 public:
  explicit FdSink(int fd) : fd_(fd) {}
  ~FdSink() override { CloseOwned(); }
  FdSink(const FdSink&) = delete;
  FdSink& operator=(const FdSink&) = delete;

  // From now on writes go to `fd` (stderr, or a file this sink then owns);
  // the previous file is closed.
  void Replace(int fd) EXCLUDES(mutex_) {
    MutexLock lock(mutex_);
    CloseOwned();
    fd_ = fd;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override REQUIRES(mutex_) {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    const char* data = line.data();
    std::size_t left = line.size();
    while (left > 0) {
      ssize_t n = write(fd_, data, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // nowhere left to report it
      data += n;
      left -= static_cast<std::size_t>(n);
    }
  }
  void flush_() override {}

 private:
  void CloseOwned() REQUIRES(mutex_) {
    if (fd_ != STDERR_FILENO) close(fd_);
  }

  int fd_ GUARDED_BY(mutex_);
};

// The descriptor of `path` opened for appending, or -1 with errno set.
int OpenLogFile(const std::string& path) {
  return open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640);
}

struct LogDestination {
  Mutex mu;
  std::shared_ptr<spdlog::logger> logger GUARDED_BY(mu);
  std::shared_ptr<FdSink> sink GUARDED_BY(mu);
  std::string file GUARDED_BY(mu);  // "" = stderr
};

LogDestination& Destination() {
  static LogDestination destination;
  return destination;
}

// The one error line of a failed open; `still` says where lines go instead.
void LogOpenFailed(const std::string& path, int error, const std::string& still) {
  spdlog::error("log_open_failed file={} | {}; still logging to {}", LogValue(path),
                std::strerror(error), still);
}

}  // namespace

bool StderrIsJournal() {
  const char* stream = std::getenv("JOURNAL_STREAM");
  if (stream == nullptr) return false;
  unsigned long long dev = 0, ino = 0;
  if (std::sscanf(stream, "%llu:%llu", &dev, &ino) != 2) return false;
  struct stat st {};
  return fstat(2, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

void ConfigureLogging(const LoggingConfig& config) {
  // One logger and one sink for the process, changed in place: replacing the
  // default logger while other threads log through it is not safe in spdlog,
  // but a formatter or descriptor swap takes the sink's lock and the level
  // is atomic.
  LogDestination& d = Destination();
  MutexLock lock(d.mu);
  int open_error = 0;
  if (!d.logger) {
    int fd = STDERR_FILENO;
    if (!config.file.empty() && (fd = OpenLogFile(config.file)) < 0) {
      const int error = errno;
      throw ConfigError("logging.file: cannot open " + config.file + ": " + std::strerror(error));
    }
    d.sink = std::make_shared<FdSink>(fd);
    d.logger = std::make_shared<spdlog::logger>("akadzed", d.sink);
    d.file = config.file;
    spdlog::set_default_logger(d.logger);
  } else if (config.file != d.file) {
    int fd = config.file.empty() ? STDERR_FILENO : OpenLogFile(config.file);
    if (fd < 0) {
      open_error = errno;
    } else {
      d.sink->Replace(fd);
      d.file = config.file;
    }
  }
  LogFormat format = config.format;
  if (format == LogFormat::kAuto) {
    format = d.file.empty() && StderrIsJournal() ? LogFormat::kJournald : LogFormat::kLogfmt;
  }
  d.logger->set_formatter(std::make_unique<LogLineFormatter>(format));
  d.logger->set_level(spdlog::level::from_str(config.level));
  if (open_error != 0) LogOpenFailed(config.file, open_error, d.file.empty() ? "stderr" : d.file);
}

void ReopenLogFile() {
  LogDestination& d = Destination();
  MutexLock lock(d.mu);
  if (!d.logger || d.file.empty()) return;
  int fd = OpenLogFile(d.file);
  if (fd < 0) {
    const int error = errno;
    LogOpenFailed(d.file, error, "the file opened before (moved or deleted)");
    return;
  }
  d.sink->Replace(fd);
}

}  // namespace akadzed
