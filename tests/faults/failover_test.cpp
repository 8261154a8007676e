// Failover (issue 15, points 5 and 6): three daemons on a multi-host URL
// while the primary of a real streaming pair (support/streaming_standby.h)
// is stopped -m immediate and its standby promoted, jobs flowing.
//  (a) synchronous replication: nothing acknowledged is lost; every job
//      finishes as audited and each daemon claims again within seconds,
//      without a restart.
//  (b) asynchronous, with the walsender paused ~1 s before the stop: commits
//      the primary acknowledged are lost. Jobs whose finish was lost are
//      `running` under live, heartbeating workers on the new primary; the
//      daemons must release them (reconcile: the database says I run a job
//      I do not run) so that every job still finishes within a bound.
//  (c) a read-only server: a multi-host URL without target_session_attrs
//      whose first host is the standby, and the primary turned read-only for
//      a moment: a read-only error (SQLSTATE 25006) is a connection problem,
//      never a failed job or a spent attempt.
// Each ends with the audit of every job (faults/job_audit.h).
//
// The scenario's database lives on the pair, not in the test cluster, so
// FaultScenario (which creates its database there) serves only for the
// daemons, the recording shell handler, the config and the report; the
// stage below does the rest (schema, audit log, limits, jobs, sampler,
// audit) on the pair with FaultScenario's own definitions.
#include <catch2/catch.hpp>

#include <algorithm>
#include <iostream>
#include <chrono>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "faults/fault_scenario.h"
#include "faults/job_audit.h"
#include "pg/pg_error.h"
#include "schema/migrations.h"
#include "support/streaming_standby.h"

namespace akadzed::test {
namespace {

using namespace std::chrono_literals;


// The scenario's database on a streaming pair: migrated, with the audit
// log, limits and jobs as FaultScenario makes them (fault_scenario.cpp),
// reached through the read-write multi-host URL so that it follows a
// promote.
// The scenario's database on a streaming pair, created and migrated on the
// primary and reached through the pair's read-write multi-host URL; the
// scenario (FaultScenario on that URL) installs the audit log and does the
// rest.
class FailoverStage {
 public:
  explicit FailoverStage(StreamingStandby& pair) {
    pair.CreateDatabase(kDb);
    pg::Connection setup = pg::Connection::Open(pair.primary_conninfo(kDb), "failover setup");
    Migrate(setup);
    url_ = pair.multi_host_conninfo(kDb);
  }

  static constexpr const char* kDb = "failover";
  const std::string& url() const { return url_; }

