#include "worker/progress_writer.h"

#include <set>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "store/worker_lease.h"

namespace akadzed {

ProgressWriter::ProgressWriter(SharedDbSession& session, const LeaseKeeper& lease, RunningJobs& running,
                               std::chrono::microseconds interval, const ServiceClock& clock)
    // A failure is left pending: the next round (or the run's finish)
    // writes it. An outage is logged once (warn, then debug); anything else
    // at warn.
    : PeriodicService({.name = "progress", .thread = "progress", .interval = interval,
                       .level_cap = spdlog::level::warn},
                      clock),
      session_(session),
      lease_(lease),
      running_(running) {}

ProgressWriter::~ProgressWriter() { Stop(); }

bool ProgressWriter::Round() {
  if (!lease_.held()) return false;
  const std::vector<RunningJobs::PendingProgress> pending = running_.Progress();
  if (pending.empty()) return false;
  const std::string worker_id = lease_.worker_id();
  std::vector<ProgressWrite> writes;
  writes.reserve(pending.size());
  for (const RunningJobs::PendingProgress& p : pending) writes.push_back({p.job_id, p.run_count, p.patch_json});
  std::vector<std::int64_t> dropped;
  std::vector<std::int64_t> written;
  if (!session_.RunIfConnected(
          [&](pg::Connection& c) { written = WriteJobProgress(c, worker_id, writes, &dropped); })) {
    return false;  // left pending; the lease keeper reopens it
  }
  // Written or dropped: done. The rest (a row locked meanwhile, a run that
  // ended: its finish carries it) stays pending for the next round.
  std::set<std::int64_t> done(written.begin(), written.end());
  done.insert(dropped.begin(), dropped.end());
  for (const RunningJobs::PendingProgress& p : pending) {
    if (done.count(p.job_id) != 0) running_.MarkProgressWritten(p.job_id, p.run_count, p.version);
  }
  for (std::int64_t id : dropped) {
    spdlog::error("progress_dropped job={} | its meta could not be written (an application's trigger or "
                  "constraint); this report is dropped, the run goes on",
                  id);
  }
  return true;
}

}  // namespace akadzed
