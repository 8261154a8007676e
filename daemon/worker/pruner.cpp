#include "worker/pruner.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "core/redact.h"
#include "pg/params.h"

namespace akadzed {

PruneCounts PruneBatch(pg::Connection& conn, std::int64_t retention_us, int batch) {
  pg::Params params;
  params.add(retention_us).add(batch);
  PruneCounts counts;
  // jobs_finished_at_idx covers exactly these rows, oldest first.
  counts.jobs = conn.exec(
      "DELETE FROM akadze.jobs WHERE id IN (SELECT id FROM akadze.jobs"
      "  WHERE state IN ('succeeded', 'failed', 'cancelled')"
      "    AND finished_at < now() - $1::bigint * interval '1 microsecond'"
      "  ORDER BY finished_at LIMIT $2::int FOR UPDATE SKIP LOCKED)",
      params).affected();
  counts.periodic_runs = conn.exec(
      "DELETE FROM akadze.periodic_runs WHERE (name, fire_at) IN (SELECT name, fire_at"
      "  FROM akadze.periodic_runs WHERE fire_at < now() - $1::bigint * interval '1 microsecond'"
      "  LIMIT $2::int FOR UPDATE SKIP LOCKED)",
      params).affected();
  // A mark counts only within its key's starts_window; keep an hour at least
  // so that a window added meanwhile still sees recent starts, and a minute
  // past the longest window, as the claim's own purge does (a claim that
  // began up to a minute ago counts from its own now()). A mark as far in
  // the future was not written by a claim (each writes its now()) and would
  // count as a start for ever: it goes too.
  counts.start_marks = conn.exec(
      "DELETE FROM akadze.limit_starts WHERE ctid = ANY(ARRAY(SELECT ctid FROM akadze.limit_starts,"
      "  (SELECT greatest((SELECT max(starts_window) FROM akadze.limits) + interval '1 minute',"
      "                   interval '1 hour') AS keep) k"
      "  WHERE started_at < now() - k.keep OR started_at > now() + k.keep"
      "  LIMIT $1::int FOR UPDATE OF limit_starts SKIP LOCKED))",
      pg::Params().add(batch)).affected();
  return counts;
}

Pruner::Pruner(std::string conninfo, std::chrono::milliseconds stall_timeout, PruningConfig config,
               const ServiceClock& clock)
    : session_(std::move(conninfo), "akadzed pruner", stall_timeout),
      config_(config),
      loop_(clock),
      guard_(clock, RetryBackoff(std::min<std::chrono::microseconds>(std::chrono::seconds(1),
                                                                      std::chrono::microseconds(config.interval_us)),
                                 std::chrono::microseconds(config.interval_us))) {}

Pruner::~Pruner() { Stop(); }

void Pruner::Start() {
  loop_.Start([this] {
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
  try {
    // Batches until every table is below a full batch, or we are stopped.
    for (bool more = true; more && !loop_.stop_requested();) {
      PruneCounts c = session_.Run(
          [&](pg::Connection& conn) { return PruneBatch(conn, config_.retention_us, config_.batch_size); });
      total.jobs += c.jobs;
      total.periodic_runs += c.periodic_runs;
      total.start_marks += c.start_marks;
      more = c.jobs == config_.batch_size || c.periodic_runs == config_.batch_size ||
             c.start_marks == config_.batch_size;
    }
    if (auto ended = guard_.Succeeded()) {
      spdlog::info("prune_recovered failures={} outage_ms={}", ended->failures, ended->ms);
    }
  } catch (const std::exception& e) {
    const RoundFailure f = guard_.Failed(e);
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