 private:
  std::string url_;
};

// Per daemon process (pid): its first claim committed after `since_us`.
std::map<std::int64_t, std::int64_t> FirstClaimSince(FaultScenario& s, std::int64_t since_us) {
  pg::Result r = s.Query(
      "SELECT w.pid, (extract(epoch FROM min(t.at)) * 1000000)::int8"
      " FROM fault_audit.transitions t JOIN fault_audit.workers w ON w.id = t.worker_id"
      " WHERE t.from_state = 'queued' AND t.to_state = 'running'"
      "   AND t.at > to_timestamp($1::float8 / 1000000)"
      " GROUP BY w.pid",
      pg::Params().add(since_us));
  std::map<std::int64_t, std::int64_t> first;
  for (int i = 0; i < r.rows(); ++i) first[r.int64(i, 0)] = r.int64(i, 1);
  return first;
}

// Attempts spent in all (each retry, failure or WorkerLost rescue adds one;
// a release adds none) and jobs with an error recorded.
std::pair<std::int64_t, std::int64_t> AttemptsAndErrors(FaultScenario& s) {
  pg::Result r = s.Query(
      "SELECT COALESCE(sum(attempt), 0), count(*) FILTER (WHERE errors <> '[]'::jsonb)"
      " FROM akadze.jobs");
  return {r.int64(0, 0), r.int64(0, 1)};
}

std::string SomeErrors(FaultScenario& s) {
  pg::Result r = s.Query(
      "SELECT string_agg(id || ': ' || errors::text, '; ') FROM"
      " (SELECT id, errors FROM akadze.jobs WHERE errors <> '[]'::jsonb ORDER BY id LIMIT 5) e");
  return std::string(r.text(0, 0));
}

// One transition of the audit log, as both servers recorded it.
using Transition = std::tuple<std::int64_t /*job*/, std::string /*from*/, std::string /*to*/,
                              std::int32_t /*run_count*/, std::int32_t /*attempt*/, std::int64_t /*at_us*/>;

std::set<Transition> ReadTransitions(pg::Connection& conn) {
  pg::Result r = conn.exec(
      "SELECT job_id, from_state, to_state, run_count, attempt, (extract(epoch FROM at) * 1000000)::int8"
      " FROM fault_audit.transitions");
  std::set<Transition> out;
  for (int i = 0; i < r.rows(); ++i) {
    out.emplace(r.int64(i, 0), std::string(r.text(i, 1)), std::string(r.text(i, 2)),
                static_cast<std::int32_t>(r.int64(i, 3)), static_cast<std::int32_t>(r.int64(i, 4)),
                r.int64(i, 5));
  }
  return out;
}

// What the old primary had committed that the promoted standby lacks.
struct LostCommits {
  std::int64_t transitions = 0;                           // job state changes lost
  std::set<std::pair<std::int64_t, std::int32_t>> claims;    // (job, run) claims lost
  std::set<std::pair<std::int64_t, std::int32_t>> finishes;  // (job, run) finishes lost
  // Of the lost finishes: those whose claim the standby had, so that the job
  // was `running` on the new primary under a worker that no longer ran it.
  std::set<std::pair<std::int64_t, std::int32_t>> orphaned;
  std::map<std::string, std::int64_t> by_kind;  // "queued->running": n
  // Of the lost claims: when the new primary claimed the same run again.
  std::map<std::pair<std::int64_t, std::int32_t>, std::int64_t> reclaimed_at_us;
  // Lost transitions the new primary has no later copy of (the same job,
  // states, run and attempt at another time: a lost rescue that spent an
  // attempt is not matched by a release of the same run that spent none). With synchronous replication a commit
  // can reach the old primary's disk and die waiting for the standby: never
  // acknowledged, so the daemon saw its COMMIT in doubt and wrote it again
  // (a finish rewritten, a claim's jobs released and claimed again). One the
  // daemon took as done is not written again: a finish it dropped is
  // released as an orphan instead, a claim it ran is run twice (the audit's
  // claims_run_twice).
  std::int64_t not_written_again = 0;
};

LostCommits CompareWithOldPrimary(StreamingStandby& pair, FaultScenario& s) {
  pg::Connection old_primary =
      pg::Connection::Open(pair.StartOldPrimaryIsolated(FailoverStage::kDb), "failover test");
  const std::set<Transition> old_rows = ReadTransitions(old_primary);
  s.Query("SELECT 1");
  pg::Connection now = pg::Connection::Open(pair.standby_conninfo(FailoverStage::kDb));
  const std::set<Transition> new_rows = ReadTransitions(now);
  LostCommits lost;
  for (const Transition& t : old_rows) {
    if (new_rows.contains(t)) continue;
    const auto& [job, from, to, run, attempt, at] = t;
    ++lost.transitions;
    ++lost.by_kind[from + "->" + to];
    if (from == "queued" && to == "running") lost.claims.emplace(job, run);
    if (from == "running" && (to == "succeeded" || to == "failed")) lost.finishes.emplace(job, run);
  }
  for (const auto& f : lost.finishes) {
    if (!lost.claims.contains(f)) lost.orphaned.insert(f);
  }
  std::set<std::tuple<std::int64_t, std::string, std::string, std::int32_t, std::int32_t>> written_new;
  for (const auto& [job, from, to, run, attempt, at] : new_rows) {
    written_new.emplace(job, from, to, run, attempt);
    if (from == "queued" && to == "running" && lost.claims.contains({job, run})) {
      lost.reclaimed_at_us[{job, run}] = at;
    }
  }
  for (const Transition& t : old_rows) {
    const auto& [job, from, to, run, attempt, at] = t;
    if (!new_rows.contains(t) && !written_new.contains({job, from, to, run, attempt})) {
      ++lost.not_written_again;
    }
  }
  return lost;
}

std::string KindsText(const std::map<std::string, std::int64_t>& kinds) {
  std::ostringstream out;
  bool first = true;
  for (const auto& [kind, n] : kinds) {
    out << (first ? "" : ", ") << kind << " " << n;
    first = false;
  }
  return out.str();
}

// Starts the pair, the stage (limits, `jobs` jobs of 20-150 ms) and three
// daemons on `url` (the stage's read-write multi-host URL when empty).
struct Failover {
  // heartbeat_interval 200 ms, heartbeat_ttl `ttl_ms`.
  explicit Failover(std::int64_t ttl = 1500)
      : ttl_ms(ttl), s([&] {
          ScenarioOptions o;
          o.heartbeat_ttl = std::to_string(ttl) + "ms";
          o.database = stage.url();
          return o;
        }()) {}
  const std::int64_t ttl_ms;
  std::unique_ptr<StreamingStandby> pair = StreamingStandby::Start();
  FailoverStage stage{*pair};
  FaultScenario s;  // on stage.url()
  static constexpr int kKeys = 20;
  std::int64_t ttl_us() const { return ttl_ms * 1000; }

