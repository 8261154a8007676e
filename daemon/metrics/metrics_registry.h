// In-process metrics for /metrics: counter and histogram families with
// labels, which the daemon's threads record into, and collectors, which write
// families computed at scrape time (gauges read from the runners, the
// process or the database). Render() writes them all in the Prometheus text
// format 0.0.4, in registration order: families first, then collectors.
//
// A family keeps at most `max_series` label sets (1000 by default); values
// for further label sets are added to one series whose label values are all
// "_other", so a flood of distinct task names cannot grow memory or the
// scrape without bound.
//
// Thread-safety: create families and add collectors before other threads use
// the registry (the references returned stay valid for its lifetime). After
// that, Add/Observe/Render may be called from any thread: each family has its
// own mutex, held only to update or copy its series.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "metrics/exposition_writer.h"
#include "core/thread_annotations.h"

namespace akadzed {

// Label values in the order of the family's label names.
using LabelValues = std::vector<std::string>;

inline constexpr std::size_t kDefaultMaxSeries = 1000;

// A monotonically increasing count per label set. The name ends in _total.
class CounterFamily {
 public:
  CounterFamily(std::string name, std::string help, std::vector<std::string> label_names,
                std::size_t max_series);

  // Adds `amount` (>= 0; negative amounts are ignored) to the series.
  void Add(const LabelValues& labels, double amount = 1);
  // Creates the series at 0 if it does not exist, so it is exported before
  // its first event.
  void Init(const LabelValues& labels) { Add(labels, 0); }
  // The series' value (0 if it does not exist), for tests.
  double Value(const LabelValues& labels) const;
  void Write(ExpositionWriter& out) const;

 private:
  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
  const std::size_t max_series_;
  mutable Mutex mu_;
  std::map<LabelValues, double> series_ GUARDED_BY(mu_);
};

// Observations counted into cumulative buckets (`le` upper bounds) per label
// set, with their sum and count.
class HistogramFamily {
 public:
  // `bounds` must be ascending and finite; a +Inf bucket is implied.
  HistogramFamily(std::string name, std::string help, std::vector<std::string> label_names,
                  std::vector<double> bounds, std::size_t max_series);

  // Records `value` (NaN is ignored).
  void Observe(const LabelValues& labels, double value);
  void Init(const LabelValues& labels);
  // The number of observations of the series, for tests.
  std::uint64_t Count(const LabelValues& labels) const;
  void Write(ExpositionWriter& out) const;

 private:
  struct Series {
    std::vector<std::uint64_t> buckets;  // per bound, not cumulative; last is +Inf
    double sum = 0;
    std::uint64_t count = 0;
  };
  Series& Find(const LabelValues& labels) REQUIRES(mu_);

  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
  const std::vector<double> bounds_;
  const std::size_t max_series_;
  mutable Mutex mu_;
  std::map<LabelValues, Series> series_ GUARDED_BY(mu_);
};

class MetricsRegistry {
 public:
  // Writes whole families (HELP, TYPE, samples) at render time; called on
  // the rendering thread, so it must be thread-safe itself.
  using Collector = std::function<void(ExpositionWriter&)>;

  // Throws std::invalid_argument for an invalid metric or label name, a
  // counter name without _total, or bounds that are not ascending.
  CounterFamily& AddCounter(std::string name, std::string help,
                            std::vector<std::string> label_names,
                            std::size_t max_series = kDefaultMaxSeries);
  HistogramFamily& AddHistogram(std::string name, std::string help,
                                std::vector<std::string> label_names, std::vector<double> bounds,
                                std::size_t max_series = kDefaultMaxSeries);
  void AddCollector(Collector collector);

  // The whole exposition. A collector that throws is skipped (the other
  // families are still rendered) and counted in
  // akadzed_metrics_collector_errors_total.
  std::string Render() const;

 private:
  std::deque<CounterFamily> counters_;
  std::deque<HistogramFamily> histograms_;
  std::vector<Collector> collectors_;
  // Families in registration order: (is_histogram, index).
  std::vector<std::pair<bool, std::size_t>> order_;
  mutable Mutex errors_mu_;
  mutable std::uint64_t collector_errors_ GUARDED_BY(errors_mu_) = 0;
};

}  // namespace akadzed
