// The default spdlog logger, captured into a string for a test's lifetime:
// every line as "<level> <message>" ("warning heartbeat_failed | ..."), all
// levels (trace and up). The destructor restores the previous default.
//
// Thread-safety: the daemon's threads may log while the test reads; text(),
// Take(), Has() and Count() read under the sink's own lock.
#pragma once

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace akadzed::test {

class LogCapture {
 public:
  LogCapture() : previous_(spdlog::default_logger()), sink_(std::make_shared<Sink>()) {
    auto logger = std::make_shared<spdlog::logger>("captured", sink_);
    logger->set_pattern("%l %v");
    logger->set_level(spdlog::level::trace);
    spdlog::set_default_logger(std::move(logger));
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // Everything logged so far.
  std::string text() const { return sink_->Read(false); }
  // Everything logged since the last Take(), and forgets it.
  std::string Take() { return sink_->Read(true); }
  bool Has(const std::string& needle) const { return text().find(needle) != std::string::npos; }
  std::size_t Count(const std::string& needle) const {
    const std::string all = text();
    std::size_t n = 0;
    for (auto at = all.find(needle); at != std::string::npos; at = all.find(needle, at + 1)) ++n;
    return n;
  }

 private:
  class Sink : public spdlog::sinks::base_sink<std::mutex> {
   public:
    std::string Read(bool take) {
      std::lock_guard<std::mutex> lock(mutex_);
      std::string text = text_;
      if (take) text_.clear();
      return text;
    }

   protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {
      spdlog::memory_buf_t line;
      formatter_->format(msg, line);
      text_.append(line.data(), line.size());
    }
    void flush_() override {}

   private:
    std::string text_;  // guarded by mutex_
  };

  std::shared_ptr<spdlog::logger> previous_;
  std::shared_ptr<Sink> sink_;
};

}  // namespace akadzed::test