  void Begin(int jobs, bool synchronous, const std::vector<std::string>& urls) {
    if (synchronous) pair->SetSynchronous(true);
    s.SetLimits(kKeys);
    s.Enqueue("shell", jobs, kKeys, 20, 150, 0.15);
    pair->WaitCaughtUp();
    s.sampler().Start();
    for (const std::string& url : urls) s.StartDaemon(url.empty() ? stage.url() : url);
  }
  // Waits until `n` more jobs succeeded.
  void AwaitProgress(int n, std::chrono::milliseconds timeout = 60s) {
    const std::int64_t done = s.CountJobs("state = 'succeeded'");
    const bool progressed = WaitUntil(
        [&] {
          // A daemon that exited (a config the daemon refuses) ends the wait.
          return s.CountJobs("state = 'succeeded'") >= done + n ||
                 static_cast<int>(s.LiveDaemons().size()) < s.daemons_started();
        },
        timeout) &&
        static_cast<int>(s.LiveDaemons().size()) == s.daemons_started();
    std::string tail;
    int shown = 0;
    for (int i = 0; i < s.daemons_started(); ++i) {
      if (!s.daemon(i).running()) {
        shown = i;
        break;
      }
    }
    if (!progressed) {
      const std::vector<std::string> lines = Lines(s.daemon(shown).Log());
      for (std::size_t i = lines.size() > 8 ? lines.size() - 8 : 0; i < lines.size(); ++i) {
        tail += lines[i] + "\n";
      }
    }
    INFO("no " << n << " jobs succeeded within " << timeout.count() << " ms, or a daemon exited; "
               << "daemon " << shown << "'s log ends:\n" << tail);
    REQUIRE(progressed);
  }
  // Every daemon's first claim after `since_us`, in ms after it; -1 when none.
  std::vector<std::int64_t> ClaimedAgainMs(std::int64_t since_us) {
    std::map<std::int64_t, std::int64_t> first = FirstClaimSince(s, since_us);
    std::vector<std::int64_t> out;
    for (int i = 0; i < s.daemons_started(); ++i) {
      auto it = first.find(s.daemon(i).pid());
      out.push_back(it == first.end() ? -1 : (it->second - since_us) / 1000);
    }
    return out;
  }
};

// For a failure: the audit log and the daemons' log lines of every job not
// finished (the first few).
std::string Unfinished(Failover& f) {
  std::ostringstream out;
  pg::Result jobs = f.s.Query(
      "SELECT id FROM akadze.jobs WHERE state NOT IN ('succeeded', 'failed', 'cancelled')"
      " ORDER BY id LIMIT 3");
  for (int i = 0; i < jobs.rows(); ++i) {
    const std::string id(jobs.text(i, 0));
    pg::Result t = f.s.Query(
        "SELECT string_agg(from_state || '->' || to_state || ' run ' || run_count || ' worker ' ||"
        "  COALESCE(worker_id::text, '-') || ' at ' || at::text, E'\\n    ' ORDER BY seq)"
        " FROM fault_audit.transitions WHERE job_id = $1",
        pg::Params().add(id));
    out << "job " << id << ":\n    " << t.text(0, 0) << "\n";
    for (int d = 0; d < f.s.daemons_started(); ++d) {
      for (const std::string& line : Lines(f.s.daemon(d).Log())) {
        if (line.find("job=" + id + " ") != std::string::npos ||
            line.find("job=" + id + "\n") != std::string::npos ||
            line.find("," + id + ",") != std::string::npos) {
          out << "  daemon " << d << " (pid " << f.s.daemon(d).pid() << "): " << line << "\n";
        }
      }
    }
  }
  return out.str();
}

// For a failure: one job's runs (ms relative to `up_us`), its audit log on
// the new primary and, when `old_conninfo` is given, on the old one, and the
// daemons' log lines naming it.
std::string JobStory(Failover& f, std::int64_t id, std::int64_t up_us,
                     const std::string& old_conninfo) {
  std::ostringstream out;
  out << "job " << id << " (ms after the promote):\n";
  for (const Execution& e : ReadExecutions(f.s.record_path())) {
    if (e.job_id == id) {
      out << "  run " << e.run_count << " executed " << (e.start_us - up_us) / 1000 << " .. "
          << (e.end_us - up_us) / 1000 << "\n";
    }
  }
  const std::string sql =
      "SELECT string_agg(from_state || '->' || to_state || ' run ' || run_count || ' attempt ' ||"
      "  attempt || ' worker ' || COALESCE(worker_id::text, '-') || ' at ' ||"
      "  ((extract(epoch FROM at) * 1000000)::int8 - $2) / 1000, E'\\n    ' ORDER BY at)"
      " FROM fault_audit.transitions WHERE job_id = $1";
  out << "  new primary:\n    "
      << f.s.Query(sql, pg::Params().add(id).add(up_us)).text(0, 0) << "\n";
  if (!old_conninfo.empty()) {
    pg::Connection old_primary = pg::Connection::Open(old_conninfo, "failover test");
    out << "  old primary:\n    "
        << old_primary.exec(sql, pg::Params().add(id).add(up_us)).text(0, 0) << "\n";
  }
  for (int d = 0; d < f.s.daemons_started(); ++d) {
    for (const std::string& line : Lines(f.s.daemon(d).Log())) {
      const std::string n = std::to_string(id);
      if (line.find("job=" + n + " ") != std::string::npos ||
          line.find("job=" + n + "\t") != std::string::npos ||
          (line.size() >= n.size() + 4 && line.compare(line.size() - n.size() - 4, n.size() + 4,
                                                       "job=" + n) == 0)) {
        out << "  daemon " << d << " (pid " << f.s.daemon(d).pid() << "): " << line << "\n";
      }
    }
  }
  return out.str();
}

// The job ids a problem line names ("job N ...").
std::vector<std::int64_t> ProblemJobs(const AuditReport& audit) {
  std::vector<std::int64_t> ids;
  for (const std::string& p : audit.problems) {
    if (p.rfind("job ", 0) == 0) ids.push_back(std::stoll(p.substr(4)));
    if (ids.size() == 3) break;
  }
  return ids;
}

std::string MsList(const std::vector<std::int64_t>& ms) {
  std::ostringstream out;
  for (std::size_t i = 0; i < ms.size(); ++i) out << (i ? "/" : "") << ms[i];
  return out.str() + " ms";
}

TEST_CASE("failover with synchronous replication while jobs flow: nothing acknowledged is lost, "
          "every daemon claims again within seconds without a restart",
          "[faults][failover]") {
  Failover f;
  const int batch = Long() ? 3000 : 400;
  f.Begin(batch, true, {"", "", ""});
  f.AwaitProgress(40);
  REQUIRE(f.s.CountJobs("state = 'queued'") >= 100);  // still flowing after the promote

  const std::int64_t down_us = NowUs();
  f.pair->StopPrimaryImmediate();
  const std::int64_t stopped_us = NowUs();
  f.pair->Promote();
  const std::int64_t up_us = NowUs();
  // Each daemon claims again on the new primary, on its own.
  std::vector<std::int64_t> again;
  const bool all_again = WaitUntil(
      [&] {
        again = f.ClaimedAgainMs(up_us);
        return std::none_of(again.begin(), again.end(), [](std::int64_t ms) { return ms < 0; });
      },
      10s);
  CHECK(all_again);
  CHECK(f.s.LiveDaemons().size() == 3);

  const bool finished = f.s.WaitAllFinished(Long() ? 300s : 60s);
  const std::string unfinished = finished ? "" : Unfinished(f);
  INFO("not finished in time:\n" << unfinished);
  CHECK(finished);
  CHECK(f.s.StopDaemons() == 0);
  REQUIRE(f.s.WaitHandlersGone(30s));
  const auto [attempts, with_errors] = AttemptsAndErrors(f.s);
  const std::string errors = with_errors ? SomeErrors(f.s) : "";
  AuditReport audit = f.s.RunAudit();
  const LostCommits lost = CompareWithOldPrimary(*f.pair, f.s);
  int lease_lost = 0;
  for (int d = 0; d < 3; ++d) lease_lost += f.s.CountLogLines(d, "event=lease_lost");

  std::ostringstream faults, recovery;
  faults << "sync replication, primary stopped -m immediate (" << (stopped_us - down_us) / 1000
         << " ms), standby promoted (" << (up_us - stopped_us) / 1000 << " ms)";
  recovery << "each daemon's first claim " << MsList(again)
           << " after the promote; lost commits " << lost.transitions << " (never acknowledged: "
           << lost.transitions - lost.not_written_again << " written again); attempts spent "
           << attempts << "; leases lost " << lease_lost;
  f.s.Report("15d. failover, synchronous", audit, faults.str(), recovery.str());
  INFO(audit.Summary());
  INFO("job errors: " << errors);
  CHECK(audit.ok());
  CHECK(audit.succeeded == audit.jobs);
  CHECK(audit.handler_overlap_keys == 0);
  // Synchronous: nothing acknowledged was lost. A commit that reached only
  // the old primary's disk was never acknowledged and was written again.
  CHECK(lost.not_written_again == 0);
  for (std::int64_t ms : again) CHECK(ms < 5000);
}

TEST_CASE("failover that loses acknowledged commits (async, walsender paused): jobs whose finish "
          "was lost are released by their live daemons and every job finishes",
          "[faults][failover]") {
  // The lag: finishes keep being acknowledged by the primary while none
  // reaches the standby, heartbeats included. On the new primary a daemon's
  // row is then older than its own clock says by the lag, the stop and the
  // promote, and its first heartbeat after the promote is fenced by the
  // lease span (heartbeat_ttl - kill_grace 500 ms - 250 ms): past it the
  // daemon takes a new id and its jobs are rescued (an attempt each), which
  // is the fence working, not what this test shows. So the span covers the
  // pause (the lag, at most the lag + 2 s: below) plus ~6 s (one heartbeat
  // interval, stop, promote and reconnect on a loaded CI machine: 1.8 s
  // seen, and once a promote of 5.1 s alone), and
  // nothing but the reconcile can free a job whose finish was lost. With
  // heartbeat_ttl 3 s and a 1 s lag the span (2.25 s) was missed on CI, and
  // with the lag + 3 s (span 3.25 s) by that 5.1 s promote
  // (docs/reliability.md, "Partitions and failover"). The pause lasts the
  // lag and 25 finishes, and a loaded machine finishes slower: it is cut at
  // the lag + 2 s, and the span is counted from that cut.
  const auto lag = Long() ? 3s : 1s;
  const auto pause_max = lag + 2s;
  Failover f(std::chrono::duration_cast<std::chrono::milliseconds>(pause_max).count() + 7000);
  // A backlog that drains well within the bound below once the jobs
  // orphaned by the failover are released (~25 jobs/s on two cores).
  const int batch = Long() ? 3000 : 300;
  f.Begin(batch, false, {"", "", ""});
  f.AwaitProgress(40);
  REQUIRE(f.s.CountJobs("state = 'queued'") >= 60);

  // At least `lag` and 25 finishes of it, at most `pause_max`.
  const std::int64_t done_before = f.s.CountJobs("state = 'succeeded'");
  f.pair->PauseWalSender();
  const std::int64_t pause_us = NowUs();
  const auto paused_at = std::chrono::steady_clock::now();
  REQUIRE(WaitUntil(
      [&] {
        const auto paused = std::chrono::steady_clock::now() - paused_at;
        return paused >= lag &&
               (paused >= pause_max || f.s.CountJobs("state = 'succeeded'") >= done_before + 25);
      },
      20s));
  const std::int64_t down_us = NowUs();
  f.pair->StopPrimaryImmediate();
  const std::int64_t stopped_us = NowUs();
  f.pair->Promote();
  const std::int64_t up_us = NowUs();
  // Seen on the new primary right away: jobs `running` whose handler's run
  // already completed before the primary stopped (their finish was lost, or
  // is still on its way).
  std::int64_t running_done_at_promote = 0;
  {
    std::set<std::pair<std::int64_t, std::int32_t>> completed;
    for (const Execution& e : ReadExecutions(f.s.record_path())) {
      if (e.end_us < down_us) completed.emplace(e.job_id, e.run_count);
    }
    pg::Result r = f.s.Query("SELECT id, run_count FROM akadze.jobs WHERE state = 'running'");
    for (int i = 0; i < r.rows(); ++i) {
      if (completed.contains({r.int64(i, 0), static_cast<std::int32_t>(r.int64(i, 1))})) {
        ++running_done_at_promote;
      }
    }
  }

  const bool finished = f.s.WaitAllFinished(Long() ? 300s : 60s);
  const std::int64_t finished_ms = (NowUs() - up_us) / 1000;
  const std::string unfinished = finished ? "" : Unfinished(f);
  INFO("not finished in time:\n" << unfinished);
  const std::int64_t still_running = f.s.CountJobs("state = 'running'");
  CHECK(finished);
  std::vector<std::int64_t> again = f.ClaimedAgainMs(up_us);
  CHECK(f.s.LiveDaemons().size() == 3);
  CHECK(f.s.StopDaemons() == 0);
  REQUIRE(f.s.WaitHandlersGone(30s));
  const auto [attempts, with_errors] = AttemptsAndErrors(f.s);
  const std::string errors = with_errors ? SomeErrors(f.s) : "";

  // What was lost, from the old primary's own data (started where no URL
  // points), and when each orphan left `running` on the new primary.
  const LostCommits lost = CompareWithOldPrimary(*f.pair, f.s);
  std::int64_t reconcile_ms = 0, orphans_left = 0;
  std::map<std::string, std::int64_t> orphan_outcome;
  for (const auto& [job, run] : lost.orphaned) {
    pg::Result r = f.s.Query(
        "SELECT to_state, attempt, (extract(epoch FROM at) * 1000000)::int8"
        " FROM fault_audit.transitions WHERE job_id = $1 AND run_count = $2"
        "   AND from_state = 'running' ORDER BY at LIMIT 1",
        pg::Params().add(job).add(run));
    if (r.rows() == 0) {
      ++orphans_left;
      continue;
    }
    reconcile_ms = std::max(reconcile_ms, (r.int64(0, 2) - up_us) / 1000);
    ++orphan_outcome[std::string(r.text(0, 0)) + (r.int64(0, 1) > 0 ? " (attempt spent)" : "")];
  }
  // A lost claim's run happened under a claim the new primary never had: the
  // job runs again with the same run_count. At-least-once, not a duplicate
  // claim: the runs that started before the new primary's claim of that run
  // are left out of the audit's per-claim checks (one that started after it
  // would overlap the new claim's run, and stays in).
  std::vector<Execution> executions, under_lost_claims;
  for (const Execution& e : ReadExecutions(f.s.record_path())) {
    auto it = lost.reclaimed_at_us.find({e.job_id, e.run_count});
    const bool under_lost =
        lost.claims.contains({e.job_id, e.run_count}) &&
        (it == lost.reclaimed_at_us.end() || e.start_us < it->second);
    (under_lost ? under_lost_claims : executions).push_back(e);
  }
  AuditReport audit = f.s.RunAudit(std::move(executions));
  int released = 0, lease_lost = 0;
  for (int d = 0; d < 3; ++d) {
    released += f.s.CountLogLines(d, "orphan_released");
    lease_lost += f.s.CountLogLines(d, "event=lease_lost");
  }

  std::ostringstream faults, recovery;
  faults << "async replication, walsender paused " << (down_us - pause_us) / 1000
         << " ms, primary stopped -m immediate (" << (stopped_us - down_us) / 1000
         << " ms), standby promoted (" << (up_us - stopped_us) / 1000 << " ms); lost "
         << lost.transitions << " job state changes (" << KindsText(lost.by_kind) << ")";
  recovery << "orphaned finishes " << lost.orphaned.size() << " (seen running with a completed "
           << "run right after the promote: " << running_done_at_promote << "), left running "
           << orphans_left << ", reconcile " << reconcile_ms << " ms after the promote ("
           << KindsText(orphan_outcome) << "; orphan_released lines " << released
           << "); runs under lost claims " << under_lost_claims.size() << "; all finished "
           << finished_ms << " ms after the promote (still running " << still_running
           << "); first claims " << MsList(again) << "; attempts spent " << attempts
           << "; leases lost " << lease_lost;
  f.s.Report("15e. failover, async with lag", audit, faults.str(), recovery.str());
  std::string stories;
  for (std::int64_t id : ProblemJobs(audit)) {
    stories += JobStory(f, id, up_us, f.pair->StartOldPrimaryIsolated(FailoverStage::kDb));
  }
  INFO(stories);
  INFO(audit.Summary());
  INFO("job errors: " << errors);
  CHECK(audit.ok());
  CHECK(audit.succeeded == audit.jobs);
  CHECK(audit.handler_overlap_keys == 0);
  // The lag was real, and it orphaned finished jobs: otherwise this test
  // shows nothing.
  CHECK(lost.transitions > 0);
  CHECK(!lost.orphaned.empty());
  CHECK(orphans_left == 0);
  // Released by their own daemons, no attempt spent: not rescued as lost.
  INFO("leases lost: " << lease_lost);
  CHECK(orphan_outcome["queued"] == static_cast<std::int64_t>(lost.orphaned.size()));
  // Once settled (claimed heartbeat_ttl ago) and seen in two rounds.
  CHECK(reconcile_ms < f.ttl_ms + 2000);
}

TEST_CASE("a read-only server is a connection problem: standby first in a URL without "
          "target_session_attrs, and the primary read-only for a moment; no job fails or spends "
          "an attempt",
          "[faults][failover]") {
  // heartbeat_ttl 5 s (lease span 4.25 s): the read-only moment (0.6 s,
  // plus two reloads and reconnects, slower on a loaded machine) stays well
  // inside every daemon's lease, so that an attempt spent can only come
  // from the read-only errors themselves.
  Failover f(5000);
  const int batch = Long() ? 3000 : 300;
  // Three daemons on a URL naming the standby first, without
  // target_session_attrs; a fourth whose URL says target_session_attrs=any
  // (it may only ever reach the standby: it must not fail jobs either).
  const std::string no_attrs = f.pair->multi_host_conninfo(FailoverStage::kDb, true, "");
  const std::string any = f.pair->multi_host_conninfo(FailoverStage::kDb, true, "any");
  f.Begin(batch, false, {no_attrs, no_attrs, no_attrs});
  f.AwaitProgress(40, 30s);
  f.s.StartDaemon(any);

  // The primary turns read-only for a moment shorter than the lease span
  // (4.25 s): sessions already open get
  // SQLSTATE 25006 on their next write, new read-write sessions are refused.
  pg::Connection admin = pg::Connection::Open(f.pair->primary_conninfo(), "fault injector");
  admin.exec("SET default_transaction_read_only = off");
  const std::int64_t done_before = f.s.CountJobs("state = 'succeeded'");
  admin.exec("ALTER SYSTEM SET default_transaction_read_only = on");
  admin.exec("SELECT pg_reload_conf()");
  const std::int64_t ro_us = NowUs();
  std::this_thread::sleep_for(600ms);  // the fault's length
  admin.exec("ALTER SYSTEM RESET default_transaction_read_only");
  admin.exec("SELECT pg_reload_conf()");
  const std::int64_t rw_us = NowUs();
  const std::int64_t done_during = f.s.CountJobs("state = 'succeeded'") - done_before;
  std::vector<std::int64_t> again;
  const bool all_again = WaitUntil(
      [&] {
        again = f.ClaimedAgainMs(rw_us);
        return std::count_if(again.begin(), again.begin() + 3,
                             [](std::int64_t ms) { return ms >= 0; }) == 3;
      },
      10s);
  CHECK(all_again);

  const bool finished = f.s.WaitAllFinished(Long() ? 300s : 60s);
  const std::string unfinished = finished ? "" : Unfinished(f);
  INFO("not finished in time:\n" << unfinished);
  CHECK(finished);
  const bool any_alive = f.s.daemon(3).running();
  const int any_exit = any_alive ? -1 : f.s.daemon(3).Wait(1s);
  CHECK(f.s.StopDaemons() == 0);
  REQUIRE(f.s.WaitHandlersGone(30s));
  const auto [attempts, with_errors] = AttemptsAndErrors(f.s);
  const std::string errors = with_errors ? SomeErrors(f.s) : "";
  const std::int64_t read_only_errors =
      f.s.CountJobs("errors::text ILIKE '%read-only%' OR errors::text LIKE '%25006%'");
  AuditReport audit = f.s.RunAudit();
  // Log lines about the read-only server, and those at level error.
  int ro_lines = 0, ro_error_lines = 0, any_ro_lines = 0, any_claims = 0, lease_lost = 0;
  for (int d = 0; d < 3; ++d) lease_lost += f.s.CountLogLines(d, "event=lease_lost");
  const std::vector<std::string> any_log = Lines(f.s.daemon(3).Log());
  const std::string any_last = any_log.empty() ? "" : any_log.back();
  std::string sample;
  for (int d = 0; d < 4; ++d) {
    for (const std::string& line : Lines(f.s.daemon(d).Log())) {
      if (line.find("read-only") == std::string::npos) continue;
      (d == 3 ? any_ro_lines : ro_lines)++;
      if (d < 3 && line.find("level=error") != std::string::npos) {
        if (++ro_error_lines <= 3) sample += line + "\n";
      }
    }
  }
  {
    std::map<std::int64_t, std::int64_t> claims = FirstClaimSince(f.s, 0);
    any_claims = claims.contains(f.s.daemon(3).pid()) ? 1 : 0;
  }

  std::ostringstream faults, recovery;
  faults << "standby first in the URL (no target_session_attrs; a 4th daemon with "
            "target_session_attrs=any), primary read-only for "
         << (rw_us - ro_us) / 1000 << " ms (" << done_during << " jobs succeeded meanwhile)";
  recovery << "first claims after read-write " << MsList(again) << "; jobs with a read-only error "
           << read_only_errors << "; attempts spent " << attempts << "; read-only log lines "
           << ro_lines << " (at error " << ro_error_lines << "); leases lost " << lease_lost
           << "; the any-daemon: "
           << (any_alive ? "alive" : "exited " + std::to_string(any_exit)) << ", claimed "
           << (any_claims ? "yes" : "no") << ", read-only lines " << any_ro_lines;
  f.s.Report("15f. read-only server", audit, faults.str(), recovery.str());
  INFO(audit.Summary());
  INFO("job errors: " << errors);
  INFO("read-only error lines:\n" << sample);
  CHECK(audit.ok());
  CHECK(audit.succeeded == audit.jobs);
  CHECK(audit.handler_overlap_keys == 0);
  CHECK(read_only_errors == 0);
  CHECK(lease_lost == 0);
  CHECK(attempts == 0);
  CHECK(ro_error_lines == 0);
  // Informative: what a daemon told target_session_attrs=any did.
  std::cout << "15f: the target_session_attrs=any daemon's last log line: " << any_last
            << std::endl;
}

}  // namespace
}  // namespace akadzed::test
