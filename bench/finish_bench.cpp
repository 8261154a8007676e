// finish_bench: what batching finishes saves. Marks N jobs running under one
// worker, then records their outcomes with FinishJobs in batches of 1 (the
// baseline: one statement per job, as an unbatched worker would) and of
// larger sizes, each on fresh rows of a throwaway PostgreSQL, and prints
// jobs per second and the speed-up against the baseline measured in the
// same run. Mixed outcomes (success with a result, retry, snooze).
//
//   finish_bench [--jobs N] [--batches 1,10,100,1000] [--runs R]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <vector>

#include <fmt/format.h>

#include "claim/claim_transaction.h"
#include "embedded/throwaway_postgres.h"
#include "pg/connection.h"
#include "schema/migrations.h"
#include "store/job_finish.h"

using namespace akadzed;

namespace {

std::vector<std::int64_t> RunningJobs(pg::Connection& conn, const std::string& worker, int n) {
  pg::Result r = conn.exec(
      "INSERT INTO akadze.jobs (task, state, run_count, worker_id, started_at, args)"
      " SELECT 'bench', 'running', 1, $1::uuid, now(), jsonb_build_object('i', i)"
      " FROM generate_series(1, $2::int) AS i RETURNING id",
      pg::Params().add(worker).add(n));
  std::vector<std::int64_t> ids;
  for (int i = 0; i < r.rows(); ++i) ids.push_back(r.int64(i, 0));
  return ids;
}

JobOutcome OutcomeFor(std::size_t i) {
  JobOutcome o;
  switch (i % 4) {
    case 0:
    case 1:
      o.kind = OutcomeKind::kSuccess;
      o.result_json = R"({"ok": true, "n": 1})";
      break;
    case 2:
      o.kind = OutcomeKind::kRetry;
      o.error = "ExitStatus";
      o.message = "exited with status 1";
      break;
    default:
      o.kind = OutcomeKind::kSnooze;
      o.delay_us = 1'000'000;
  }
  return o;
}

// Seconds to finish every job of `ids` in batches of `batch`.
double FinishAll(pg::Connection& conn, const std::string& worker,
                 const std::vector<std::int64_t>& ids, std::size_t batch) {
  auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < ids.size(); i += batch) {
    std::vector<FinishRequest> requests;
    for (std::size_t k = i; k < std::min(ids.size(), i + batch); ++k) {
      requests.push_back({ids[k], 1, OutcomeFor(k)});
    }
    auto results = FinishJobs(conn, worker, requests);
    for (const auto& r : results) {
      if (!r.applied) throw std::runtime_error("a finish was not applied");
    }
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"finish_bench: batched finishes against one statement per job"};
  int jobs = 5000;
  int runs = 3;
  std::vector<std::size_t> batches{1, 10, 100, 1000};
  app.add_option("--jobs", jobs, "Jobs finished per measurement")->check(CLI::Range(1, 10'000'000));
  app.add_option("--runs", runs, "Measurements per batch size (the median is shown)")
      ->check(CLI::Range(1, 100));
  app.add_option("--batches", batches, "Batch sizes; 1 is the baseline")->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  if (std::find(batches.begin(), batches.end(), std::size_t{1}) == batches.end()) {
    batches.insert(batches.begin(), 1);
  }

  auto server = ThrowawayPostgres::Start();
  pg::Connection conn = pg::Connection::Open(server->conninfo(), "finish_bench");
  Migrate(conn);
  std::string worker = RandomUuid();
  std::cout << fmt::format("finish_bench: {} jobs per measurement, median of {} runs\n\n", jobs, runs);
  std::cout << "| batch | statements | seconds | jobs/s | vs batch 1 |\n|---:|---:|---:|---:|---:|\n";
  double baseline = 0;
  for (std::size_t batch : batches) {
    std::vector<double> times;
    for (int r = 0; r < runs; ++r) {
      auto ids = RunningJobs(conn, worker, jobs);
      times.push_back(FinishAll(conn, worker, ids, batch));
      conn.exec("DELETE FROM akadze.jobs");
    }
    std::sort(times.begin(), times.end());
    double median = times[times.size() / 2];
    if (batch == 1) baseline = median;
    std::cout << fmt::format("| {} | {} | {:.3f} | {:.0f} | {:.1f}x |\n", batch,
                             (jobs + batch - 1) / batch, median, jobs / median, baseline / median);
  }
  return 0;
}
