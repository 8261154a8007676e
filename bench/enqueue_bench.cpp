// enqueue_bench: what the producers' API costs (docs/enqueue.md). On a
// throwaway PostgreSQL it enqueues the same jobs (args {"n": i}, a
// limit_key among 30) six ways, in turns, `--rounds` times, and prints the
// median of each with jobs per second, the ratio against enqueue_many, and
// CPU per job split into client (this process) and server (the session's
// backend, from /proc):
//
//   enqueue_many          one call of akadze.enqueue_many with N jobs
//   enqueue_many unique   the same, every job with a unique_key (one
//                         statement each inside the function)
//   enqueue               akadze.enqueue once per job, autocommit
//   INSERT                one-row INSERT ... RETURNING id per job, autocommit
//   INSERT in one tx      the same inside one transaction
//   INSERT ... SELECT     one INSERT of all N rows from a jsonb parameter
//                         (what a batch API cannot beat by much)
//
// The per-job ways run on `--single-jobs` jobs (fewer: they take a round
// trip each). The table is truncated between measurements. Exits 1 when
// enqueue_many stays under --min-jobs-per-second (0: no check).
//
//   enqueue_bench [--jobs N] [--single-jobs M] [--rounds R] [--min-jobs-per-second X]
#include <CLI/CLI.hpp>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "process_cpu.h"
#include "embedded/throwaway_postgres.h"
#include "pg/connection.h"
#include "schema/migrations.h"

using namespace akadzed;
using akadzed::bench::ClientCpuSeconds;
using akadzed::bench::ProcessCpuSeconds;

