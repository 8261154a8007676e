// SQL fragments over akadze.jobs' columns that several statements (of the
// store and the claim) share, so each rule is written once: what is ready,
// appending to `errors`, and reading a timestamp
// the schema accepts (including '-infinity' and 'infinity') as a point in
// the past that now() can be subtracted from.
//
// Thread-safety: pure functions, but CanReadTable (one statement on the
// connection it is given).
#pragma once

#include <string>
#include <string_view>

#include "pg/connection.h"

namespace akadzed {

// The ready predicate of SPEC §1 over akadze.jobs' own columns (the queue's
// pause is a separate check): what a claim may take, and what the admin
// commands count as ready.
//
// Three spellings of `state = 'queued'` (state is NOT NULL: they mean the
// same) say which index a generic plan may use, since under a held MVCC
// horizon the statistics count live rows only and a plan that reads a
// partial index of queued rows whole, taking it for a few pages, steps over
// every dead entry in it:
//   kReadyJobSql     the partial indexes on state = 'queued' (jobs_claim_idx,
//                    jobs_claim_key_idx): reads in claim order;
//   kReadyByXidSql   only jobs_queued_xid_idx, whose predicate is this
//                    spelling (migration 009): reads by the transaction that
//                    queued a row (claim/claim_floor.h);
//   kReadyByIdSql    no partial index (no predicate is implied): reads by id,
//                    through jobs_pkey.
#define AKADZED_READY_AFTER_STATE \
  " AND run_at <= now() AND cancel_requested_at IS NULL AND (expires_at IS NULL OR expires_at > now())"
inline constexpr const char* kReadyJobSql = "state = 'queued'" AKADZED_READY_AFTER_STATE;
inline constexpr const char* kReadyByXidSql = "(state = 'queued') IS TRUE" AKADZED_READY_AFTER_STATE;
inline constexpr const char* kReadyByIdSql = "(state = 'queued') IS NOT FALSE" AKADZED_READY_AFTER_STATE;
#undef AKADZED_READY_AFTER_STATE

// Running rows with a limit key, spelled as jobs_running_key_xid_idx's
// predicate (migration 010) so that a read of a key's running rows (a
// claim's count of running(K), `akadzed limits`) goes through that index
// and no plan reads jobs_running_worker_idx (every running job of the
// cluster) whole instead: its predicate, `state = 'running'`, is not
// implied by this one. A running row's id lookup says
// `(state = 'running') IS NOT FALSE`: no partial index, jobs_pkey.
inline constexpr const char* kRunningWithKeySql = "(state = 'running') IS TRUE AND limit_key IS NOT NULL";

// The snapshot a claim floor records (claim/claim_floor.h), as pg_snapshot
// text, with the transaction's own id among those in progress when it has
// one. A snapshot never lists its own transaction, and its xmax may be past
// it, so what the transaction writes after the snapshot (a claim planned
// again in its transaction after it locked rows; a before-commit hook)
// would look seen by it, and a floor would skip it: a job this claim made
// running left out of its key's next count (found in review: a max_running
// of 2 counted 1).
inline constexpr const char* kFloorSnapshotSql =
    "(SELECT o.s || CASE WHEN o.x IS NULL THEN '' WHEN o.s LIKE '%:' THEN o.x::text ELSE ',' || o.x::text END"
    " FROM (SELECT pg_current_snapshot()::text AS s, pg_current_xact_id_if_assigned() AS x) o)";

// The server a floor was taken on, as text: pg_postmaster_start_time() as
// epoch seconds (with microseconds), the same whatever the session's
// TimeZone and DateStyle, so that a floor one process stored matches in
// another (claim/stored_floor.h).
inline constexpr const char* kServerStartedSql = "extract(epoch FROM pg_postmaster_start_time())::text";

// The queues the database names outside akadze.jobs, as a SELECT of
// (queue, served): those the workers serve, pause or cap (served true) and,
// `with_floors`, those with a stored claim floor (akadze.queue_floors;
// served false unless also one of the others: pass it only when the role
// may read the table, CanReadTable). The known bounds of the skip scans
// that find the other queues (FirstInGapSql).
std::string KnownQueuesSql(bool with_floors);

// Whether the session's role may SELECT from `table` (a qualified name):
// a statement that names a table it may not read fails whole.
bool CanReadTable(pg::Connection& conn, const std::string& table);

// The first value of `column` (of akadze.jobs as `j`) over the rows where
// `where` holds that lies after `lo` and before `hi` (SQL expressions,
// either NULL: no bound on that side), in the order of an index that leads
// with `column` (given `where`'s equalities): a probe of a skip scan that
// never enters the entries of `lo` or `hi` themselves, where a held MVCC
// horizon keeps the dead entries of a served queue's or a limit key's
// claims. Four gated subqueries, one per kind of bound, so each is one
// index range (a bound inside an OR would not bound the scan).
std::string FirstInGapSql(std::string_view column, std::string_view where, std::string_view lo,
                          std::string_view hi);

// The running jobs of the registered workers, as a subquery with the
// columns (queue, limit_key, worker_id): each worker's read with its stored
// running floor (akadze.workers.running_floor, migration 014, written by
// its heartbeat: store/worker_lease.h) when the floor is of this server and
// well-formed, so that it reads the ids its last reconcile found and the
// entries of jobs_running_worker_idx from its from_xid on and at its
// points: what a heartbeat round's claims left, not every job the worker
// ran while a held MVCC horizon keeps their entries; else the worker's
// entries whole. A job running under no registered worker (a dead worker's
// whose row the rescue removed, about to be requeued) is not among them.
// For the counts of running jobs (status report, limits in use, workers).
const std::string& RunningJobsOfWorkersSql();
// One worker's running jobs as RunningJobsOfWorkersSql reads each: a
// subquery of (id, queue, limit_key, worker_id) for the worker `worker_id`
// (an SQL expression of type uuid) with the stored floor `stored_floor` (a
// jsonb expression, e.g. its row's running_floor); a lateral subquery where
// they name an outer row. Also the rescue's read of a dead worker's jobs.
std::string RunningJobsOfWorkerSql(std::string_view worker_id, std::string_view stored_floor);

// A queue's running jobs, every one whoever runs it (a queue cap's count,
// claim/claim_transaction.cpp), as a query of one column, id, read through
// jobs_running_worker_idx (worker_id, running_xid) without stepping over the
// dead entries a held MVCC horizon keeps there: those of every job the
// cluster ran since it was held. `queue` is an SQL expression of type text.
//
// Without `floor`: each registered worker's jobs as RunningJobsOfWorkerSql
// reads them (its stored running floor: what a heartbeat round's claims
// left), and whole the entries between the registered ids and those
// without a worker (jobs of workers that left, or that no daemon wrote).
// With `floor` (what the last count of the queue knew, for its snapshot S:
// core/running_floor.h): the ids it found, by id, and the entries whose
// running_xid S does not see, from_xid on and at the points, in every
// range of worker ids: from each registered worker's id (and, with
// `with_stops`, each of the last kQueueCountStops stopped workers' ids,
// akadze.worker_stops) up to the next such id, below the first, and
// without a worker. Within a range the entries of older transactions are
// passed over in the index, without a visit of their rows: those of the
// bounding worker are not read at all, those of workers between (ids
// that left with no stop recorded) are read in the index only.
struct QueueRunningFloorSql {
  std::string from_xid;  // xid8
  std::string points;    // xid8[]
  std::string ids;       // int8[]
  bool with_stops = false;  // the role may read akadze.worker_stops
};
inline constexpr int kQueueCountStops = 100;
std::string QueueRunningJobsSql(std::string_view queue, const QueueRunningFloorSql* floor);

// Settings local to a transaction whose statements each read a few rows of
// akadze.jobs through an index (a claim, a finish): no table scan, hash or
// merge join, so a plan joins row by row through an index. A generic plan
// is made once per connection, with the statistics of that moment: made on
// a daemon's first statements, while the table was small, it scanned the
// table (the finish) or merged the whole of jobs_pkey (the claiming
// UPDATE), and kept doing so as the table grew, as fast as a held MVCC
// horizon makes it grow (12-43 ms a statement after 40 s at 1,000 jobs/s).
// JIT is off too: a plan that keeps a disabled node (a sort no index
// avoids) costs over 10^10, past jit_above_cost, and compiling took 440 ms
// of a sweep that read 2 buffers. As the expressions of one SELECT.
inline constexpr const char* kIndexLookupPlansSql =
    "set_config('enable_seqscan', 'off', true), set_config('enable_hashjoin', 'off', true),"
    " set_config('enable_mergejoin', 'off', true), set_config('jit', 'off', true)";

// The `errors` column of akadze.jobs is a jsonb array of {error, message}
// entries, the last 10 kept.
// SQL that appends {error, message} to the jsonb `errors` and keeps the last
// 10 entries; the arguments are SQL expressions. `errors` may hold any jsonb
// an application wrote (an object or a scalar becomes the array's first
// element, as jsonb's || makes it).
std::string AppendErrorSql(std::string_view errors, std::string_view error,
                           std::string_view message);

// `column` (a timestamptz expression) held within [the earliest timestamptz,
// now()]: now() minus it is always a finite interval ('-infinity' counts as
// 4714 BC, a future time or 'infinity' as now()), where now() - column fails
// the statement for every row beside an infinite one. For a column that is
// never NULL (GREATEST skips a NULL: it would read as 4714 BC).
std::string PastTimestampSql(std::string_view column);

// A timestamptz column as int8 microseconds since 2000-01-01 UTC
// (PostgreSQL's own epoch), exactly: PostgreSQL keeps a timestamptz as that
// int8, so every finite value fits (counted from 1970, 294276 AD would
// not), and EXTRACT(EPOCH FROM a timestamptz) goes through a double and
// rounds far from 2000, where from the interval since 2000 it is exact.
// '-infinity' and 'infinity', which the schema accepts (docs/reliability.md,
// "Extreme values"), are INT64_MIN and INT64_MAX, as PostgreSQL stores
// them: they keep their order. NULL stays NULL (a pruning batch that
// deleted nothing has no floor to give). For the claim's run_at positions
// and the pruning floor.
std::string MicrosSince2000Sql(std::string_view column);
// The exact timestamptz MicrosSince2000Sql made the int8 `param` (an SQL
// expression) from.
std::string TimestampFromMicrosSql(std::string_view param);

// ISO-8601 UTC text of a timestamptz column, e.g.
// "2026-11-30T01:23:05.123456Z"; 'infinity' and '-infinity' as themselves.
std::string IsoTimestampSql(std::string_view column);

// Seconds from `column` to now(), at least 0, as float8 (PastTimestampSql);
// NULL where `column` is NULL.
std::string AgeSecondsSql(std::string_view column);

}  // namespace akadzed
