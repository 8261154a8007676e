#include "worker/daemon.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "claim/claim_transaction.h"
#include "config/config_keys.h"
#include "core/duration.h"
#include "core/redact.h"
#include "metrics/monitoring.h"
#include "web/status_page.h"
#include "pg/pg_error.h"
#include "schema/migrations.h"
#include "worker/finish_count_writer.h"
#include "worker/finisher.h"
#include "worker/job_rescuer.h"
#include "worker/lease_keeper.h"
#include "runtime/log_line.h"
#include "runtime/loop_health.h"
#include "runtime/logging.h"
#include "worker/notify_listener.h"
#include "periodic/periodic_scheduler.h"
#include "worker/progress_writer.h"
#include "worker/pruner.h"
#include "worker/queue_runner.h"
#include "worker/queued_sweeper.h"
#include "worker/running_jobs.h"

namespace akadzed {

namespace {

sigset_t DaemonSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  return set;
}

// Waits up to `timeout` for one of the daemon's signals; 0 when none came.
int WaitSignal(std::chrono::milliseconds timeout) {
  sigset_t set = DaemonSignals();
  auto ms = std::max<std::int64_t>(timeout.count(), 0);
  timespec ts{static_cast<time_t>(ms / 1000), static_cast<long>(ms % 1000) * 1'000'000L};
  int sig = sigtimedwait(&set, nullptr, &ts);
  return sig > 0 ? sig : 0;
}

std::string Hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

// Fails with a clear message unless the database has this build's schema.
void CheckSchema(const std::string& conninfo) {
  pg::Connection conn = pg::Connection::Open(conninfo, "akadzed");
  if (std::string problem = SchemaMismatch(conn); !problem.empty()) {
    throw std::runtime_error(problem);
  }
}

// Applies SIGHUP: new handlers and logging; which keys need a restart
// instead is config/config_keys.cpp's table.
void Reload(const DaemonConfig& running, HandlerRegistry& handlers, LeaseKeeper& lease) {
  ReopenLogFile();  // whether or not the config loads: logrotate moved the file
  try {
    DaemonConfig fresh = LoadConfigFile(running.path);
    // The running worker timings stay; the new handlers' kill_grace must fit
    // in them. A lease only ever gets shorter on a reload: a job started with
    // an old handler keeps that handler's grace.
    const std::int64_t grace = MaxKillGraceUs(fresh);
    if (std::string problem = LeaseSpanProblem(running.worker, grace); !problem.empty()) {
      throw ConfigError(running.path + ": " + problem);
    }
    // The shorter lease first: a new handler's grace counts from its start.
    lease.SetLeaseSpan(std::min(lease.lease_span_us(), LeaseSpanUs(running.worker, grace)));
    handlers.Replace(BuildHandlers(fresh));
    ConfigureLogging(fresh.logging);
    spdlog::info("reload config={} handlers={}", LogValue(running.path), fresh.handlers.size());
    if (std::vector<std::string> keys = RestartKeysChanged(running, fresh); !keys.empty()) {
      std::string list;
      for (const std::string& key : keys) list += (list.empty() ? "" : ", ") + key;
      spdlog::warn("reload config={} | changes to {} take effect on restart", LogValue(running.path), list);
    }
  } catch (const std::exception& e) {
    spdlog::error("reload_failed | {}; keeping the running config", OneLine(RedactSecrets(e.what())));
  }
}

}  // namespace

