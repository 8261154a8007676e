// The horizon warning (database.horizon_warn_after, docs/operations.md "The
// MVCC horizon"): fed every read of what holds back the database's horizon
// (store/horizon.h), it says how long the horizon has been held and logs
// one line when an episode passes the bound and one when it ends.
//
//   held age   of each holder: its age in seconds where PostgreSQL gives a
//              start (a transaction, a prepared transaction); else (a
//              replication slot, a walsender's hot_standby_feedback, another
//              role's session seen without pg_read_all_stats) the time since
//              this watch first saw it holding the same xmin, in an unbroken
//              run of reads: a lower bound. The horizon's age is the oldest
//              holder's (0 when none).
//   episode    begins with the first read whose horizon age reaches the
//              bound: one warn line `horizon_held` naming the oldest holder
//              (kind, pid, application_name, state, backend_type, xact_start,
//              ages; a slot's or prepared transaction's name; never a query).
//              It lasts while reads find a holder past the bound, whichever
//              holder that is, and ends with the first read that finds none:
//              one info line `horizon_released` with its length (from the
//              start of the hold that opened it). A read that failed is not
//              fed: it neither opens nor ends an episode.
//   privilege  the first read that shows this role cannot see other roles'
//              sessions logs one warn line `horizon_stats_hidden`.
//
// With a bound of 0 nothing is logged but the privilege line; the ages are
// still computed (the gauge reads them).
//
// Thread-safety: owned and used by one thread (the database gauges' reader).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>

#include "runtime/service_clock.h"
#include "store/horizon.h"

namespace akadzed {

class HorizonWatch {
 public:
  // `warn_after`: the bound; 0 disables the episode lines.
  HorizonWatch(std::chrono::microseconds warn_after, const ServiceClock& clock = SteadyServiceClock());

  struct Oldest {
    HorizonHolder holder;
    double held_seconds = 0;  // its held age (above)
    bool age_from_postgres = false;  // false: since this watch first saw it
  };

  // Feeds one read; logs an episode's lines. Returns the oldest holder by
  // held age, nullopt when nothing holds the horizon.
  std::optional<Oldest> Observe(const HorizonReport& report);

  bool in_episode() const { return episode_start_.has_value(); }

 private:
  const std::chrono::microseconds warn_after_;
  const ServiceClock& clock_;
  // Holders without a PostgreSQL start time, by identity and xmin: when
  // first seen in the current unbroken run of reads.
  std::map<std::string, ServiceClock::time_point> first_seen_;
  std::optional<ServiceClock::time_point> episode_start_;  // the hold's start
  bool hidden_logged_ = false;
};

}  // namespace akadzed
