#include "faults/job_audit.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

#include "pg/params.h"
#include "pg/pg_error.h"

namespace akadzed::test {

namespace {

constexpr std::size_t kMaxProblems = 20;

void Note(AuditReport& report, const std::string& problem) {
  if (report.problems.size() < kMaxProblems) report.problems.push_back(problem);
}

// The applicable limits of every key (own row, else '*'): what the claim
// obeys (SPEC §2).
struct KeyLimits {
  std::map<std::string, std::optional<std::int64_t>> max_running;  // own rows
  bool has_star = false;
  std::optional<std::int64_t> star_max_running;

  static KeyLimits Read(pg::Connection& conn) {
    KeyLimits limits;
    pg::Result r = conn.exec("SELECT key, max_running FROM akadze.limits");
    for (int i = 0; i < r.rows(); ++i) {
      std::string key(r.text(i, 0));
      if (key == "*") {
        limits.has_star = true;
        limits.star_max_running = r.optional_int64(i, 1);
      } else {
        limits.max_running[key] = r.optional_int64(i, 1);
      }
    }
    return limits;
  }
  // The cap on running jobs of `key`: nullopt = none; 0 = held (no row).
  std::optional<std::int64_t> Cap(const std::string& key) const {
    if (auto it = max_running.find(key); it != max_running.end()) return it->second;
    if (has_star) return star_max_running;
    return 0;
  }
};

}  // namespace

void InstallAuditLog(pg::Connection& conn) {
  conn.exec(R"sql(
    CREATE SCHEMA fault_audit;
    CREATE TABLE fault_audit.transitions (
      seq bigint GENERATED ALWAYS AS IDENTITY,
      job_id bigint NOT NULL,
      from_state text NOT NULL,
      to_state text NOT NULL,
      run_count integer NOT NULL,
      attempt integer NOT NULL,
      worker_id uuid,
      limit_key text,
      queue text NOT NULL,
      started_at timestamptz,
      at timestamptz NOT NULL DEFAULT clock_timestamp(),
      app text);
    CREATE FUNCTION fault_audit.record_transition() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO fault_audit.transitions
        (job_id, from_state, to_state, run_count, attempt, worker_id, limit_key, queue,
         started_at, app)
      VALUES (NEW.id, OLD.state, NEW.state, NEW.run_count, NEW.attempt,
              COALESCE(OLD.worker_id, NEW.worker_id), NEW.limit_key, NEW.queue, NEW.started_at,
              current_setting('application_name', true));
      RETURN NULL;
    END $$;
    CREATE TRIGGER fault_audit_transitions AFTER UPDATE ON akadze.jobs FOR EACH ROW
      WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION fault_audit.record_transition();
    CREATE TABLE fault_audit.workers (id uuid NOT NULL, pid integer NOT NULL,
                                      at timestamptz NOT NULL DEFAULT clock_timestamp());
    CREATE FUNCTION fault_audit.record_worker() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO fault_audit.workers (id, pid) VALUES (NEW.id, NEW.pid);
      RETURN NULL;
    END $$;
    CREATE TRIGGER fault_audit_workers AFTER INSERT ON akadze.workers FOR EACH ROW
      EXECUTE FUNCTION fault_audit.record_worker();
  )sql");
}

std::vector<Execution> ReadExecutions(const std::string& path) {
  std::vector<Execution> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    Execution e;
    std::string extra;
    if (fields >> e.job_id >> e.run_count >> e.start_us >> e.end_us && !(fields >> extra)) {
      out.push_back(e);
    }
  }
  return out;
}

LimitSampler::LimitSampler(std::string conninfo) : conninfo_(std::move(conninfo)) {}

LimitSampler::~LimitSampler() { Stop(); }

void LimitSampler::Start() { thread_ = std::thread([this] { Loop(); }); }

void LimitSampler::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

std::vector<std::string> LimitSampler::overshoots() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> all = overshoots_;
  for (const auto& e : errors_) all.push_back("sampler error: " + e);
  return all;
}

