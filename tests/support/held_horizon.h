// Reads under a held MVCC horizon (issue 41): another session's snapshot
// keeps every row version a claim, finish or prune makes dead, and their
// entries stay in the indexes, where a read from the head steps over them.
#pragma once

#include <catch2/catch.hpp>

#include <optional>

#include "claim/claim_transaction.h"
#include "claim/stored_floor.h"
#include "pg/connection.h"
#include "pg/transaction.h"

namespace akadzed::test {

// Holds the horizon of `holder`'s database from construction until
// release() or destruction: a REPEATABLE READ transaction whose snapshot is
// taken (its first statement). `holder` does nothing else meanwhile.
class HeldHorizon {
 public:
  explicit HeldHorizon(pg::Connection& holder) : tx_(holder, "BEGIN ISOLATION LEVEL REPEATABLE READ") {
    tx_.exec("SELECT 1");
  }
  // Ends the snapshot: what it kept may go from now on.
  void release() { tx_.rollback(); }

 private:
  pg::Transaction tx_;
};

// Queue "q": 3,000 ready jobs of the last hour over priorities 0 and 1,
// inserted before the horizon is held; then 20 claims of 100 through
// `claimer` with `floor`, which is then stored (SaveQueueFloor): 2,000 dead
// entries at the heads of the two levels, which a read from a head steps
// over. The horizon stays held until release() or destruction.
class ClaimedPastTwoLevels {
 public:
  ClaimedPastTwoLevels(pg::Connection& claimer, pg::Connection& holder) {
    claimer.exec("INSERT INTO akadze.jobs (task, queue, run_at, priority) SELECT 't', 'q', now() - interval"
                 " '1 hour' + g * interval '1 millisecond', g % 2 FROM generate_series(1, 3000) g");
    horizon_.emplace(holder);
    ClaimRequest r;
    r.queue = "q";
    r.slots = 100;
    r.floor = &floor;
    for (int i = 0; i < 20; ++i) REQUIRE(RunClaim(claimer, r).jobs.size() == 100);
    REQUIRE(floor.levels.size() == 2);
    SaveQueueFloor(claimer, "q", floor);
  }
  void release() { horizon_->release(); }

  ClaimFloor floor;  // the claims' own, as stored

 private:
  std::optional<HeldHorizon> horizon_;
};

}  // namespace akadzed::test
