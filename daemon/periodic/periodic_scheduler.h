// The periodic scheduler: enqueues the jobs of the config's `periodic:`
// entries, leaderless. Every daemon runs one; at each fire instant whichever
// daemon first inserts (name, fire_at) into akadze.periodic_runs enqueues the
// job, in the same transaction, so a fire makes exactly one job however many
// daemons run (akadze's rule). Fire instants come from the database's clock,
// not the host's, so daemons on skewed hosts agree on them.
//
// Only the most recent fire instant is ever considered, and only while it is
// younger than the entry's grace: a daemon back after an outage enqueues at
// most one job per entry, never a backlog. With `overlap: false` the job
// carries unique_key 'periodic:<name>'; while the previous one is queued or
// running the fire is rolled back and tried again on later ticks within its
// grace (so it runs late rather than not at all, if the previous one ends in
// time).
//
// Thread-safety: FirePeriodic uses the connection it is given; a
// PeriodicScheduler's Start/Stop are for its owner only, its Round for its
// thread (or a test's, with the thread never started).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "periodic/periodic_config.h"
#include "pg/connection.h"
#include "runtime/db_session.h"
#include "runtime/service_loop.h"

namespace akadzed {

// The latest fire instant of `schedule` at or before `now_us`, if it is no
// older than `grace_us` (Unix microseconds). Pure.
std::optional<std::int64_t> LatestFire(const Schedule& schedule, std::int64_t now_us,
                                       std::int64_t grace_us);

struct FireResult {
  enum class Kind {
    kNone,        // no fire instant within the grace
    kEnqueued,    // this call enqueued job_id for fire_at_us
    kTaken,       // another daemon (or an earlier call) already fired fire_at_us
    kOverlapped,  // overlap: false and the previous job is still active; rolled back
  };
  Kind kind = Kind::kNone;
  std::int64_t fire_at_us = 0;
  std::int64_t job_id = 0;
  std::int64_t db_now_us = 0;  // the database's clock when it was decided
};

// Decides and, if due, records `entry`'s latest fire and enqueues its job,
// in one transaction on `conn`. Throws pg::PgError on database errors
// (nothing is recorded then).
FireResult FirePeriodic(pg::Connection& conn, const PeriodicConfig& entry);

class PeriodicScheduler {
 public:
  // `stall_timeout` bounds its transactions (pg::Connection::Open).
  PeriodicScheduler(std::string conninfo, std::chrono::milliseconds stall_timeout,
                    std::vector<PeriodicConfig> entries,
                    const ServiceClock& clock = SteadyServiceClock());
  ~PeriodicScheduler();

  // Starts the thread; a scheduler without entries starts none.
  void Start();
  void Stop();

  // One pass over the entries whose next fire is due by the local estimate
  // of the database clock (the clock's wall time plus the offset the last
  // fire measured): each fires (periodic_enqueued, periodic_skipped); a
  // failure is logged (periodic_failed, an outage once). Returns when the
  // thread runs the next: the next fire's instant, 10 ms to 1 s from the
  // round's start, or the backoff's wait after a failure.
  ServiceClock::time_point Round();

 private:
  void Loop();

  DbSession session_;
  std::vector<PeriodicConfig> entries_;
  // Used by the scheduler thread only:
  std::vector<std::int64_t> handled_;          // per entry: latest fire_at decided (taken/enqueued)
  std::vector<std::int64_t> reported_overlap_; // per entry: fire_at last logged as overlapped
  std::int64_t clock_offset_us_ = 0;           // database clock minus the clock's wall time
  // A failed tick is retried about every second (jittered); the database
  // being away is logged once per outage, other errors each time.
  RoundGuard guard_;
  ServiceLoop loop_;
};

}  // namespace akadzed
