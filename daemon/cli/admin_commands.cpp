// The operator commands: enqueue, jobs list|show|cancel|requeue,
// queues list|pause|resume, workers list, status. SQL is in
// store/job_admin.h; this file parses options and prints text or --json.
// Job args are never printed.
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "claim/queue_counts.h"
#include "pg/transaction.h"
#include "store/job_admin.h"
#include "store/limits_table.h"
#include "store/status_report.h"
#include "web/report_json.h"
#include "cli/commands.h"
#include "core/duration.h"

namespace akadzed::cli {

namespace {

using nlohmann::json;

struct AdminOptions {
  std::string url;
  bool json = false;
  // enqueue
  std::string task;
  std::string args = "{}";
  std::string queue = "default";
  std::int64_t priority = 0;
  std::string delay;
  std::string run_at;
  std::string limit_key;
  std::string unique_key;
  std::int64_t max_attempts = 3;
  std::string expires_at;
  // jobs / queues
  std::string filter_queue;
  std::string filter_state;
  std::int64_t limit = 50;
  std::int64_t id = 0;
  std::string name;
  // queues limit
  std::optional<std::int64_t> max_running;
  bool clear = false;
};

json Opt(const std::optional<std::string>& v) { return v ? json(*v) : json(); }
std::string Dash(const std::optional<std::string>& v) { return v ? *v : "-"; }
std::string Dash(const std::optional<std::int64_t>& v) { return v ? std::to_string(*v) : "-"; }

std::string Seconds(double s) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(1) << s << 's';
  return out.str();
}

// The status's horizon section: the oldest holders, each named by what
// identifies its kind (application_name, slot or gid), never a query.
void PrintHorizon(const HorizonReport& h) {
  std::cout << "\n== horizon: what holds back vacuum of akadze.jobs, oldest first ==\n"
               "KIND\tPID\tNAME\tSTATE\tBACKEND_TYPE\tXACT_START\tAGE\tXID_AGE\n";
  for (const HorizonHolder& x : h.holders) {
    const std::optional<std::string>& name = x.slot_name ? x.slot_name : x.gid ? x.gid : x.application_name;
    std::cout << x.kind << '\t' << Dash(x.pid) << '\t' << (name && !name->empty() ? *name : "-") << '\t'
              << (x.hidden ? "(hidden)" : Dash(x.state)) << '\t' << Dash(x.backend_type) << '\t'
              << Dash(x.xact_start) << '\t' << (x.age_seconds ? Seconds(*x.age_seconds) : "-") << '\t'
              << x.xid_age << '\n';
  }
  if (h.holders_total > static_cast<std::int64_t>(h.holders.size())) {
    std::cout << "(" << h.holders_total - static_cast<std::int64_t>(h.holders.size()) << " more holders)\n";
  }
  if (!h.stats_visible) {
    std::cout << "(this role cannot see other roles' sessions: grant it pg_read_all_stats, docs/security.md)\n";
  }
}

void PrintJobText(const JobRow& j) {
  std::cout << "id: " << j.id << "\ntask: " << j.task << "\nqueue: " << j.queue
            << "\nstate: " << JobStateName(j.state) << "\npriority: " << j.priority
            << "\nattempt: " << j.attempt << "/" << j.max_attempts
            << "\nrun_count: " << j.run_count << "\nsnoozes: " << j.snoozes
            << "\nrun_at: " << j.run_at << "\nexpires_at: " << Dash(j.expires_at)
            << "\nlimit_key: " << Dash(j.limit_key) << "\nunique_key: " << Dash(j.unique_key)
            << "\nworker_id: " << Dash(j.worker_id)
            << "\ncancel_requested_at: " << Dash(j.cancel_requested_at)
            << "\ncreated_at: " << j.created_at << "\nstarted_at: " << Dash(j.started_at)
            << "\nfinished_at: " << Dash(j.finished_at) << "\nmeta: " << j.meta_json
            << "\nresult: " << (j.result_json ? *j.result_json : "-") << "\nerrors:";
  json errors = json::parse(j.errors_json);
  if (!errors.is_array() || errors.empty()) {
    std::cout << " -\n";
  } else {
    std::cout << '\n';
    for (const json& e : errors) std::cout << "  " << e.dump() << '\n';
  }
  std::cout << std::flush;
}

// Runs `body` on a connection to `url` under the documented exit codes.
int Run(const std::string& command, const std::string& url,
        const std::function<void(pg::Connection&)>& body) {
  return RunCommand(command, [&] {
    pg::Connection conn = pg::Connection::Open(ResolveDatabaseUrl(url), "akadzed admin");
    try {
      body(conn);
    } catch (const AdminError& e) {
      PrintError(command + " failed", e.what());
      return kExitFailure;
    }
    return kExitOk;
  });
}

std::optional<std::string> NonEmpty(const std::string& s) {
  return s.empty() ? std::nullopt : std::optional<std::string>(s);
}

void AddEnqueue(CLI::App& app, Action& action) {
  auto o = std::make_shared<AdminOptions>();
  CLI::App* cmd = app.add_subcommand("enqueue", "Insert one job into akadze.jobs");
  AddDatabaseOption(cmd, o->url);
  cmd->add_option("TASK", o->task, "Task name (selects the handler)")->required();
  cmd->add_option("--args", o->args, "Job args, a JSON object (default {})");
  cmd->add_option("--queue", o->queue, "Queue (default 'default')");
  cmd->add_option("--priority", o->priority, "Priority, higher first (default 0)")
      ->check(CLI::Range(std::int64_t{-32768}, std::int64_t{32767}));
  auto* delay = cmd->add_option("--delay", o->delay, "Run no sooner than this from now, e.g. 30s");
  auto* run_at = cmd->add_option("--run-at", o->run_at, "Run no sooner than this ISO-8601 time");
  delay->excludes(run_at);
  run_at->excludes(delay);
  cmd->add_option("--limit-key", o->limit_key, "Per-key limit group (see akadzed limits)");
  cmd->add_option("--unique-key", o->unique_key, "At most one queued or running job per key");
  cmd->add_option("--max-attempts", o->max_attempts, "Failed runs before 'failed' (default 3)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{2147483647}));
  cmd->add_option("--expires-at", o->expires_at, "Not run after this ISO-8601 time");
  cmd->add_flag("--json", o->json, "Print the new job (without args) as JSON");
  cmd->callback([&action, o] {
    action = [o]() -> int {
      EnqueueRequest req;
      req.task = o->task;
      req.args_json = o->args;
      req.queue = o->queue;
      req.priority = o->priority;
      req.run_at = NonEmpty(o->run_at);
      req.limit_key = NonEmpty(o->limit_key);
      req.unique_key = NonEmpty(o->unique_key);
      req.max_attempts = o->max_attempts;
      req.expires_at = NonEmpty(o->expires_at);
      if (!o->delay.empty()) {
        std::string error;
        req.delay_us = ParseDuration(o->delay, &error);
        if (!req.delay_us) {
          PrintError("enqueue", "--delay: " + error);
          return kExitUsage;
        }
      }
      try {
        ValidateEnqueue(req);
      } catch (const std::invalid_argument& e) {
        PrintError("enqueue", e);
        return kExitUsage;
      }
      return Run("enqueue", o->url, [&](pg::Connection& conn) {
        JobRow job = EnqueueJob(conn, req);
        if (o->json) {
          std::cout << DumpJson(JobJson(job, JobDetail::kSummary)) << std::endl;
        } else {
          std::cout << job.id << std::endl;
        }
      });
    };
  });
}

void AddJobs(CLI::App& app, Action& action) {
  auto o = std::make_shared<AdminOptions>();
  CLI::App* jobs = app.add_subcommand("jobs", "List, show, cancel and requeue jobs");
  jobs->require_subcommand(1);

  CLI::App* list = jobs->add_subcommand("list", "List jobs, newest first (never args)");
  AddDatabaseOption(list, o->url);
  list->add_option("--queue", o->filter_queue, "Only this queue");
  list->add_option("--state", o->filter_state, "Only this state")
      ->check(CLI::IsMember(JobStateNames()));
  list->add_option("--limit", o->limit, "Most jobs to print, 1 to 1000 (default 50)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1000}));
  list->add_flag("--json", o->json, "Print a JSON array");
  list->callback([&action, o] {
    action = [o]() -> int {
      return Run("jobs list", o->url, [&](pg::Connection& conn) {
        std::vector<JobRow> rows =
            ListJobs(conn, NonEmpty(o->filter_queue), ParseJobState(o->filter_state), o->limit);
        if (o->json) {
          json out = json::array();
          for (const JobRow& j : rows) out.push_back(JobJson(j, JobDetail::kSummary));
          std::cout << DumpJson(out) << std::endl;
          return;
        }
        std::cout << "ID\tSTATE\tQUEUE\tTASK\tPRIORITY\tATTEMPT\tRUN_AT\tLIMIT_KEY\n";
        for (const JobRow& j : rows) {
          std::cout << j.id << '\t' << JobStateName(j.state) << '\t' << j.queue << '\t' << j.task << '\t'
                    << j.priority << '\t' << j.attempt << '/' << j.max_attempts << '\t'
                    << j.run_at << '\t' << Dash(j.limit_key) << '\n';
        }
        std::cout << std::flush;
      });
    };
  });

  CLI::App* show = jobs->add_subcommand("show", "Show one job with its errors and result");
  AddDatabaseOption(show, o->url);
  show->add_option("ID", o->id, "Job id")->required()->check(CLI::PositiveNumber);
  show->add_flag("--json", o->json, "Print one JSON object");
  show->callback([&action, o] {
    action = [o]() -> int {
      return Run("jobs show", o->url, [&](pg::Connection& conn) {
        JobRow job = ShowJob(conn, o->id);
        if (o->json) {
          std::cout << DumpJson(JobJson(job, JobDetail::kWithResult)) << std::endl;
        } else {
          PrintJobText(job);
        }
      });
    };
  });

  CLI::App* cancel = jobs->add_subcommand("cancel", "Cancel a queued job or stop a running one");
  AddDatabaseOption(cancel, o->url);
  cancel->add_option("ID", o->id, "Job id")->required()->check(CLI::PositiveNumber);
  cancel->add_flag("--json", o->json, "Print {\"id\":N,\"outcome\":...}");
  cancel->callback([&action, o] {
    action = [o]() -> int {
      return Run("jobs cancel", o->url, [&](pg::Connection& conn) {
        CancelOutcome outcome = CancelJob(conn, o->id);
        const char* word = outcome == CancelOutcome::kCancelled          ? "cancelled"
                           : outcome == CancelOutcome::kCancelRequested ? "cancel_requested"
                                                                         : "already_requested";
        if (o->json) {
          std::cout << json{{"id", o->id}, {"outcome", word}}.dump() << std::endl;
        } else if (outcome == CancelOutcome::kCancelled) {
          std::cout << "cancelled job " << o->id << std::endl;
        } else if (outcome == CancelOutcome::kCancelRequested) {
          std::cout << "cancel requested for running job " << o->id
                    << " (its daemon stops it within a heartbeat)" << std::endl;
        } else {
          std::cout << "cancel already requested for running job " << o->id << std::endl;
        }
      });
    };
  });

  CLI::App* requeue = jobs->add_subcommand("requeue", "Put a failed job back in its queue");
  AddDatabaseOption(requeue, o->url);
  requeue->add_option("ID", o->id, "Job id")->required()->check(CLI::PositiveNumber);
  requeue->add_flag("--json", o->json, "Print the job (without args) as JSON");
  requeue->callback([&action, o] {
    action = [o]() -> int {
      return Run("jobs requeue", o->url, [&](pg::Connection& conn) {
        JobRow job = RequeueJob(conn, o->id);
        if (o->json) {
          std::cout << DumpJson(JobJson(job, JobDetail::kSummary)) << std::endl;
        } else {
          std::cout << "requeued job " << job.id << " in queue " << job.queue << std::endl;
        }
      });
    };
  });
}

json QueueJson(const QueueRow& q) {
  return {{"queue", q.queue},         {"queued", q.queued},       {"ready", q.ready},
          {"running", q.running},     {"succeeded", q.succeeded}, {"failed", q.failed},
          {"cancelled", q.cancelled}, {"lag_seconds", q.lag_seconds},
          {"paused", q.paused},       {"paused_at", Opt(q.paused_at)},
          {"max_running", q.max_running ? json(*q.max_running) : json()}};
}

void PrintQueues(const std::vector<QueueRow>& rows) {
  std::cout << "QUEUE\tQUEUED\tREADY\tRUNNING\tMAX_RUNNING\tSUCCEEDED\tFAILED\tCANCELLED\tLAG\tPAUSED\n";
  for (const QueueRow& q : rows) {
    std::cout << q.queue << '\t' << q.queued << '\t' << q.ready << '\t' << q.running << '\t'
              << Dash(q.max_running) << '\t' << q.succeeded << '\t' << q.failed << '\t' << q.cancelled
              << '\t' << Seconds(q.lag_seconds) << '\t' << (q.paused ? "yes" : "no") << '\n';
  }
}

void PrintWorkers(const std::vector<WorkerRow>& rows) {
  std::cout << "ID\tHOSTNAME\tPID\tQUEUES\tSTARTED_AT\tHEARTBEAT_AGE\tRUNNING\n";
  for (const WorkerRow& w : rows) {
    std::string queues;
    for (const std::string& q : w.queues) queues += (queues.empty() ? "" : ",") + q;
    std::cout << w.id << '\t' << w.hostname << '\t' << w.pid << '\t' << queues << '\t'
              << w.started_at << '\t' << Seconds(w.heartbeat_age_seconds) << '\t' << w.running
              << '\n';
  }
}

void AddQueues(CLI::App& app, Action& action) {
  auto o = std::make_shared<AdminOptions>();
  CLI::App* queues = app.add_subcommand("queues", "List, pause, resume and cap queues");
  queues->require_subcommand(1);

  CLI::App* list = queues->add_subcommand("list", "Jobs per state, lag, busy and paused per queue");
  AddDatabaseOption(list, o->url);
  list->add_flag("--json", o->json, "Print a JSON array");
  list->callback([&action, o] {
    action = [o]() -> int {
      return Run("queues list", o->url, [&](pg::Connection& conn) {
        std::vector<QueueRow> rows = ListQueues(conn);
        if (o->json) {
          json out = json::array();
          for (const QueueRow& q : rows) out.push_back(QueueJson(q));
          std::cout << DumpJson(out) << std::endl;
          return;
        }
        PrintQueues(rows);
        std::cout << std::flush;
      });
    };
  });

  for (const bool pause : {true, false}) {
    const std::string verb = pause ? "pause" : "resume";
    CLI::App* cmd = queues->add_subcommand(
        verb, pause ? "Stop claims from NAME (idempotent)" : "Let claims take NAME again (idempotent)");
    AddDatabaseOption(cmd, o->url);
    cmd->add_option("NAME", o->name, "Queue name")->required();
    cmd->callback([&action, o, pause, verb] {
      action = [o, pause, verb]() -> int {
        return Run("queues " + verb, o->url, [&](pg::Connection& conn) {
          const bool changed = pause ? PauseQueue(conn, o->name) : ResumeQueue(conn, o->name);
          if (changed) {
            std::cout << (pause ? "paused " : "resumed ") << o->name << std::endl;
          } else {
            std::cout << o->name << (pause ? " was already paused" : " was not paused")
                      << std::endl;
          }
        });
      };
    });
  }

  // A cluster-wide cap on the queue's running jobs (akadze.queue_caps).
  CLI::App* limit = queues->add_subcommand(
      "limit", "Cap NAME's running jobs across every daemon (--max-running N), or remove the cap (--clear)");
  AddDatabaseOption(limit, o->url);
  limit->add_option("NAME", o->name, "Queue name")->required();
  CLI::Option* max_running = limit->add_option("--max-running", o->max_running,
                                               "At most N of the queue's jobs run at once, cluster-wide")
                                 ->check(CLI::Range(std::int64_t{1}, std::int64_t{2147483647}));
  CLI::Option* clear = limit->add_flag("--clear", o->clear, "Remove the queue's cap");
  max_running->excludes(clear);
  limit->callback([&action, o] {
    action = [o]() -> int {
      return Run("queues limit", o->url, [&](pg::Connection& conn) {
        if (!o->max_running && !o->clear) {
          throw std::invalid_argument("give --max-running N or --clear");
        }
        if (o->clear) {
          const std::optional<std::int64_t> old = ClearQueueCap(conn, o->name);
          std::cout << (old ? "removed the cap of " + o->name + " (max_running " + std::to_string(*old) + ")"
                            : o->name + " had no cap")
                    << std::endl;
          return;
        }
        const std::optional<std::int64_t> old = SetQueueCap(conn, o->name, *o->max_running);
        std::cout << o->name << " max_running " << *o->max_running
                  << (old ? " (was " + std::to_string(*old) + ")" : std::string(" (had no cap)")) << std::endl;
      });
    };
  });
}

void AddWorkers(CLI::App& app, Action& action) {
  auto o = std::make_shared<AdminOptions>();
  CLI::App* workers = app.add_subcommand("workers", "List registered daemons");
  workers->require_subcommand(1);
  CLI::App* list = workers->add_subcommand("list", "Registered daemons with heartbeat age");
  AddDatabaseOption(list, o->url);
  list->add_flag("--json", o->json, "Print a JSON array");
  list->callback([&action, o] {
    action = [o]() -> int {
      return Run("workers list", o->url, [&](pg::Connection& conn) {
        // No JIT (as the status report): the running counts' plan joins
        // each worker to reads whose estimates add up past jit_above_cost,
        // and compiling takes far longer than the read.
        pg::Transaction tx(conn, "BEGIN READ ONLY", pg::Transaction::Begin::kWithFirstStatement);
        tx.exec("SET LOCAL jit = off");
        std::vector<WorkerRow> rows = ListWorkers(conn);
        tx.commit();
        if (o->json) {
          json out = json::array();
          for (const WorkerRow& w : rows) out.push_back(WorkerJson(w));
          std::cout << DumpJson(out) << std::endl;
          return;
        }
        PrintWorkers(rows);
        std::cout << std::flush;
      });
    };
  });
}

// One screen: the status page's report (store/status_report.h), as text or
// as the JSON /api/status serves (web/report_json.h).
void AddStatus(CLI::App& app, Action& action) {
  auto o = std::make_shared<AdminOptions>();
  CLI::App* status = app.add_subcommand("status", "One screen: queues, limits in use, workers, failures, the horizon");
  AddDatabaseOption(status, o->url);
  status->add_flag("--json", o->json, "Print one JSON object");
  status->callback([&action, o] {
    action = [o]() -> int {
      return Run("status", o->url, [&](pg::Connection& conn) {
        const StatusReport report = ReadStatusReport(conn, CountQueuedJobs);
        if (o->json) {
          std::cout << DumpJson(StatusJson(report, false)) << std::endl;
          return;
        }
        const auto count = [&](std::int64_t n, bool capped) {
          return std::to_string(n) + (capped ? "+" : "");
        };
        std::cout << "== queues ==\nQUEUE\tREADY\tSCHEDULED\tRUNNING\tMAX_RUNNING\tOLDEST_READY\tLAST_HOUR\tPAUSED\n";
        for (const QueueStatus& q : report.queues) {
          std::int64_t succeeded = 0;
          std::int64_t failed = 0;
          for (const MinuteCount& m : q.finished_per_minute) {
            succeeded += m.succeeded;
            failed += m.failed;
          }
          std::cout << q.queue << '\t' << count(q.ready, q.capped) << '\t' << count(q.scheduled, q.capped)
                    << '\t' << q.running << '\t' << Dash(q.max_running) << '\t'
                    << (q.oldest_ready_age_seconds ? Seconds(*q.oldest_ready_age_seconds) : "-") << '\t'
                    << succeeded << " ok/" << failed << " failed\t" << (q.paused ? "yes" : "no") << '\n';
        }
        if (report.queues_truncated) std::cout << "(more queues not shown)\n";
        std::cout << "\n== limits in use ==\nKEY\tROW\tRUNNING\tMAX_RUNNING\tSTARTS\tMAX_STARTS\n";
        for (const LimitUse& l : report.limits) {
          std::cout << l.key << '\t' << (l.row ? *l.row : "held") << '\t' << l.running << '\t'
                    << Dash(l.max_running) << '\t' << l.starts << '\t' << Dash(l.max_starts)
                    << '\n';
        }
        std::cout << "\n== keys held: queued jobs, no limits row (own or '*') ==\nKEY\tQUEUED\n";
        for (const HeldLimitKey& h : report.held_keys) std::cout << h.key << '\t' << count(h.queued, h.capped) << '\n';
        if (report.held_keys_total > static_cast<std::int64_t>(report.held_keys.size())) {
          std::cout << "(" << report.held_keys_total - static_cast<std::int64_t>(report.held_keys.size())
                    << " more keys held)\n";
        }
        std::cout << "\n== workers ==\n";
        PrintWorkers(report.workers);
        std::cout << "\n== recent failures ==\nID\tTASK\tQUEUE\tATTEMPTS\tFINISHED_AT\tERROR\n";
        for (const RecentFailure& f : report.recent_failures) {
          std::cout << f.id << '\t' << f.task << '\t' << f.queue << '\t' << f.attempt << '/' << f.max_attempts
                    << '\t' << Dash(f.finished_at) << '\t' << Dash(f.error_kind) << '\n';
        }
        PrintHorizon(report.horizon);
        std::cout << std::flush;
      });
    };
  });
}

}  // namespace

void AddAdminCommands(CLI::App& app, Action& action) {
  AddEnqueue(app, action);
  AddJobs(app, action);
  AddQueues(app, action);
  AddWorkers(app, action);
  AddStatus(app, action);
}

}  // namespace akadzed::cli
