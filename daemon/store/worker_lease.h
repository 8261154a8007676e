// Leases (SPEC §4): a daemon's row in akadze.workers, its heartbeat, and the
// rescue of jobs whose worker stopped heartbeating.
//
// Thread-safety: functions use the connection they are given; one call per
// connection at a time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/job_states.h"
#include "core/running_floor.h"
#include "pg/connection.h"
#include "store/transition_listener.h"

namespace akadzed {

struct WorkerIdentity {
  std::string id;  // uuid
  std::string hostname;
  int pid = 0;
  std::vector<std::string> queues;
};

// Inserts (or refreshes) the worker's row with heartbeat_at = now().
void RegisterWorker(pg::Connection& conn, const WorkerIdentity& worker);

// Sets heartbeat_at = now(). Returns false when the row is gone (it was
// rescued as dead, or deleted by hand), or, with `lease_span_us`, when its
// heartbeat is older than that by clock_timestamp(): a heartbeat that
// reaches the server after the lease ran out must not renew the old id (its
// jobs would wait another heartbeat_ttl for their rescue). The caller takes
// a new id. Also keeps `floor` (the last reconcile's), when it is of this
// worker, as the worker's running floor (migration 014), from which the
// counts of running jobs read its jobs (store/job_sql.h,
// RunningJobsOfWorkersSql); without one the stored floor stays (a floor
// of the same worker stays true, however old: it only reads more).
struct OwnedJobsFloor;
bool Heartbeat(pg::Connection& conn, const std::string& worker_id,
               std::optional<std::int64_t> lease_span_us = std::nullopt, const OwnedJobsFloor* floor = nullptr);


struct OwnedJob {
  std::int64_t id = 0;
  std::int32_t run_count = 0;
  bool cancel_requested = false;
  bool settled = false;  // claimed (started_at) over `settled_us` ago, or no started_at
};

// What a worker's last read of its running jobs knew (core/running_floor.h),
// for the worker, the server (pg_postmaster_start_time: a promoted standby
// or a restored backup has transaction ids of another history) and the
// connection it was read through. Empty `worker_id`: none.
struct OwnedJobsFloor {
  std::string worker_id;
  std::string server_started;
  RunningFloor running;
  // Used only through the same connection (pg::Connection::serial): a new
  // one may reach a server that lost transactions since.
  std::uint64_t connection = 0;
};

// The jobs the database says this worker runs now. With `floor` (read
// through this connection, of this worker and server), reads the jobs the
// last read found, by id, and the worker's entries of
// jobs_running_worker_idx (worker_id, running_xid) made running since its
// snapshot (docs/claim.md, "Running floors"): what one heartbeat round's
// claims left, however long the horizon is held. Without one (a connection
// replaced), reads so from the floor its heartbeats stored
// (akadze.workers.running_floor), as the rescue does; without a usable
// stored one either (a new worker id's first rounds, which have no
// entries), reads the worker's entries whole: every job it ran while a held
// MVCC horizon keeps them. Either way, leaves
// in `floor` (when given) what this read knew; on an exception it is left
// as it was (an older floor stays true, it only reads more).
std::vector<OwnedJob> OwnedRunningJobs(pg::Connection& conn, const std::string& worker_id,
                                       std::int64_t settled_us = 0, OwnedJobsFloor* floor = nullptr);

// `floor` as akadze.workers.running_floor keeps it (JSON: version, worker,
// server, from_xid and points as text, ids), or nullopt when it is not one
// of `worker_id`.
std::optional<std::string> StoredRunningFloorJson(const OwnedJobsFloor& floor, const std::string& worker_id);

// Records that the workers `worker_ids` stopped with only the jobs
// `floor.ids` running under them as of the snapshot `floor` was taken from
// (akadze.worker_stops, migration 012): the rescue then reads only their
// jobs made running from the stop's from_xid on (the floor's, or the
// earliest running_xid of those jobs if older), not every job they ran
// (which a held MVCC horizon keeps). No stop when one of those jobs has no
// running_xid (the range would not find it). A stop already recorded is
// kept.
void RecordWorkerStops(pg::Connection& conn, const std::vector<std::string>& worker_ids, const RunningFloor& floor);

// Deletes the worker's row (clean shutdown, after its jobs were released),
// and records its stop with the jobs still running under it (those its
// shutdown could not release: the rescue's after the ttl): read with
// `floor` (the lease keeper's last reconcile floor), or whole without one.
void DeregisterWorker(pg::Connection& conn, const std::string& worker_id, OwnedJobsFloor* floor = nullptr);

// The jobs the database says this worker runs now in `queue`, except
// `except` (id and run_count only): after a claim whose COMMIT was in doubt,
// those are the jobs it may have claimed without knowing.
std::vector<OwnedJob> OwnedRunningJobsOfQueue(pg::Connection& conn, const std::string& worker_id,
                                              const std::string& queue,
                                              const std::vector<std::int64_t>& except);

// A running job's progress report (handlers/job_progress.h) to merge into
// its meta.
struct ProgressWrite {
  std::int64_t job_id = 0;
  std::int32_t run_count = 0;
  std::string patch_json;  // a JSON object
};

// Merges each patch into its job's meta (key by key), only while the job
// still runs under `worker_id` with that run_count: a run that ended or was
// taken since is left alone (its finish carries the patch), and so is a row
// another transaction holds (SKIP LOCKED: never a wait). One statement;
// returns the ids written. A meta that is not a JSON object (an
// application's) is left as it is. If the statement fails with a row's SQL
// error, each patch is written alone, and one that still fails is dropped,
// its id appended to `dropped`. Throws pg::PgError otherwise.
std::vector<std::int64_t> WriteJobProgress(pg::Connection& conn, const std::string& worker_id,
                                           const std::vector<ProgressWrite>& writes,
                                           std::vector<std::int64_t>* dropped = nullptr);

struct RescuedJob {
  std::int64_t id = 0;
  std::string worker_id;  // the lost worker ("" when the job had none)
  JobState state = JobState::kQueued;  // queued, or failed when attempts are spent
  std::string error;      // WorkerLost, or Unprocessable (failed: no rescue could be written)
  std::optional<std::string> traceparent;  // the job's meta.traceparent as stored (unchecked)
};

// Rescues running jobs whose worker has not heartbeaten for `ttl_us` (or has
// no row and started more than `ttl_us` ago): attempt+1, error WorkerLost,
// back to queued, or failed when attempts are spent (cancelled when a cancel
// was requested: such a job is never claimed again). Rows another
// transaction holds are left for the next round. Then deletes rows of dead
// workers that own no running job. Returns the rescued jobs.
// With `hooks`, each rescue runs them in its transaction; a job one refuses
// stays running (retried next round) and the rest are rescued.
//
// One row never fails the round for the others (docs/reliability.md, "Rows
// that cannot be processed"): counters saturate at int4's maximum; if the
// statement still fails with an SQL error, each lost job is rescued alone,
// one that fails alone is failed as Unprocessable, and one that cannot even
// be failed is left running, its id appended to `skipped`, and tried again
// next round. A worker heartbeat more than `ttl_us` in the future is set to
// now() first. Throws pg::ConnectionError and pg::TransientError.
std::vector<RescuedJob> RescueLostJobs(pg::Connection& conn, std::int64_t ttl_us,
                                       const TransitionListener* hooks = nullptr,
                                       std::vector<std::int64_t>* skipped = nullptr);

}  // namespace akadzed
