// many_daemons_bench: many real daemons (`akadzed run` child processes) on
// one queue, and what limits them (issue 21). The default run is 16 daemons
// x 4 slots, then 64 daemons x 1 slot: the same 64 slots, but a claim of
// the second shape takes one job at most, so it needs a claim per job, and
// the claims of a queue take turns on the queue's claim lock.
//
// For each configuration (--configs DxS,...) and each network delay
// (--delay-ms 0,0.5) the program creates a fresh database on one throwaway
// PostgreSQL (fsync off, pg_stat_statements loaded), with:
//   - --keys (30) limit keys key0.., each with its own akadze.limits row
//     max_running --key-max-running (4): the limits exist and are exact,
//     and while keys x max_running >= daemons x slots (120 >= 64) they do
//     not lower the ideal; the output says which bound the ideal is;
//   - enough ready jobs of task `sleep` in queue `bench`, keys in turn by
//     id, that the queue never drains during the run (checked); each job
//     sleeps in bench_sleep_plugin for min_ms + (id * 2654435761 mod 2^64)
//     mod (max_ms - min_ms + 1) ms (20-100 ms), a time the program computes
//     with the same formula, in SQL, for the mean job time;
//   - with --queue-cap N, a cluster-wide cap on the queue (akadze.queue_caps).
// It then starts D daemons, each with its own YAML config (one fair queue of
// S slots, the sleep plugin, pruning and metrics off, logging at warn), all
// directly on the server's socket or all through one in-process proxy that
// delays every byte the given ms each way (bench/delayed_network.h), waits until
// every daemon has its akadze.workers row, lets them run --warmup (5) s,
// measures --seconds (30), and stops them with SIGTERM.
//
// Per configuration it prints a line, and at the end a table:
//   jobs/s        jobs that succeeded in the window (finished_at in it);
//   ideal         min(daemons x slots, keys' capacity, queue cap) / mean job
//                 time: what the slots could do if claims, finishes and
//                 hand-offs took no time; ratio = jobs/s / ideal;
//   claims/s      calls of the claim's head statement (the one that takes
//                 the queue's claim lock, pg_advisory_xact_lock on
//                 'akadze.claim_queue:' || queue) in the window, from
//                 pg_stat_statements (reset at the window's start);
//   jobs/claim    jobs claimed in the window (the rows of the claiming
//                 statement, the UPDATE that marks them running) per claim;
//                 `empty` is the share of claims that took no job (the
//                 claiming statement runs only when a claim has a plan);
//   lock wait     the head statement's mean and max execution time: it does
//                 little besides waiting for the claim lock, so this is the
//                 claim lock wait per claim (server side);
//   after lock    the server time (planning and execution) of the claim's
//                 statements after the head (the window reads, key locks
//                 and counts, the cap's count, the claiming statement), per
//                 claim: time the claim lock is held, to which the trips
//                 between daemon and server while the claim holds it add
//                 the delay at least 4 times (the head's and first
//                 window's reply, the key locks with their recount there and
//                 back, the claiming statement with COMMIT on its way), and
//                 the daemon's turns between them;
//   running       the mean in the window and the peak over the run of the
//                 queue's running jobs, sampled every ~2 ms on a direct
//                 connection (a job counts as running from its claim until
//                 its finish is recorded; with --prefetch, the prefetched
//                 jobs waiting for a slot count too);
//   overshoots    samples in which a key ran more than its max_running, or
//                 the queue more than --queue-cap: must be 0;
//   CPU µs/job    the daemons' CPU (utime + stime of the D processes, from
//                 /proc) and the server's (every postmaster child but this
//                 program's own sessions; the line also gives the part in
//                 the daemons' sessions, and this program's with its
//                 sessions: the sampler, the probe and the proxy) over the
//                 window, per job done;
//   busy cores    the whole machine's busy CPU in the window (/proc/stat),
//                 in cores, and in brackets the part outside the daemons,
//                 the server and this program: other work on the machine,
//                 which the figures of that run share the cores with;
//   round trip    (in the line) p50 and p90 of `SELECT 1` on a connection
//                 along the daemons' path, every 20 ms in the window: the
//                 delay each way twice, plus the proxy's thread (one for
//                 every connection) and the machine's scheduling;
//   sessions      (in the line) the server sessions per daemon at the
//                 window's end (its claim loop, finisher and lease keeper).
// The machine's cores are shared by the daemons, the server and this
// program: on a 2-core machine the direct runs show CPU limits as much as
// claim limits. Read the ratio with claims/s, the lock wait and the mean
// running: claims take turns on the queue's claim lock, so claims/s cannot
// pass 1 / (the time a claim holds the lock); when jobs/claim is 1 (one
// slot per daemon), jobs/s cannot either, the slots wait in the lock's queue
// (running mean below the slots) and the lock wait grows with the daemons.
//
// Usage: many_daemons_bench [--configs 16x4,64x1] [--delay-ms 0,0.5]
//                           [--seconds 30] [--warmup 5] [--min-ms 20] [--max-ms 100]
//                           [--keys 30] [--key-max-running 4] [--queue-cap N] [--prefetch N]
//                           [--mode fair|ordered] [--poll-interval 1s]
//                           [--akadzed PATH] [--plugin PATH] [--top-statements N] [--keep-logs]
// The daemon binary: --akadzed, else $AKADZED_BIN, else the build tree's.
// The plugin: --plugin, else libbench_sleep_plugin.so next to this program.
// Exit status 1 on an overshoot, a daemon that died or did not stop
// cleanly, a queue that drained, or a setup error.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "delayed_network.h"
#include "process_cpu.h"
#include "embedded/throwaway_postgres.h"
#include "pg/connection.h"
#include "schema/migrations.h"

extern char** environ;

using namespace akadzed;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using bench::ProcStat;
using bench::ReadProcStat;
using namespace std::chrono_literals;

constexpr const char* kQueue = "bench";
constexpr const char* kTask = "sleep";
// Marks this program's own statements, so pg_stat_statements' figures
// leave them out.
constexpr const char* kOwnTag = "/* many_daemons_bench */ ";
// The server sessions a daemon of one queue holds with pruning and metrics
// off (a claim loop, the finisher, the lease keeper: docs/architecture.md,
// "Threads and connections"), plus the one of its start-up schema check.
constexpr int kSessionsPerDaemon = 4;

struct DaemonShape {
  int daemons = 16;
  int slots = 4;
  std::string label() const { return fmt::format("{}x{}", daemons, slots); }
};

