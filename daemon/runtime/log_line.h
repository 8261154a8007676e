// One line of the daemon's log. Every call site writes its message in one
// grammar,
//
//   event key=value key=value ... [| free text]
//
// where the event and keys are words ([A-Za-z0-9_.-]), a value is either a
// token that cannot hold a space (a number, an id, an enum name, a duration)
// or LogValue(x) for anything else (task and queue names, paths, hostnames,
// error classes), and the free text after " | " may hold anything (error
// messages, handler output). LogLineFormatter parses each message back into
// event, fields and msg and renders it as one logfmt line, one JSON object
// or one journald logfmt line; whatever the bytes, one event is one line.
//
// Thread-safety: LogValue and ParseLogEvent are pure functions. A
// LogLineFormatter is used by one sink under that sink's lock (spdlog gives
// each sink its own clone).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <spdlog/formatter.h>

#include "runtime/logging_config.h"

namespace akadzed {

// A message split into its parts.
struct LogEvent {
  std::string event;
  // In message order, values decoded (quotes and escapes removed).
  std::vector<std::pair<std::string, std::string>> fields;
  // The free text, when the message has a "|" separator (possibly empty).
  std::optional<std::string> msg;
};

// `value` encoded as a logfmt value: as is when it is a non-empty run of
// printable UTF-8 without '"', '=' and '\'; otherwise in double quotes with
// \" \\ \n \r \t escapes, other control bytes and bytes that are not UTF-8
// as \xNN. ParseLogEvent decodes it back to `value`.
std::string LogValue(std::string_view value);

// Splits `message`: the first word is the event; then key=value tokens
// (bare or LogValue-quoted); then, after a "|" token, the free text. A token
// that is neither ends the fields: it and everything after it become the
// msg, so a malformed message loses nothing.
LogEvent ParseLogEvent(std::string_view message);

// The spdlog formatter of the daemon's lines (LogFormat::kAuto renders as
// logfmt; resolving auto is ConfigureLogging's job):
//   logfmt:   ts=2026-11-30T12:00:00.123Z level=info event=start job=42 ... msg="free text"
//   json:     {"ts":"2026-11-30T12:00:00.123Z","level":"info","event":"start","job":"42",...,"msg":"..."}
//   journald: <6>level=info event=start job=42 ... msg="free text"
// JSON values are all strings, and invalid UTF-8 becomes U+FFFD. Levels are
// trace, debug, info, warn, error, critical.
class LogLineFormatter final : public spdlog::formatter {
 public:
  explicit LogLineFormatter(LogFormat format) : format_(format) {}
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override;
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<LogLineFormatter>(format_);
  }

 private:
  LogFormat format_;
};

}  // namespace akadzed
