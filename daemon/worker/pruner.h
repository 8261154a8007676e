// Pruning: deletes finished jobs older than the retention, periodic runs
// older than it, and start marks no limit window can still count, in batches
// (one DELETE per table per batch, rows locked elsewhere skipped), so that
// the tables stay small without long-running statements. Every daemon
// prunes; SKIP LOCKED keeps them out of each other's way.
//
// Thread-safety: PruneBatch uses the connection it is given; a Pruner's
// Start/Stop are for its owner only.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "config/config.h"
#include "pg/connection.h"
#include "runtime/db_session.h"
#include "runtime/service_loop.h"

namespace akadzed {

struct PruneCounts {
  std::int64_t jobs = 0;           // succeeded/failed/cancelled, finished before the retention
  std::int64_t periodic_runs = 0;  // fired before the retention
  std::int64_t start_marks = 0;    // older than every starts_window (and at least an hour)
};

// Deletes at most `batch` rows of each kind. A count equal to `batch` means
// more may be left.
PruneCounts PruneBatch(pg::Connection& conn, std::int64_t retention_us, int batch);

// The pruning loop, on the service kit (runtime/service_loop.h): a round
// every pruning.interval; a failed round is retried after the guard's
// backoff (1 s doubling up to the interval).
class Pruner {
 public:
  // `stall_timeout` bounds its transactions (pg::Connection::Open).
  Pruner(std::string conninfo, std::chrono::milliseconds stall_timeout, PruningConfig config,
         const ServiceClock& clock = SteadyServiceClock());
  ~Pruner();

  void Start();
  void Stop();

  // One round, on the caller's thread: batches until every table is below
  // a full batch (or stop is requested), logs what it deleted (`prune`) or
  // its failure (`prune_failed`, `prune_recovered` after an outage).
  // Returns the wait before the next round.
  std::chrono::microseconds Round();

 private:
  DbSession session_;
  PruningConfig config_;
  ServiceLoop loop_;
  RoundGuard guard_;
};

}  // namespace akadzed
