#include "worker/logging.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace akadzed {

namespace {

// "%*": the syslog priority of the record's level as "<N>".
class JournalPriorityFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    static constexpr char kPriority[] = {'7', '7', '6', '4', '3', '2', '6'};
    const char text[] = {'<', kPriority[static_cast<int>(msg.level)], '>'};
    dest.append(text, text + 3);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JournalPriorityFlag>();
  }
};

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
  // One logger for the process, changed in place on reload: replacing the
  // default logger while other threads log through it is not safe in spdlog,
  // but a formatter swap takes the sink's lock and the level is atomic.
  static std::mutex mu;
  static std::shared_ptr<spdlog::logger> logger;
  std::lock_guard lock(mu);
  bool journal = config.format == LogFormat::kJournald ||
                 (config.format == LogFormat::kAuto && StderrIsJournal());
  auto formatter = std::make_unique<spdlog::pattern_formatter>(
      "%Y-%m-%dT%H:%M:%S.%eZ %l %v", spdlog::pattern_time_type::utc);
  if (journal) formatter->add_flag<JournalPriorityFlag>('*').set_pattern("%*%v");
  if (!logger) {
    logger = std::make_shared<spdlog::logger>("akadzed",
                                              std::make_shared<spdlog::sinks::stderr_sink_mt>());
    logger->flush_on(spdlog::level::trace);
    spdlog::set_default_logger(logger);
  }
  logger->set_formatter(std::move(formatter));
  logger->set_level(spdlog::level::from_str(config.level));
}

}  // namespace akadzed