void LimitSampler::Loop() {
  std::optional<KeyLimits> limits;
  std::map<std::string, std::int64_t> queue_caps;  // akadze.queue_caps, read with the limits
  std::optional<pg::Connection> conn;
  while (!stop_.load()) {
    try {
      if (!conn || !conn->healthy()) {
        conn.reset();
        conn.emplace(pg::Connection::Open(conninfo_, "fault audit sampler"));
        if (!limits) {
          limits = KeyLimits::Read(*conn);
          pg::Result caps = conn->exec("SELECT queue, max_running FROM akadze.queue_caps");
          for (int i = 0; i < caps.rows(); ++i) queue_caps[std::string(caps.text(i, 0))] = caps.int64(i, 1);
        }
      }
      // One statement: one snapshot of every key's and every queue's running
      // jobs (kind 'k' and 'q').
      pg::Result r = conn->exec(
          "SELECT 'k', limit_key, count(*) FROM akadze.jobs"
          " WHERE state = 'running' AND limit_key IS NOT NULL GROUP BY limit_key"
          " UNION ALL SELECT 'q', queue, count(*) FROM akadze.jobs WHERE state = 'running' GROUP BY queue");
      for (int i = 0; i < r.rows(); ++i) {
        std::string key(r.text(i, 1));
        std::int64_t running = r.int64(i, 2);
        if (r.text(i, 0) == "q") {
          const auto cap = queue_caps.find(key);
          if (cap == queue_caps.end()) continue;
          if (running > max_queue_seen_.load()) max_queue_seen_ = running;
          if (running > cap->second) {
            std::lock_guard lock(mu_);
            overshoots_.push_back("queue " + key + ": " + std::to_string(running) +
                                  " running, queue max_running " + std::to_string(cap->second));
          }
          continue;
        }
        if (running > max_seen_.load()) max_seen_ = running;
        std::optional<std::int64_t> cap = limits->Cap(key);
        if (cap && running > *cap) {
          std::lock_guard lock(mu_);
          overshoots_.push_back("key " + key + ": " + std::to_string(running) +
                                " running, max_running " + std::to_string(*cap));
        }
      }
      ++samples_;
      // A sample every few milliseconds is plenty, and leaves the two
      // cores of a CI machine to the daemons (a cadence, not a wait).
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    } catch (const pg::ConnectionError&) {
      // The database is away (a restart under test): try again shortly.
      conn.reset();
      ++reconnects_;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } catch (const std::exception& e) {
      std::lock_guard lock(mu_);
      if (errors_.size() < 10) errors_.push_back(e.what());
      conn.reset();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

std::string AuditReport::Summary() const {
  std::ostringstream out;
  out << "jobs=" << jobs << " succeeded=" << succeeded << " failed_spent=" << failed_spent
      << " lost=" << lost << " stuck_running=" << stuck_running
      << " (dead worker " << stuck_dead_worker << ") duplicates=" << duplicates()
      << " (double_finish " << double_finishes << ", claim_run_twice " << claims_run_twice
      << ", run_after_finish " << runs_after_finish << ") claims=" << claims << " reruns=" << reruns
      << " executions=" << executions << " overshoots=" << overshoots() << " (running "
      << running_overshoots << " in " << samples << " samples, rate " << rate_overshoots << " with "
      << rate_full_windows << " windows filled) handler_overlap_keys=" << handler_overlap_keys;
  for (const auto& p : problems) out << "\n  problem: " << p;
  return out.str();
}

AuditReport Audit(pg::Connection& conn, const AuditOptions& options) {
  AuditReport report;
  const KeyLimits limits = KeyLimits::Read(conn);

  // Final rows, with the per-job summary of the transition log.
  struct JobRow {
    std::string state;
    std::int32_t attempt = 0, max_attempts = 0, run_count = 0;
    std::string limit_key;  // "" for none
    bool has_key = false;
    std::int64_t claims = 0, finals = 0, requeues = 0;
    std::optional<std::int64_t> finish_us;
  };
  std::unordered_map<std::int64_t, JobRow> jobs;
  pg::Result rows = conn.exec(
      "SELECT j.id, j.state, j.attempt, j.max_attempts, j.run_count, j.limit_key,"
      "       (w.heartbeat_at > now() - $1::bigint * interval '1 microsecond') IS TRUE,"
      "       t.claims, t.finals, t.requeues, t.finish_us"
      " FROM akadze.jobs j"
      " LEFT JOIN akadze.workers w ON w.id = j.worker_id"
      " LEFT JOIN (SELECT job_id,"
      "     count(*) FILTER (WHERE from_state = 'queued' AND to_state = 'running') AS claims,"
      "     count(*) FILTER (WHERE to_state IN ('succeeded', 'failed', 'cancelled')) AS finals,"
      "     count(*) FILTER (WHERE from_state = 'running' AND to_state = 'queued') AS requeues,"
      "     (extract(epoch FROM min(at) FILTER (WHERE to_state IN ('succeeded', 'failed',"
      "        'cancelled'))) * 1000000)::int8 AS finish_us"
      "   FROM fault_audit.transitions GROUP BY job_id) t ON t.job_id = j.id",
      pg::Params().add(options.heartbeat_ttl_us));
  for (int i = 0; i < rows.rows(); ++i) {
    JobRow j;
    std::int64_t id = rows.int64(i, 0);
    j.state = std::string(rows.text(i, 1));
    j.attempt = static_cast<std::int32_t>(rows.int64(i, 2));
    j.max_attempts = static_cast<std::int32_t>(rows.int64(i, 3));
    j.run_count = static_cast<std::int32_t>(rows.int64(i, 4));
    if (auto key = rows.optional_text(i, 5)) {
      j.has_key = true;
      j.limit_key = *key;
    }
    bool live_worker = rows.text(i, 6) == "t";
    j.claims = rows.optional_int64(i, 7).value_or(0);
    j.finals = rows.optional_int64(i, 8).value_or(0);
    j.requeues = rows.optional_int64(i, 9).value_or(0);
    j.finish_us = rows.optional_int64(i, 10);
    ++report.jobs;
    report.claims += j.claims;
    if (j.claims > 1) report.reruns += j.claims - 1;
    const bool finished =
        j.state == "succeeded" || (j.state == "failed" && j.attempt >= j.max_attempts);
    if (j.state == "succeeded") ++report.succeeded;
    if (j.state == "failed" && finished) ++report.failed_spent;
    if (!finished) {
      ++report.lost;
      Note(report, "job " + std::to_string(id) + " not finished: state " + j.state + ", attempt " +
                       std::to_string(j.attempt) + "/" + std::to_string(j.max_attempts));
      if (j.state == "running") {
        ++report.stuck_running;
        if (!live_worker) ++report.stuck_dead_worker;
      }
    }
    if (j.finals > 1) {
      ++report.double_finishes;
      Note(report,
           "job " + std::to_string(id) + " finished " + std::to_string(j.finals) + " times");
    }
    // Every claim added one to run_count, and every run but the last went
    // back to the queue (rescue, release): anything else is an unexplained
    // change of state.
    if (j.claims != j.run_count || (finished && j.requeues != j.claims - 1)) {
      Note(report, "job " + std::to_string(id) + ": run_count " + std::to_string(j.run_count) +
                       " but " + std::to_string(j.claims) + " claims and " +
                       std::to_string(j.requeues) + " requeues logged");
    }
    jobs.emplace(id, std::move(j));
  }

  // The handlers' side: D2, D3, and the final run's record.
  std::map<std::pair<std::int64_t, std::int32_t>, int> runs;
  for (const Execution& e : options.executions) {
    ++report.executions;
    if (++runs[{e.job_id, e.run_count}] == 2) {
      ++report.claims_run_twice;
      Note(report, "job " + std::to_string(e.job_id) + " run " + std::to_string(e.run_count) +
                       " executed twice");
    }
    auto it = jobs.find(e.job_id);
    if (it == jobs.end()) {
      Note(report, "an execution of unknown job " + std::to_string(e.job_id));
      continue;
    }
    const JobRow& j = it->second;
    if (e.run_count > j.run_count || (j.finish_us && e.start_us > *j.finish_us)) {
      ++report.runs_after_finish;
      Note(report, "job " + std::to_string(e.job_id) + " run " + std::to_string(e.run_count) +
                       " started after the job's finish was recorded");
    }
  }
  if (options.records_complete) {
    for (const auto& [id, j] : jobs) {
      if (j.state == "succeeded" && !runs.count({id, j.run_count})) {
        ++report.lost;
        Note(report, "job " + std::to_string(id) + " succeeded without an execution of run " +
                         std::to_string(j.run_count));
      }
    }
  }

  // Start rates, from every claim's now() (the claim's own clock).
  pg::Result starts = conn.exec(
      "SELECT t.limit_key, (extract(epoch FROM t.started_at) * 1000000)::int8, l.max_starts,"
      "       (extract(epoch FROM l.starts_window) * 1000000)::int8"
      " FROM fault_audit.transitions t"
      " CROSS JOIN LATERAL (SELECT * FROM akadze.limits l WHERE l.key IN (t.limit_key, '*')"
      "                     ORDER BY l.key = '*' LIMIT 1) l"
      " WHERE t.from_state = 'queued' AND t.to_state = 'running' AND t.limit_key IS NOT NULL"
      "   AND l.max_starts IS NOT NULL"
      " ORDER BY t.limit_key, t.started_at");
  for (int begin = 0; begin < starts.rows();) {
    int end = begin;
    while (end < starts.rows() && starts.text(end, 0) == starts.text(begin, 0)) ++end;
    const std::int64_t max_starts = starts.int64(begin, 2);
    const std::int64_t window = starts.int64(begin, 3);
    // For each claim instant T: the starts in (T - window, T].
    int left = begin;
    for (int i = begin; i < end;) {
      const std::int64_t t = starts.int64(i, 1);
      int last = i;
      while (last + 1 < end && starts.int64(last + 1, 1) == t) ++last;
      while (starts.int64(left, 1) <= t - window) ++left;
      const std::int64_t in_window = last - left + 1;
      if (in_window == max_starts) ++report.rate_full_windows;
      if (in_window > max_starts) {
        ++report.rate_overshoots;
        Note(report, "key " + std::string(starts.text(begin, 0)) + ": " +
                         std::to_string(in_window) + " starts within one window, max_starts " +
                         std::to_string(max_starts));
      }
      i = last + 1;
    }
    begin = end;
  }

  // Sampled running counts.
  if (options.sampler != nullptr) {
    report.samples = options.sampler->samples();
    for (const std::string& o : options.sampler->overshoots()) {
      if (o.rfind("sampler error", 0) == 0) {
        Note(report, o);
      } else {
        ++report.running_overshoots;
        Note(report, o);
      }
    }
  }

  // Informative: handler executions of one key overlapping beyond its cap.
  std::map<std::string, std::vector<std::pair<std::int64_t, int>>> edges;
  for (const Execution& e : options.executions) {
    auto it = jobs.find(e.job_id);
    if (it == jobs.end() || !it->second.has_key) continue;
    edges[it->second.limit_key].push_back({e.start_us, +1});
    edges[it->second.limit_key].push_back({e.end_us, -1});
  }
  for (auto& [key, points] : edges) {
    std::optional<std::int64_t> cap = limits.Cap(key);
    if (!cap) continue;
    std::sort(points.begin(), points.end());  // an end before a start at the same instant
    std::int64_t running = 0, peak = 0;
    for (const auto& [at, delta] : points) peak = std::max(peak, running += delta);
    if (peak > *cap) ++report.handler_overlap_keys;
  }

  // The run's span: first claim to last finish.
  pg::Result span = conn.exec(
      "SELECT (extract(epoch FROM min(at) FILTER (WHERE to_state = 'running')) * 1000000)::int8,"
      "       (extract(epoch FROM max(at) FILTER (WHERE to_state IN ('succeeded', 'failed',"
      "          'cancelled'))) * 1000000)::int8"
      " FROM fault_audit.transitions");
  report.first_claim_us = span.optional_int64(0, 0).value_or(0);
  report.last_finish_us = span.optional_int64(0, 1).value_or(0);
  return report;
}

}  // namespace akadzed::test
