// The interface between the daemon and the code that runs a job: a shell
// command (ShellHandler) or a plugin (PluginHandler). The daemon calls Run on
// one of its executor threads and records the returned outcome.
//
// Thread-safety: Run is called concurrently from many threads (one job each);
// implementations keep per-run state on the stack. JobStop is shared between
// the runner and the daemon threads that may ask it to stop.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "core/claimed_job.h"
#include "core/job_outcome.h"
#include "handlers/job_progress.h"

namespace akadzed {

// Why the daemon wants a running job stopped.
enum class StopReason {
  kNone,
  kCancelRequested,  // cancel_requested_at was set on the job
  kShutdown,         // shutdown_timeout passed (or a second SIGTERM)
  kLeaseLost,        // our heartbeat failed for heartbeat_ttl: not our job now
};

// A stop request for the job an executor runs (one job at a time: the
// executor resets it between jobs, Reset()). Request() may be called from any
// thread, any number of times (the first reason wins); the runner sees it
// through reason() or by polling wake_fd(), which turns readable once a stop
// has been requested.
class JobStop {
 public:
  JobStop();
  ~JobStop();
  JobStop(const JobStop&) = delete;
  JobStop& operator=(const JobStop&) = delete;

  void Request(StopReason reason);
  // Makes it as new for the next job: no reason, wake_fd() not readable.
  // Only while nobody can Request it (no RunningJobs registration): an
  // executor keeps one for all its jobs, since an eventfd made and closed
  // per job was a third of the daemon's CPU per no-op job.
  void Reset();
  StopReason reason() const { return reason_.load(std::memory_order_acquire); }
  bool requested() const { return reason() != StopReason::kNone; }
  // An eventfd, readable after Request(); owned by this object.
  int wake_fd() const { return fd_; }

 private:
  std::atomic<StopReason> reason_{StopReason::kNone};
  int fd_ = -1;
};

class JobHandler {
 public:
  virtual ~JobHandler() = default;

  // Runs `job` to its end and reports the outcome. Must return promptly
  // (within the handler's kill grace) once `stop` is requested; the outcome
  // returned then is ignored by the daemon, which decides by the reason.
  // What the handler reports of its progress goes to `progress` (may be
  // null: then it is dropped). Never throws: a handler's own failure is a
  // kRetry outcome with an error.
  virtual JobOutcome Run(const ClaimedJob& job, JobStop& stop, JobProgress* progress = nullptr) = 0;

  // "shell" or "plugin", for logs.
  virtual const char* kind() const = 0;
};

}  // namespace akadzed
