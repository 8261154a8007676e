// What `akadzed run` offers for monitoring, in one object the daemon owns:
// the metrics registry with the in-process families the runners and the
// finisher record into (WorkerMetrics), the database gauges (DbGauges),
// per-queue slots, the lease, process metrics and build info, and the HTTP
// listener (MetricsServer) that serves them with /healthz and /readyz. While
// it exists it counts the process's database errors: it installs a
// DatabaseErrorCounter as the pg layer's ErrorObserver and removes it when
// destroyed.
//
// With `metrics.enabled: false` nothing listens and the database is read
// only for the horizon warning (database.horizon_warn_after, DbGauges); the
// in-process families are still recorded (it is cheap).
//
// Thread-safety: construct, Bind, Start and Stop from the owner (the
// daemon's main thread); worker_metrics() may be used from any thread. The
// probes passed to Start are called on the listener's threads.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/http_exchange.h"
#include "metrics/metrics_config.h"
#include "metrics/database_error_counter.h"
#include "metrics/db_gauges.h"
#include "metrics/metrics_registry.h"
#include "metrics/metrics_server.h"
#include "metrics/worker_metrics.h"

namespace akadzed {

class Monitoring {
 public:
  struct QueueSlots {
    std::string queue;
    int slots = 0;
    int busy = 0;
  };
  // What only the daemon knows, asked at scrape time (thread-safe).
  struct Probes {
    std::function<std::vector<QueueSlots>()> slots;
    std::function<bool()> lease_held;
    // nullopt while the daemon's loops are alive, else the stalled loop.
    std::function<std::optional<std::string>()> stalled_loop;
    // The status page on the same listener (web/status_page.h); null: none.
    std::function<HttpReply(const HttpRequest&)> pages;
  };

  // `horizon_warn_after`: database.horizon_warn_after (0: off). `clock`:
  // the database gauges' reader's.
  Monitoring(const MetricsConfig& config, const std::string& conninfo,
             const std::vector<std::string>& queues, std::chrono::microseconds horizon_warn_after,
             const ServiceClock& clock = SteadyServiceClock());
  ~Monitoring();
  Monitoring(const Monitoring&) = delete;
  Monitoring& operator=(const Monitoring&) = delete;

  WorkerMetrics& worker_metrics() { return worker_metrics_; }
  const DatabaseErrorCounter& database_errors() const { return *db_errors_; }
  const MetricsRegistry& registry() const { return registry_; }

  // Opens the listener's socket; a no-op when disabled. Throws
  // std::runtime_error with one line (see MetricsServer::Bind).
  void Bind();
  // Serves /metrics, /healthz and /readyz; when disabled, starts only the
  // database reader, if the horizon warning needs it.
  void Start(Probes probes);
  // Stops the listener, then the database reader. Idempotent.
  void Stop();

 private:
  void WriteDaemonGauges(ExpositionWriter& out) const;

  const MetricsConfig config_;
  MetricsRegistry registry_;
  WorkerMetrics worker_metrics_;
  std::shared_ptr<DatabaseErrorCounter> db_errors_;  // shared with the pg layer
  std::unique_ptr<DbGauges> db_gauges_;   // when enabled or the horizon warning is on
  std::unique_ptr<MetricsServer> server_; // when enabled
  Probes probes_;  // set by Start before the listener's threads run
};

}  // namespace akadzed
