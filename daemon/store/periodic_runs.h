// The periodic scheduler's statements (SPEC: leaderless periodic jobs): the
// fire row in akadze.periodic_runs and the job it enqueues, in the
// transaction of one fire. The decision which instant is due is the
// scheduler's (periodic/periodic_scheduler.h).
//
// Thread-safety: functions use the transaction they are given.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "pg/transaction.h"

namespace akadzed {

// The job one fire of a periodic entry enqueues.
struct PeriodicJob {
  std::string name;  // the entry's name: the fire row's key with fire_at
  std::string task;
  std::string args_json;
  std::string queue;
  std::int64_t priority = 0;
  std::int64_t max_attempts = 0;
  std::optional<std::string> unique_key;  // 'periodic:<name>' for overlap: false
};

// The transaction's now() (its start) as Unix microseconds: every statement
// of the transaction sees this instant.
std::int64_t TransactionNowUs(pg::Transaction& tx);

struct FireInsert {
  bool fire_recorded = false;         // false: the (name, fire_at) row was there already
  std::optional<std::int64_t> job_id; // the job, when recorded and not held off by unique_key
};

// Inserts the fire row (name, fire_at_us) and, only if that row is new, the
// job (ON CONFLICT DO NOTHING on an active unique_key). A concurrent
// transaction inserting the same row waits here for this one's end.
FireInsert InsertFire(pg::Transaction& tx, const PeriodicJob& job, std::int64_t fire_at_us);

// Records the job a fire enqueued on its fire row.
void LinkFireJob(pg::Transaction& tx, const std::string& name, std::int64_t fire_at_us,
                 std::int64_t job_id);

}  // namespace akadzed