struct Settings {
  std::vector<DaemonShape> shapes;
  std::vector<double> delays_ms{0};
  int seconds = 30;
  int warmup = 5;
  int min_ms = 20;
  int max_ms = 100;
  int keys = 30;
  int key_max_running = 4;
  std::optional<int> queue_cap;
  int prefetch = 0;  // queues[].prefetch of every daemon (0: not written)
  std::string mode = "fair";
  std::string poll_interval = "1s";
  std::string akadzed;
  std::string plugin;
  int top_statements = 0;
  bool keep_logs = false;
};

struct RunResult {
  DaemonShape shape;
  double delay_ms = 0;
  double window_s = 0;
  std::int64_t jobs_enqueued = 0;
  double mean_job_ms = 0;
  double ideal_jobs_s = 0;
  std::string ideal_bound;  // "slots", "keys" or "queue cap"
  std::int64_t succeeded = 0;       // finished as succeeded in the window
  std::int64_t other_finishes = 0;  // finished otherwise (retry, failure) in the window
  std::int64_t claimed = 0;         // jobs claimed in the window (the claiming statement's rows)
  std::int64_t claims_with_jobs = 0;  // the claiming statement's calls
  std::int64_t claims = 0;          // head statement calls in the window
  double lock_wait_mean_ms = 0;
  double lock_wait_max_ms = 0;
  double claim_ms_per_claim = 0;    // server time of the claim's statements after the head, per claim
  std::int64_t ready_left = 0;
  double running_mean = 0;
  std::int64_t running_peak = 0;
  std::int64_t samples = 0;
  std::int64_t overshoots = 0;
  std::vector<std::string> overshoot_examples;
  double daemon_cpu_s = 0;
  double server_cpu_s = 0;
  double server_sessions_cpu_s = 0;  // of which the daemons' sessions
  double bench_cpu_s = 0;  // this program and its sessions' backends
  double machine_busy_s = 0;   // every process of the machine, in the window
  double machine_total_s = 0;  // busy + idle: the window x the cores
  double sessions_per_daemon = 0;
  double round_trip_p50_ms = 0;  // SELECT 1 along the daemons' path, in the window
  double round_trip_p90_ms = 0;
  int died = 0;          // daemons that exited before the stop
  int unclean_stops = 0; // daemons that did not exit 0 after SIGTERM
  std::vector<std::string> errors;

  double busy_cores() const { return window_s > 0 ? machine_busy_s / window_s : 0; }
  double cores() const { return window_s > 0 ? machine_total_s / window_s : 0; }
  // Busy cores not accounted to the daemons, the server or this program:
  // other work on the machine, which the run's figures then share it with.
  double outside_cores() const {
    return window_s > 0 ? std::max(0.0, machine_busy_s - daemon_cpu_s - server_cpu_s - bench_cpu_s) / window_s : 0;
  }
  // Claims that took no job, in percent (a claim that straddles the
  // window's edge may count on one side only: never below 0).
  double empty_claims_percent() const {
    return claims > 0 ? std::max(0.0, 100.0 * static_cast<double>(claims - claims_with_jobs) /
                                          static_cast<double>(claims))
                      : 0.0;
  }
  double ratio() const { return ideal_jobs_s > 0 ? jobs_per_s() / ideal_jobs_s : 0; }
  double jobs_per_claim() const {
    return claims > 0 ? static_cast<double>(claimed) / static_cast<double>(claims) : 0;
  }
  // CPU seconds per job done, in microseconds.
  double us_per_job(double cpu_s) const {
    return cpu_s * 1e6 / static_cast<double>(std::max<std::int64_t>(1, succeeded));
  }
  double jobs_per_s() const { return window_s > 0 ? static_cast<double>(succeeded) / window_s : 0; }
  double claims_per_s() const { return window_s > 0 ? static_cast<double>(claims) / window_s : 0; }
  bool failed() const {
    return overshoots > 0 || died > 0 || unclean_stops > 0 || ready_left == 0 || !errors.empty();
  }
};

// "16x4" -> {16, 4}.
DaemonShape ParseShape(const std::string& text) {
  static const std::regex shape(R"(\s*(\d+)\s*x\s*(\d+)\s*)");
  std::smatch m;
  if (!std::regex_match(text, m, shape)) throw CLI::ValidationError("--configs", "expected DAEMONSxSLOTS, got " + text);
  DaemonShape s{std::stoi(m[1]), std::stoi(m[2])};
  if (s.daemons < 1 || s.daemons > 200 || s.slots < 1 || s.slots > 10000) {
    throw CLI::ValidationError("--configs", "daemons 1-200 and slots 1-10000, got " + text);
  }
  return s;
}

std::string Tail(const std::string& path, int lines) {
  std::ifstream in(path);
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
  std::string out;
  for (std::size_t i = all.size() > static_cast<std::size_t>(lines) ? all.size() - lines : 0; i < all.size(); ++i) {
    out += "    " + all[i] + "\n";
  }
  return out;
}

// CPU seconds of every child of `postmaster` (backends and background
// processes) but `excluded`, by pid; and under pid 0, the postmaster's own
// with that of the children it reaped (autovacuum workers come and go).
std::map<int, double> ServerCpu(int postmaster, const std::set<int>& excluded) {
  std::map<int, double> cpu;
  if (std::optional<ProcStat> s = ReadProcStat(postmaster)) cpu[0] = s->cpu_s + s->reaped_children_cpu_s;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const int pid = std::stoi(name);
    if (excluded.count(pid) != 0) continue;
    if (std::optional<ProcStat> s = ReadProcStat(pid); s && s->ppid == postmaster) cpu[pid] = s->cpu_s;
  }
  return cpu;
}

// CPU spent between two ServerCpu snapshots. A child that ended between
// them is counted whole under pid 0 once the postmaster reaped it, so what
// it had spent at the first snapshot is taken off; one that started between
// them counts from its start.
double CpuBetween(const std::map<int, double>& before, const std::map<int, double>& after) {
  double total = 0;
  for (const auto& [pid, s] : after) {
    auto it = before.find(pid);
    total += s - (it == before.end() ? 0.0 : it->second);
  }
  for (const auto& [pid, s] : before) {
    if (pid != 0 && after.count(pid) == 0) total -= s;
  }
  return total;
}

// Busy and total CPU seconds of the whole machine so far (/proc/stat's
// first line: busy = user + nice + system + irq + softirq + steal).
struct MachineCpu {
  double busy_s = 0;
  double total_s = 0;
};
MachineCpu ReadMachineCpu() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  static const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double busy = user + nice + system + irq + softirq + steal;
  return MachineCpu{busy / ticks, (busy + idle + iowait) / ticks};
}

