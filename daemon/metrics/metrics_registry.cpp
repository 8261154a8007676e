#include "metrics/metrics_registry.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "core/redact.h"

namespace akadzed {

namespace {

MetricLabels Zip(const std::vector<std::string>& names, const LabelValues& values) {
  MetricLabels labels;
  labels.reserve(names.size() + 1);
  for (std::size_t i = 0; i < names.size(); ++i) labels.emplace_back(names[i], values[i]);
  return labels;
}

// The key a label set is stored under: itself, or the overflow series once
// the family is full.
template <typename Map>
LabelValues KeyFor(const Map& series, const LabelValues& labels, std::size_t names,
                   std::size_t max_series) {
  if (labels.size() != names) {
    throw std::invalid_argument("metrics: wrong number of label values");
  }
  if (series.count(labels) || series.size() < max_series) return labels;
  return LabelValues(names, "_other");
}

void CheckNames(const std::string& name, const std::vector<std::string>& label_names) {
  if (!IsMetricName(name)) throw std::invalid_argument("metrics: invalid metric name " + name);
  for (const std::string& label : label_names) {
    if (!IsLabelName(label) || label == "le") {
      throw std::invalid_argument("metrics: invalid label name " + label + " in " + name);
    }
  }
}

}  // namespace

CounterFamily::CounterFamily(std::string name, std::string help,
                             std::vector<std::string> label_names, std::size_t max_series)
    : name_(std::move(name)),
      help_(std::move(help)),
      label_names_(std::move(label_names)),
      max_series_(max_series) {}

void CounterFamily::Add(const LabelValues& labels, double amount) {
  if (!(amount >= 0)) return;
  MutexLock lock(mu_);
  series_[KeyFor(series_, labels, label_names_.size(), max_series_)] += amount;
}

double CounterFamily::Value(const LabelValues& labels) const {
  MutexLock lock(mu_);
  auto it = series_.find(labels);
  return it == series_.end() ? 0 : it->second;
}

void CounterFamily::Write(ExpositionWriter& out) const {
  std::map<LabelValues, double> copy;
  {
    MutexLock lock(mu_);
    copy = series_;
  }
  out.Family(name_, help_, "counter");
  for (const auto& [labels, value] : copy) out.Sample(name_, Zip(label_names_, labels), value);
}

HistogramFamily::HistogramFamily(std::string name, std::string help,
                                 std::vector<std::string> label_names, std::vector<double> bounds,
                                 std::size_t max_series)
    : name_(std::move(name)),
      help_(std::move(help)),
      label_names_(std::move(label_names)),
      bounds_(std::move(bounds)),
      max_series_(max_series) {}

HistogramFamily::Series& HistogramFamily::Find(const LabelValues& labels) {
  Series& s = series_[KeyFor(series_, labels, label_names_.size(), max_series_)];
  if (s.buckets.empty()) s.buckets.assign(bounds_.size() + 1, 0);
  return s;
}

void HistogramFamily::Observe(const LabelValues& labels, double value) {
  if (std::isnan(value)) return;
  // The first bucket whose upper bound is >= value; past the end: +Inf.
  auto bucket = static_cast<std::size_t>(
      std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  MutexLock lock(mu_);
  Series& s = Find(labels);
  ++s.buckets[bucket];
  s.sum += value;
  ++s.count;
}

void HistogramFamily::Init(const LabelValues& labels) {
  MutexLock lock(mu_);
  Find(labels);
}

std::uint64_t HistogramFamily::Count(const LabelValues& labels) const {
  MutexLock lock(mu_);
  auto it = series_.find(labels);
  return it == series_.end() ? 0 : it->second.count;
}

void HistogramFamily::Write(ExpositionWriter& out) const {
  std::map<LabelValues, Series> copy;
  {
    MutexLock lock(mu_);
    copy = series_;
  }
  out.Family(name_, help_, "histogram");
  const std::string bucket_name = name_ + "_bucket";
  for (const auto& [values, s] : copy) {
    MetricLabels labels = Zip(label_names_, values);
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i <= bounds_.size(); ++i) {
      cumulative += s.buckets[i];
      MetricLabels with_le = labels;
      with_le.emplace_back("le", i < bounds_.size() ? FormatMetricValue(bounds_[i]) : "+Inf");
      out.Sample(bucket_name, with_le, static_cast<double>(cumulative));
    }
    out.Sample(name_ + "_sum", labels, s.sum);
    out.Sample(name_ + "_count", labels, static_cast<double>(s.count));
  }
}

CounterFamily& MetricsRegistry::AddCounter(std::string name, std::string help,
                                           std::vector<std::string> label_names,
                                           std::size_t max_series) {
  CheckNames(name, label_names);
  if (!name.ends_with("_total")) {
    throw std::invalid_argument("metrics: a counter's name ends in _total: " + name);
  }
  counters_.emplace_back(std::move(name), std::move(help), std::move(label_names), max_series);
  order_.emplace_back(false, counters_.size() - 1);
  return counters_.back();
}

HistogramFamily& MetricsRegistry::AddHistogram(std::string name, std::string help,
                                               std::vector<std::string> label_names,
                                               std::vector<double> bounds,
                                               std::size_t max_series) {
  CheckNames(name, label_names);
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i]) || (i > 0 && bounds[i] <= bounds[i - 1])) {
      throw std::invalid_argument("metrics: histogram bounds must be finite and ascending: " + name);
    }
  }
  histograms_.emplace_back(std::move(name), std::move(help), std::move(label_names),
                           std::move(bounds), max_series);
  order_.emplace_back(true, histograms_.size() - 1);
  return histograms_.back();
}

void MetricsRegistry::AddCollector(Collector collector) {
  collectors_.push_back(std::move(collector));
}

std::string MetricsRegistry::Render() const {
  ExpositionWriter out;
  for (const auto& [histogram, index] : order_) {
    if (histogram) {
      histograms_[index].Write(out);
    } else {
      counters_[index].Write(out);
    }
  }
  for (const Collector& collector : collectors_) {
    // A collector writes into its own writer, so a throw midway leaves no
    // half-written family behind.
    ExpositionWriter part;
    try {
      collector(part);
    } catch (const std::exception& e) {
      spdlog::warn("metrics_collector_failed | {}", OneLine(RedactSecrets(e.what())));
      MutexLock lock(errors_mu_);
      ++collector_errors_;
      continue;
    }
    out.Append(part);
  }
  std::uint64_t errors;
  {
    MutexLock lock(errors_mu_);
    errors = collector_errors_;
  }
  out.Family("akadzed_metrics_collector_errors_total",
             "Scrape-time collectors that failed and were left out of a scrape", "counter");
  out.Sample("akadzed_metrics_collector_errors_total", {}, static_cast<double>(errors));
  return out.Take();
}

}  // namespace akadzed
