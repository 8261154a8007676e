// The audit that ends every fault scenario (docs/reliability.md): from the
// final rows of akadze.jobs, the transition log a trigger kept while the
// daemons ran, the handlers' own execution records and a running-jobs sampler,
// it counts what at-least-once delivery and exact limits forbid.
//
// Definitions (the same words as docs/reliability.md):
//  - finished: `succeeded`, or `failed` with attempt >= max_attempts.
//  - lost: any job not finished at the end (queued, running, cancelled, or
//    failed with attempts left), or a job recorded `succeeded` whose final run
//    (the run_count of its finish) has no completed execution record.
//  - stuck running: a lost job still `running`; split by whether its worker
//    still heartbeats.
//  - duplicate beyond at-least-once, any of:
//      D1 a job with more than one recorded finish (transition into a final
//         state);
//      D2 one claim (job id, run_count) executed to completion more than once;
//      D3 an execution of a job that started after the job's finish was
//         recorded, or of a run_count the job never reached.
//    Re-running a job whose earlier run ended without a recorded finish (its
//    worker died, lost its lease or its claim was in doubt, and the rescue or
//    the release put it back in the queue) is at-least-once, counted as a
//    re-run, not a duplicate.
//  - limit overshoot: a sample (one statement, one snapshot) in which a key
//    had more running jobs than its applicable max_running (own row, else
//    '*'; a key with no row must have none), or a queue more than its
//    cluster-wide cap (akadze.queue_caps), or a key whose recorded starts
//    (the claims' now(), from the transition log) exceed max_starts within
//    some window (T - starts_window, T], the claim's own window rule.
//
// Thread-safety: InstallAuditLog, ReadExecutions and Audit use what they are
// given from the calling thread. LimitSampler runs one thread of its own; its
// members are called from the owner's thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "pg/connection.h"

namespace akadzed::test {

// Creates schema fault_audit in the database: `transitions` (every change of
// akadze.jobs.state, with run_count, attempt, the run's worker, the limit key,
// started_at, clock_timestamp() and the writer's application_name) and
// `workers` (every akadze.workers row inserted: id, pid), both kept by
// triggers. Call it before any daemon starts.
void InstallAuditLog(pg::Connection& conn);

// One completed handler run, as the handler recorded it:
// "<job id> <run_count> <start_us> <end_us>" (CLOCK_REALTIME microseconds).
struct Execution {
  std::int64_t job_id = 0;
  std::int32_t run_count = 0;
  std::int64_t start_us = 0;
  std::int64_t end_us = 0;
};

// The records in `path` (missing file: none); a torn line is skipped.
std::vector<Execution> ReadExecutions(const std::string& path);

// Samples the running jobs of every limit key and every queue from its own
// connection, in a loop, and compares each with the key's applicable
// max_running and the queue's cap (akadze.limits and akadze.queue_caps are
// read once, at Start: they must not change during a scenario). Survives
// the database going away: it reconnects, counting the gaps.
class LimitSampler {
 public:
  explicit LimitSampler(std::string conninfo);
  ~LimitSampler();
  LimitSampler(const LimitSampler&) = delete;
  LimitSampler& operator=(const LimitSampler&) = delete;

  void Start();
  void Stop();
  std::int64_t samples() const { return samples_.load(); }
  std::int64_t reconnects() const { return reconnects_.load(); }
  // The largest running count seen for any key (shows the sampler saw load).
  std::int64_t max_seen() const { return max_seen_.load(); }
  // The largest running count seen for a capped queue (shows the cap bound).
  std::int64_t max_queue_seen() const { return max_queue_seen_.load(); }
  // "key K: N running, max_running M" for every overshoot seen (after Stop).
  std::vector<std::string> overshoots() const;

 private:
  void Loop();

  std::string conninfo_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<std::int64_t> samples_{0};
  std::atomic<std::int64_t> reconnects_{0};
  std::atomic<std::int64_t> max_seen_{0};
  std::atomic<std::int64_t> max_queue_seen_{0};
  mutable std::mutex mu_;
  std::vector<std::string> overshoots_;  // guarded by mu_
  std::vector<std::string> errors_;      // guarded by mu_; not connection errors
};

struct AuditReport {
  std::int64_t jobs = 0;
  std::int64_t succeeded = 0;
  std::int64_t failed_spent = 0;     // failed with every attempt spent
  std::int64_t lost = 0;
  std::int64_t stuck_running = 0;    // of the lost: still running
  std::int64_t stuck_dead_worker = 0;  // of those: no live worker
  std::int64_t double_finishes = 0;  // D1
  std::int64_t claims_run_twice = 0; // D2
  std::int64_t runs_after_finish = 0;  // D3
  std::int64_t claims = 0;           // queued -> running transitions
  std::int64_t reruns = 0;           // claims beyond the first (at-least-once)
  std::int64_t executions = 0;       // completed handler runs recorded
  std::int64_t running_overshoots = 0;  // samples x keys over max_running
  std::int64_t rate_overshoots = 0;     // windows over max_starts
  std::int64_t rate_full_windows = 0;   // claims that filled a window to max_starts (limit bound)
  std::int64_t samples = 0;
  // Informative, not a failure: keys whose recorded handler executions
  // overlapped beyond max_running (a handler still running after its job was
  // rescued: an orphan of a killed daemon that outlived heartbeat_ttl).
  std::int64_t handler_overlap_keys = 0;
  std::int64_t first_claim_us = 0;  // clock of the first claim, last finish
  std::int64_t last_finish_us = 0;
  std::vector<std::string> problems;  // the first few, human readable

  std::int64_t duplicates() const { return double_finishes + claims_run_twice + runs_after_finish; }
  std::int64_t overshoots() const { return running_overshoots + rate_overshoots; }
  bool ok() const {
    return lost == 0 && duplicates() == 0 && overshoots() == 0 && problems.empty();
  }
  // One line: every figure above.
  std::string Summary() const;
};

struct AuditOptions {
  // The handlers' execution records; required: every job's final run must
  // have one (records_complete), or only used for D2/D3 (false: e.g. a
  // handler that may be killed between its work and its record).
  std::vector<Execution> executions;
  bool records_complete = true;
  // The worker heartbeat age beyond which a running job's worker is dead.
  std::int64_t heartbeat_ttl_us = 30'000'000;
  const LimitSampler* sampler = nullptr;  // stopped
};

// Audits every job of the database `conn` is connected to.
AuditReport Audit(pg::Connection& conn, const AuditOptions& options);

}  // namespace akadzed::test
