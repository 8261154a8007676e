// Pruning's statements: deletes finished jobs older than the retention,
// periodic runs older than it, and start marks no limit window can still
// count, in batches (one DELETE per table per batch, rows locked elsewhere
// skipped), so that the tables stay small without long-running statements.
// The thread that runs them is worker/pruner.h.
//
// Thread-safety: PruneBatch uses the connection it is given.
#pragma once

#include <cstdint>
#include <optional>

#include "pg/connection.h"

namespace akadzed {

struct PruneCounts {
  std::int64_t jobs = 0;           // succeeded/failed/cancelled, finished before the retention
  std::int64_t periodic_runs = 0;  // fired before the retention
  std::int64_t start_marks = 0;    // older than every starts_window (and at least an hour)
};

// Where a batch reads from: jobs_finished_at_idx from the finished_at
// (microseconds since 2000, store/job_sql.h MicrosSince2000Sql) of the
// latest job the batches before it deleted, limit_starts_started_at_idx
// from the started_at of the latest start mark they deleted; from the head
// without one. While another session holds the MVCC horizon back, such an
// index keeps at its head an entry for every row deleted since, dead: a
// batch read from the head stepped over all of them, each batch of each
// round (start marks: every mark the claims purged, once the hold is older
// than the marks' hour, which the floor passes once the batches are done:
// PruneBatch). A row behind the floor that no batch deleted
// (locked by another transaction when its batch ran, or written later with
// an older time) waits until a batch reads from the head again (the pruner
// drops its floor every 10 minutes: worker/pruner.h).
struct PruneFloor {
  std::optional<std::int64_t> finished_at_us;
  std::optional<std::int64_t> started_at_us;  // of start marks
};

// Deletes at most `batch` rows of each kind. A count equal to `batch` means
// more may be left. With `floor`, finished jobs and start marks are read
// from it, and it moves to the latest finished_at and started_at the batch
// deleted; for start marks, once fewer than a batch were left before the
// bound of the marks no window counts, to that bound (the marks the claims
// purged during a hold lie before it, dead).
PruneCounts PruneBatch(pg::Connection& conn, std::int64_t retention_us, int batch, PruneFloor* floor = nullptr);

}  // namespace akadzed
