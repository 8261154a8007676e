// Fuzz target: handlers/outcome_report.h, the JSON a shell handler writes to
// fd 3. Properties, for any bytes:
//  - ParseOutcomeReport never throws;
//  - whitespace only is no report, with the default outcome (success);
//  - a rejected report has a one-line reason of bounded length;
//  - an accepted one keeps docs/handlers.md's rules: result only with
//    success (valid JSON), delay only with retry/snooze (required with
//    snooze, 0..365 days), error and message only with retry/fail/cancel,
//    and then a non-empty one-line error class of at most 100 bytes;
//  - written back as a report (the delay as a duration string), it parses
//    to the same outcome.
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/duration.h"
#include "fuzz_check.h"
#include "handlers/outcome_report.h"

namespace {

using akadzed::JobOutcome;
using akadzed::OutcomeKind;
using akadzed::OutcomeReport;

bool IsRetryFailCancel(OutcomeKind kind) {
  return kind == OutcomeKind::kRetry || kind == OutcomeKind::kFail || kind == OutcomeKind::kCancel;
}

std::string Describe(const JobOutcome& o) {
  return std::string(akadzed::OutcomeKindName(o.kind)) + " result=" + o.result_json.value_or("-") +
         " delay=" + (o.delay_us ? std::to_string(*o.delay_us) : "-") + " error=" +
         nlohmann::json(o.error).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace) +
         " message=" +
         nlohmann::json(o.message).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
}

void CheckAccepted(const OutcomeReport& report) {
  const JobOutcome& o = report.outcome;
  const std::string what = Describe(o);
  FUZZ_CHECK(o.kind != OutcomeKind::kRelease, what);
  FUZZ_CHECK(!o.interrupted, what);
  FUZZ_CHECK(report.explicit_kind || o.kind == OutcomeKind::kSuccess, what);
  if (o.result_json) {
    FUZZ_CHECK(o.kind == OutcomeKind::kSuccess, "result with " + what);
    const nlohmann::json result = nlohmann::json::parse(*o.result_json, nullptr, false);
    FUZZ_CHECK(!result.is_discarded() && !result.is_null(), "result is not JSON: " + what);
  }
  if (o.delay_us) {
    FUZZ_CHECK(o.kind == OutcomeKind::kRetry || o.kind == OutcomeKind::kSnooze, "delay with " + what);
    FUZZ_CHECK(*o.delay_us >= 0 && *o.delay_us <= akadzed::kMaxOutcomeDelayUs, "delay range: " + what);
  }
  FUZZ_CHECK(o.kind != OutcomeKind::kSnooze || o.delay_us, "snooze without delay: " + what);
  if (IsRetryFailCancel(o.kind)) {
    FUZZ_CHECK(!o.error.empty(), "no error class: " + what);
    FUZZ_CHECK(o.error.size() <= 100, "error class too long: " + what);
    FUZZ_CHECK(akadzed::fuzz::IsOneLine(o.error), "error class not one line: " + what);
  } else {
    FUZZ_CHECK(o.error.empty() && o.message.empty(), "error or message with " + what);
  }
}

// The report a handler would write to get `o`.
std::string Rewrite(const JobOutcome& o) {
  nlohmann::json doc = nlohmann::json::object();
  doc["outcome"] = akadzed::OutcomeKindName(o.kind);
  if (o.result_json) doc["result"] = nlohmann::json::parse(*o.result_json);
  if (o.delay_us) doc["delay"] = akadzed::FormatDuration(*o.delay_us);
  if (IsRetryFailCancel(o.kind)) doc["error"] = o.error;
  if (!o.message.empty()) doc["message"] = o.message;
  return doc.dump();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const OutcomeReport report = akadzed::ParseOutcomeReport(text, false);

  if (!report.present) {
    FUZZ_CHECK(text.find_first_not_of(" \t\r\n") == std::string_view::npos,
               "text ignored as no report");
    FUZZ_CHECK(report.invalid.empty() && !report.explicit_kind, "no report, but rejected or explicit");
    const JobOutcome& o = report.outcome;
    FUZZ_CHECK(o.kind == OutcomeKind::kSuccess && !o.result_json && !o.delay_us && o.error.empty() &&
                   o.message.empty(),
               "no report, but " + Describe(o));
  } else if (!report.invalid.empty()) {
    FUZZ_CHECK(akadzed::fuzz::IsOneLine(report.invalid), "reason not one line: " + report.invalid);
    FUZZ_CHECK(report.invalid.size() <= 400, "reason too long: " + report.invalid);
  } else {
    CheckAccepted(report);
    const std::string rewritten = Rewrite(report.outcome);
    const OutcomeReport again = akadzed::ParseOutcomeReport(rewritten, false);
    FUZZ_CHECK(again.present && again.invalid.empty(),
               "rewritten report " + rewritten + " is rejected: " + again.invalid);
    const JobOutcome& a = report.outcome;
    const JobOutcome& b = again.outcome;
    FUZZ_CHECK(a.kind == b.kind && a.result_json == b.result_json && a.delay_us == b.delay_us &&
                   a.error == b.error && a.message == b.message,
               Describe(a) + " rewritten as " + rewritten + " parses to " + Describe(b));
  }

  const OutcomeReport too_big = akadzed::ParseOutcomeReport(text, true);
  FUZZ_CHECK(too_big.present && !too_big.invalid.empty(), "an oversized report is not rejected");
  return 0;
}
