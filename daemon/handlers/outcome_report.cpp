#include "handlers/outcome_report.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/duration.h"
#include "core/redact.h"

namespace akadzed {

namespace {

// Parses the report's "delay": a duration string or a number of seconds.
std::optional<std::int64_t> ParseDelay(const nlohmann::json& value, std::string* error) {
  std::optional<std::int64_t> delay;
  if (value.is_string()) {
    std::string reason;
    delay = ParseDuration(value.get<std::string>(), &reason);
    if (!delay) {
      *error = "field 'delay': " + OneLine(TruncateUtf8(reason, 200));
      return std::nullopt;
    }
  } else if (value.is_number()) {
    const double seconds = value.get<double>();
    if (!(seconds >= 0)) {
      *error = "field 'delay' must be >= 0";
      return std::nullopt;
    }
    if (seconds * 1e6 > static_cast<double>(kMaxOutcomeDelayUs)) {
      *error = "field 'delay' must be at most 365 days";
      return std::nullopt;
    }
    delay = static_cast<std::int64_t>(std::llround(seconds * 1e6));
  } else {
    *error = "field 'delay' must be a duration string (\"30s\") or a number of seconds";
    return std::nullopt;
  }
  if (*delay > kMaxOutcomeDelayUs) {
    *error = "field 'delay' must be at most 365 days";
    return std::nullopt;
  }
  return delay;
}

}  // namespace

std::size_t JsonNestingDepth(std::string_view text) {
  std::size_t depth = 0;
  std::size_t deepest = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

OutcomeReport ParseOutcomeReport(std::string_view text, bool too_big) {
  OutcomeReport report;
  if (too_big) {
    report.present = true;
    report.invalid = "outcome on fd 3 is larger than 1 MiB";
    return report;
  }
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) return report;
  report.present = true;
  auto reject = [&report](std::string why) {
    report.invalid = std::move(why);
    return report;
  };
  if (JsonNestingDepth(text) > kMaxOutcomeReportDepth) {
    return reject("outcome on fd 3 is nested deeper than " + std::to_string(kMaxOutcomeReportDepth) +
                  " levels");
  }
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // Not e.what(): it quotes the payload.
    return reject("outcome on fd 3 is not valid JSON (parse error at byte " +
                  std::to_string(e.byte) + ")");
  } catch (const nlohmann::json::exception&) {
    // out_of_range 406, a number beyond double such as 1e400 (found by
    // tests/fuzz/fuzz_outcome_report.cpp): it escaped, and the shell handler
    // retried the job as a HandlerError even when it had succeeded.
    return reject("outcome on fd 3 is not usable JSON (a number is out of range)");
  }
  if (!doc.is_object()) return reject("outcome on fd 3 must be a JSON object");

  static const std::map<std::string_view, OutcomeKind> kKinds = {
      {"success", OutcomeKind::kSuccess}, {"retry", OutcomeKind::kRetry},
      {"snooze", OutcomeKind::kSnooze},   {"fail", OutcomeKind::kFail},
      {"cancel", OutcomeKind::kCancel}};
  for (const auto& [key, value] : doc.items()) {
    if (key != "outcome" && key != "result" && key != "delay" && key != "error" &&
        key != "message") {
      return reject("unknown field '" + OneLine(TruncateUtf8(key, 64)) +
                    "' (use outcome, result, delay, error, message)");
    }
  }
  JobOutcome& outcome = report.outcome;
  if (auto it = doc.find("outcome"); it != doc.end()) {
    if (!it->is_string()) return reject("field 'outcome' must be a string");
    const std::string name = it->get<std::string>();
    auto kind = kKinds.find(name);
    if (kind == kKinds.end()) {
      return reject("field 'outcome': unknown outcome '" + OneLine(TruncateUtf8(name, 64)) +
                    "' (use success, retry, snooze, fail or cancel)");
    }
    outcome.kind = kind->second;
    report.explicit_kind = true;
  }
  const OutcomeKind kind = outcome.kind;
  const char* kind_name = OutcomeKindName(kind);
  if (auto it = doc.find("result"); it != doc.end()) {
    if (kind != OutcomeKind::kSuccess) {
      return reject(std::string("field 'result' is not allowed with outcome ") + kind_name);
    }
    if (!it->is_null()) outcome.result_json = it->dump();
  }
  if (auto it = doc.find("delay"); it != doc.end()) {
    if (kind != OutcomeKind::kRetry && kind != OutcomeKind::kSnooze) {
      return reject(std::string("field 'delay' is not allowed with outcome ") + kind_name +
                    " (only retry and snooze)");
    }
    std::string why;
    outcome.delay_us = ParseDelay(*it, &why);
    if (!outcome.delay_us) return reject(why);
  }
  if (kind == OutcomeKind::kSnooze && !outcome.delay_us) {
    return reject("outcome snooze requires field 'delay'");
  }
  for (const char* field : {"error", "message"}) {
    auto it = doc.find(field);
    if (it == doc.end()) continue;
    if (kind != OutcomeKind::kRetry && kind != OutcomeKind::kFail && kind != OutcomeKind::kCancel) {
      return reject(std::string("field '") + field + "' is not allowed with outcome " + kind_name +
                    " (only retry, fail and cancel)");
    }
    if (!it->is_string()) return reject(std::string("field '") + field + "' must be a string");
    (std::strcmp(field, "error") == 0 ? outcome.error : outcome.message) = it->get<std::string>();
  }
  // Normalized before the defaults apply: an error of only blanks would
  // otherwise end up as an empty class (found by the properties of
  // tests/fuzz/fuzz_outcome_report.cpp).
  outcome.error = OneLine(TruncateUtf8(outcome.error, 100));
  if (outcome.error.empty()) {
    if (kind == OutcomeKind::kRetry) {
      outcome.error = "Retry";
    } else if (kind == OutcomeKind::kFail) {
      outcome.error = "Failed";
    } else if (kind == OutcomeKind::kCancel) {
      outcome.error = "Cancelled";
    }
  }
  return report;
}

bool ParseProgressLine(std::string_view line, ProgressReport* report, std::string* invalid) {
  const std::size_t first = line.find_first_not_of(" \t\r");
  if (first == std::string_view::npos || line[first] != '{') return false;
  if (JsonNestingDepth(line) > kMaxOutcomeReportDepth) return false;
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception&) {
    return false;  // a line of a report written over several lines
  }
  if (!doc.is_object() || doc.empty()) return false;
  for (const auto& item : doc.items()) {
    if (item.key() != "progress" && item.key() != "meta") return false;
  }
  const nlohmann::json none;
  *invalid = CheckProgress(doc.contains("progress") ? doc["progress"] : none,
                           doc.contains("meta") ? doc["meta"] : none, report);
  return true;
}

}  // namespace akadzed
