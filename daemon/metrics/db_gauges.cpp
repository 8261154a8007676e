#include "metrics/db_gauges.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "claim/queue_counts.h"
#include "core/redact.h"
#include "pg/pg_error.h"
#include "pg/transaction.h"
#include "schema/migrations.h"
#include "store/horizon.h"

namespace akadzed {

DbGauges::DbGauges(std::string conninfo, std::vector<std::string> queues, DbGaugeOptions options,
                   const ServiceClock& clock)
    : session_(std::move(conninfo), "akadzed metrics"),
      queues_(std::move(queues)),
      options_(options),
      horizon_watch_(options.horizon_warn_after, clock),
      next_check_(clock.Now()),  // the first check at once
      loop_(clock) {}

std::chrono::milliseconds HorizonCheckInterval(std::chrono::microseconds warn_after) {
  using std::chrono::milliseconds;
  return std::clamp(std::chrono::duration_cast<milliseconds>(warn_after / 4), milliseconds(1000),
                    milliseconds(30000));
}

DbGauges::~DbGauges() { Stop(); }

void DbGauges::Start() { loop_.Start("db gauges", [this] { Loop(); }); }

void DbGauges::Stop() { loop_.Stop(); }

std::shared_ptr<const DbGauges::Snapshot> DbGauges::Fresh() {
  MutexLock lock(loop_.mu());
  if (latest_ && loop_.clock().Now() - latest_->started <= options_.max_age) return latest_;
  if (loop_.stop_requested_locked() || !loop_.started_locked()) return nullptr;
  // A read in flight counts: it started less than `wait` ago or will be
  // waited for no longer than that.
  if (requested_ == completed_) {
    ++requested_;
    loop_.Notify();
  }
  const std::uint64_t target = requested_;
  loop_.WaitFor(lock, options_.wait, [&]() REQUIRES(loop_.mu()) { return completed_ >= target; });
  return completed_ >= target ? latest_ : nullptr;
}

void DbGauges::Loop() {
  const bool check_horizon = options_.horizon_warn_after.count() > 0;
  for (;;) {
    bool scrape_waits;
    {
      MutexLock lock(loop_.mu());
      const auto asked = [&]() REQUIRES(loop_.mu()) { return requested_ > completed_; };
      if (!check_horizon) {
        loop_.Wait(lock, asked);
      } else if (const ServiceClock::time_point now = loop_.clock().Now(); now < next_check_) {
        loop_.WaitFor(lock, std::chrono::duration_cast<ServiceLoop::Duration>(next_check_ - now), asked);
      }
      if (loop_.stop_requested_locked()) return;
      scrape_waits = asked();
    }
    if (scrape_waits) {
      ReadRound();
    } else {  // the horizon check's time came first
      HorizonRound();
    }
  }
}

void DbGauges::ReadRound() {
  std::uint64_t goal;  // the requests this read answers: those made before it starts
  {
    MutexLock lock(loop_.mu());
    goal = requested_;
  }
  auto snapshot = std::make_shared<Snapshot>(Read());
  if (snapshot->horizon_read) {  // it was checked
    next_check_ = loop_.clock().Now() + HorizonCheckInterval(options_.horizon_warn_after);
  }
  // One line when reads start or stop failing, not one per scrape.
  const std::string& problem = !snapshot->error.empty() ? snapshot->error : snapshot->schema_problem;
  if (!problem.empty() && !reads_failing_) {
    spdlog::warn("metrics_database_failed | {}", problem);
  } else if (problem.empty() && reads_failing_) {
    spdlog::info("metrics_database_ok");
  }
  reads_failing_ = !problem.empty();
  {
    MutexLock lock(loop_.mu());
    latest_ = std::move(snapshot);
    completed_ = goal;
  }
  loop_.Notify();
  loop_.MarkRound();
}

void DbGauges::HorizonRound() {
  CheckHorizon();
  next_check_ = loop_.clock().Now() + HorizonCheckInterval(options_.horizon_warn_after);
  loop_.MarkRound();
}

DbGauges::Snapshot DbGauges::Read() {
  Snapshot s;
  s.started = loop_.clock().Now();
  try {
    session_.Run([&](pg::Connection& conn) {
      pg::Transaction tx(conn, "BEGIN READ ONLY");
      // No JIT: the counts' plans join each worker to reads whose estimates
      // (a function scan's 100 rows) add up past jit_above_cost, and
      // compiling took 600 ms of a read of well under a millisecond.
      tx.exec(fmt::format("SET LOCAL statement_timeout = {}; SET LOCAL jit = off",
                          options_.statement_timeout.count()));
      s.schema_problem = SchemaMismatch(conn);
      if (!s.schema_problem.empty()) return;  // the tables may not be there: read nothing
      try {
        // The horizon first: it matters most when akadze.jobs is bloated
        // and the gauges' statements below run into their timeout.
        const HorizonReport horizon = ReadHorizon(conn, {.max_holders = options_.max_horizon_holders});
        s.jobs_dead_tuples = ReadJobsDeadTuples(conn);
        s.horizon = horizon_watch_.Observe(horizon);
        s.horizon_holders = horizon.holders_total;
        s.stats_visible = horizon.stats_visible;
        s.horizon_read = true;
        StatusReportOptions counts;
        counts.count_cap = options_.count_cap;
        counts.max_queues = options_.max_queues;
        s.queues = ReadQueueSection(conn, CountQueuedJobs, counts).queues;
        s.limits = ListLimitKeysInUse(conn, options_.max_limit_keys, &s.limit_keys);
        s.held = ListHeldLimitKeys(conn, options_.max_limit_keys, &s.held_keys);
        s.gauges_read = true;
      } catch (const pg::SqlError& e) {
        // The database answered, the gauges' statements did not (e.g. the
        // statement_timeout on a huge akadze.jobs): /readyz is still fine.
        spdlog::warn("metrics_gauges_failed | {}", OneLine(e.what()));
      }
      tx.commit();
    });
  } catch (const std::exception& e) {
    s.error = OneLine(RedactSecrets(e.what(), session_.conninfo()));
    if (s.error.empty()) s.error = "unknown error";
  }
  return s;
}

void DbGauges::Write(ExpositionWriter& out) {
  std::shared_ptr<const Snapshot> s = Fresh();
  const bool up = s && s->error.empty();
  const bool ready = up && s->schema_problem.empty();
  out.Gauge("akadzed_database_up",
            "1 when the database answered this scrape's read (within a few seconds)", up ? 1 : 0);
  out.Gauge("akadzed_ready",
            "1 when /readyz answers 200: the database answers with the schema this akadzed needs",
            ready ? 1 : 0);
  if (!ready) return;
  if (s->horizon_read) WriteHorizon(out, *s);
  if (!s->gauges_read) return;

  // The configured queues first (at 0 without jobs), then the others the
  // database has, by name, up to max_queues.
  std::map<std::string, QueueStatus> rows;
  for (const std::string& q : queues_) rows[q].queue = q;
  for (const QueueStatus& row : s->queues) {
    if (rows.count(row.queue) || rows.size() < options_.max_queues) rows[row.queue] = row;
  }
  out.Family("akadzed_jobs",
             "Queued and running jobs in akadze.jobs by queue (queued counted up to metrics' count cap)",
             "gauge");
  for (const auto& [name, row] : rows) {
    out.Sample("akadzed_jobs", {{"queue", name}, {"state", "queued"}},
               static_cast<double>(row.ready + row.scheduled));
    out.Sample("akadzed_jobs", {{"queue", name}, {"state", "running"}}, static_cast<double>(row.running));
  }
  out.Family("akadzed_queue_finished_last_hour",
             "Jobs akadzed daemons finished in the last hour, by queue and outcome (akadze.queue_minutes)",
             "gauge");
  for (const auto& [name, row] : rows) {
    MinuteCount hour;
    for (const MinuteCount& m : row.finished_per_minute) {
      hour.succeeded += m.succeeded;
      hour.failed += m.failed;
      hour.cancelled += m.cancelled;
    }
    const std::pair<const char*, std::int64_t> states[] = {
        {"succeeded", hour.succeeded}, {"failed", hour.failed}, {"cancelled", hour.cancelled}};
    for (const auto& [state, count] : states) {
      out.Sample("akadzed_queue_finished_last_hour", {{"queue", name}, {"state", state}},
                 static_cast<double>(count));
    }
  }
  out.Family("akadzed_queue_ready_jobs",
             "Queued jobs whose run_at has come (ready to claim unless the queue is paused)",
             "gauge");
  for (const auto& [name, row] : rows) {
    out.Sample("akadzed_queue_ready_jobs", {{"queue", name}}, static_cast<double>(row.ready));
  }
  out.Family("akadzed_queue_lag_seconds",
             "Age of the oldest ready job (now - run_at), 0 when none is ready", "gauge");
  for (const auto& [name, row] : rows) {
    out.Sample("akadzed_queue_lag_seconds", {{"queue", name}}, row.oldest_ready_age_seconds.value_or(0.0));
  }
  out.Family("akadzed_queue_paused", "1 when the queue has a row in akadze.queue_pauses", "gauge");
  for (const auto& [name, row] : rows) {
    out.Sample("akadzed_queue_paused", {{"queue", name}}, row.paused ? 1 : 0);
  }
  out.Family("akadzed_queue_max_running",
             "The queue's cluster-wide cap on running jobs (akadze.queue_caps); no sample: no cap",
             "gauge");
  for (const auto& [name, row] : rows) {
    if (row.max_running) {
      out.Sample("akadzed_queue_max_running", {{"queue", name}}, static_cast<double>(*row.max_running));
    }
  }
  out.Gauge("akadzed_limit_keys_in_use",
            "Limit keys with running jobs and an applicable akadze.limits row (all of them)",
            static_cast<double>(s->limit_keys));
  out.Family("akadzed_limit_running",
             "Running jobs per limit key in use (the busiest keys, at most 1000)", "gauge");
  for (const LimitKeyUse& use : s->limits) {
    out.Sample("akadzed_limit_running", {{"key", use.key}}, static_cast<double>(use.running));
  }
  out.Family("akadzed_limit_max_running",
             "The max_running cap that applies to each limit key in akadzed_limit_running", "gauge");
  for (const LimitKeyUse& use : s->limits) {
    if (use.max_running) {
      out.Sample("akadzed_limit_max_running", {{"key", use.key}},
                 static_cast<double>(*use.max_running));
    }
  }
  out.Gauge("akadzed_limit_keys_held",
            "Limit keys with queued jobs and no applicable akadze.limits row (own or '*'): never "
            "started (all of them)",
            static_cast<double>(s->held_keys));
  out.Family("akadzed_limit_held_jobs",
             "Queued jobs per held limit key (the keys with most, at most 1000)", "gauge");
  for (const HeldLimitKey& h : s->held) {
    out.Sample("akadzed_limit_held_jobs", {{"key", h.key}}, static_cast<double>(h.queued));
  }
}

void DbGauges::CheckHorizon() {
  try {
    const HorizonReport horizon = session_.Run([&](pg::Connection& conn) {
      pg::Transaction tx(conn, "BEGIN READ ONLY");
      tx.exec(fmt::format("SET LOCAL statement_timeout = {}", options_.statement_timeout.count()));
      HorizonReport report = ReadHorizon(conn, {.max_holders = options_.max_horizon_holders});
      tx.commit();
      return report;
    });
    horizon_watch_.Observe(horizon);
    if (horizon_failing_) spdlog::info("horizon_check_ok");
    horizon_failing_ = false;
  } catch (const std::exception& e) {
    // One line when checks start failing; a read failed is no holder ended.
    if (!horizon_failing_) {
      spdlog::warn("horizon_check_failed | {}", OneLine(RedactSecrets(e.what(), session_.conninfo())));
    }
    horizon_failing_ = true;
  }
}

void DbGauges::WriteHorizon(ExpositionWriter& out, const Snapshot& s) const {
  out.Gauge("akadzed_db_horizon_age_seconds",
            "How long the oldest holder has held back the xmin horizon of akadzed's database (vacuum "
            "removes no row version dead since), 0 when none: a transaction's or prepared "
            "transaction's age; for a replication slot, a walsender's hot_standby_feedback or, "
            "without pg_read_all_stats, another role's session, the time since this daemon first saw "
            "it hold the same xmin (docs/operations.md)",
            s.horizon ? s.horizon->held_seconds : 0);
  out.Gauge("akadzed_db_horizon_xid_age",
            "Transactions since the xmin the oldest holder of the horizon holds (age(xmin)), 0 when none",
            s.horizon ? static_cast<double>(s.horizon->holder.xid_age) : 0);
  out.Gauge("akadzed_db_horizon_holders",
            "Sessions, replication slots and prepared transactions holding back the horizon (those "
            "with a known start only when older than 1s)",
            static_cast<double>(s.horizon_holders));
  out.Gauge("akadzed_db_stats_visible",
            "1 when akadzed's role sees other roles' sessions in pg_stat_activity (pg_read_all_stats); "
            "0: their holds are timed only from when this daemon first saw them (docs/security.md)",
            s.stats_visible ? 1 : 0);
  out.Family("akadzed_db_dead_tuples",
             "Dead row versions of the table by PostgreSQL's statistics (pg_stat_user_tables.n_dead_tup)",
             "gauge");
  out.Sample("akadzed_db_dead_tuples", {{"table", "jobs"}}, static_cast<double>(s.jobs_dead_tuples));
}

std::optional<std::string> DbGauges::NotReady() {
  std::shared_ptr<const Snapshot> s = Fresh();
  if (!s) {
    return fmt::format("database: no answer within {}s",
                       std::chrono::duration<double>(options_.wait).count());
  }
  if (!s->error.empty()) return "database: " + s->error;
  if (!s->schema_problem.empty()) return s->schema_problem;
  return std::nullopt;
}

}  // namespace akadzed
