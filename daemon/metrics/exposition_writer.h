// Writes the Prometheus text exposition format 0.0.4: a family's HELP and
// TYPE lines, then its samples, with label values and help text escaped and
// numbers in the format's spelling (+Inf, -Inf, NaN). The writer does not
// check that a family's samples follow it or that names are valid; callers
// (the registry and the scrape-time collectors) write each family whole.
//
// Thread-safety: a value; one thread at a time.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace akadzed {

// Label name/value pairs, in the order they are written.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class ExpositionWriter {
 public:
  // Starts a family: "# HELP name help" and "# TYPE name type"; type is
  // "counter", "gauge" or "histogram".
  void Family(std::string_view name, std::string_view help, std::string_view type);
  // One sample line: name{label="value",...} value.
  void Sample(std::string_view name, const MetricLabels& labels, double value);
  // A whole gauge family with one unlabelled sample.
  void Gauge(std::string_view name, std::string_view help, double value);

  // Appends what `other` wrote.
  void Append(const ExpositionWriter& other) { text_ += other.text_; }

  const std::string& text() const { return text_; }
  std::string Take() { return std::move(text_); }

 private:
  std::string text_;
};

// A number as the format spells it: integers without a fraction, others in
// the shortest form that reads back exactly, +Inf, -Inf, NaN.
std::string FormatMetricValue(double value);

// True for a valid metric name ([a-zA-Z_:][a-zA-Z0-9_:]*) or label name
// ([a-zA-Z_][a-zA-Z0-9_]*, not starting with "__").
bool IsMetricName(std::string_view name);
bool IsLabelName(std::string_view name);

}  // namespace akadzed
