// status_page_bench: what an open status page costs the database
// (docs/status-page.md, "What it costs"). On a throwaway PostgreSQL it
// builds an akadze.jobs of --jobs rows (default 1,000,000) shaped like a
// busy production table:
//
//   95%   history: succeeded, 0.2% failed (with an error), cancelled, over
//         the last two days, in 5 queues
//   4%    queued over 5 queues x 30 limit keys x 4 priorities, a tenth
//         scheduled in the future; every key has a limits row, and 200 more
//         jobs carry a mistyped key, held (what the page is there to show)
//   200   running under 4 worker rows
//         and a day of queue_minutes (5 queues)
//
// then VACUUM ANALYZE, and prints:
//   - each statement of one status read (ReadStatusReport, what /api/status
//     and `akadzed status` run) with the scans auto_explain logged: node,
//     index, rows, buffers, time;
//   - the read timed --rounds times in a row (after one warm-up): median and
//     p95 wall ms, and the server's CPU per read (the session's backend,
//     from /proc) and the client's;
//   - the same for `akadzed queues list`'s aggregate over all of
//     akadze.jobs (what `status` read before), in turns, with the ratio.
// Exits 1 when the status read's server CPU per read is --max-ms or more
// (0: no check), or when a statement of the read scans akadze.jobs whole.
//
//   status_page_bench [--jobs N] [--rounds R] [--max-ms M]
//
// STATUS_BENCH_PLANS=FILE also writes each statement's whole plan (JSON)
// there.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <thread>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "embedded/throwaway_postgres.h"
#include "pg/connection.h"
#include "process_cpu.h"
#include "schema/migrations.h"
#include "store/job_admin.h"
#include "claim/queue_counts.h"
#include "store/status_report.h"
#include "support/plan_log.h"

using namespace akadzed;

