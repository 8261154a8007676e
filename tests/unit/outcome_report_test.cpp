// ParseOutcomeReport (handlers/outcome_report.h) on its own: regressions
// found by tests/fuzz/fuzz_outcome_report.cpp. The protocol as a whole is
// tested with real processes in shell_handler_test.cpp.
#include <catch2/catch.hpp>

#include "handlers/outcome_report.h"

namespace akadzed {
namespace {

TEST_CASE("outcome report: blanks are no report", "[shell][outcome]") {
  const OutcomeReport report = ParseOutcomeReport(" \n\t\r\n", false);
  CHECK_FALSE(report.present);
  CHECK(report.invalid.empty());
  CHECK(report.outcome.kind == OutcomeKind::kSuccess);
}

TEST_CASE("outcome report: a number beyond double is rejected, not thrown", "[shell][outcome]") {
  OutcomeReport report;
  REQUIRE_NOTHROW(report = ParseOutcomeReport(R"({"result": {"n": 1e400}})", false));
  CHECK(report.present);
  CHECK(report.invalid == "outcome on fd 3 is not usable JSON (a number is out of range)");
}

TEST_CASE("outcome report: an error class of blanks takes the default", "[shell][outcome]") {
  const OutcomeReport retry = ParseOutcomeReport(R"({"outcome": "retry", "error": " \n"})", false);
  CHECK(retry.invalid.empty());
  CHECK(retry.outcome.error == "Retry");
  const OutcomeReport fail = ParseOutcomeReport(R"({"outcome": "fail", "error": "\t"})", false);
  CHECK(fail.outcome.error == "Failed");
  const OutcomeReport named = ParseOutcomeReport(R"({"outcome": "cancel", "error": "Gone\n"})", false);
  CHECK(named.outcome.error == "Gone");
}

TEST_CASE("outcome report: more than 1 MiB is rejected", "[shell][outcome]") {
  const OutcomeReport report = ParseOutcomeReport("", true);
  CHECK(report.present);
  CHECK(report.invalid == "outcome on fd 3 is larger than 1 MiB");
}

}  // namespace
}  // namespace akadzed
