// The daemon (`akadzed run`): a lease keeper, a finisher and one QueueRunner
// per configured queue, driven from the main thread, which also handles the
// signals (pgbouncer's model: one thread waits for them synchronously; no
// async handlers) and talks to systemd.
//
//   SIGTERM, SIGINT  stop claiming, drain until shutdown_timeout, then stop
//                    what is left and release it to `queued` (no attempt
//                    spent); a second one skips the rest of the drain.
//   SIGHUP           reload handlers and logging from the config file; a bad
//                    new config keeps the old one and says so.
//
// systemd: READY=1 once claiming, STATUS= with the busy slots, WATCHDOG=1
// only while every claim loop and the lease keeper prove progress, STOPPING=1
// when the drain starts.
//
// Thread-safety: Run is called once, from the main thread, after
// BlockDaemonSignals() and before any other thread was started.
#pragma once

#include <memory>
#include <string>

#include "config/config.h"
#include "hooks/transition_hooks.h"
#include "worker/handler_registry.h"
#include "runtime/systemd_notifier.h"

namespace akadzed {

// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread; threads started
// afterwards inherit the mask, so only Daemon::Run's sigtimedwait sees them.
void BlockDaemonSignals();

class Daemon {
 public:
  // `hooks` may be null (no transition hooks). They are not reloaded by
  // SIGHUP: the config's `hooks:` take effect on restart.
  Daemon(DaemonConfig config, std::string conninfo, HandlerMap handlers,
         std::unique_ptr<TransitionHooks> hooks = nullptr);

  // Runs until SIGTERM/SIGINT and the drain are over. Returns the exit code:
  // 0 after a clean shutdown, 1 when the database cannot be used at start
  // (the message is logged). Throws nothing.
  int Run();

 private:
  DaemonConfig config_;
  std::string conninfo_;
  HandlerRegistry handlers_;
  std::unique_ptr<TransitionHooks> hooks_;  // never null
  SystemdNotifier notifier_;
};

}  // namespace akadzed
