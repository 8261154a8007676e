// Poison rows: the one policy by which a row the database will not take
// never fails the statement of its batch for the others (docs/reliability.md,
// "Rows that cannot be processed"), for every batched write of the store and
// the finisher.
//
//  - IsolatePoisonRows: batch, then row by row. The batch's statement is run
//    whole; if it fails for what one row holds (pg::RowFaultError: a data
//    exception, a constraint, an application's trigger; or a hook's refusal,
//    HookError), each row is tried alone, and one that fails alone with a
//    row's fault is handed to the caller, who gives it a lesser form to try
//    (a failure instead of a rescue, say) or leaves it (skipped, dropped).
//    Every other error (the server away or in doubt, a transient error, the
//    server's state: a timeout, a read-only server) propagates, batch and
//    all: the caller's next round tries again.
//  - RunWithHooks: a statement and the transition hooks of the jobs it
//    changed, in one transaction; a job a hook refuses (HookError) is
//    rolled back with the rest, noted, and the statement run again without
//    it, so one refusal holds back that job only.
//
// Thread-safety: plain functions; they use the connection the caller's
// callables use, one call per connection at a time.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "core/job_states.h"
#include "pg/connection.h"
#include "pg/pg_error.h"
#include "pg/result.h"
#include "pg/transaction.h"
#include "store/transition_listener.h"

namespace akadzed {

// What becomes of a row that failed alone with a row's fault.
enum class PoisonedRow {
  kTryAgain,  // the caller changed the row (a lesser form of its write): alone again
  kLeave,     // the caller gave the row its outcome (skipped, dropped, given up)
};

// Runs `batch()`. If it throws pg::RowFaultError or HookError, runs
// `alone(row)` for each row of `rows()` (taken after the batch failed: the
// rows still to do), and for one that throws pg::RowFaultError,
// `poisoned(row, error)` says whether to try it alone again. `alone` and
// `poisoned` may change the row (rows() is returned by value and the
// reference passed is to its element). Returns true when the batch went
// through whole. Other errors propagate.
template <typename Batch, typename Rows, typename Alone, typename Poisoned>
bool IsolatePoisonRows(Batch&& batch, Rows&& rows, Alone&& alone, Poisoned&& poisoned) {
  try {
    batch();
    return true;
  } catch (const pg::RowFaultError&) {
  } catch (const HookError&) {
  }
  auto each = rows();
  for (auto& row : each) {
    for (;;) {
      try {
        alone(row);
        break;
      } catch (const pg::RowFaultError& error) {
        if (poisoned(row, error) == PoisonedRow::kLeave) break;
      }
    }
  }
  return false;
}

// Runs `statement()` (which returns the changed jobs' ids in its first
// column) with the hooks that may fire from `from`, in one transaction; a
// job a hook refuses is rolled back, appended to `refused` (which the
// statement leaves alone on its next run) and the statement run again.
// Without such hooks the statement runs alone. Returns its result.
template <typename Statement>
pg::Result RunWithHooks(pg::Connection& conn, const TransitionListener* hooks, JobState from,
                        std::vector<std::int64_t>& refused, Statement&& statement) {
  const bool hooked = MayFire(hooks, from);
  for (;;) {
    std::optional<pg::Transaction> tx;
    if (hooked) tx.emplace(conn);
    pg::Result rows = statement();
    if (!tx) return rows;
    std::vector<std::int64_t> ids;
    for (int i = 0; i < rows.rows(); ++i) ids.push_back(rows.int64(i, 0));
    try {
      hooks->Fire(conn, from, ids);
      tx->commit();
      return rows;
    } catch (const HookError& e) {
      tx->rollback();
      refused.push_back(e.job_id());
    }
  }
}

}  // namespace akadzed
