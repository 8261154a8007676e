#include "worker/pruner.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "core/redact.h"

namespace akadzed {

Pruner::Pruner(std::string conninfo, std::chrono::milliseconds stall_timeout, PruningConfig config,
               const ServiceClock& clock)
    : session_(std::move(conninfo), "akadzed pruner", stall_timeout),
      config_(config),
      loop_(clock),
      guard_(clock, LoopBackoff(std::min<std::chrono::microseconds>(std::chrono::seconds(1),
                                                                      std::chrono::microseconds(config.interval_us)),
                                 std::chrono::microseconds(config.interval_us))) {}

Pruner::~Pruner() { Stop(); }

void Pruner::Start() {
  loop_.Start("pruner", [this] {
    for (;;) {
      const auto wait = Round();
      loop_.MarkRound();
      if (loop_.Sleep(wait)) return;
    }
  });
}

void Pruner::Stop() { loop_.Stop(); }

std::chrono::microseconds Pruner::Round() {
  PruneCounts total;
  std::chrono::microseconds wait(config_.interval_us);
  const auto now = loop_.clock().Now();
  if (floor_since_ == ServiceClock::time_point{} || now - floor_since_ >= kPruneFloorReset) {
    floor_ = PruneFloor{};
    floor_since_ = now;
  }
  try {
    // Batches until every table is below a full batch, or we are stopped.
    for (bool more = true; more && !loop_.stop_requested();) {
      PruneCounts c = session_.Run(
          [&](pg::Connection& conn) { return PruneBatch(conn, config_.retention_us, config_.batch_size, &floor_); });
      total.jobs += c.jobs;
      total.periodic_runs += c.periodic_runs;
      total.start_marks += c.start_marks;
      more = c.jobs == config_.batch_size || c.periodic_runs == config_.batch_size ||
             c.start_marks == config_.batch_size;
    }
    if (auto ended = guard_.Succeeded()) {
      spdlog::info("prune_recovered failures={} outage_ms={}", ended->failures, ended->ms);
    }
  } catch (const std::exception&) {
    const RoundFailure f = guard_.Failed(std::current_exception());
    spdlog::log(f.level, "prune_failed | {}", f.message);
    wait = f.retry_in;
  }
  if (total.jobs + total.periodic_runs + total.start_marks > 0) {
    spdlog::info("prune jobs={} periodic_runs={} start_marks={}", total.jobs, total.periodic_runs,
                 total.start_marks);
  }
  return wait;
}

}  // namespace akadzed
