// The in-process metrics (daemon/metrics/): what the registry renders is a
// valid exposition by the strict parser, with the values recorded, from
// many threads at once; label escaping; the series cap. And the liveness
// check /healthz shares with the systemd watchdog.
#include <catch2/catch.hpp>

#include <thread>
#include <vector>

#include "metrics/database_error_counter.h"
#include "metrics/metrics_registry.h"
#include "metrics/worker_metrics.h"
#include "pg/pg_error.h"
#include "support/prometheus_text.h"
#include "runtime/loop_health.h"

namespace akadzed {
namespace {

using test::ParsePrometheusText;
using test::PromExposition;

TEST_CASE("counters and histograms render as a valid exposition", "[metrics]") {
  MetricsRegistry registry;
  CounterFamily& jobs = registry.AddCounter("t_jobs_total", "Jobs \\ with \"help\"\nsecond line",
                                            {"task", "outcome"});
  HistogramFamily& seconds = registry.AddHistogram("t_seconds", "Seconds", {"task"}, {0.1, 1, 10});
  registry.AddCollector([](ExpositionWriter& out) { out.Gauge("t_gauge", "A gauge", 2.5); });
  jobs.Init({"idle", "success"});
  jobs.Add({"a \"b\"\nc\\d", "success"}, 2);
  jobs.Add({"a \"b\"\nc\\d", "success"});
  jobs.Add({"x", "retry"}, -5);  // ignored
  seconds.Init({"idle"});
  for (double v : {0.05, 0.1, 0.5, 5.0, 50.0}) seconds.Observe({"t"}, v);

  PromExposition e = ParsePrometheusText(registry.Render());
  CHECK(e.Find("t_jobs_total")->help == "Jobs \\ with \"help\"\nsecond line");
  CHECK(e.Value("t_jobs_total", {{"task", "a \"b\"\nc\\d"}, {"outcome", "success"}}) == 3);
  CHECK(e.Value("t_jobs_total", {{"task", "idle"}, {"outcome", "success"}}) == 0);
  CHECK_FALSE(e.Value("t_jobs_total", {{"task", "x"}, {"outcome", "retry"}}));
  // le is an upper bound, inclusive: 0.1 falls in the 0.1 bucket.
  CHECK(e.Value("t_seconds_bucket", {{"task", "t"}, {"le", "0.1"}}) == 2);
  CHECK(e.Value("t_seconds_bucket", {{"task", "t"}, {"le", "1"}}) == 3);
  CHECK(e.Value("t_seconds_bucket", {{"task", "t"}, {"le", "10"}}) == 4);
  CHECK(e.Value("t_seconds_bucket", {{"task", "t"}, {"le", "+Inf"}}) == 5);
  CHECK(e.Value("t_seconds_count", {{"task", "t"}}) == 5);
  CHECK(e.Value("t_seconds_sum", {{"task", "t"}}) == Approx(55.65));
  CHECK(e.Value("t_seconds_count", {{"task", "idle"}}) == 0);
  CHECK(e.Value("t_gauge") == 2.5);
  CHECK(e.Value("akadzed_metrics_collector_errors_total") == 0);
}

TEST_CASE("bad names and bounds are refused at registration", "[metrics]") {
  MetricsRegistry registry;
  CHECK_THROWS_AS(registry.AddCounter("jobs", "no _total", {}), std::invalid_argument);
  CHECK_THROWS_AS(registry.AddCounter("1x_total", "h", {}), std::invalid_argument);
  CHECK_THROWS_AS(registry.AddCounter("x_total", "h", {"__reserved"}), std::invalid_argument);
  CHECK_THROWS_AS(registry.AddHistogram("h", "h", {"le"}, {1}), std::invalid_argument);
  CHECK_THROWS_AS(registry.AddHistogram("h", "h", {}, {1, 1}), std::invalid_argument);
}

TEST_CASE("a family keeps at most max_series label sets", "[metrics]") {
  MetricsRegistry registry;
  CounterFamily& c = registry.AddCounter("t_total", "h", {"task"}, 3);
  for (int i = 0; i < 10; ++i) c.Add({"task" + std::to_string(i)});
  PromExposition e = ParsePrometheusText(registry.Render());
  CHECK(e.Samples("t_total").size() == 4);  // 3 + the overflow series
  CHECK(e.Value("t_total", {{"task", "_other"}}) == 7);
  CHECK(e.Sum("t_total") == 10);
}

TEST_CASE("a collector that throws is left out and counted", "[metrics]") {
  MetricsRegistry registry;
  registry.AddCollector([](ExpositionWriter& out) {
    out.Family("half_written", "h", "gauge");
    throw std::runtime_error("database gone");
  });
  registry.AddCollector([](ExpositionWriter& out) { out.Gauge("after", "h", 1); });
  PromExposition e = ParsePrometheusText(registry.Render());
  CHECK(e.Find("half_written") == nullptr);
  CHECK(e.Value("after") == 1);
  CHECK(e.Value("akadzed_metrics_collector_errors_total") == 1);
}

TEST_CASE("recording from many threads while rendering loses nothing", "[metrics]") {
  MetricsRegistry registry;
  WorkerMetrics metrics(registry, {"q"});
  constexpr int kThreads = 8;
  constexpr int kJobs = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kJobs; ++i) {
        metrics.JobEnded("task" + std::to_string(t % 2), i % 3 == 0 ? "retry" : "success",
                         i * 0.001);
      }
    });
  }
  for (int i = 0; i < 20; ++i) ParsePrometheusText(registry.Render());  // meanwhile
  for (auto& t : threads) t.join();
  PromExposition e = ParsePrometheusText(registry.Render());
  CHECK(e.Sum("akadzed_job_outcomes_total") == kThreads * kJobs);
  CHECK(e.Sum("akadzed_job_duration_seconds_count") == kThreads * kJobs);
  CHECK(e.Value("akadzed_claim_duration_seconds_count", {{"queue", "q"}}) == 0);
  CHECK(e.Value("akadzed_jobs_claimed_total", {{"queue", "q"}}) == 0);
}

