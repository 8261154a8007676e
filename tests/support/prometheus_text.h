// A strict parser of the Prometheus text exposition format 0.0.4, for the
// tests of /metrics. Stricter than Prometheus itself where akadzed's output
// should be: every family has exactly one HELP and one TYPE line, both before
// its samples; a family's lines are contiguous; no series appears twice;
// counters' samples end in _total and are not negative; histograms have, per
// label set, buckets with strictly ascending `le` ending in +Inf, cumulative
// (non-decreasing) counts, a +Inf bucket equal to _count, and a _sum.
// Metric and label names, label value escapes (\\, \", \n only), numbers
// (including +Inf, -Inf, NaN) and optional timestamps are checked; no
// leading or trailing blanks, no trailing comma in label sets, and the text
// ends with a newline.
//
// Thread-safety: pure functions and values.
#pragma once

#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace akadzed::test {

// A rejected exposition: what() is "line N: message".
class PrometheusTextError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using PromLabels = std::map<std::string, std::string>;

struct PromSample {
  std::string name;   // the sample's own name, e.g. x_bucket
  PromLabels labels;
  double value = 0;
  std::optional<std::int64_t> timestamp_ms;
};

struct PromFamily {
  std::string name;
  std::string type;   // counter, gauge, histogram, summary, untyped
  std::string help;   // unescaped
  std::vector<PromSample> samples;
};

struct PromExposition {
  std::vector<PromFamily> families;

  const PromFamily* Find(std::string_view family) const;
  // The value of sample `name` with exactly `labels`, or nullopt.
  std::optional<double> Value(std::string_view name, const PromLabels& labels = {}) const;
  // The sum over samples named `name` whose labels include `subset`.
  double Sum(std::string_view name, const PromLabels& subset = {}) const;
  // Samples named `name` whose labels include `subset`.
  std::vector<PromSample> Samples(std::string_view name, const PromLabels& subset = {}) const;
};

// Parses and validates `text`; throws PrometheusTextError.
PromExposition ParsePrometheusText(std::string_view text);

}  // namespace akadzed::test
