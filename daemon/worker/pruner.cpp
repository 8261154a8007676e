#include "worker/pruner.h"

#include <spdlog/spdlog.h>

#include "core/redact.h"

namespace akadzed {

Pruner::Pruner(std::string conninfo, std::chrono::milliseconds stall_timeout, PruningConfig config)
    : session_(std::move(conninfo), "akadzed pruner", stall_timeout), config_(config) {}

Pruner::~Pruner() { Stop(); }

void Pruner::Start() { thread_ = std::thread([this] { Loop(); }); }

void Pruner::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Pruner::Loop() {
  const auto interval = std::chrono::microseconds(config_.interval_us);
  for (;;) {
    PruneCounts total;
    try {
      // Batches until every table is below a full batch, or we are stopped.
      for (bool more = true; more;) {
        PruneCounts c = session_.Run(
            [&](pg::Connection& conn) { return PruneBatch(conn, config_.retention_us, config_.batch_size); });
        total.jobs += c.jobs;
        total.periodic_runs += c.periodic_runs;
        total.start_marks += c.start_marks;
        more = c.jobs == config_.batch_size || c.periodic_runs == config_.batch_size ||
               c.start_marks == config_.batch_size;
        std::lock_guard lock(mu_);
        if (stopping_) more = false;
      }
    } catch (const std::exception& e) {
      spdlog::warn("prune_failed | {}", OneLine(e.what()));
    }
    if (total.jobs + total.periodic_runs + total.start_marks > 0) {
      spdlog::info("prune jobs={} periodic_runs={} start_marks={}", total.jobs, total.periodic_runs,
                   total.start_marks);
    }
    std::unique_lock lock(mu_);
    if (cv_.wait_for(lock, interval, [&] { return stopping_; })) return;
  }
}

}  // namespace akadzed
