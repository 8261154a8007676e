// The strict Prometheus text parser of the tests (support/prometheus_text.h):
// what it accepts, and that it rejects each kind of malformed exposition.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "support/prometheus_text.h"

namespace akadzed::test {
namespace {

const std::string kValid =
    "# HELP akadzed_jobs Jobs by queue and state \\\\ with \\n escapes\n"
    "# TYPE akadzed_jobs gauge\n"
    "akadzed_jobs{queue=\"default\",state=\"queued\"} 3\n"
    "akadzed_jobs{queue=\"a \\\"quoted\\\" \\\\ name\\n\",state=\"queued\"} 0\n"
    "# a plain comment\n"
    "# TYPE outcomes_total counter\n"
    "# HELP outcomes_total Outcomes\n"
    "outcomes_total{task=\"t\",outcome=\"success\"} 2 1700000000000\n"
    "outcomes_total{task=\"t\",outcome=\"retry\"} 1e+2\n"
    "# HELP d_seconds Durations\n"
    "# TYPE d_seconds histogram\n"
    "d_seconds_bucket{task=\"t\",le=\"0.5\"} 1\n"
    "d_seconds_bucket{task=\"t\",le=\"1\"} 1\n"
    "d_seconds_bucket{task=\"t\",le=\"+Inf\"} 2\n"
    "d_seconds_sum{task=\"t\"} 3.25\n"
    "d_seconds_count{task=\"t\"} 2\n"
    "d_seconds_bucket{task=\"u\",le=\"0.5\"} 0\n"
    "d_seconds_bucket{task=\"u\",le=\"1\"} 0\n"
    "d_seconds_bucket{task=\"u\",le=\"+Inf\"} 0\n"
    "d_seconds_sum{task=\"u\"} 0\n"
    "d_seconds_count{task=\"u\"} 0\n"
    "# HELP g A gauge with odd values\n"
    "# TYPE g gauge\n"
    "g{k=\"inf\"} +Inf\n"
    "g{k=\"ninf\"} -Inf\n"
    "g{k=\"nan\"} NaN\n"
    "g{k=\"neg\"} -0.5\n"
    "g{k=\"exp\"} 1.5E-3\n"
    "g{} 7\n";

std::string ErrorOf(const std::string& text) {
  try {
    ParsePrometheusText(text);
  } catch (const PrometheusTextError& e) {
    return e.what();
  }
  return "";
}

TEST_CASE("a valid exposition parses into families and samples", "[prometheus]") {
  PromExposition e = ParsePrometheusText(kValid);
  REQUIRE(e.families.size() == 4);
  CHECK(e.families[0].name == "akadzed_jobs");
  CHECK(e.families[0].help == "Jobs by queue and state \\ with \n escapes");
  CHECK(e.Value("akadzed_jobs", {{"queue", "default"}, {"state", "queued"}}) == 3);
  CHECK(e.Value("akadzed_jobs", {{"queue", "a \"quoted\" \\ name\n"}, {"state", "queued"}}) == 0);
  CHECK(e.Find("outcomes_total")->type == "counter");
  CHECK(e.Sum("outcomes_total", {{"task", "t"}}) == 102);
  CHECK(e.Samples("outcomes_total", {{"outcome", "success"}}).at(0).timestamp_ms == 1700000000000);
  CHECK(e.Value("d_seconds_count", {{"task", "t"}}) == 2);
  CHECK(e.Value("d_seconds_sum", {{"task", "t"}}) == 3.25);
  CHECK(std::isinf(*e.Value("g", {{"k", "inf"}})));
  CHECK(*e.Value("g", {{"k", "ninf"}}) < 0);
  CHECK(std::isnan(*e.Value("g", {{"k", "nan"}})));
  CHECK(e.Value("g", {{"k", "exp"}}) == Approx(0.0015));
  CHECK(e.Value("g") == 7);
  CHECK_FALSE(e.Value("g", {{"k", "missing"}}));
  CHECK(ParsePrometheusText("").families.empty());
}

TEST_CASE("malformed expositions are rejected with the line", "[prometheus]") {
  const std::string gauge = "# HELP g h\n# TYPE g gauge\n";
  struct Case {
    std::string text;
    std::string message;
  };
  std::vector<Case> cases = {
      {"# HELP g h\n# TYPE g gauge\ng 1", "newline"},
      // Names.
      {gauge + "1g 1\n", "line 3: expected a metric name"},
      {"# HELP 1g h\n# TYPE 1g gauge\n", "line 1: expected a metric name"},
      {gauge + "g{1a=\"x\"} 1\n", "expected a label name"},
      {gauge + "g{__name__=\"x\"} 1\n", "reserved"},
      {gauge + "g{a-b=\"x\"} 1\n", "expected = after the label name"},
      // Label values and label sets.
      {gauge + "g{a=\"x\\t\"} 1\n", "invalid escape \\t"},
      {gauge + "g{a=\"x} 1\n", "unterminated label value"},
      {gauge + "g{a=x} 1\n", "quoted label value"},
      {gauge + "g{a=\"x\",} 1\n", "trailing comma"},
      {gauge + "g{a=\"x\",a=\"y\"} 1\n", "appears twice"},
      {gauge + "g{a=\"x\" } 1\n", ", or }"},
      // Values and blanks.
      {gauge + "g one\n", "invalid value \"one\""},
      {gauge + "g 0x10\n", "invalid value"},
      {gauge + "g 1_000\n", "invalid value"},
      {gauge + "g inf\n", "invalid value"},
      {gauge + "g 1e\n", "invalid value"},
      {gauge + "g\n", "expected a blank before the value"},
      {gauge + "g 1 12.5\n", "invalid timestamp"},
      {gauge + "g 1 2 3\n", "text after the timestamp"},
      {gauge + "g 1 \n", "trailing blank"},
      {gauge + " g 1\n", "leading blank"},
      // HELP and TYPE: present, once, before the samples, valid.
      {"# TYPE g gauge\ng 1\n", "line 2: sample g comes before its family's HELP and TYPE"},
      {"# HELP g h\ng 1\n", "line 2: sample g comes before"},
      {"g 1\n", "line 1: sample g has no HELP and TYPE before it"},
      {gauge + "# HELP g again\n", "line 3: second HELP for g"},
      {gauge + "# TYPE g gauge\n", "second TYPE"},
      {gauge + "g 1\n# HELP g late\n", "after its samples"},
      {"# HELP g h\n# TYPE g meter\n", "unknown type meter"},
      {"# HELP g h\n# TYPE g gauge extra\n", "text after the type"},
      {"# HELP g h\n# HELP x h\n# TYPE x gauge\n", "line 2: family g has no TYPE line"},
      {"# HELP x\\q h\n", "expected a space before the HELP text"},
      {"# HELP x h\n# TYPE x\\q gauge\n", "expected a blank before the type"},
      {"# HELP g bad \\t escape\n# TYPE g gauge\n", "invalid escape \\t in HELP text"},
      // Families contiguous, series unique.
      {gauge + "g 1\n# HELP x h\n# TYPE x gauge\nx 1\ng{a=\"b\"} 2\n",
       "line 7: sample g appears apart from its family g"},
      {gauge + "g 1\n# HELP x h\n# TYPE x gauge\n# HELP g h\n", "family g appears again"},
      {gauge + "g{a=\"1\"} 1\ng{a=\"1\"} 2\n", "line 4: duplicate series g"},
      // Counters.
      {"# HELP c h\n# TYPE c counter\nc 1\n", "counter c does not end in _total"},
      {"# HELP c_total h\n# TYPE c_total counter\nc_total -1\n", "counter c_total is negative"},
      {"# HELP c_total h\n# TYPE c_total counter\nc_created 1\n", "has no HELP and TYPE"},
  };
  const std::string h = "# HELP h_seconds h\n# TYPE h_seconds histogram\n";
  const std::vector<Case> histograms = {
      {h + "h_seconds_bucket{le=\"1\"} 1\nh_seconds_bucket{le=\"+Inf\"} 2\nh_seconds_sum 1\n",
       "no _count"},
      {h + "h_seconds_bucket{le=\"1\"} 1\nh_seconds_bucket{le=\"+Inf\"} 2\nh_seconds_count 2\n",
       "no _sum"},
      {h + "h_seconds_bucket{le=\"1\"} 1\nh_seconds_sum 1\nh_seconds_count 1\n", "no +Inf bucket"},
      {h + "h_seconds_bucket{le=\"+Inf\"} 2\nh_seconds_sum 1\nh_seconds_count 3\n",
       "_count differs from the +Inf bucket"},
      {h + "h_seconds_bucket{le=\"2\"} 1\nh_seconds_bucket{le=\"1\"} 1\n"
           "h_seconds_bucket{le=\"+Inf\"} 1\nh_seconds_sum 1\nh_seconds_count 1\n",
       "line 4: le values are not strictly ascending"},
      {h + "h_seconds_bucket{le=\"1\"} 1\nh_seconds_bucket{le=\"1.0\"} 1\n"
           "h_seconds_bucket{le=\"+Inf\"} 1\nh_seconds_sum 1\nh_seconds_count 1\n",
       "not strictly ascending"},
      {h + "h_seconds_bucket{le=\"1\"} 3\nh_seconds_bucket{le=\"+Inf\"} 2\n"
           "h_seconds_sum 1\nh_seconds_count 2\n",
       "line 4: bucket counts are not cumulative"},
      {h + "h_seconds_bucket{le=\"x\"} 1\n", "is not a number"},
      {h + "h_seconds_bucket 1\n", "has no le label"},
      {h + "h_seconds_sum{le=\"1\"} 1\n", "must not have an le label"},
      {h + "h_seconds_sum 1\nh_seconds_count 0\n", "series without buckets"},
      {h + "h_seconds 1\n", "has no HELP and TYPE"},
      {h + "h_seconds_bucket{le=\"+Inf\"} -1\nh_seconds_sum 0\nh_seconds_count -1\n",
       "not a count"},
  };
  cases.insert(cases.end(), histograms.begin(), histograms.end());
  for (const Case& c : cases) {
    INFO(c.text);
    std::string error = ErrorOf(c.text);
    CHECK(error.find(c.message) != std::string::npos);
    CHECK_FALSE(error.empty());
  }
}

}  // namespace
}  // namespace akadzed::test