namespace {

struct Timing {
  double median_ms = 0;
  double p95_ms = 0;
  double server_ms_per_read = 0;
  double client_ms_per_read = 0;
};

Timing Time(pg::Connection& conn, int backend, int rounds, const std::function<void()>& read) {
  read();  // warm-up: caches, plans
  std::vector<double> wall;
  const double server0 = bench::ProcessCpuSeconds(backend);
  const double client0 = bench::ClientCpuSeconds();
  for (int i = 0; i < rounds; ++i) {
    const auto start = std::chrono::steady_clock::now();
    read();
    wall.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  Timing t;
  t.server_ms_per_read = (bench::ProcessCpuSeconds(backend) - server0) * 1000 / rounds;
  t.client_ms_per_read = (bench::ClientCpuSeconds() - client0) * 1000 / rounds;
  std::sort(wall.begin(), wall.end());
  t.median_ms = wall[wall.size() / 2];
  t.p95_ms = wall[std::min(wall.size() - 1, wall.size() * 95 / 100)];
  (void)conn;
  return t;
}

// The statement's first line, cut: enough to tell them apart.
std::string Label(const std::string& query) {
  std::string one;
  for (char c : query) one += (c == '\n' || c == '\t') ? ' ' : c;
  one.erase(std::unique(one.begin(), one.end(), [](char a, char b) { return a == ' ' && b == ' '; }), one.end());
  return one.size() > 70 ? one.substr(0, 67) + "..." : one;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"status_page_bench: what one read of the status page costs on a big akadze.jobs"};
  int jobs = 1'000'000;
  int rounds = 50;
  double max_ms = 5;
  app.add_option("--jobs", jobs, "Rows of akadze.jobs")->check(CLI::Range(10'000, 100'000'000));
  app.add_option("--rounds", rounds, "Reads timed (after one warm-up)")->check(CLI::Range(5, 100'000));
  app.add_option("--max-ms", max_ms, "Exit 1 when the server's CPU per status read is this or more (0: no check)")
      ->check(CLI::Range(0.0, 1e6));
  CLI11_PARSE(app, argc, argv);

  ThrowawayPostgresOptions server_options;
  server_options.settings = {"shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track_planning=on"};
  auto server = ThrowawayPostgres::Start(server_options);
  pg::Connection conn = pg::Connection::Open(server->conninfo(), "status_page_bench");
  Migrate(conn);
  const int backend = static_cast<int>(conn.exec("SELECT pg_backend_pid()").int64(0, 0));

  const int queued = jobs / 25;
  const int running = 200;
  const int history = jobs - queued - running;
  const auto build_start = std::chrono::steady_clock::now();
  conn.exec(fmt::format(
      "INSERT INTO akadze.jobs (task, queue, state, attempt, run_count, created_at, run_at, started_at,"
      " finished_at, errors)"
      " SELECT 'task' || (i % 7), 'q' || (i % 5),"
      "   CASE WHEN i % 500 = 0 THEN 'failed' WHEN i % 97 = 0 THEN 'cancelled' ELSE 'succeeded' END,"
      "   1, 1, f - interval '2 seconds', f - interval '2 seconds', f - interval '1 second', f,"
      "   CASE WHEN i % 500 = 0 THEN '[{{\"error\": \"HandlerFailed\", \"message\": \"exit status 1\"}}]'::jsonb"
      "        ELSE '[]' END"
      " FROM generate_series(1, {}) i, LATERAL (SELECT now() - (i % 172800) * interval '1 second' AS f) t",
      history));
  conn.exec(fmt::format(
      "INSERT INTO akadze.jobs (task, queue, priority, limit_key, run_at)"
      " SELECT 'task' || (i % 7), 'q' || (i % 5), i % 4, 'tenant-' || (i % 30),"
      "   now() + (CASE WHEN i % 10 = 0 THEN 1 ELSE -1 END) * (i % 3600) * interval '1 second'"
      " FROM generate_series(1, {}) i",
      queued));
  for (int w = 0; w < 4; ++w) {
    conn.exec(fmt::format("INSERT INTO akadze.workers (id, hostname, pid, queues) VALUES"
                          " ('00000000-0000-4000-8000-00000000000{}', 'host-{}', {}, '{{q0,q1,q2,q3,q4}}')",
                          w, w, 1000 + w));
  }
  conn.exec(fmt::format(
      "INSERT INTO akadze.jobs (task, queue, state, worker_id, run_count, attempt, started_at, limit_key)"
      " SELECT 'task' || (i % 7), 'q' || (i % 5), 'running',"
      "   ('00000000-0000-4000-8000-00000000000' || (i % 4))::uuid, 1, 1, now(), 'tenant-' || (i % 30)"
      " FROM generate_series(1, {}) i",
      running));
  conn.exec("INSERT INTO akadze.limits (key, max_running) SELECT 'tenant-' || i, 10 FROM generate_series(0, 29) i");
  conn.exec("UPDATE akadze.jobs SET limit_key = 'tenant-typo' WHERE id IN"
            " (SELECT id FROM akadze.jobs WHERE state = 'queued' ORDER BY id LIMIT 200)");
  // A day of history: 1,440 minutes x 5 queues.
  conn.exec("INSERT INTO akadze.queue_minutes (minute, queue, succeeded, failed)"
            " SELECT date_trunc('minute', now()) - m * interval '1 minute', 'q' || q, 100 + m % 60, m % 3"
            " FROM generate_series(0, 1439) m, generate_series(0, 4) q");
  conn.exec("CHECKPOINT");
  conn.exec("VACUUM (ANALYZE) akadze.jobs");
  const double build_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - build_start).count();
  const std::int64_t rows = conn.exec("SELECT count(*) FROM akadze.jobs").int64(0, 0);
  std::cout << fmt::format(
      "status_page_bench: akadze.jobs of {} rows ({} history, {} queued, {} running), built in {:.1f} s\n\n", rows,
      history, queued, running, build_s);

  // One read with every plan logged.
  const std::string log = (server->directory() / "server.log").string();
  conn.exec(test::kAutoExplainSql);
  const std::uintmax_t mark = test::FileSize(log);
  const StatusReport report = ReadStatusReport(conn, CountQueuedJobs);
  conn.exec("SET auto_explain.log_min_duration = -1");
  std::vector<test::LoggedPlan> plans;
  for (int i = 0; i < 100; ++i) {  // the server writes its log after the reply
    plans = test::PlansInLog(test::ReadFrom(log, mark));
    bool last = false;
    for (const test::LoggedPlan& p : plans) last = last || p.query.find("WHERE j.state = 'failed'") != std::string::npos;
    if (last) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (const char* dump = std::getenv("STATUS_BENCH_PLANS")) {
    std::ofstream out(dump);
    for (const test::LoggedPlan& p : plans) out << p.query << "\n" << p.plan.dump(1) << "\n\n";
  }
  bool scanned_jobs = false;
  std::cout << "One status read, statement by statement (auto_explain, ANALYZE and BUFFERS):\n\n"
               "| statement | ms | scans of akadze (node, index: rows x loops, buffers hit/read) |\n|---|---:|---|\n";
  for (const test::LoggedPlan& p : plans) {
    if (p.query.rfind("SET ", 0) == 0 || p.query.rfind("BEGIN", 0) == 0 || p.query.rfind("COMMIT", 0) == 0) continue;
    std::string scans;
    for (const test::ScanNode& s : test::ScanNodes(p.plan)) {
      if (s.relation == "jobs" && s.node_type == "Seq Scan") scanned_jobs = true;
      scans += fmt::format("{}{} {}{}: {:.0f} x {:.0f}, {}/{}", scans.empty() ? "" : "; ", s.node_type,
                           s.relation.empty() ? "" : s.relation + " ", s.index, s.actual_rows, s.loops, s.shared_hit,
                           s.shared_read);
    }
    std::cout << fmt::format("| `{}` | {:.2f} | {} |\n", Label(p.query), p.plan.value("Actual Total Time", 0.0),
                             scans.empty() ? "-" : scans);
  }
  std::int64_t ready = 0;
  for (const QueueStatus& q : report.queues) ready += q.ready;
  std::cout << fmt::format("\n(the report: {} queues, {} ready, {} recent failures, {} held keys)\n\n",
                           report.queues.size(), ready, report.recent_failures.size(), report.held_keys_total);

  conn.exec("CREATE EXTENSION pg_stat_statements");
  conn.exec("SELECT pg_stat_statements_reset()");
  const Timing status = Time(conn, backend, rounds, [&] { ReadStatusReport(conn, CountQueuedJobs); });
  {
    pg::Result r = conn.exec(
        "SELECT query, calls, mean_exec_time, mean_plan_time FROM pg_stat_statements"
        " WHERE query NOT LIKE '%pg_stat_statements%' ORDER BY total_exec_time + total_plan_time DESC LIMIT 12");
    std::cout << "Per statement over the timed reads (pg_stat_statements):\n\n"
                 "| statement | calls | exec ms | plan ms |\n|---|---:|---:|---:|\n";
    for (int i = 0; i < r.rows(); ++i) {
      std::cout << fmt::format("| `{}` | {} | {:.3f} | {:.3f} |\n", Label(std::string(r.text(i, 0))), r.text(i, 1),
                               r.float64(i, 2), r.float64(i, 3));
    }
    std::cout << "\n";
  }
  const int aggregate_rounds = std::max(3, rounds / 10);
  const Timing aggregate = Time(conn, backend, aggregate_rounds, [&] { ListQueues(conn); });
  std::cout << "| read | rounds | median ms | p95 ms | server CPU ms/read | client CPU ms/read |\n"
               "|---|---:|---:|---:|---:|---:|\n";
  std::cout << fmt::format("| status read (ReadStatusReport) | {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} |\n", rounds,
                           status.median_ms, status.p95_ms, status.server_ms_per_read, status.client_ms_per_read);
  std::cout << fmt::format("| full aggregate (`queues list`) | {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} |\n",
                           aggregate_rounds, aggregate.median_ms, aggregate.p95_ms, aggregate.server_ms_per_read,
                           aggregate.client_ms_per_read);
  std::cout << fmt::format("\nthe status read costs the server {:.3f}x the full aggregate's CPU ({:.0f}x less)\n",
                           status.server_ms_per_read / aggregate.server_ms_per_read,
                           aggregate.server_ms_per_read / std::max(status.server_ms_per_read, 1e-9));
  int exit_code = 0;
  if (scanned_jobs) {
    std::cerr << "status_page_bench: a statement of the status read scanned akadze.jobs whole\n";
    exit_code = 1;
  }
  if (max_ms > 0 && status.server_ms_per_read >= max_ms) {
    std::cerr << fmt::format("status_page_bench: {:.2f} ms of server CPU per status read, not below --max-ms {}\n",
                             status.server_ms_per_read, max_ms);
    exit_code = 1;
  }
  return exit_code;
}
