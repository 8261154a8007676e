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
#include "runtime/service_clock.h"
#include "runtime/systemd_notifier.h"

namespace akadzed {

// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread; threads started
// afterwards inherit the mask, so only Daemon::Run's sigtimedwait sees them.
void BlockDaemonSignals();

class Daemon {
 public:
  // `hooks` may be null (no transition hooks). They are not reloaded by
  // SIGHUP: the config's `hooks:` take effect on restart. `clock`: the one
  // clock every loop of the daemon reads (runtime/service_clock.h).
  Daemon(DaemonConfig config, std::string conninfo, HandlerMap handlers,
         std::unique_ptr<TransitionHooks> hooks = nullptr, const ServiceClock& clock = SteadyServiceClock());

  // Runs the phases below until SIGTERM/SIGINT and the drain are over.
  // Returns the exit code: 0 after a clean shutdown, 1 when the start
  // failed (logged `start_failed`). Does not return when jobs are still
  // running after the drain, their stop and kill_grace + 10 s (handlers that
  // ignored the stop, or finishes the database did not take): it logs
  // `shutdown unfinished_jobs=N` and ends the process with _Exit(1), stderr
  // flushed, since tearing down the threads would wait for those handlers;
  // the jobs are rescued after heartbeat_ttl. Throws nothing.
  int Run();

 private:
  // What runs between Start and Stop: the lease keeper, the finisher, the
  // queue runners, the notify listener, the periodic scheduler, the pruner
  // and the monitoring (daemon.cpp).
  struct Services;

  // Phase 1, start. Checks the database schema, binds the metrics listener
  // and starts the lease keeper (registering the worker); then starts the
  // finisher, one QueueRunner per queue, the notify listener (with
  // listen_notify), the periodic scheduler, the pruner (unless disabled) and
  // the monitoring; logs `started` and sends READY=1. Null when the schema,
  // the listener or the registration fails, or a thread of the later ones
  // cannot start (a limit on threads): logged `start_failed`, nothing left
  // running (what had started stopped as at a SIGTERM: jobs already claimed
  // run, up to shutdown_timeout, or go back to queued).
  std::unique_ptr<Services> Start();
  // Start's second half: the finisher, the runners, the listener, the
  // periodic scheduler, the pruner and the monitoring. Throws when one
  // cannot start; `starting` then names it.
  void StartWork(Services& services, std::string& starting);
  // Stops the listener, the pruner, the periodic scheduler and every claim
  // loop (those that started); Drain's first step, and a failed start's.
  void StopClaiming(Services& services);

  // Phase 2, serve. Waits for signals until SIGTERM or SIGINT (logged
  // `signal`): SIGHUP reloads between RELOADING=1 and READY=1; every tick
  // (1 s, or half the watchdog interval if shorter) sends WATCHDOG=1 while
  // every watched loop makes rounds, and STATUS= with the busy slots.
  void Serve(Services& services);

  // Phase 3, drain. Sends STOPPING=1, stops the listener, the pruner, the
  // periodic scheduler and every claim loop, then waits (feeding the
  // watchdog) until the running jobs are done, shutdown_timeout passes or a
  // second SIGTERM/SIGINT comes. Returns whether a second signal cut it
  // short.
  bool Drain(Services& services);

  // Phase 4, stop. Stops the jobs still running (released to `queued`) and
  // waits up to the largest kill_grace + 10 s for them. Then joins the
  // runners, stops the finisher, the monitoring and the lease keeper
  // (deregistering the worker), logs `stopped` and returns true; or, with
  // jobs left, logs `shutdown unfinished_jobs` and returns false with every
  // thread still running.
  bool Stop(Services& services, bool second_signal);

  DaemonConfig config_;
  std::string conninfo_;
  HandlerRegistry handlers_;
  std::unique_ptr<TransitionHooks> hooks_;  // never null
  SystemdNotifier notifier_;
  const ServiceClock& clock_;
};

}  // namespace akadzed