TEST_CASE("database errors are counted once each, by kind, where the pg layer raises them",
          "[metrics]") {
  auto counter = std::make_shared<DatabaseErrorCounter>();
  pg::SetErrorObserver(counter);
  CHECK_THROWS_AS(pg::ThrowForResult(nullptr, nullptr, "SELECT failed"), pg::ConnectionError);
  CHECK_THROWS_AS(pg::ThrowForConnection(nullptr, "cannot connect"), pg::ConnectionError);
  CHECK_THROWS_AS(pg::ThrowForResult(nullptr, nullptr, "COMMIT failed", true), pg::InDoubtError);
  pg::SetErrorObserver(nullptr);
  CHECK_THROWS(pg::ThrowForConnection(nullptr, "not counted"));
  CHECK(counter->count("connection") == 2);
  CHECK(counter->count("in_doubt") == 1);
  CHECK(counter->count("sql") == 0);
  ExpositionWriter out;
  counter->Write(out);
  PromExposition e = ParsePrometheusText(out.text());
  CHECK(e.Value("akadzed_database_errors_total", {{"kind", "connection"}}) == 2);
  CHECK(e.Value("akadzed_database_errors_total", {{"kind", "transient"}}) == 0);
}

TEST_CASE("metric values are spelled as the format wants", "[metrics]") {
  CHECK(FormatMetricValue(3) == "3");
  CHECK(FormatMetricValue(0.25) == "0.25");
  CHECK(FormatMetricValue(1e20) == "1e+20");
  CHECK(FormatMetricValue(1.0 / 0.0) == "+Inf");
  CHECK(FormatMetricValue(-1.0 / 0.0) == "-Inf");
  CHECK(FormatMetricValue(std::nan("")) == "NaN");
}

}  // namespace
}  // namespace akadzed

namespace akadzed {
namespace {

TEST_CASE("StalledLoop names the first loop past its period plus the grace", "[metrics]") {
  using namespace std::chrono_literals;
  const auto now = std::chrono::steady_clock::now();
  std::vector<LoopRound> loops = {{"lease keeper", now - 6s, 5s},
                                  {"claim loop of queue default", now - 3s, 1s}};
  CHECK_FALSE(StalledLoop(loops, now, 2s));
  CHECK(StalledLoop(loops, now, 1500ms) == "claim loop of queue default: no round for 3s");
  CHECK(StalledLoop(loops, now, 500ms) == "lease keeper: no round for 6s");
  CHECK_FALSE(StalledLoop({}, now, 0s));
}

}  // namespace
}  // namespace akadzed
