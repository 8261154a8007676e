// Pruning's statements: deletes finished jobs older than the retention,
// periodic runs older than it, and start marks no limit window can still
// count, in batches (one DELETE per table per batch, rows locked elsewhere
// skipped), so that the tables stay small without long-running statements.
// The thread that runs them is worker/pruner.h.
//
// Thread-safety: PruneBatch uses the connection it is given.
#pragma once

#include <cstdint>

#include "pg/connection.h"

namespace akadzed {

struct PruneCounts {
  std::int64_t jobs = 0;           // succeeded/failed/cancelled, finished before the retention
  std::int64_t periodic_runs = 0;  // fired before the retention
  std::int64_t start_marks = 0;    // older than every starts_window (and at least an hour)
};

// Deletes at most `batch` rows of each kind. A count equal to `batch` means
// more may be left.
PruneCounts PruneBatch(pg::Connection& conn, std::int64_t retention_us, int batch);

}  // namespace akadzed
