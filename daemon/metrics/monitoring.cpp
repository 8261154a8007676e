#include "metrics/monitoring.h"

#include "metrics/process_metrics.h"
#include "pg/pg_error.h"

#ifndef AKADZED_VERSION
#define AKADZED_VERSION "unknown"
#endif

namespace akadzed {

Monitoring::Monitoring(const MetricsConfig& config, const std::string& conninfo,
                       const std::vector<std::string>& queues,
                       std::chrono::microseconds horizon_warn_after, const ServiceClock& clock)
    : config_(config),
      worker_metrics_(registry_, queues),
      db_errors_(std::make_shared<DatabaseErrorCounter>()) {
  registry_.AddCollector([this](ExpositionWriter& out) { WriteDaemonGauges(out); });
  registry_.AddCollector([this](ExpositionWriter& out) { db_errors_->Write(out); });
  registry_.AddCollector([](ExpositionWriter& out) { WriteProcessMetrics(out); });
  if (config_.enabled || horizon_warn_after.count() > 0) {
    db_gauges_ = std::make_unique<DbGauges>(conninfo, queues,
                                            DbGaugeOptions{.horizon_warn_after = horizon_warn_after}, clock);
  }
  if (config_.enabled) {
    registry_.AddCollector([this](ExpositionWriter& out) { db_gauges_->Write(out); });
    server_ = std::make_unique<MetricsServer>(clock);
  }
  pg::SetErrorObserver(db_errors_);
}

Monitoring::~Monitoring() {
  Stop();
  pg::SetErrorObserver(nullptr);
}

void Monitoring::Bind() {
  if (server_) server_->Bind(config_.host, config_.port);
}

void Monitoring::Start(Probes probes) {
  probes_ = std::move(probes);
  if (db_gauges_) db_gauges_->Start();
  if (!server_) return;
  server_->Serve({
      .metrics = [this] { return registry_.Render(); },
      .unhealthy = [this] { return probes_.stalled_loop ? probes_.stalled_loop() : std::nullopt; },
      .unready = [this] { return db_gauges_->NotReady(); },
      .pages = probes_.pages,
  });
}

void Monitoring::Stop() {
  if (server_) server_->Stop();
  if (db_gauges_) db_gauges_->Stop();
}

void Monitoring::WriteDaemonGauges(ExpositionWriter& out) const {
  out.Family("akadzed_build_info", "Always 1; the labels name this akadzed build", "gauge");
  out.Sample("akadzed_build_info", {{"version", AKADZED_VERSION}}, 1);
  if (probes_.slots) {
    const std::vector<QueueSlots> queues = probes_.slots();
    out.Family("akadzed_slots", "Configured slots (concurrent jobs) per queue", "gauge");
    for (const QueueSlots& q : queues) out.Sample("akadzed_slots", {{"queue", q.queue}}, q.slots);
    out.Family("akadzed_busy_slots",
               "Slots holding a claimed job whose finish is not recorded yet, per queue", "gauge");
    for (const QueueSlots& q : queues) out.Sample("akadzed_busy_slots", {{"queue", q.queue}}, q.busy);
  }
  if (probes_.lease_held) {
    out.Gauge("akadzed_lease_held",
              "1 while this daemon's heartbeats keep its lease (0: handlers stopped, claiming paused)",
              probes_.lease_held() ? 1 : 0);
  }
}

}  // namespace akadzed
