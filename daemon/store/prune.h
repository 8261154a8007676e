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

// Where a batch reads jobs_finished_at_idx from: the finished_at
// (microseconds since 2000, store/job_sql.h MicrosSince2000Sql) of the
// latest job the batches before it deleted, or from the head without one.
// While another session holds the MVCC horizon back, the index keeps at its
// head an entry for every job pruning deleted since, dead: a batch read
// from the head stepped over all of them, each batch of each round. A job
// behind the floor that no batch deleted (locked by another transaction
// when its batch ran, or written later with an older finished_at) waits
// until a batch reads from the head again (the pruner drops its floor
// every 10 minutes: worker/pruner.h).
struct PruneFloor {
  std::optional<std::int64_t> finished_at_us;
};

// Deletes at most `batch` rows of each kind. A count equal to `batch` means
// more may be left. With `floor`, finished jobs are read from it, and it
// moves to the latest finished_at the batch deleted.
PruneCounts PruneBatch(pg::Connection& conn, std::int64_t retention_us, int batch, PruneFloor* floor = nullptr);

}  // namespace akadzed