void BlockDaemonSignals() {
  sigset_t set = DaemonSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

Daemon::Daemon(DaemonConfig config, std::string conninfo, HandlerMap handlers,
               std::unique_ptr<TransitionHooks> hooks, const ServiceClock& clock)
    : config_(std::move(config)),
      conninfo_(std::move(conninfo)),
      handlers_(std::move(handlers)),
      hooks_(hooks ? std::move(hooks) : std::make_unique<TransitionHooks>()),
      notifier_(SystemdNotifier::FromEnvironment()),
      clock_(clock) {}

// What runs between the start and the stop phases. The members are declared
// in the order they start and so are destroyed in reverse, on every path.
struct Daemon::Services {
  Services(const DaemonConfig& config, const std::string& conninfo, const TransitionHooks* hooks,
           const ServiceClock& daemon_clock)
      : clock(daemon_clock),
        timings(config.worker),
        identity(Identity(config)),
        // Metrics and health (metrics/monitoring.h); the finisher and the
        // runners record into it, so it outlives them.
        monitoring(config.metrics, conninfo, identity.queues,
                   std::chrono::microseconds(config.database.horizon_warn_after_us), daemon_clock),
        // Every daemon transaction is bounded (database.stall_timeout), and
        // the lease ends early enough for every handler to be dead before a
        // rescue.
        stall(std::chrono::milliseconds(config.database.stall_timeout_us / 1000)),
        finisher(conninfo, stall, monitoring.worker_metrics(),
                 {.hooks = hooks,
                  .plan = FinishPlanFor(TotalSlots(config)),
                  .tally = &finish_tally,
                  .batch_delay = std::chrono::microseconds(config.worker.finish_batch_delay_us)},
                 daemon_clock),
        lease(conninfo, identity, timings, LeaseSpanUs(timings, MaxKillGraceUs(config)), stall,
              running, hooks, daemon_clock),
        // The lease's other duties, each a service of its own on the lease's
        // connection.
        rescuer(lease.session(), lease, timings, hooks, daemon_clock),
        sweeper(lease.session(), std::chrono::microseconds(timings.heartbeat_interval_us), hooks,
                &monitoring.worker_metrics(), daemon_clock),
        progress(lease.session(), lease, running, std::chrono::microseconds(timings.heartbeat_interval_us),
                 daemon_clock),
        finish_counts(lease.session(), finish_tally, std::chrono::microseconds(timings.heartbeat_interval_us),
                      daemon_clock) {}

  static int TotalSlots(const DaemonConfig& config) {
    int slots = 0;
    for (const QueueConfig& q : config.queues) slots += q.slots;
    return slots;
  }

  static WorkerIdentity Identity(const DaemonConfig& config) {
    WorkerIdentity id{RandomUuid(), Hostname(), static_cast<int>(getpid()), {}};
    for (const QueueConfig& q : config.queues) id.queues.push_back(q.name);
    return id;
  }

  // The jobs of every runner, for the lease keeper.
  HeldJobs Held() const {
    HeldJobs held;
    for (const auto& r : runners) {
      HeldJobs one = r->held_jobs();
      held.ids.insert(held.ids.end(), one.ids.begin(), one.ids.end());
      held.claims_in_flight += one.claims_in_flight;
      held.claims_started += one.claims_started;
    }
    return held;
  }

  // The loops the systemd watchdog and /healthz watch (runtime/loop_health.h).
  std::vector<LoopRound> Loops() const {
    std::vector<LoopRound> rounds{{"lease keeper", lease.last_round(),
                                   std::chrono::microseconds(timings.heartbeat_interval_us)}};
    for (const auto& r : runners) {
      rounds.push_back({"claim loop of queue " + r->name(), r->last_round(),
                        std::chrono::microseconds(timings.poll_interval_us)});
    }
    return rounds;
  }

  // systemd's STATUS= text: `prefix` and each queue's busy/slots.
  std::string Status(const std::string& prefix) const {
    std::string text = prefix;
    for (const auto& r : runners) text += fmt::format(" {}={}/{}", r->name(), r->busy_slots(), r->slots());
    return text;
  }

  // True once every runner has drained; waits until `until` at most.
  bool Drained(ServiceClock::time_point until) const {
    return std::all_of(runners.begin(), runners.end(),
                       [&](const auto& r) { return r->WaitDrained(until); });
  }

  const ServiceClock& clock;
  const WorkerConfig& timings;
  WorkerIdentity identity;
  RunningJobs running;
  FinishTally finish_tally;  // the finisher adds, finish_counts writes
  // The status page (web.enabled, on the metrics listener): made before the
  // listener serves it, destroyed after the listener stopped.
  std::unique_ptr<StatusPage> page;
  Monitoring monitoring;
  std::chrono::milliseconds stall;
  Finisher finisher;
  LeaseKeeper lease;
  JobRescuer rescuer;
  QueuedSweeper sweeper;
  ProgressWriter progress;
  FinishCountWriter finish_counts;
  std::vector<std::unique_ptr<QueueRunner>> runners;
  // Declared after the runners, so these run before they go. The finisher
  // frees slots of the runners (FinishItem::slot): on a path that skips
  // Stop it ends before they go (after Stop, this is a no-op). The listener's
  // probes read the runners: it stops before they go.
  struct StopFinisher {
    Finisher& finisher;
    const ServiceClock& clock;
    ~StopFinisher() { finisher.Stop(clock.Now()); }
  } stop_finisher{finisher, clock};
  struct StopMonitoring {
    Monitoring& monitoring;
    ~StopMonitoring() { monitoring.Stop(); }
  } stop_monitoring{monitoring};
  struct ForgetHeldJobs {
    LeaseKeeper& lease;
    ~ForgetHeldJobs() { lease.SetHeldJobs(nullptr); }
  } forget_held_jobs{lease};
  std::unique_ptr<NotifyListener> listener;
  std::unique_ptr<PeriodicScheduler> periodic;
  std::unique_ptr<Pruner> pruner;
  std::atomic<bool> draining{false};  // claim loops end on purpose: /healthz stays 200
  std::string queues_text;            // the queues as the `started` line names them
};

int Daemon::Run() {
  std::unique_ptr<Services> services = Start();
  if (!services) return 1;
  Serve(*services);
  const bool second_signal = Drain(*services);
  if (!Stop(*services, second_signal)) {
    // Destroying the services would wait for handlers that ignored the stop.
    std::fflush(stderr);
    std::_Exit(1);
  }
  return 0;
}

namespace {

// The start_failed line for `error`, thrown while `starting` started: a
// thread that could not start (std::thread's std::system_error) names what
// it was for.
std::string StartFailure(const std::exception_ptr& error, const std::string& starting) {
  try {
    std::rethrow_exception(error);
  } catch (const std::system_error& e) {
    if (starting.empty()) return e.what();
    std::string line = "cannot start " + starting + ": " + e.code().message();
    if (e.code() == std::errc::resource_unavailable_try_again) {
      line += " (a limit on threads: systemd's TasksMax, a pids cgroup, ulimit -u?)";
    }
    return line;
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace

std::unique_ptr<Daemon::Services> Daemon::Start() {
  auto s = std::make_unique<Services>(config_, conninfo_, hooks_.get(), clock_);
  std::string starting;
  try {
    CheckSchema(conninfo_);
    s->monitoring.Bind();
    starting = "the lease keeper";
    s->lease.Start();
  } catch (const std::exception&) {
    spdlog::critical("start_failed | {}", OneLine(RedactSecrets(StartFailure(std::current_exception(), starting), conninfo_)));
    return nullptr;
  }
  try {
    StartWork(*s, starting);
  } catch (const std::exception&) {
    // A thread that cannot start (TasksMax, a pids cgroup), or memory: what
    // did start stops as at a SIGTERM, without waiting for a signal.
    spdlog::critical("start_failed | {}", OneLine(RedactSecrets(StartFailure(std::current_exception(), starting), conninfo_)));
    StopClaiming(*s);
    s->Drained(clock_.Now() + std::chrono::microseconds(config_.worker.shutdown_timeout_us));
    if (!Stop(*s, /*second_signal=*/false)) {
      std::fflush(stderr);
      std::_Exit(1);
    }
    return nullptr;
  }
  spdlog::info("started worker={} queues={} handlers={} pid={}", s->identity.id, LogValue(s->queues_text),
               config_.handlers.size(), s->identity.pid);
  notifier_.Notify("READY=1\nSTATUS=claiming");
  return s;
}

void Daemon::StartWork(Services& s, std::string& starting) {
  starting = "the rescue";
  s.rescuer.Start();
  starting = "the queued sweep";
  s.sweeper.Start();
  starting = "the progress writer";
  s.progress.Start();
  starting = "the finish counts writer";
  s.finish_counts.Start();
  starting = "the finisher";
  s.finisher.Start();
  std::string& queues = s.queues_text;
  for (const QueueConfig& q : config_.queues) {
    starting = "the claim loop of queue " + q.name;
    s.runners.push_back(std::make_unique<QueueRunner>(q, s.timings, conninfo_, s.stall, handlers_,
                                                       s.running, s.finisher, s.lease,
                                                       s.monitoring.worker_metrics(), hooks_.get(), clock_));
    s.runners.back()->Start();
    queues += fmt::format("{}{}(slots={},{}{})", queues.empty() ? "" : ",", q.name, q.slots,
                          q.mode == ClaimMode::kFair ? "fair" : "ordered",
                          q.aging_us ? ",aging=" + FormatDuration(*q.aging_us) : "");
  }
  s.lease.SetHeldJobs([&s] { return s.Held(); });
  if (config_.worker.listen_notify) {
    starting = "the notify listener";
    s.listener = std::make_unique<NotifyListener>(
        conninfo_,
        [&s](const std::string& queue) {
          for (auto& r : s.runners) {
            if (queue.empty() || r->name() == queue) r->Wake();
          }
        },
        clock_);
    s.listener->Start();
  }
  starting = "the periodic scheduler";
  s.periodic = std::make_unique<PeriodicScheduler>(conninfo_, s.stall, config_.periodic, clock_);
  s.periodic->Start();
  if (config_.pruning.enabled) {
    starting = "the pruner";
    s.pruner = std::make_unique<Pruner>(conninfo_, s.stall, config_.pruning, clock_);
    s.pruner->Start();
  }
  const auto health_grace = notifier_.watchdog_interval().value_or(std::chrono::seconds(60));
  if (config_.metrics.enabled && config_.web.enabled) {
    s.page = std::make_unique<StatusPage>(conninfo_, config_.web, s.stall, StatusPageOptions{}, clock_);
  }
  starting = "the metrics listener";
  s.monitoring.Start({
      .slots =
          [&s] {
            std::vector<Monitoring::QueueSlots> slots;
            for (const auto& r : s.runners) slots.push_back({r->name(), r->slots(), r->busy_slots()});
            return slots;
          },
      .lease_held = [&s] { return s.lease.held(); },
      .stalled_loop =
          [&s, health_grace]() -> std::optional<std::string> {
            if (s.draining.load()) return std::nullopt;
            return StalledLoop(s.Loops(), s.clock.Now(), health_grace);
          },
      .pages = s.page ? std::function<HttpReply(const HttpRequest&)>(
                             [page = s.page.get()](const HttpRequest& r) { return page->Handle(r); })
                       : nullptr,
  });
}

void Daemon::Serve(Services& s) {
  // The signal loop, which also feeds the watchdog and the status line.
  const auto watchdog = notifier_.watchdog_interval();
  auto tick = std::chrono::milliseconds(1000);
  if (watchdog) {
    tick = std::min(tick, std::chrono::duration_cast<std::chrono::milliseconds>(*watchdog / 2));
  }
  for (;;) {
    int sig = WaitSignal(tick);
    if (sig == SIGHUP) {
      notifier_.Notify("RELOADING=1");
      Reload(config_, handlers_, s.lease);
      notifier_.Notify("READY=1");
      continue;
    }
    if (sig == SIGTERM || sig == SIGINT) {
      spdlog::info("signal name={} | stopping: no new claims, draining for up to {}",
                   LogValue(sigabbrev_np(sig)), FormatDuration(config_.worker.shutdown_timeout_us));
      return;
    }
    if (watchdog && !StalledLoop(s.Loops(), clock_.Now(), *watchdog)) notifier_.Notify("WATCHDOG=1");
    notifier_.Notify("STATUS=" + s.Status(s.lease.held() ? "claiming; busy" : "lease lost; busy"));
  }
}

void Daemon::StopClaiming(Services& s) {
  s.draining = true;
  if (s.listener) s.listener->Stop();
  if (s.pruner) s.pruner->Stop();
  if (s.periodic) s.periodic->Stop();
  for (auto& r : s.runners) r->StopClaiming();
}

bool Daemon::Drain(Services& s) {
  notifier_.Notify("STOPPING=1\nSTATUS=draining");
  StopClaiming(s);
  const auto watchdog = notifier_.watchdog_interval();
  const auto deadline = clock_.Now() + std::chrono::microseconds(config_.worker.shutdown_timeout_us);
  bool fast = false;
  while (!s.Drained(clock_.Now()) && clock_.Now() < deadline && !fast) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_.Now());
    int sig = WaitSignal(std::min(left, std::chrono::milliseconds(100)));
    if (sig == SIGTERM || sig == SIGINT) {
      fast = true;
      spdlog::warn("signal name={} | again: stopping running jobs now", LogValue(sigabbrev_np(sig)));
    }
    if (watchdog) notifier_.Notify("WATCHDOG=1");
  }
  return fast;
}

bool Daemon::Stop(Services& s, bool second_signal) {
  int stopped = s.running.RequestStopAll(StopReason::kShutdown, /*latch=*/true);
  if (stopped > 0) {
    spdlog::warn("shutdown stopping_jobs={} | {}; they are released to queued", stopped,
                 second_signal ? "second signal" : "shutdown_timeout passed");
  }
  // Handlers end within their kill grace; a plugin that ignores the stop is
  // left behind (its job is rescued after heartbeat_ttl).
  const auto grace = std::chrono::microseconds(MaxKillGraceUs(config_));
  if (!s.Drained(clock_.Now() + grace + std::chrono::seconds(10))) {
    int left = 0;
    for (const auto& r : s.runners) left += r->busy_slots();
    spdlog::error(
        "shutdown unfinished_jobs={} | handlers that ignored the stop, or finishes the database "
        "did not take; these jobs are rescued after heartbeat_ttl",
        left);
    return false;
  }
  for (auto& r : s.runners) r->Join();
  s.finisher.Stop(clock_.Now() + std::chrono::seconds(10));
  s.monitoring.Stop();
  // The services on the lease's connection, then the lease.
  s.finish_counts.Stop();
  s.progress.Stop();
  s.sweeper.Stop();
  s.rescuer.Stop();
  s.lease.Stop(/*deregister=*/true);
  spdlog::info("stopped worker={}", s.lease.worker_id());
  return true;
}

}  // namespace akadzed