// One `akadzed run` child: its output in a file; SIGKILLed and reaped on
// destruction if it still runs.
class DaemonChild {
 public:
  DaemonChild(const std::vector<std::string>& argv, std::string log_path) : log_path_(std::move(log_path)) {
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const int log = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log < 0) throw std::runtime_error("cannot open " + log_path_ + ": " + std::strerror(errno));
    const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    pid_ = fork();
    if (pid_ == 0) {
      // Only async-signal-safe calls between fork and exec: this process
      // has other threads (the proxy, the sampler).
      dup2(devnull, 0);
      dup2(log, 1);
      dup2(log, 2);
      execve(args[0], args.data(), environ);
      _exit(127);
    }
    close(log);
    close(devnull);
    if (pid_ < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  }
  ~DaemonChild() {
    if (pid_ > 0 && exit_code_ < 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  DaemonChild(const DaemonChild&) = delete;
  DaemonChild& operator=(const DaemonChild&) = delete;

  int pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }
  void Signal(int sig) const {
    if (exit_code_ < 0) kill(pid_, sig);
  }
  bool running() {
    if (exit_code_ >= 0) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == 0) return true;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return false;
  }
  // The exit code (128 + signal when killed), -1 while it runs.
  int exit_code() const { return exit_code_; }

 private:
  pid_t pid_ = -1;
  int exit_code_ = -1;
  std::string log_path_;
};

// Counts running jobs per limit key and per queue on its own direct
// connection, every ~2 ms, against the keys' max_running (read once: limits
// do not change during a run) and the queue's cap.
class RunningSampler {
 public:
  RunningSampler(std::string conninfo, std::map<std::string, std::int64_t> key_caps,
                 std::optional<std::int64_t> queue_cap)
      : conninfo_(std::move(conninfo)), key_caps_(std::move(key_caps)), queue_cap_(queue_cap) {
    conn_.emplace(pg::Connection::Open(conninfo_, "many_daemons_bench sampler"));
    backend_pid_ = conn_->backend_pid();
    thread_ = std::thread([this] { Loop(); });
  }
  ~RunningSampler() { Stop(); }
  RunningSampler(const RunningSampler&) = delete;
  RunningSampler& operator=(const RunningSampler&) = delete;

  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    conn_.reset();
  }
  int backend_pid() const { return backend_pid_; }
  // The mean of the queue's running jobs over the samples from now on.
  void StartWindow() {
    std::lock_guard lock(mu_);
    window_samples_ = 0;
    window_running_sum_ = 0;
    in_window_ = true;
  }
  void EndWindow() {
    std::lock_guard lock(mu_);
    in_window_ = false;
  }
  double window_running_mean() const {
    std::lock_guard lock(mu_);
    return window_samples_ == 0 ? 0.0 : static_cast<double>(window_running_sum_) / static_cast<double>(window_samples_);
  }
  std::int64_t peak() const { return peak_.load(); }
  std::int64_t samples() const { return samples_.load(); }
  std::int64_t overshoots() const { return overshoots_.load(); }
  std::vector<std::string> examples() const {
    std::lock_guard lock(mu_);
    return examples_;
  }
  std::vector<std::string> errors() const {
    std::lock_guard lock(mu_);
    return errors_;
  }

 private:
  void Loop() {
    const std::string sql = std::string(kOwnTag) +
                            "SELECT queue, limit_key, count(*) FROM akadze.jobs WHERE state = 'running'"
                            " GROUP BY queue, limit_key";
    while (!stop_.load()) {
      try {
        // One statement: one snapshot of every key and queue.
        pg::Result r = conn_->exec(sql);
        std::map<std::string, std::int64_t> per_queue;
        bool over = false;
        std::string example;
        for (int i = 0; i < r.rows(); ++i) {
          const std::int64_t n = r.int64(i, 2);
          per_queue[std::string(r.text(i, 0))] += n;
          if (r.is_null(i, 1)) continue;
          const std::string key(r.text(i, 1));
          auto cap = key_caps_.find(key);
          if (cap != key_caps_.end() && n > cap->second) {
            over = true;
            example = fmt::format("key {}: {} running, max_running {}", key, n, cap->second);
          }
        }
        const std::int64_t queue_running = per_queue[kQueue];
        if (queue_cap_ && queue_running > *queue_cap_) {
          over = true;
          example = fmt::format("queue {}: {} running, cap {}", kQueue, queue_running, *queue_cap_);
        }
        if (queue_running > peak_.load()) peak_ = queue_running;
        ++samples_;
        {
          std::lock_guard lock(mu_);
          if (in_window_) {
            ++window_samples_;
            window_running_sum_ += queue_running;
          }
          if (over && examples_.size() < 5) examples_.push_back(example);
        }
        if (over) ++overshoots_;
      } catch (const std::exception& e) {
        {
          std::lock_guard lock(mu_);
          if (errors_.size() < 5) errors_.push_back(std::string("sampler: ") + e.what());
        }
        std::this_thread::sleep_for(20ms);
        try {
          conn_.emplace(pg::Connection::Open(conninfo_, "many_daemons_bench sampler"));
        } catch (const std::exception&) {
        }
        continue;
      }
      // A cadence, not a wait: ~500 samples/s leave the cores to the
      // daemons and the server.
      std::this_thread::sleep_for(2ms);
    }
  }

  std::string conninfo_;
  std::map<std::string, std::int64_t> key_caps_;
  std::optional<std::int64_t> queue_cap_;
  std::optional<pg::Connection> conn_;  // the sampler thread's, once started
  int backend_pid_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<std::int64_t> samples_{0};
  std::atomic<std::int64_t> overshoots_{0};
  std::atomic<std::int64_t> peak_{0};
  mutable std::mutex mu_;
  bool in_window_ = false;                 // guarded by mu_
  std::int64_t window_samples_ = 0;        // guarded by mu_
  std::int64_t window_running_sum_ = 0;    // guarded by mu_
  std::vector<std::string> examples_;      // guarded by mu_
  std::vector<std::string> errors_;        // guarded by mu_
  std::thread thread_;
};

// Times `SELECT 1` on its own connection along the daemons' path (through
// the proxy, or direct) every 20 ms between Start and Stop: what one round
// trip costs while the daemons run (the delay each way twice, plus the
// proxy's and the machine's scheduling).
class RoundTripProbe {
 public:
  explicit RoundTripProbe(const std::string& conninfo)
      : conn_(pg::Connection::Open(conninfo, "many_daemons_bench probe")), backend_pid_(conn_.backend_pid()) {}
  ~RoundTripProbe() { Stop(); }
  RoundTripProbe(const RoundTripProbe&) = delete;
  RoundTripProbe& operator=(const RoundTripProbe&) = delete;

