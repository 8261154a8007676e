// spawn_ceiling: how fast this machine runs a shell job's process at all,
// with no database: `--parallel` threads each run the daemon's own
// ShellHandler (posix_spawn into a process group of its own, a clean
// environment, the job's args on stdin, fd 3, every other descriptor closed,
// a pidfd to wait on, the pipes drained, the leader reaped) on `--command`
// until `--jobs` runs are done. This is the ceiling the shell burn-down of
// bench/throughput/run is held against (issue 18: within 1.5x of it, at the
// same parallelism); the burn-down adds the claims and finishes.
//
//   spawn_ceiling [--jobs N] [--parallel P] [--command /bin/true]
//
// Prints one line of key=value figures: jobs, parallel, seconds, jobs_per_s,
// cpu_us_per_job (this process, user+system) and child_cpu_us_per_job (the
// reaped children), failed (runs whose outcome was not success).
#include <CLI/CLI.hpp>

#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "handlers/shell_handler.h"

using namespace akadzed;

namespace {

double CpuSeconds(int who) {
  rusage u{};
  getrusage(who, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"spawn_ceiling: the daemon's shell handler spawning a command, no database"};
  int jobs = 3000;
  int parallel = 8;
  std::string command = "/bin/true";
  app.add_option("--jobs", jobs, "runs in all")->check(CLI::PositiveNumber);
  app.add_option("--parallel", parallel, "threads running at once (the daemon's slots)")->check(CLI::PositiveNumber);
  app.add_option("--command", command, "the program to run (no arguments)");
  CLI11_PARSE(app, argc, argv);

  ShellHandlerConfig config;
  config.command = {command};
  config.kill_grace_us = 1'000'000;
  ShellHandler handler("noop", config);

  std::atomic<int> next{0};
  std::atomic<int> failed{0};
  const double cpu_before = CpuSeconds(RUSAGE_SELF);
  const double children_before = CpuSeconds(RUSAGE_CHILDREN);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < parallel; ++t) {
    threads.emplace_back([&] {
      for (int i; (i = next.fetch_add(1)) < jobs;) {
        ClaimedJob job;
        job.id = i + 1;
        job.task = "noop";
        job.queue = "bench";
        job.max_attempts = 3;
        job.run_count = 1;
        job.args_json = "{}";  // as the burn-down's jobs: the args column's default
        JobStop stop;
        if (handler.Run(job, stop).kind != OutcomeKind::kSuccess) failed.fetch_add(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu = CpuSeconds(RUSAGE_SELF) - cpu_before;
  const double children = CpuSeconds(RUSAGE_CHILDREN) - children_before;
  std::cout << fmt::format(
                   "jobs={} parallel={} seconds={:.3f} jobs_per_s={:.1f} cpu_us_per_job={:.1f} "
                   "child_cpu_us_per_job={:.1f} failed={}",
                   jobs, parallel, seconds, jobs / seconds, 1e6 * cpu / jobs, 1e6 * children / jobs,
                   failed.load())
            << std::endl;
  return failed.load() == 0 ? 0 : 1;
}
