#include "runtime/log_line.h"

#include <charconv>
#include <cstdint>
#include <ctime>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/details/log_msg.h>

#include "runtime/job_traces.h"

namespace akadzed {

namespace {

// The length of the valid UTF-8 sequence starting at text[i], or 0 when the
// byte there does not start one (stray continuation, overlong form,
// surrogate, beyond U+10FFFF, cut short).
std::size_t Utf8Length(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  std::size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return n;
}

bool IsWordChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
}

bool NeedsQuotes(std::string_view value) {
  if (value.empty()) return true;
  for (std::size_t i = 0; i < value.size();) {
    const auto c = static_cast<unsigned char>(value[i]);
    if (c <= 0x20 || c == 0x7F || c == '"' || c == '=' || c == '\\') return true;
    const std::size_t n = Utf8Length(value, i);
    if (n == 0) return true;
    i += n;
  }
  return false;
}

void AppendLogfmtValue(std::string& out, std::string_view value) {
  if (!NeedsQuotes(value)) {
    out += value;
    return;
  }
  out += '"';
  for (std::size_t i = 0; i < value.size();) {
    const char c = value[i];
    const auto u = static_cast<unsigned char>(c);
    std::size_t n = 1;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (u < 0x20 || u == 0x7F || (n = Utf8Length(value, i)) == 0) {
          n = 1;
          out += fmt::format("\\x{:02x}", u);
        } else {
          out.append(value.substr(i, n));
        }
    }
    i += n;
  }
  out += '"';
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Decodes the quoted value starting at text[i] == '"'; on success stores it
// in `out`, returns the index after the closing quote. nullopt when the
// quote is not closed.
std::optional<std::size_t> DecodeQuoted(std::string_view text, std::size_t i, std::string& out) {
  out.clear();
  for (++i; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') return i + 1;
    if (c != '\\' || i + 1 == text.size()) {
      out += c;
      continue;
    }
    const char e = text[++i];
    switch (e) {
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case '"':
      case '\\': out += e; break;
      case 'x':
        if (i + 2 < text.size() && HexDigit(text[i + 1]) >= 0 && HexDigit(text[i + 2]) >= 0) {
          out += static_cast<char>(HexDigit(text[i + 1]) * 16 + HexDigit(text[i + 2]));
          i += 2;
          break;
        }
        [[fallthrough]];
      default:
        out += '\\';
        out += e;
    }
  }
  return std::nullopt;
}

const char* LevelName(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace: return "trace";
    case spdlog::level::debug: return "debug";
    case spdlog::level::info: return "info";
    case spdlog::level::warn: return "warn";
    case spdlog::level::err: return "error";
    case spdlog::level::critical: return "critical";
    default: return "off";
  }
}

// The syslog priority of `level`, as sd-daemon(3)'s "<N>" prefix wants it.
char JournalPriority(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
    case spdlog::level::debug: return '7';
    case spdlog::level::warn: return '4';
    case spdlog::level::err: return '3';
    case spdlog::level::critical: return '2';
    default: return '6';
  }
}

// 2026-11-30T12:00:00.123Z
std::string Timestamp(spdlog::log_clock::time_point time) {
  const auto since_epoch = time.time_since_epoch();
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(since_epoch - seconds);
  const std::time_t t = seconds.count();
  std::tm tm{};
  gmtime_r(&t, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms.count());
}

void AppendJsonString(std::string& out, std::string_view text) {
  out += nlohmann::json(std::string(text)).dump(-1, ' ', false,
                                                nlohmann::json::error_handler_t::replace);
}

// A line about a job this daemon has in hand with a trace id
// (runtime/job_traces.h) gets trace_id= right after its job= field, unless
// it says one itself.
void AddTraceId(LogEvent& e) {
  auto job = e.fields.end();
  for (auto it = e.fields.begin(); it != e.fields.end(); ++it) {
    if (it->first == "trace_id") return;
    if (it->first == "job" && job == e.fields.end()) job = it;
  }
  if (job == e.fields.end()) return;
  std::int64_t id = 0;
  const std::string& text = job->second;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (error != std::errc() || end != text.data() + text.size()) return;
  if (std::optional<std::string> trace = JobTraceId(id)) {
    e.fields.insert(job + 1, {"trace_id", std::move(*trace)});
  }
}

}  // namespace

std::string LogValue(std::string_view value) {
  std::string out;
  AppendLogfmtValue(out, value);
  return out;
}

LogEvent ParseLogEvent(std::string_view message) {
  LogEvent parsed;
  std::size_t i = message.find(' ');
  parsed.event = std::string(message.substr(0, i));
  while (i < message.size()) {
    while (i < message.size() && message[i] == ' ') ++i;
    if (i == message.size()) break;
    const std::string_view rest = message.substr(i);
    if (rest == "|" || rest.substr(0, 2) == "| ") {
      parsed.msg = std::string(rest.substr(rest.size() > 1 ? 2 : 1));
      break;
    }
    std::size_t k = i;
    while (k < message.size() && IsWordChar(message[k])) ++k;
    bool field = k > i && k < message.size() && message[k] == '=';
    std::string value;
    std::size_t end = k + 1;
    if (field && end < message.size() && message[end] == '"') {
      std::optional<std::size_t> closed = DecodeQuoted(message, end, value);
      field = closed && (*closed == message.size() || message[*closed] == ' ');
      if (field) end = *closed;
    } else if (field) {
      end = std::min(message.find(' ', end), message.size());
      value = std::string(message.substr(k + 1, end - k - 1));
    }
    if (!field) {
      parsed.msg = std::string(rest);
      break;
    }
    parsed.fields.emplace_back(std::string(message.substr(i, k - i)), std::move(value));
    i = end;
  }
  return parsed;
}

void LogLineFormatter::format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) {
  LogEvent e = ParseLogEvent(std::string_view(msg.payload.data(), msg.payload.size()));
  AddTraceId(e);
  std::string line;
  line.reserve(msg.payload.size() + 64);
  if (format_ == LogFormat::kJson) {
    line += "{\"ts\":\"" + Timestamp(msg.time) + "\",\"level\":\"" + LevelName(msg.level) +
            "\",\"event\":";
    AppendJsonString(line, e.event);
    for (const auto& [key, value] : e.fields) {
      line += ',';
      AppendJsonString(line, key);
      line += ':';
      AppendJsonString(line, value);
    }
    if (e.msg) {
      line += ",\"msg\":";
      AppendJsonString(line, *e.msg);
    }
    line += '}';
  } else {
    if (format_ == LogFormat::kJournald) {
      line += {'<', JournalPriority(msg.level), '>'};
    } else {
      line += "ts=" + Timestamp(msg.time) + ' ';
    }
    line += "level=";
    line += LevelName(msg.level);
    line += " event=";
    AppendLogfmtValue(line, e.event);
    for (const auto& [key, value] : e.fields) {
      line += ' ' + key + '=';
      AppendLogfmtValue(line, value);
    }
    if (e.msg) {
      line += " msg=";
      AppendLogfmtValue(line, *e.msg);
    }
  }
  line += '\n';
  dest.append(line.data(), line.data() + line.size());
}

}  // namespace akadzed