  int backend_pid() const { return backend_pid_; }
  void Start() {
    thread_ = std::thread([this] {
      const std::string sql = std::string(kOwnTag) + "SELECT 1";
      try {
        while (!stop_.load()) {
          const auto t = Clock::now();
          conn_.exec(sql);
          ms_.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t).count());
          std::this_thread::sleep_for(20ms);
        }
      } catch (const std::exception& e) {
        error_ = e.what();
      }
    });
  }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  // After Stop: the round trips' quantile `q` in ms (0 when none).
  double Quantile(double q) const {
    if (ms_.empty()) return 0;
    std::vector<double> sorted = ms_;
    std::sort(sorted.begin(), sorted.end());
    return sorted[std::min(sorted.size() - 1, static_cast<std::size_t>(q * static_cast<double>(sorted.size())))];
  }
  const std::string& error() const { return error_; }

 private:
  pg::Connection conn_;
  int backend_pid_ = 0;
  std::atomic<bool> stop_{false};
  std::vector<double> ms_;  // the probe thread's until Stop
  std::string error_;       // the probe thread's until Stop
  std::thread thread_;
};

// A fresh temporary directory for the daemons' configs and logs, removed on
// destruction unless `keep`.
class RunDirectory {
 public:
  RunDirectory() {
    std::string pattern = (fs::temp_directory_path() / "many-daemons-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~RunDirectory() {
    std::error_code ignored;
    if (!keep) fs::remove_all(path_, ignored);
  }
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;
  const std::string& path() const { return path_; }
  bool keep = false;

 private:
  std::string path_;
};

std::string DaemonConfigYaml(const Settings& st, const DaemonShape& shape, const std::string& plugin) {
  return fmt::format(
      "worker:\n"
      "  poll_interval: {}\n"
      "  shutdown_timeout: 10s\n"
      "queues:\n"
      "  - {{name: {}, slots: {}, mode: {}{}}}\n"
      "handlers:\n"
      "  {}:\n"
      "    plugin: {{path: \"{}\", config: {{min_ms: {}, max_ms: {}}}}}\n"
      "pruning: {{enabled: false}}\n"
      "metrics: {{enabled: false}}\n"
      "logging: {{level: warn, format: logfmt}}\n",
      st.poll_interval, kQueue, shape.slots, st.mode,
      st.prefetch > 0 ? fmt::format(", prefetch: {}", st.prefetch) : std::string(), kTask, plugin, st.min_ms,
      st.max_ms);
}

// The most jobs that can run at once, and what bounds it: the slots
// (daemons x slots), the keys' capacity (keys x max_running) or the queue's
// cap.
struct RunningBound {
  std::int64_t running = 0;
  std::string what;
};
RunningBound IdealRunning(const Settings& st, const DaemonShape& shape) {
  RunningBound b{static_cast<std::int64_t>(shape.daemons) * shape.slots, "slots"};
  const std::int64_t key_capacity = static_cast<std::int64_t>(st.keys) * st.key_max_running;
  if (key_capacity < b.running) b = {key_capacity, "keys"};
  if (st.queue_cap && *st.queue_cap < b.running) b = {*st.queue_cap, "queue cap"};
  return b;
}

// The jobs one run needs so that the queue never drains: the ideal rate for
// the warm-up, the window and the daemons' start-up, with a margin.
std::int64_t JobsToEnqueue(const Settings& st, double ideal_jobs_s, const DaemonShape& shape) {
  const double startup_s = 10 + 0.3 * shape.daemons;
  const double seconds = st.warmup + st.seconds + startup_s;
  return std::max<std::int64_t>(5000, static_cast<std::int64_t>(std::ceil(ideal_jobs_s * seconds * 1.25)));
}

// A claim's statements, told by their text: the head (the claim lock), the
// queue cap's count, the window reads, the key locks and recounts, the
// claiming statement.
bool IsHead(const std::string& query) {
  return query.find("pg_advisory_xact_lock(hashtextextended('akadze.claim_queue:'") != std::string::npos;
}
// The claiming statement: run once a claim has a plan (not by a claim
// that finds nothing to take), one row per job it claims.
bool IsClaimingStatement(const std::string& query) {
  return query.find("WITH fence AS (SELECT") != std::string::npos &&
         query.find("UPDATE akadze.jobs j SET") != std::string::npos;
}
bool IsClaimStatement(const std::string& query) {
  if (IsHead(query)) return true;
  static const char* const kMarks[] = {
      "FROM akadze.queue_caps c WHERE c.queue = $1",  // the cap's count
      "WITH w AS MATERIALIZED",                        // the first window with its keys' counts
      "ORDER BY priority DESC, run_at",                // further windows
      "priority DESC, run_at_us",                      // keyed windows
      "'akadze.limit_key:'",                           // key locks
      "SELECT k.key, k.has_row",                       // key counts and recounts
      "SELECT u.key, l.key IS NOT NULL AS has_row",
      "WITH fence AS (SELECT",                         // the claiming statement
  };
  for (const char* mark : kMarks) {
    if (query.find(mark) != std::string::npos) return true;
  }
  return false;
}

std::string OneLine(const std::string& query, std::size_t width) {
  std::string one;
  for (char c : query) {
    const char d = (c == '\n' || c == '\t') ? ' ' : c;
    if (d == ' ' && !one.empty() && one.back() == ' ') continue;
    one += d;
  }
  return one.size() > width ? one.substr(0, width - 3) + "..." : one;
}

RunResult RunOne(ThrowawayPostgres& server, int postmaster, const Settings& st, const DaemonShape& shape,
                 double delay_ms, int run_number) {
  RunResult out;
  out.shape = shape;
  out.delay_ms = delay_ms;
  const std::string dbname = fmt::format("many_daemons_{}", run_number);
  server.create_database(dbname);
  const std::string direct = server.conninfo(dbname);
  pg::Connection conn = pg::Connection::Open(direct, "many_daemons_bench");
  Migrate(conn);
  conn.exec("CREATE EXTENSION pg_stat_statements");

  // Limits: every key its own row.
  conn.exec(std::string(kOwnTag) +
                "INSERT INTO akadze.limits (key, max_running)"
                " SELECT 'key' || k, $2::int FROM generate_series(0, $1::int - 1) AS k",
            pg::Params().add(st.keys).add(st.key_max_running));
  if (st.queue_cap) {
    const bool caps_table =
        !conn.exec(std::string(kOwnTag) + "SELECT to_regclass('akadze.queue_caps')").is_null(0, 0);
    if (!caps_table) {
      throw std::runtime_error(
          "--queue-cap: this build's schema has no akadze.queue_caps (migration 008_queue_caps); "
          "rebuild akadzed and this program from a tree that has it");
    }
    conn.exec(std::string(kOwnTag) + "INSERT INTO akadze.queue_caps (queue, max_running) VALUES ($1, $2::int)",
              pg::Params().add(kQueue).add(*st.queue_cap));
  }

  // The ideal, before the jobs (the mean job time is that of the formula's
  // values, evenly spread; measured again over the enqueued jobs below).
  const double formula_mean_ms = (st.min_ms + st.max_ms) / 2.0;
  const RunningBound ideal = IdealRunning(st, shape);
  const std::int64_t bound = ideal.running;
  out.ideal_bound = ideal.what;
  const std::int64_t jobs = JobsToEnqueue(st, static_cast<double>(bound) * 1000.0 / formula_mean_ms, shape);
  conn.exec(std::string(kOwnTag) +
                "INSERT INTO akadze.jobs (task, queue, limit_key)"
                " SELECT $1, $2, 'key' || (i % $4::int) FROM generate_series(0, $3::int8 - 1) AS i",
            pg::Params().add(kTask).add(kQueue).add(jobs).add(st.keys));
  conn.exec("VACUUM ANALYZE akadze.jobs");
  out.jobs_enqueued = jobs;
  // The plugin's formula, exactly: (id * 2654435761) mod 2^64, mod the span.
  out.mean_job_ms = conn.exec(std::string(kOwnTag) +
                                  "SELECT avg($1::int + ((id::numeric * 2654435761) % 18446744073709551616)"
                                  "                     % ($2::int - $1::int + 1))::float8"
                                  " FROM akadze.jobs WHERE queue = $3",
                              pg::Params().add(st.min_ms).add(st.max_ms).add(kQueue))
                        .float64(0, 0);
  out.ideal_jobs_s = static_cast<double>(bound) * 1000.0 / out.mean_job_ms;

  std::map<std::string, std::int64_t> key_caps;
  {
    pg::Result r = conn.exec(std::string(kOwnTag) + "SELECT key, max_running FROM akadze.limits");
    for (int i = 0; i < r.rows(); ++i) key_caps[std::string(r.text(i, 0))] = r.int64(i, 1);
  }

  std::unique_ptr<bench::DelayedNetwork> network;
  if (delay_ms > 0) {
    network = std::make_unique<bench::DelayedNetwork>(
        direct, std::chrono::microseconds(static_cast<std::int64_t>(std::llround(delay_ms * 1000))));
  }
  const std::string daemon_conninfo = network ? network->conninfo() : direct;

  RunningSampler sampler(direct, key_caps,
                         st.queue_cap ? std::optional<std::int64_t>(*st.queue_cap) : std::nullopt);
  RoundTripProbe probe(daemon_conninfo);
  const std::set<int> own_backends{conn.backend_pid(), sampler.backend_pid(), probe.backend_pid()};

  RunDirectory dir;
  dir.keep = st.keep_logs;
  std::vector<std::unique_ptr<DaemonChild>> daemons;
  auto count_died = [&] {
    int died = 0;
    for (auto& d : daemons) {
      if (!d->running()) {
        ++died;
      }
    }
    return died;
  };
  auto report_died = [&](const std::string& when) {
    for (std::size_t i = 0; i < daemons.size(); ++i) {
      if (daemons[i]->exit_code() >= 0) {
        out.errors.push_back(fmt::format("daemon {} exited ({}) {}; its log:\n{}", i, daemons[i]->exit_code(), when,
                                         Tail(daemons[i]->log_path(), 10)));
      }
    }
    dir.keep = true;
  };
  try {
    for (int i = 0; i < shape.daemons; ++i) {
      // Each daemon its own config file, as separate hosts would have.
      const std::string config = fmt::format("{}/akadzed{}.yaml", dir.path(), i);
      {
        std::ofstream file(config);
        file << DaemonConfigYaml(st, shape, st.plugin);
      }
      daemons.push_back(std::make_unique<DaemonChild>(
          std::vector<std::string>{st.akadzed, "run", "--config", config, "--database-url", daemon_conninfo},
          fmt::format("{}/daemon{}.log", dir.path(), i)));
    }
    // Every daemon registered (its akadze.workers row), or one died.
    const auto deadline = Clock::now() + std::chrono::seconds(60 + shape.daemons);
    for (;;) {
      const std::int64_t registered =
          conn.exec(std::string(kOwnTag) + "SELECT count(*) FROM akadze.workers").int64(0, 0);
      if (registered >= shape.daemons) break;
      if (count_died() > 0) {
        out.died = count_died();
        report_died("before it registered");
        return out;
      }
      if (Clock::now() > deadline) {
        out.errors.push_back(fmt::format("only {} of {} daemons registered in time", registered, shape.daemons));
        dir.keep = true;
        return out;
      }
      std::this_thread::sleep_for(50ms);
    }
    std::this_thread::sleep_for(std::chrono::seconds(st.warmup));

    // The window.
    std::vector<int> daemon_pids;
    for (auto& d : daemons) daemon_pids.push_back(d->pid());
    auto daemon_cpu = [&] {
      double total = 0;
      for (int pid : daemon_pids) {
        if (std::optional<ProcStat> s = ReadProcStat(pid)) total += s->cpu_s;
      }
      return total;
    };
    // This program with its own sessions (the sampler's, the probe's, this
    // connection's backends).
    auto bench_cpu = [&] {
      double total = 0;
      for (int pid : own_backends) {
        if (std::optional<ProcStat> s = ReadProcStat(pid)) total += s->cpu_s;
      }
      std::optional<ProcStat> s = ReadProcStat(getpid());
      return total + (s ? s->cpu_s : 0.0);
    };
    conn.exec(std::string(kOwnTag) + "SELECT pg_stat_statements_reset()");
    const std::string t0(conn.exec(std::string(kOwnTag) + "SELECT clock_timestamp()::text").text(0, 0));
    const auto wall0 = Clock::now();
    const double daemon_cpu0 = daemon_cpu();
    const double bench_cpu0 = bench_cpu();
    const MachineCpu machine0 = ReadMachineCpu();
    const std::map<int, double> server_cpu0 = ServerCpu(postmaster, own_backends);
    std::set<int> daemon_backends;
    {
      pg::Result r = conn.exec(std::string(kOwnTag) +
                               "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                               " AND backend_type = 'client backend' AND pid <> pg_backend_pid()");
      for (int i = 0; i < r.rows(); ++i) {
        if (const int pid = static_cast<int>(r.int64(i, 0)); own_backends.count(pid) == 0) daemon_backends.insert(pid);
      }
    }
    sampler.StartWindow();
    probe.Start();
    std::this_thread::sleep_until(wall0 + std::chrono::seconds(st.seconds));
    sampler.EndWindow();
    probe.Stop();
    out.round_trip_p50_ms = probe.Quantile(0.5);
    out.round_trip_p90_ms = probe.Quantile(0.9);
    if (!probe.error().empty()) out.errors.push_back("probe: " + probe.error());
    const std::string t1(conn.exec(std::string(kOwnTag) + "SELECT clock_timestamp()::text").text(0, 0));
    // What the statements did in the window (this program's own left out).
    pg::Result stats = conn.exec(std::string(kOwnTag) +
                                 "SELECT query, calls, total_exec_time, mean_exec_time, max_exec_time,"
                                 "       total_plan_time, rows"
                                 " FROM pg_stat_statements"
                                 " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
                                 "   AND query NOT LIKE '%many_daemons_bench%'"
                                 " ORDER BY total_exec_time + total_plan_time DESC");
    const std::map<int, double> server_cpu1 = ServerCpu(postmaster, own_backends);
    const double daemon_cpu1 = daemon_cpu();
    const double bench_cpu1 = bench_cpu();
    const MachineCpu machine1 = ReadMachineCpu();
    out.machine_busy_s = machine1.busy_s - machine0.busy_s;
    out.machine_total_s = machine1.total_s - machine0.total_s;
    // The daemons' sessions, once each has claimed and finished (some open
    // on first use).
    out.sessions_per_daemon =
        static_cast<double>(conn.exec(std::string(kOwnTag) +
                                          "SELECT count(*) FROM pg_stat_activity"
                                          " WHERE datname = current_database() AND backend_type = 'client backend'"
                                          "   AND pid <> ALL($1::int[])",
                                      pg::Params().add_array(std::vector<std::int64_t>(own_backends.begin(),
                                                                                       own_backends.end())))
                                .int64(0, 0)) /
        shape.daemons;
    out.daemon_cpu_s = daemon_cpu1 - daemon_cpu0;
    out.bench_cpu_s = bench_cpu1 - bench_cpu0;
    out.server_cpu_s = CpuBetween(server_cpu0, server_cpu1);
    {
      std::map<int, double> sessions0, sessions1;
      for (int pid : daemon_backends) {
        if (server_cpu0.count(pid) != 0 && server_cpu1.count(pid) != 0) {
          sessions0[pid] = server_cpu0.at(pid);
          sessions1[pid] = server_cpu1.at(pid);
        }
      }
      out.server_sessions_cpu_s = CpuBetween(sessions0, sessions1);
    }
    out.window_s = conn.exec(std::string(kOwnTag) +
                                 "SELECT extract(epoch FROM $2::timestamptz - $1::timestamptz)::float8",
                             pg::Params().add(t0).add(t1))
                       .float64(0, 0);

    double claim_total_ms = 0;
    double head_total_ms = 0;
    for (int i = 0; i < stats.rows(); ++i) {
      const std::string query(stats.text(i, 0));
      if (IsHead(query)) {
        out.claims += stats.int64(i, 1);
        head_total_ms += stats.float64(i, 2);
        out.lock_wait_max_ms = std::max(out.lock_wait_max_ms, stats.float64(i, 4));
      }
      if (IsClaimStatement(query) && !IsHead(query)) claim_total_ms += stats.float64(i, 2) + stats.float64(i, 5);
      if (IsClaimingStatement(query)) {
        out.claims_with_jobs += stats.int64(i, 1);
        out.claimed += stats.int64(i, 6);
      }
    }
    if (out.claims > 0) {
      out.lock_wait_mean_ms = head_total_ms / static_cast<double>(out.claims);
      out.claim_ms_per_claim = claim_total_ms / static_cast<double>(out.claims);
    }
    if (st.top_statements > 0) {
      std::cout << fmt::format("  top statements of {} at {} ms (pg_stat_statements, by total time in the window):\n",
                               shape.label(), delay_ms);
      for (int i = 0; i < stats.rows() && i < st.top_statements; ++i) {
        const std::string query(stats.text(i, 0));
        std::cout << fmt::format(
            "    {} calls={} total_ms={:.0f} mean_ms={:.3f} max_ms={:.1f} plan_ms={:.0f} | {}\n",
            IsHead(query) ? "[head] " : IsClaimStatement(query) ? "[claim]" : "[other]", stats.text(i, 1),
            stats.float64(i, 2), stats.float64(i, 3), stats.float64(i, 4), stats.float64(i, 5), OneLine(query, 120));
      }
    }

    pg::Result counts = conn.exec(
        std::string(kOwnTag) +
            "SELECT"
            " count(*) FILTER (WHERE state = 'succeeded' AND finished_at >= $1::timestamptz"
            "                  AND finished_at < $2::timestamptz),"
            " count(*) FILTER (WHERE state <> 'succeeded' AND finished_at >= $1::timestamptz"
            "                  AND finished_at < $2::timestamptz),"
            " count(*) FILTER (WHERE state = 'queued' AND run_at <= now())"
            " FROM akadze.jobs WHERE queue = $3",
        pg::Params().add(t0).add(t1).add(kQueue));
    out.succeeded = counts.int64(0, 0);
    out.other_finishes = counts.int64(0, 1);
    out.ready_left = counts.int64(0, 2);
    // Retries and failures anywhere in the run (there should be none).
    const std::int64_t not_clean =
        conn.exec(std::string(kOwnTag) +
                      "SELECT count(*) FROM akadze.jobs WHERE queue = $1 AND (attempt > 1 OR state = 'failed'"
                      " OR (state = 'queued' AND run_count > 0))",
                  pg::Params().add(kQueue))
            .int64(0, 0);
    if (not_clean > 0) {
      out.errors.push_back(fmt::format("{} jobs were retried or failed", not_clean));
    }

    out.died = count_died();
    if (out.died > 0) report_died("during the run");

    // Stop: SIGTERM, then wait for the drain.
    for (auto& d : daemons) d->Signal(SIGTERM);
    const auto stop_deadline = Clock::now() + 60s;
    while (Clock::now() < stop_deadline && count_died() < shape.daemons) std::this_thread::sleep_for(20ms);
    for (std::size_t i = 0; i < daemons.size(); ++i) {
      if (daemons[i]->running()) {
        ++out.unclean_stops;
        out.errors.push_back(fmt::format("daemon {} still ran 60 s after SIGTERM", i));
      } else if (daemons[i]->exit_code() != 0 && out.died == 0) {
        ++out.unclean_stops;
        out.errors.push_back(fmt::format("daemon {} exited {} after SIGTERM; its log:\n{}", i,
                                         daemons[i]->exit_code(), Tail(daemons[i]->log_path(), 10)));
        dir.keep = true;
      }
    }
  } catch (...) {
    dir.keep = true;
    throw;
  }
  daemons.clear();
  sampler.Stop();
  out.running_mean = sampler.window_running_mean();
  out.running_peak = sampler.peak();
  out.samples = sampler.samples();
  out.overshoots = sampler.overshoots();
  out.overshoot_examples = sampler.examples();
  for (const std::string& e : sampler.errors()) out.errors.push_back(e);
  if (out.ready_left == 0) out.errors.push_back("the queue drained during the window: raise the jobs enqueued");
  if (dir.keep) std::cerr << "many_daemons_bench: daemon configs and logs kept in " << dir.path() << "\n";
  network.reset();
  {
    // Leave the cluster's disk to the next run.
    pg::Connection admin = pg::Connection::Open(server.conninfo("postgres"), "many_daemons_bench");
    admin.exec(std::string(kOwnTag) + "DROP DATABASE " + dbname + " WITH (FORCE)");
  }
  return out;
}

std::string DelayLabel(double delay_ms) {
  return delay_ms > 0 ? fmt::format("{} ms", delay_ms) : std::string("direct");
}

void PrintLine(const RunResult& r) {
  std::cout << fmt::format("{} {}: {:.0f} jobs/s of ideal {:.0f} ({:.2f}; {} bound, mean job {:.1f} ms);",
                           r.shape.label(), DelayLabel(r.delay_ms), r.jobs_per_s(), r.ideal_jobs_s, r.ratio(),
                           r.ideal_bound, r.mean_job_ms)
            << fmt::format(" {:.0f} claims/s, {:.2f} jobs/claim ({:.0f}% empty);", r.claims_per_s(), r.jobs_per_claim(),
                           r.empty_claims_percent())
            << fmt::format(" claim lock wait mean {:.2f} ms, max {:.1f} ms;", r.lock_wait_mean_ms, r.lock_wait_max_ms)
            << fmt::format(" claim statements after the lock {:.2f} ms/claim;", r.claim_ms_per_claim)
            << fmt::format(" running mean {:.1f}, peak {} of {} slots;", r.running_mean, r.running_peak,
                           static_cast<std::int64_t>(r.shape.daemons) * r.shape.slots)
            << fmt::format(" {} overshoots in {} samples;", r.overshoots, r.samples)
            << fmt::format(" round trip p50 {:.2f} ms, p90 {:.2f} ms;", r.round_trip_p50_ms, r.round_trip_p90_ms)
            << fmt::format(" CPU per job: daemons {:.0f} us, server {:.0f} us ({:.0f} us in the daemons' sessions),"
                           " this program {:.0f} us;",
                           r.us_per_job(r.daemon_cpu_s), r.us_per_job(r.server_cpu_s),
                           r.us_per_job(r.server_sessions_cpu_s), r.us_per_job(r.bench_cpu_s))
            << fmt::format(" machine {:.2f} of {:.0f} cores busy, {:.2f} of them outside this run;", r.busy_cores(),
                           r.cores(), r.outside_cores())
            << fmt::format(" {:.1f} sessions/daemon", r.sessions_per_daemon)
            << (r.other_finishes > 0 ? fmt::format("; {} other finishes", r.other_finishes) : std::string()) << "\n"
            << std::flush;
  for (const std::string& e : r.overshoot_examples) std::cerr << "  overshoot: " << e << "\n";
  for (const std::string& e : r.errors) std::cerr << "  error: " << e << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  Settings st;
  CLI::App app{"many_daemons_bench: D akadzed daemons x S slots on one queue of sleeping jobs, against the ideal"};
  DaemonShape single;
  app.add_option("--daemons", single.daemons, "Daemons, when --configs is not given (default 16)")
      ->check(CLI::Range(1, 200));
  app.add_option("--slots", single.slots, "Slots per daemon, when --configs is not given (default 4)")
      ->check(CLI::Range(1, 10000));
  std::vector<std::string> configs;
  app.add_option("--configs", configs, "Shapes to run in turn, DAEMONSxSLOTS, e.g. 16x4,64x1")->delimiter(',');
  app.add_option("--delay-ms", st.delays_ms,
                 "Delay each way, in ms, between the daemons and the server (0: direct); a list runs each,"
                 " e.g. 0,0.5 (default 0)")
      ->delimiter(',')
      ->check(CLI::Range(0.0, 1000.0));
  app.add_option("--seconds", st.seconds, "Length of the measured window (default 30)")->check(CLI::Range(1, 3600));
  app.add_option("--warmup", st.warmup, "Seconds after every daemon registered, before the window (default 5)")
      ->check(CLI::Range(0, 600));
  app.add_option("--min-ms", st.min_ms, "Shortest job, ms (default 20)")->check(CLI::Range(0, 3600000));
  app.add_option("--max-ms", st.max_ms, "Longest job, ms (default 100)")->check(CLI::Range(0, 3600000));
  app.add_option("--keys", st.keys, "Limit keys, each with its own akadze.limits row (default 30)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--key-max-running", st.key_max_running, "max_running of every key (default 4)")
      ->check(CLI::Range(1, 1000000));
  int queue_cap = 0;
  CLI::Option* cap_option =
      app.add_option("--queue-cap", queue_cap, "Cluster-wide cap on the queue's running jobs (akadze.queue_caps)")
          ->check(CLI::Range(1, 1000000));
  app.add_option("--prefetch", st.prefetch,
                 "Jobs each daemon claims beyond its slots (queues[].prefetch; default 0, not written)")
      ->check(CLI::Range(0, 10000));
  app.add_option("--mode", st.mode, "The queue's mode: fair (default) or ordered")
      ->check(CLI::IsMember({"fair", "ordered"}));
  app.add_option("--poll-interval", st.poll_interval, "The daemons' worker.poll_interval (default 1s)");
  app.add_option("--akadzed", st.akadzed, "The akadzed binary (default: $AKADZED_BIN, else the build tree's)");
  app.add_option("--plugin", st.plugin, "The sleep plugin (default: libbench_sleep_plugin.so next to this program)");
  app.add_option("--top-statements", st.top_statements,
                 "Also print the N statements with the most server time in each window (default 0)")
      ->check(CLI::Range(0, 1000));
  app.add_flag("--keep-logs", st.keep_logs,
               "Keep each run's daemon configs and logs (kept anyway when a daemon fails)");
  CLI11_PARSE(app, argc, argv);
  if (st.min_ms > st.max_ms) {
    std::cerr << "many_daemons_bench: --min-ms must not exceed --max-ms\n";
    return 2;
  }
  if (cap_option->count() > 0) st.queue_cap = queue_cap;
  try {
    for (const std::string& c : configs) st.shapes.push_back(ParseShape(c));
  } catch (const CLI::ValidationError& e) {
    std::cerr << "many_daemons_bench: " << e.what() << "\n";
    return 2;
  }
  if (st.shapes.empty()) st.shapes.push_back(single);

  const fs::path self_dir = fs::read_symlink("/proc/self/exe").parent_path();
  if (st.akadzed.empty()) {
    if (const char* env = std::getenv("AKADZED_BIN"); env != nullptr && *env != '\0') st.akadzed = env;
  }
#ifdef AKADZED_BENCH_DAEMON
  if (st.akadzed.empty()) st.akadzed = AKADZED_BENCH_DAEMON;
#endif
  if (st.plugin.empty()) st.plugin = (self_dir / "libbench_sleep_plugin.so").string();
  for (const auto& [what, path] : {std::pair<const char*, std::string>{"akadzed binary", st.akadzed},
                                   std::pair<const char*, std::string>{"sleep plugin", st.plugin}}) {
    if (path.empty() || access(path.c_str(), R_OK) != 0) {
      std::cerr << fmt::format("many_daemons_bench: no {} at '{}' (see --akadzed, --plugin)\n", what, path);
      return 2;
    }
  }
  st.akadzed = fs::absolute(st.akadzed).string();
  st.plugin = fs::absolute(st.plugin).string();

  int max_daemons = 0;
  for (const DaemonShape& s : st.shapes) max_daemons = std::max(max_daemons, s.daemons);
  const int max_connections = std::max(300, max_daemons * kSessionsPerDaemon + 30);

  std::vector<RunResult> results;
  bool failed = false;
  try {
    ThrowawayPostgresOptions options;
    options.settings = {"shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track=top",
                        "pg_stat_statements.track_planning=on",
                        fmt::format("max_connections={}", max_connections)};
    std::unique_ptr<ThrowawayPostgres> server = ThrowawayPostgres::Start(options);
    int postmaster = 0;
    {
      std::ifstream pid_file(server->directory() / "data" / "postmaster.pid");
      pid_file >> postmaster;
    }
    const std::int64_t key_capacity = static_cast<std::int64_t>(st.keys) * st.key_max_running;
    std::cout << fmt::format(
        "many_daemons_bench: configs {}, network {}; one {} queue '{}' of jobs sleeping {}-{} ms (by id);"
        " {} keys x max_running {} = {} running at most{}; {} s window after {} s warm-up; daemons poll every {};"
        " server max_connections {}\n",
        [&] {
          std::string s;
          for (const DaemonShape& shape : st.shapes) s += (s.empty() ? "" : ", ") + shape.label();
          return s;
        }(),
        [&] {
          std::string s;
          for (double d : st.delays_ms) s += (s.empty() ? "" : ", ") + DelayLabel(d);
          return s;
        }(),
        st.mode, kQueue, st.min_ms, st.max_ms, st.keys, st.key_max_running, key_capacity,
        st.queue_cap ? fmt::format(", queue cap {}", *st.queue_cap) : std::string(), st.seconds, st.warmup,
        st.poll_interval, max_connections);
    std::cout << "\n";
    int run_number = 0;
    for (const DaemonShape& shape : st.shapes) {
      const std::int64_t slots = static_cast<std::int64_t>(shape.daemons) * shape.slots;
      const RunningBound ideal = IdealRunning(st, shape);
      std::cout << fmt::format("{}: {} slots; the keys' capacity {} is {} them: the ideal is {} / mean job time"
                               " ({} bound)\n",
                               shape.label(), slots, key_capacity, key_capacity >= slots ? "at least" : "BELOW",
                               ideal.running, ideal.what)
                << std::flush;
      for (double delay : st.delays_ms) {
        RunResult r = RunOne(*server, postmaster, st, shape, delay, ++run_number);
        PrintLine(r);
        failed = failed || r.failed();
        results.push_back(std::move(r));
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "many_daemons_bench: " << e.what() << "\n";
    failed = true;
  }

  if (!results.empty()) {
    std::cout << "\n| daemons x slots | network | jobs/s | ideal jobs/s | ratio | claims/s | jobs/claim |"
                 " empty claims | lock wait mean ms | lock wait max ms | after lock ms/claim | running mean |"
                 " running peak | overshoots | round trip p50 ms | daemon CPU us/job | server CPU us/job |"
                 " busy cores (outside) | status |\n"
                 "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
    for (const RunResult& r : results) {
      std::cout << fmt::format("| {} | {} | {:.0f} | {:.0f} | {:.2f} | {:.0f} | {:.2f} | {:.0f}% |", r.shape.label(),
                               DelayLabel(r.delay_ms), r.jobs_per_s(), r.ideal_jobs_s, r.ratio(), r.claims_per_s(),
                               r.jobs_per_claim(), r.empty_claims_percent())
                << fmt::format(" {:.2f} | {:.1f} | {:.2f} | {:.1f} | {} | {} | {:.2f} |", r.lock_wait_mean_ms,
                               r.lock_wait_max_ms, r.claim_ms_per_claim, r.running_mean, r.running_peak, r.overshoots,
                               r.round_trip_p50_ms)
                << fmt::format(" {:.0f} | {:.0f} | {:.2f} ({:.2f}) | {} |\n", r.us_per_job(r.daemon_cpu_s),
                               r.us_per_job(r.server_cpu_s), r.busy_cores(), r.outside_cores(),
                               r.failed() ? "FAILED" : "ok");
    }
  }
  if (std::any_of(results.begin(), results.end(), [](const RunResult& r) { return r.outside_cores() > 0.3; })) {
    std::cout << "\n(some runs shared the machine with other work: more than 0.3 cores busy outside the daemons,"
                 " the server and this program; their figures are low by that much)\n";
  }
  return failed ? 1 : 0;
}
