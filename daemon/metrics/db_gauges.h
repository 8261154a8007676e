// The part of /metrics and /readyz that comes from the database: queued
// and running jobs, ready jobs, lag, pause and the last hour's finishes per
// queue (the status report's queue section, store/status_report.h: counts
// that read past the dead entries a held MVCC horizon keeps), limit keys in use,
// and whether the database answers with the schema this binary needs.
//
// One thread with its own connection (a DbSession, so it reconnects) reads
// them when a scrape asks and the last read is older than `max_age`: a
// scrape storm costs the database at most one read per max_age. Each read is
// a READ ONLY transaction with a statement_timeout. A scrape waits at most
// `wait` for the read; when the database is slow or gone it gets
// akadzed_database_up 0 and no database gauges (the in-process metrics are
// still served), and the error is counted (akadzed_database_errors_total,
// through the pg layer).
//
// What holds back the database's horizon (store/horizon.h) is read with the
// gauges, and fed to the horizon warning (metrics/horizon_watch.h) on the
// reader thread. With `horizon_warn_after` set, the thread also reads it by
// itself (that statement only) every HorizonCheckInterval(), so the warning
// does not wait for a scrape; the daemon then starts the reader even with
// the listener disabled.
//
// The thread's two rounds are public (ReadRound, HorizonRound), so a test
// drives them on its own thread, on a clock it moves, with the thread never
// started.
//
// Thread-safety: Start/Stop from the owner; Write and NotReady from any
// thread (they share the latest read under a mutex); ReadRound and
// HorizonRound from the reader thread (or a test's, the thread never
// started).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "metrics/exposition_writer.h"
#include "metrics/horizon_watch.h"
#include "runtime/db_session.h"
#include "core/thread_annotations.h"
#include "runtime/service_loop.h"
#include "store/job_admin.h"
#include "store/limits_table.h"
#include "store/status_report.h"

namespace akadzed {

struct DbGaugeOptions {
  std::chrono::milliseconds max_age{1000};            // a read younger than this is reused
  std::chrono::milliseconds wait{3000};               // a scrape waits this long for a read
  std::chrono::milliseconds statement_timeout{2000};  // per statement of a read
  std::size_t max_queues = 1000;                      // queues exported (by name)
  std::int64_t count_cap = 1000000;                   // a queue's queued jobs counted up to this
  std::size_t max_limit_keys = 1000;                  // limit keys exported (busiest first)
  // database.horizon_warn_after; 0: no warning, no reads between scrapes.
  std::chrono::microseconds horizon_warn_after{0};
  std::size_t max_horizon_holders = 20;  // holders read (their held ages tracked), oldest first
};

// How often the reader checks the horizon by itself: a quarter of the
// bound, from 1 s to 30 s.
std::chrono::milliseconds HorizonCheckInterval(std::chrono::microseconds warn_after);

class DbGauges {
 public:
  // `queues`: the configured queues, exported (at 0) even with no jobs.
  DbGauges(std::string conninfo, std::vector<std::string> queues, DbGaugeOptions options = {},
           const ServiceClock& clock = SteadyServiceClock());
  ~DbGauges();
  DbGauges(const DbGauges&) = delete;
  DbGauges& operator=(const DbGauges&) = delete;

  void Start();
  void Stop();

  // Writes akadzed_database_up and akadzed_ready, and, when a fresh read
  // succeeded, the database gauges. Refreshes first if needed.
  void Write(ExpositionWriter& out);
  // nullopt when the database answers with this binary's schema; else one
  // line saying why not (passwords redacted). Refreshes first if needed.
  std::optional<std::string> NotReady();

  // One read, as a scrape's request makes the thread do: the gauges and the
  // horizon, logged once when reads start failing
  // (metrics_database_failed) or work again (metrics_database_ok), made
  // the latest (Write and NotReady use it while it is younger than
  // max_age, by the clock), waking the scrapes that wait for it.
  void ReadRound() EXCLUDES(loop_.mu());
  // The horizon alone, as between scrapes (horizon_warn_after set): fed to
  // the horizon warning; logged once when checks start failing
  // (horizon_check_failed) or work again (horizon_check_ok).
  void HorizonRound();

 private:
  struct Snapshot {
    ServiceClock::time_point started;  // when the read began
    std::string error;           // the database did not answer: why
    std::string schema_problem;  // SchemaMismatch(), when it answered
    bool gauges_read = false;    // false: the gauges' statements failed
    std::vector<QueueStatus> queues;
    std::vector<LimitKeyUse> limits;  // at most max_limit_keys, busiest first
    std::int64_t limit_keys = 0;      // all keys in use, also beyond the cap
    std::vector<HeldLimitKey> held;   // at most max_limit_keys, most queued first
    std::int64_t held_keys = 0;       // all held keys, also beyond the cap
    bool horizon_read = false;        // the horizon's statements answered
    std::optional<HorizonWatch::Oldest> horizon;  // its oldest holder; none: nothing holds it
    std::int64_t horizon_holders = 0;
    bool stats_visible = false;
    std::int64_t jobs_dead_tuples = 0;
  };
  // The latest read if it started within max_age (after waiting up to
  // `wait` for one); nullptr when none came in time.
  std::shared_ptr<const Snapshot> Fresh();
  void Loop();
  Snapshot Read();
  // The horizon only, between scrapes (horizon_warn_after set).
  void CheckHorizon();
  void WriteHorizon(ExpositionWriter& out, const Snapshot& s) const;

  DbSession session_;  // used by the reader thread only
  const std::vector<std::string> queues_;
  const DbGaugeOptions options_;
  HorizonWatch horizon_watch_;    // the reader thread's
  bool horizon_failing_ = false;  // the reader thread's: the last CheckHorizon failed
  bool reads_failing_ = false;    // the reader thread's: the last read failed
  ServiceClock::time_point next_check_;  // the reader thread's: the next horizon check (horizon_warn_after)
  // The reader thread, its stop, and the mutex (loop_.mu()) guarding:
  ServiceLoop loop_;
  std::shared_ptr<const Snapshot> latest_ GUARDED_BY(loop_.mu());
  std::uint64_t requested_ GUARDED_BY(loop_.mu()) = 0;  // reads asked for
  std::uint64_t completed_ GUARDED_BY(loop_.mu()) = 0;  // reads done
};

}  // namespace akadzed
