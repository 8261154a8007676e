// Fuzz target: runtime/log_line.h, the daemon's log line grammar. Properties:
//  - LogValue(v) is one token: no line break or other control byte, and
//    either a bare run without blank, '"', '=' and '\', or quoted;
//  - ParseLogEvent decodes LogValue(v) back to v in any field position, and
//    keeps the free text after " | " as is;
//  - ParseLogEvent of any message, written back in the grammar, parses to
//    the same event, fields and msg (a fixed point);
//  - LogLineFormatter renders any message as exactly one line; the logfmt
//    and journald lines parse back into level, event, fields and msg, and a
//    JSON line is a JSON object with the same strings.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/details/log_msg.h>

#include "fuzz_check.h"
#include "runtime/log_line.h"

namespace {

using akadzed::LogEvent;
using akadzed::LogValue;
using akadzed::ParseLogEvent;

std::string Json(std::string_view text) {
  return nlohmann::json(std::string(text)).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
}

bool SameEvent(const LogEvent& a, const LogEvent& b) {
  return a.event == b.event && a.fields == b.fields && a.msg == b.msg;
}

std::string Describe(const LogEvent& e) {
  std::string out = "event=" + Json(e.event);
  for (const auto& [key, value] : e.fields) out += " " + Json(key) + "=" + Json(value);
  if (e.msg) out += " msg=" + Json(*e.msg);
  return out;
}

void CheckValue(std::string_view value) {
  const std::string encoded = LogValue(value);
  FUZZ_CHECK(!encoded.empty(), "empty encoding");
  for (const char c : encoded) {
    const auto u = static_cast<unsigned char>(c);
    FUZZ_CHECK(u >= 0x20 && u != 0x7f, "control byte in " + Json(encoded));
  }
  if (encoded.front() != '"') {
    FUZZ_CHECK(encoded == value, "bare encoding changed the value: " + Json(encoded));
    FUZZ_CHECK(encoded.find_first_of(" \"=\\") == std::string::npos, "bare " + Json(encoded));
  } else {
    FUZZ_CHECK(encoded.size() >= 2 && encoded.back() == '"', "unterminated " + Json(encoded));
  }
}

// `e` written back in the grammar: event, key=LogValue(value)..., | msg.
std::string Rebuild(const LogEvent& e) {
  std::string out = e.event;
  for (const auto& [key, value] : e.fields) out += " " + key + "=" + LogValue(value);
  if (e.msg) out += " | " + *e.msg;
  return out;
}

// Renders `message` with the daemon's formatter in `format`.
std::string Render(akadzed::LogFormat format, std::string_view message) {
  akadzed::LogLineFormatter formatter(format);
  const spdlog::details::log_msg msg("akadzed", spdlog::level::warn,
                                     spdlog::string_view_t(message.data(), message.size()));
  spdlog::memory_buf_t buffer;
  formatter.format(msg, buffer);
  return std::string(buffer.data(), buffer.size());
}

void CheckRendered(std::string_view message, const LogEvent& e) {
  for (const akadzed::LogFormat format :
       {akadzed::LogFormat::kLogfmt, akadzed::LogFormat::kJournald, akadzed::LogFormat::kJson}) {
    const std::string line = Render(format, message);
    FUZZ_CHECK(!line.empty() && line.back() == '\n', "no newline at the end: " + Json(line));
    const std::string_view body = std::string_view(line).substr(0, line.size() - 1);
    FUZZ_CHECK(akadzed::fuzz::IsOneLine(body), "more than one line: " + Json(line));

    if (format == akadzed::LogFormat::kJson) {
      const nlohmann::json doc = nlohmann::json::parse(body, nullptr, false);
      FUZZ_CHECK(doc.is_object(), "not a JSON object: " + Json(line));
      // A field named like a fixed key (call sites never do that) repeats the
      // key, and the parser keeps the last one: check the fixed keys only
      // without such a field.
      bool shadowed = false;
      for (const auto& [key, value] : e.fields) {
        shadowed = shadowed || key == "ts" || key == "level" || key == "event" || key == "msg";
      }
      if (shadowed) continue;
      FUZZ_CHECK(doc.value("level", "") == "warn", "level: " + Json(line));
      // Invalid UTF-8 is replaced, so compare only what was valid.
      const auto same = [](const nlohmann::json& got, const std::string& want) {
        return got.is_string() && (got.get<std::string>() == want ||
                                   Json(want).find("\\ufffd") != std::string::npos ||
                                   got.get<std::string>().find("\xEF\xBF\xBD") != std::string::npos);
      };
      FUZZ_CHECK(same(doc["event"], e.event), "event: " + Json(line));
      for (const auto& [key, value] : e.fields) {
        FUZZ_CHECK(doc.contains(key) && doc[key].is_string(), "field " + key + ": " + Json(line));
      }
      if (e.msg) FUZZ_CHECK(same(doc["msg"], *e.msg), "msg: " + Json(line));
      continue;
    }
    // logfmt: "ts=... level=warn event=..."; journald: "<4>level=warn event=...".
    // Either way the first word is not a field of ours; the rest must be.
    const LogEvent back = ParseLogEvent(body);
    std::vector<std::pair<std::string, std::string>> want = {{"level", "warn"}, {"event", e.event}};
    want.insert(want.end(), e.fields.begin(), e.fields.end());
    if (e.msg) want.emplace_back("msg", *e.msg);
    std::vector<std::pair<std::string, std::string>> got = back.fields;
    if (format == akadzed::LogFormat::kLogfmt) {
      FUZZ_CHECK(back.event.starts_with("ts=") && !got.empty(), "logfmt line: " + Json(line));
    } else {
      FUZZ_CHECK(back.event == "<4>level=warn", "journald line: " + Json(line));
      got.insert(got.begin(), {"level", "warn"});
    }
    FUZZ_CHECK(got == want && !back.msg, Json(line) + " parses to " + Describe(back));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);

  // Any message: a fixed point after one parse, and one line in every format.
  const LogEvent parsed = ParseLogEvent(input);
  const std::string rebuilt = Rebuild(parsed);
  const LogEvent again = ParseLogEvent(rebuilt);
  FUZZ_CHECK(SameEvent(parsed, again), Describe(parsed) + " rebuilt as " + Json(rebuilt) +
                                           " parses to " + Describe(again));
  CheckRendered(input, parsed);

  // The input cut into two values and a free text, placed in a message.
  if (size >= 2) {
    const std::size_t a = data[0] % size;
    const std::size_t b = a + data[1] % (size - a + 1);
    const std::string_view v1 = input.substr(0, a);
    const std::string_view v2 = input.substr(a, b - a);
    const std::string_view tail = input.substr(b);
    CheckValue(v1);
    CheckValue(v2);
    const std::string message =
        "ev a=" + LogValue(v1) + " b_2.x-y=" + LogValue(v2) + " | " + std::string(tail);
    const LogEvent e = ParseLogEvent(message);
    const LogEvent want{"ev", {{"a", std::string(v1)}, {"b_2.x-y", std::string(v2)}}, std::string(tail)};
    FUZZ_CHECK(SameEvent(e, want), Json(message) + " parses to " + Describe(e));
  }
  return 0;
}
