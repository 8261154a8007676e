// Pruning: deletes finished jobs older than the retention, periodic runs
// older than it, and start marks no limit window can still count, in batches
// (one DELETE per table per batch, rows locked elsewhere skipped), so that
// the tables stay small without long-running statements. Every daemon
// prunes; SKIP LOCKED keeps them out of each other's way.
//
// Thread-safety: PruneBatch uses the connection it is given; a Pruner's
// Start/Stop are for its owner only.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "config/config.h"
#include "pg/connection.h"
#include "runtime/db_session.h"

namespace akadzed {

struct PruneCounts {
  std::int64_t jobs = 0;           // succeeded/failed/cancelled, finished before the retention
  std::int64_t periodic_runs = 0;  // fired before the retention
  std::int64_t start_marks = 0;    // older than every starts_window (and at least an hour)
};

// Deletes at most `batch` rows of each kind. A count equal to `batch` means
// more may be left.
PruneCounts PruneBatch(pg::Connection& conn, std::int64_t retention_us, int batch);

class Pruner {
 public:
  // `stall_timeout` bounds its transactions (pg::Connection::Open).
  Pruner(std::string conninfo, std::chrono::milliseconds stall_timeout, PruningConfig config);
  ~Pruner();

  void Start();
  void Stop();

 private:
  void Loop();

  DbSession session_;
  PruningConfig config_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // guarded by mu_
};

}  // namespace akadzed