namespace {

struct Sample {
  double seconds = 0;
  double client_cpu = 0;
  double server_cpu = 0;
};

struct Way {
  std::string name;
  bool per_job = false;  // runs on --single-jobs jobs
  std::function<void(pg::Connection&, int jobs)> run;
};

nlohmann::json Jobs(int n, bool unique) {
  nlohmann::json jobs = nlohmann::json::array();
  for (int i = 0; i < n; ++i) {
    nlohmann::json job = {{"task", "bench"}, {"args", {{"n", i}}}, {"limit_key", "k" + std::to_string(i % 30)}};
    if (unique) job["unique_key"] = "u" + std::to_string(i);
    jobs.push_back(std::move(job));
  }
  return jobs;
}

void ExpectIds(const pg::Result& r, std::size_t n) {
  if (r.rows() != 1 || r.is_null(0, 0)) throw std::runtime_error("no ids came back");
  const std::string ids(r.text(0, 0));
  if (std::count(ids.begin(), ids.end(), ',') + 1 != static_cast<long>(n)) {
    throw std::runtime_error("expected " + std::to_string(n) + " ids");
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"enqueue_bench: akadze.enqueue_many against enqueue per job and plain INSERTs"};
  int jobs = 10'000;
  int single_jobs = 2'000;
  int rounds = 3;
  double min_rate = 20'000;
  app.add_option("--jobs", jobs, "Jobs per batch measurement (enqueue_many, INSERT ... SELECT)")
      ->check(CLI::Range(1, 1'000'000));
  app.add_option("--single-jobs", single_jobs, "Jobs per measurement of the one-per-job ways")
      ->check(CLI::Range(1, 1'000'000));
  app.add_option("--rounds", rounds, "Measurements of each way, taken in turns (the median is shown)")
      ->check(CLI::Range(1, 100));
  app.add_option("--min-jobs-per-second", min_rate,
                 "Exit 1 when enqueue_many's median is below this (0: no check)")
      ->check(CLI::Range(0.0, 1e9));
  CLI11_PARSE(app, argc, argv);

  auto server = ThrowawayPostgres::Start();
  pg::Connection conn = pg::Connection::Open(server->conninfo(), "enqueue_bench");
  Migrate(conn);
  const int backend = static_cast<int>(conn.exec("SELECT pg_backend_pid()").int64(0, 0));

  const std::vector<Way> ways = {
      {"enqueue_many", false,
       [](pg::Connection& c, int n) {
         ExpectIds(c.exec("SELECT akadze.enqueue_many($1::jsonb)", pg::Params().add(Jobs(n, false).dump())), n);
       }},
      {"enqueue_many unique", false,
       [](pg::Connection& c, int n) {
         ExpectIds(c.exec("SELECT akadze.enqueue_many($1::jsonb)", pg::Params().add(Jobs(n, true).dump())), n);
       }},
      {"enqueue per job", true,
       [](pg::Connection& c, int n) {
         for (int i = 0; i < n; ++i) {
           c.exec("SELECT akadze.enqueue($1, $2::jsonb, limit_key => $3)",
                  pg::Params().add("bench").add(nlohmann::json{{"n", i}}.dump()).add("k" + std::to_string(i % 30)));
         }
       }},
      {"INSERT per job", true,
       [](pg::Connection& c, int n) {
         for (int i = 0; i < n; ++i) {
           c.exec("INSERT INTO akadze.jobs (task, args, limit_key) VALUES ($1, $2::jsonb, $3) RETURNING id",
                  pg::Params().add("bench").add(nlohmann::json{{"n", i}}.dump()).add("k" + std::to_string(i % 30)));
         }
       }},
      {"INSERT per job, one tx", true,
       [](pg::Connection& c, int n) {
         c.exec("BEGIN");
         for (int i = 0; i < n; ++i) {
           c.exec("INSERT INTO akadze.jobs (task, args, limit_key) VALUES ($1, $2::jsonb, $3) RETURNING id",
                  pg::Params().add("bench").add(nlohmann::json{{"n", i}}.dump()).add("k" + std::to_string(i % 30)));
         }
         c.exec("COMMIT");
       }},
      {"INSERT ... SELECT", false,
       [](pg::Connection& c, int n) {
         pg::Result r = c.exec(
             "WITH ins AS (INSERT INTO akadze.jobs (task, args, limit_key)"
             " SELECT j.task, j.args, j.limit_key FROM jsonb_to_recordset($1::jsonb)"
             "   AS j(task text, args jsonb, limit_key text) RETURNING id)"
             " SELECT array_agg(id)::text FROM ins",
             pg::Params().add(Jobs(n, false).dump()));
         ExpectIds(r, n);
       }},
  };

  std::map<std::string, std::vector<Sample>> samples;
  for (int round = 0; round < rounds; ++round) {
    for (const Way& way : ways) {
      const int n = way.per_job ? single_jobs : jobs;
      conn.exec("TRUNCATE akadze.jobs");
      const double client0 = ClientCpuSeconds();
      const double server0 = ProcessCpuSeconds(backend);
      const auto start = std::chrono::steady_clock::now();
      way.run(conn, n);
      Sample s;
      s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      s.client_cpu = ClientCpuSeconds() - client0;
      s.server_cpu = ProcessCpuSeconds(backend) - server0;
      if (conn.exec("SELECT count(*) FROM akadze.jobs").int64(0, 0) != n) {
        throw std::runtime_error(way.name + ": the table does not hold " + std::to_string(n) + " jobs");
      }
      samples[way.name].push_back(s);
    }
  }

  auto median = [](std::vector<Sample> v, double Sample::*field) {
    std::sort(v.begin(), v.end(), [&](const Sample& a, const Sample& b) { return a.*field < b.*field; });
    return v[v.size() / 2].*field;
  };
  std::cout << fmt::format(
      "enqueue_bench: {} jobs per batch way, {} per one-per-job way, median of {} rounds in turns\n\n",
      jobs, single_jobs, rounds);
  std::cout << "| way | jobs | seconds | jobs/s | vs enqueue_many | client µs/job | server µs/job |\n"
               "|---|---:|---:|---:|---:|---:|---:|\n";
  const double base_rate = jobs / median(samples["enqueue_many"], &Sample::seconds);
  for (const Way& way : ways) {
    const int n = way.per_job ? single_jobs : jobs;
    const std::vector<Sample>& v = samples[way.name];
    const double seconds = median(v, &Sample::seconds);
    const double rate = n / seconds;
    std::cout << fmt::format("| {} | {} | {:.3f} | {:.0f} | {:.2f}x | {:.1f} | {:.1f} |\n", way.name, n,
                             seconds, rate, rate / base_rate, median(v, &Sample::client_cpu) * 1e6 / n,
                             median(v, &Sample::server_cpu) * 1e6 / n);
  }
  if (min_rate > 0 && base_rate < min_rate) {
    std::cerr << fmt::format("enqueue_bench: enqueue_many ran {:.0f} jobs/s, below --min-jobs-per-second {:.0f}\n",
                             base_rate, min_rate);
    return 1;
  }
  return 0;
}
