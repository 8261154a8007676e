// The shell-command job handler: runs each job as a child process started
// from the configured argv (exec'd directly, never through a shell unless the
// argv itself is `sh -c ...`), in its own process group, with the job's args
// JSON on stdin, the job's identity in the environment (the daemon's own,
// minus its AKADZE_*, libpq and systemd variables) and an outcome pipe on
// fd 3. stdout and stderr are logged line by line; the timeout and stop
// requests end the whole process group (TERM, grace, KILL). The protocol the
// child sees is docs/handlers.md.
//
// Thread-safety: the handler is immutable after construction; Run may be
// called from any number of threads at once (all per-run state lives in the
// call). Run waits for its own child by pid, so the process must not reap
// children it did not spawn (no waitpid(-1), SIGCHLD not set to SIG_IGN).
#pragma once

#include <string>

#include "handlers/handler_config.h"
#include "handlers/job_handler.h"

namespace akadzed {

class ShellHandler : public JobHandler {
 public:
  // `task` is the task name this handler serves (for logs). Throws
  // std::invalid_argument when config.command is empty.
  ShellHandler(std::string task, ShellHandlerConfig config);

  // Spawns the command, feeds and supervises it, and returns once the
  // leader has exited, the rest of its process group has been killed, its
  // pipes are drained (bounded) and it is reaped. Never throws.
  // fd-3 progress lines go to `progress` as they come.
  JobOutcome Run(const ClaimedJob& job, JobStop& stop, JobProgress* progress = nullptr) override;

  const char* kind() const override { return "shell"; }

  const std::string& task() const { return task_; }
  const ShellHandlerConfig& config() const { return config_; }

 private:
  const std::string task_;
  const ShellHandlerConfig config_;
};

}  // namespace akadzed
