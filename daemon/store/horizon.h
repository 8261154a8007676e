// What holds back the MVCC horizon of akadzed's database: the transactions,
// snapshots and replication slots because of which no row version of
// akadze.jobs that a claim or a finish made dead can be removed by vacuum
// (docs/operations.md, "The MVCC horizon"). Read by the database gauges and
// the horizon warning (metrics/db_gauges.h) and by the status report
// (`akadzed status`, the status page).
//
// One statement over three sources, each a holder of an xmin:
//
//   backend               a row of pg_stat_activity (not this session, not an
//                         autovacuum worker: vacuum's own xmin holds nothing
//                         back) with
//                           - backend_xid set, of any database: that
//                             transaction is running in every snapshot taken
//                             here, so every snapshot's xmin is at most it;
//                           - or backend_xmin set, of this database, or of
//                             no database (a physical walsender: a standby's
//                             hot_standby_feedback). Another database's
//                             snapshot holds only the shared catalogs.
//                         Its xmin is the older of the two; its age in
//                         seconds is now() - xact_start.
//   replication_slot      a row of pg_replication_slots with xmin set (any
//                         kind, any database: a slot's xmin holds every
//                         table). catalog_xmin alone holds back only the
//                         system catalogs, not akadze.jobs: not listed.
//                         PostgreSQL keeps no time for a slot's xmin: its
//                         age in seconds is unknown (NULL).
//   prepared_transaction  a row of pg_prepared_xacts (any database: its xid
//                         is in every snapshot); age from `prepared`.
//
// The rule that leaves out akadzed's own work: a holder whose start time is
// known and less than `min_age` ago (1 s) is not listed. Every transaction
// of a daemon (a claim, a finish, a gauge read, this one) takes a snapshot
// for milliseconds; one held longer than a second is a holder like any other.
// Holders without a known start (slots, walsenders, and sessions of other
// roles when this role lacks pg_read_all_stats) are always listed.
//
// Privileges: pg_stat_activity shows backend_xid, backend_xmin, pid,
// datid and application_name of every session, but state, backend_type and
// the start times only of this role's own sessions unless the role has the
// privileges of pg_read_all_stats (pg_monitor includes it; superusers have
// it). Without them another role's holder is listed with `hidden` set and
// no age in seconds, never left out (docs/security.md).
//
// Query texts are never read.
//
// Thread-safety: functions use the connection they are given, one thread at
// a time; they hold no state of their own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pg/connection.h"

namespace akadzed {

struct HorizonOptions {
  double min_age_seconds = 1.0;  // holders with a known start younger than this are left out
  std::size_t max_holders = 5;   // listed, oldest first (all are counted)
};

struct HorizonHolder {
  std::string kind;  // "backend", "replication_slot", "prepared_transaction"
  // backend: its pid; replication_slot: the pid of the walsender using it.
  std::optional<std::int64_t> pid;
  std::optional<std::string> application_name;  // backend
  // backend: pg_stat_activity.state ("active", "idle in transaction", ...);
  // replication_slot: "active" or "inactive".
  std::optional<std::string> state;
  std::optional<std::string> backend_type;  // backend: "client backend", "walsender", ...
  std::optional<std::string> database;      // its database; none: a physical walsender or slot
  std::optional<std::string> slot_name;     // replication_slot
  std::optional<std::string> slot_type;     // replication_slot: "physical" or "logical"
  std::optional<std::string> gid;           // prepared_transaction
  std::optional<std::string> owner;         // prepared_transaction: its role
  // ISO-8601 UTC. xact_start: the backend's transaction, or when the
  // prepared transaction was prepared.
  std::optional<std::string> xact_start;
  std::optional<std::string> backend_start;
  std::optional<std::string> query_start;
  // now() - xact_start; nullopt where PostgreSQL gives no time (a slot, a
  // walsender, another role's session seen without pg_read_all_stats).
  std::optional<double> age_seconds;
  std::string xmin;          // the transaction id it holds the horizon at (as text)
  std::int64_t xid_age = 0;  // age(xmin): transactions since then
  bool hidden = false;       // another role's session, its details hidden from this role
};

struct HorizonReport {
  std::vector<HorizonHolder> holders;  // at most max_holders, oldest first
  std::int64_t holders_total = 0;      // all of them
  // Whether this role sees every session's details (pg_read_all_stats).
  bool stats_visible = false;
};

// One statement on `conn` (in the caller's transaction, if any). Holders are
// ordered by age_seconds (unknown last), then by xid_age. Throws pg::PgError.
HorizonReport ReadHorizon(pg::Connection& conn, const HorizonOptions& options = {});

// n_dead_tup of akadze.jobs from the statistics (pg_stat_user_tables): an
// estimate, updated by the server as transactions end. Throws pg::PgError.
std::int64_t ReadJobsDeadTuples(pg::Connection& conn);

}  // namespace akadzed
