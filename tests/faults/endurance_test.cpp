// Endurance (issue 41, goal 4): a daemon under a steady producer while
// another session holds the database's horizon back with a REPEATABLE READ
// snapshot, so that no row version a claim or a finish made dead can be
// removed and no index entry of one can be killed.
//
// One run, on one fresh database, measures each variant twice: "fresh" (no
// snapshot held, autovacuum at work) and at the end of the hold. The
// variants run side by side, each its own `akadzed run` child process with
// one queue of slots 50, no prefetch, listen_notify on, the no-op plugin
// (bench/throughput/noop_plugin.c, built as tests/plugins/libnoop_plugin.so)
// recording when each job's handler starts, and its own producer calling
// akadze.enqueue_many 20 times a second (1,000 jobs/s by default):
//
//   fair     mode fair, no limit key
//   ordered  mode ordered, no limit key
//   keys     mode fair, jobs spread over 1,000 limit keys, each with its own
//            akadze.limits row (max_running 4, at most 10 starts per second;
//            neither binds at 1 job per key per second: the planner's
//            per-key reads are what is measured, not the limits' waits)
//   ordered_keys  the same keys in mode ordered (with `keys` at once, the
//            two share the 1,000 limits rows and their caps)
//   capped   mode fair, no limit key, the queue capped at its daemon's
//            slots (akadze.queue_caps): every claim counts the queue's
//            running jobs, the count that is measured (the cap itself
//            does not bind at 1,000 no-op jobs/s)
//
// Figures per variant, fresh and at the end of the hold:
//   - warm claim: the median of the warm runs of `akadzed claim --queue Q
//     --slots 50 --mode M --dry-run --repeat 21` (taken right after the
//     latency window, never during it: a dry run holds the queue's claim
//     lock, which the daemon's claims wait for);
//   - enqueue-to-start p50/p99 of the jobs whose handler began in the window
//     (the last 15 s before the dry runs): the plugin's wall clock when
//     handle() began against the job's created_at (the enqueuing
//     transaction's start);
//   - the backlog (jobs enqueued and not yet begun: the producers' counts
//     less the plugin's records, never a count of the table, which under a
//     hold reads every dead entry), sampled every second;
//   - printed only: the daemon's own mean claim time over the window (its
//     akadzed_claim_duration_seconds histogram), and the time of the other
//     statements a long-running daemon runs (heartbeat, reconcile and rescue
//     by worker id, the queued sweep, a finish, a pruning batch, the status report,
//     `akadzed status`, a /metrics scrape with its database gauges).
// Every 10 s it prints a progress line: the backlog, each daemon's claim
// time, the table's dead row versions (pg_stat_user_tables) and the claim
// indexes' entries read per claimed job (pg_stat_user_indexes), which is
// where the dead entries a held horizon leaves show up.
//
// Bounds, against the fresh figures of the same run (these machines are
// noisy; only ratios to the same run are fair), for each variant:
//   - warm claim at the end of the hold <= 2 x fresh + 1 ms;
//   - p99 enqueue-to-start at the end of the hold <= 2 x fresh + 10 ms;
//   - the backlog never grows: no sample of the hold above 2 s of arrivals
//     (2 x the rate), and over the last third of the hold the least-squares
//     line through the samples rises by at most a quarter second of arrivals.
// Each figure that breaks its bound fails the test with a line naming the
// variant, the figure, its value and the bound.
//
// Environment:
//   AKADZED_ENDURANCE_HOLD_SECONDS  the hold (default 60; 1800 for the
//                                   issue's long run: not under CTest's timeout)
//   AKADZED_ENDURANCE_VARIANTS      which variants (default fair,ordered; the
//                                   keys variant by flag: three variants at
//                                   once overload a 2-core CI machine)
//   AKADZED_ENDURANCE_RATE          jobs per second per variant (default 1000)
//
// On main before the fix of issue 41 this test fails: the claims walk every
// dead entry at the head of the queue's part of the claim index.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "faults/fault_scenario.h"
#include "claim/claim_transaction.h"
#include "claim/queue_counts.h"
#include "pg/connection.h"
#include "pg/transaction.h"
#include "core/uuid.h"
#include "store/horizon.h"
#include "store/job_admin.h"
#include "store/job_finish.h"
#include "store/limits_table.h"
#include "store/prune.h"
#include "store/queued_sweep.h"
#include "store/status_report.h"
#include "store/worker_lease.h"
#include "support/daemon_process.h"
#include "support/http_probe.h"
#include "support/prometheus_text.h"
#include "support/run_command.h"
#include "support/test_cluster.h"

namespace akadzed::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kSlots = 50;
constexpr int kTicksPerSecond = 20;  // enqueue_many calls per second per producer
constexpr int kKeys = 1000;
constexpr int kWindowSeconds = 15;   // the latency window, fresh and at the end of the hold
constexpr int kDryRuns = 11;         // 1 cold + 10 warm

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  return std::stoi(v);
}

std::string EnvText(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v == nullptr || *v == '\0' ? fallback : std::string(v);
}

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Nearest rank, as bench/throughput/throughput.mjs's percentile().
double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  rank = std::clamp<std::size_t>(rank, 1, v.size());
  return v[rank - 1];
}

double Median(std::vector<double> v) { return Percentile(std::move(v), 50); }
// The median of timings, or NAN when one of them failed (TimeMs).
double MedianMs(std::vector<double> v) {
  for (double x : v) {
    if (std::isnan(x)) return NAN;
  }
  return Median(std::move(v));
}

// The TCP ports process `pid` listens on: its sockets' inodes (/proc/<pid>/fd)
// matched against /proc/net/tcp's listening entries. The daemon's metrics
// listener is 127.0.0.1:0 (a free port) and its log runs at warn, where the
// metrics_listening line (info) is not written.
std::vector<int> ListeningPorts(pid_t pid) {
  std::vector<std::string> inodes;
  const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR* d = opendir(fd_dir.c_str())) {
    while (dirent* e = readdir(d)) {
      char target[256];
      const std::string link = fd_dir + "/" + e->d_name;
      const ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
      if (n <= 0) continue;
      const std::string t(target, static_cast<std::size_t>(n));
      if (t.rfind("socket:[", 0) == 0) inodes.push_back(t.substr(8, t.size() - 9));
    }
    closedir(d);
  }
  std::vector<int> ports;
  std::istringstream tcp(ReadProcFile("/proc/" + std::to_string(pid) + "/net/tcp"));
  std::string line;
  std::getline(tcp, line);  // header
  while (std::getline(tcp, line)) {
    std::istringstream f(line);
    std::string sl, local, remote, state, queues, timer, retr, uid, timeout, inode;
    f >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
    if (state != "0A") continue;  // TCP_LISTEN
    if (std::find(inodes.begin(), inodes.end(), inode) == inodes.end()) continue;
    ports.push_back(std::stoi(local.substr(local.find(':') + 1), nullptr, 16));
  }
  return ports;
}

struct Variant {
  std::string name;  // also the queue's name
  std::string mode;  // fair or ordered
  bool keys = false;
  bool capped = false;
};

// Calls akadze.enqueue_many for rate / 20 jobs 20 times a second, on a fixed
// schedule: a call that comes late is made at once, so the rate holds on
// average whatever one call took.
class Producer {
 public:
  Producer(std::string db, Variant v, int rate) : db_(std::move(db)), v_(std::move(v)), rate_(rate) {}
  ~Producer() { Stop(); }
  void Start() {
    thread_ = std::thread([this] { Run(); });
  }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::int64_t enqueued() const { return enqueued_; }
  double max_call_ms() const { return max_call_ms_; }
  std::string error() {
    std::lock_guard lock(mu_);
    return error_;
  }

 private:
  void Run() {
    try {
      pg::Connection conn = pg::Connection::Open(db_, "endurance producer");
      std::mt19937 random(static_cast<unsigned>(std::hash<std::string>{}(v_.name)));
      const int batch = rate_ / kTicksPerSecond;
      const auto start = Clock::now();
      for (std::int64_t tick = 0; !stop_; ++tick) {
        std::this_thread::sleep_until(start + tick * std::chrono::microseconds(1000000 / kTicksPerSecond));
        std::string jobs = "[";
        for (int i = 0; i < batch; ++i) {
          jobs += i == 0 ? "" : ",";
          jobs += R"({"task":"noop","queue":")" + v_.name + "\"";
          if (v_.keys) jobs += R"(,"limit_key":"k)" + std::to_string(random() % kKeys) + "\"";
          jobs += "}";
        }
        jobs += "]";
        const auto t0 = Clock::now();
        conn.exec("SELECT akadze.enqueue_many($1::jsonb)", pg::Params().add(jobs));
        max_call_ms_ = std::max(max_call_ms_.load(), MsSince(t0));
        enqueued_ += batch;
      }
    } catch (const std::exception& e) {
      std::lock_guard lock(mu_);
      error_ = e.what();
    }
  }

  std::string db_;
  Variant v_;
  int rate_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<std::int64_t> enqueued_{0};
  std::atomic<double> max_call_ms_{0};
  std::mutex mu_;
  std::string error_;
};

// The backlog of every queue, once a second: the jobs its producer enqueued
// less those whose handler began (the plugin's record file, read on from
// where the last sample stopped), so jobs queued or claimed and not yet
// started. Not a count of akadze.jobs: under a held horizon that reads
// every dead entry the hold keeps (5 million after 30 minutes), a second of
// the server's CPU each second, which the daemons' claims then wait for.
class BacklogSampler {
 public:
  struct Sample {
    double t = 0;  // seconds since the sampler's `t0`
    std::map<std::string, std::int64_t> ready;
  };
  struct Source {
    std::string queue;
    const Producer* producer = nullptr;
    std::string record;  // the plugin's record file: a line per job begun
  };
  BacklogSampler(std::vector<Source> sources, Clock::time_point t0) : sources_(std::move(sources)), t0_(t0) {}
  ~BacklogSampler() { Stop(); }
  void Start() {
    thread_ = std::thread([this] { Run(); });
  }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::vector<Sample> samples() {
    std::lock_guard lock(mu_);
    return samples_;
  }
  std::string error() {
    std::lock_guard lock(mu_);
    return error_;
  }

 private:
  void Run() {
    try {
      std::vector<std::int64_t> started(sources_.size(), 0);
      std::vector<std::streamoff> offset(sources_.size(), 0);
      const auto start = Clock::now();
      for (int i = 0; !stop_; ++i) {
        std::this_thread::sleep_until(start + i * 1s);
        Sample s;
        s.t = SecondsSince(t0_);
        for (std::size_t k = 0; k < sources_.size(); ++k) {
          // Enqueued first: a job counted as begun is never one the count
          // of enqueued jobs has not reached yet.
          const std::int64_t enqueued = sources_[k].producer->enqueued();
          std::ifstream in(sources_[k].record, std::ios::binary);
          if (in) {
            in.seekg(offset[k]);
            std::string line;
            // Whole lines only: one the plugin is writing is read next time.
            while (std::getline(in, line) && !in.eof()) {
              ++started[k];
              offset[k] += static_cast<std::streamoff>(line.size()) + 1;
            }
          }
          s.ready[sources_[k].queue] = std::max<std::int64_t>(0, enqueued - started[k]);
        }
        std::lock_guard lock(mu_);
        samples_.push_back(std::move(s));
      }
    } catch (const std::exception& e) {
      std::lock_guard lock(mu_);
      error_ = e.what();
    }
  }

  std::vector<Source> sources_;
  Clock::time_point t0_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<Sample> samples_;
  std::string error_;
};

// What one variant's daemon reports on /metrics: claims and their time.
struct ClaimCounters {
  double count = 0;
  double sum_s = 0;
  double claimed = 0;
  double dead = 0;  // akadzed_claim_dead_index_entries_total: the daemon's own claims' dead-entry steps
};

// The figures of one phase (fresh, or the end of the hold) of one variant.
struct PhaseFigures {
  double warm_claim_ms = NAN;     // median of the warm dry runs
  double cold_claim_ms = NAN;
  double dry_run_wall_ms = NAN;   // the whole `akadzed claim --dry-run --repeat` process
  double daemon_claim_ms = NAN;   // the daemon's mean claim over the window
  double p50_ms = NAN, p99_ms = NAN, max_ms = NAN;
  std::int64_t latency_jobs = 0;  // jobs whose handler began in the window
  std::map<std::string, double> statements_ms;  // printed only
};

struct Window {
  std::int64_t from_us = 0;  // the wall clock (created_at), microseconds
  std::int64_t to_us = 0;
  ClaimCounters before, after;
};

struct VariantRun {
  Variant v;
  std::string config;
  std::string record;
  std::unique_ptr<DaemonProcess> daemon;
  std::unique_ptr<Producer> producer;
  int port = 0;
  std::string worker_id;
  PhaseFigures fresh, held;
  Window fresh_window, held_window;
};

// When each daemon's /metrics was last scraped: its database gauges are
// read again only by a scrape more than a second after the last read.
std::map<int, Clock::time_point>& LastScrape() {
  static std::map<int, Clock::time_point> last;
  return last;
}

ClaimCounters ScrapeClaims(int port, const std::string& queue) {
  LastScrape()[port] = Clock::now();
  HttpAnswer a = HttpGet(port, "/metrics");
  if (a.status != 200) throw std::runtime_error("GET /metrics: status " + std::to_string(a.status));
  PromExposition e = ParsePrometheusText(a.body);
  ClaimCounters c;
  c.count = e.Value("akadzed_claim_duration_seconds_count", {{"queue", queue}}).value_or(0);
  c.sum_s = e.Value("akadzed_claim_duration_seconds_sum", {{"queue", queue}}).value_or(0);
  c.claimed = e.Value("akadzed_jobs_claimed_total", {{"queue", queue}}).value_or(0);
  c.dead = e.Value("akadzed_claim_dead_index_entries_total", {{"queue", queue}}).value_or(0);
  return c;
}

// The median time of `f` over `runs` runs, in ms, for the figures printed
// and not asserted: one that fails (a statement past its timeout at the
// end of a long hold: the status report's after 30 minutes) is printed
// with its error and counts as no figure ("-"), not as the test's failure.
template <typename F>
double TimeMs(F&& f, int runs = 5) {
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = Clock::now();
    try {
      f();
    } catch (const std::exception& e) {
      std::cout << fmt::format("  a printed-only statement failed after {:.0f} ms: {}", MsSince(t0), e.what())
                << std::endl;
      return NAN;
    }
    ms.push_back(MsSince(t0));
  }
  return Median(ms);
}

std::string Ms(double v) { return std::isnan(v) ? "-" : fmt::format("{:.2f}", v); }

// Least-squares slope of (t, y), per second.
double Slope(const std::vector<std::pair<double, double>>& points) {
  if (points.size() < 2) return 0;
  double n = static_cast<double>(points.size()), st = 0, sy = 0, stt = 0, sty = 0;
  for (auto [t, y] : points) {
    st += t;
    sy += y;
    stt += t * t;
    sty += t * y;
  }
  const double d = n * stt - st * st;
  return d == 0 ? 0 : (n * sty - st * sy) / d;
}

TEST_CASE("endurance: claims, latency and backlog stay level while a snapshot is held",
          "[faults][endurance][direct]") {
  const int hold_s = EnvInt("AKADZED_ENDURANCE_HOLD_SECONDS", 60);
  const int rate = EnvInt("AKADZED_ENDURANCE_RATE", 1000);
  REQUIRE(hold_s >= 3 * kWindowSeconds);
  REQUIRE(rate >= kTicksPerSecond);
  REQUIRE(rate % kTicksPerSecond == 0);  // rate / 20 jobs a call
  const std::map<std::string, Variant> known{{"fair", Variant{"fair", "fair", false}},
                                             {"ordered", Variant{"ordered", "ordered", false}},
                                             {"keys", Variant{"keys", "fair", true}},
                                             {"ordered_keys", Variant{"ordered_keys", "ordered", true}},
                                             {"capped", Variant{"capped", "fair", false, true}}};
  std::vector<VariantRun> runs;
  {
    std::istringstream names(EnvText("AKADZED_ENDURANCE_VARIANTS", "fair,ordered"));
    for (std::string name; std::getline(names, name, ',');) {
      INFO("AKADZED_ENDURANCE_VARIANTS: unknown variant '" << name
                                                            << "' (fair, ordered, keys, ordered_keys, capped)");
      REQUIRE(known.count(name) == 1);
      runs.emplace_back();
      runs.back().v = known.at(name);
    }
  }
  REQUIRE(!runs.empty());

  const std::string db = FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db, "endurance test");
  TempDir dir;
  bool any_keys = false;
  for (auto& r : runs) any_keys = any_keys || r.v.keys;
  if (any_keys) {
    conn.exec(
        "INSERT INTO akadze.limits (key, max_running, max_starts, starts_window)"
        " SELECT 'k' || i, 4, 10, interval '1 second' FROM generate_series(0, $1::int - 1) AS i",
        pg::Params().add(kKeys));
  }
  for (auto& r : runs) {
    if (r.v.capped) {
      conn.exec("INSERT INTO akadze.queue_caps (queue, max_running) VALUES ($1, $2)",
                pg::Params().add(r.v.name).add(kSlots));
    }
  }
  std::cout << fmt::format("endurance: {} jobs/s per variant ({}), slots {}, no prefetch, hold {} s, "
                           "windows of {} s; load {}",
                           rate, EnvText("AKADZED_ENDURANCE_VARIANTS", "fair,ordered"), kSlots,
                           hold_s, kWindowSeconds, ReadProcFile("/proc/loadavg").substr(0, 14))
            << std::endl;

  // ---- the daemons, one per variant ----
  for (auto& r : runs) {
    r.record = dir.path() + "/starts-" + r.v.name;
    std::ostringstream y;
    y << "worker:\n  listen_notify: true\n"
      << "queues:\n  - {name: " << r.v.name << ", slots: " << kSlots << ", mode: " << r.v.mode << "}\n"
      << "handlers:\n  noop:\n    plugin: {path: libnoop_plugin.so, config: {record: \"" << r.record
      << "\"}}\n"
      << "pruning: {enabled: false}\n"
      << "metrics: {listen: 127.0.0.1:0}\n"
      << "logging: {level: warn, format: logfmt}\n";
    r.config = dir.Write("akadzed-" + r.v.name + ".yaml", y.str());
    r.daemon = std::make_unique<DaemonProcess>(
        std::vector<std::string>{"run", "--config", r.config, "--database-url", db},
        EnvChanges{{"AKADZED_PLUGIN_PATH", std::string(AKADZED_FAULT_PLUGIN_DIR)}},
        dir.path() + "/daemon-" + r.v.name + ".log");
  }
  // Up: each daemon listens (its "akadzed listen" session idle after LISTEN),
  // has its worker row, and serves /metrics.
  {
    const bool up = WaitUntil(
        [&] {
          for (auto& r : runs) {
            if (!r.daemon->running()) return true;  // reported below
          }
          return Count(conn,
                       "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                       " AND application_name = 'akadzed listen' AND state = 'idle' AND query <> ''") ==
                 static_cast<std::int64_t>(runs.size());
        },
        60s);
    for (auto& r : runs) {
      INFO(r.v.name << "'s daemon log:\n" << r.daemon->Log());
      REQUIRE(r.daemon->running());
    }
    REQUIRE(up);
  }
  for (auto& r : runs) {
    REQUIRE(WaitUntil([&] { return ListeningPorts(r.daemon->pid()).size() == 1; }, 30s));
    r.port = ListeningPorts(r.daemon->pid()).front();
    pg::Result w = conn.exec("SELECT id::text FROM akadze.workers WHERE pid = $1",
                             pg::Params().add(r.daemon->pid()));
    REQUIRE(w.rows() == 1);
    r.worker_id = std::string(w.text(0, 0));
  }

  // ---- the producers and the sampler ----
  const auto t0 = Clock::now();
  std::vector<BacklogSampler::Source> sources;
  for (auto& r : runs) {
    r.producer = std::make_unique<Producer>(db, r.v, rate);
    sources.push_back({r.v.name, r.producer.get(), r.record});
  }
  BacklogSampler sampler(std::move(sources), t0);
  sampler.Start();
  for (auto& r : runs) r.producer->Start();

  pg::Connection probe = pg::Connection::Open(db, "endurance probe");
  std::map<std::string, ClaimCounters> last_scrape;
  double last_index_read = 0, last_claimed = 0;
  auto index_read = [&] {
    return static_cast<double>(Count(conn,
        "SELECT coalesce(sum(idx_tup_read), 0)::int8 FROM pg_stat_user_indexes"
        " WHERE indexrelname IN ('jobs_claim_idx', 'jobs_claim_key_idx')"));
  };
  auto check_alive = [&] {
    for (auto& r : runs) {
      INFO(r.v.name << "'s daemon log:\n" << r.daemon->Log());
      REQUIRE(r.daemon->running());
      INFO(r.v.name << "'s producer failed");
      REQUIRE(r.producer->error().empty());
    }
    INFO("the backlog sampler failed");
    REQUIRE(sampler.error().empty());
  };
  // One progress line: per variant the last backlog and the daemon's
  // mean claim since the last line; the table's dead row versions; the claim
  // indexes' entries read per job claimed (all variants) since the last line.
  auto progress = [&](const std::string& phase) {
    check_alive();
    std::ostringstream line;
    line << fmt::format("  t={:5.0f}s {:<6}", SecondsSince(t0), phase);
    const auto samples = sampler.samples();
    double claimed = 0;
    for (auto& r : runs) {
      const ClaimCounters c = ScrapeClaims(r.port, r.v.name);
      const ClaimCounters& p = last_scrape[r.v.name];
      const std::int64_t backlog = samples.empty() || samples.back().ready.count(r.v.name) == 0
                                       ? 0 : samples.back().ready.at(r.v.name);
      // The daemon's claims' own dead entries of jobs_claim_idx per claim
      // (the index reads of the line's end include the sampler's counts).
      line << fmt::format(" | {} backlog {:5} claim {:>7} ms, dead {:>7}", r.v.name, backlog,
                          c.count > p.count ? Ms(1000 * (c.sum_s - p.sum_s) / (c.count - p.count)) : "-",
                          c.count > p.count ? fmt::format("{:.1f}", (c.dead - p.dead) / (c.count - p.count)) : "-");
      last_scrape[r.v.name] = c;
      claimed += c.claimed;
    }
    const double read = index_read();
    const std::int64_t dead = Count(conn,
        "SELECT coalesce(n_dead_tup, 0) FROM pg_stat_user_tables WHERE relid = 'akadze.jobs'::regclass");
    line << fmt::format(" | dead versions {:8} | claim index entries read per job {:>8}", dead,
                        claimed > last_claimed ? fmt::format("{:.1f}", (read - last_index_read) / (claimed - last_claimed)) : "-");
    last_index_read = read;
    last_claimed = claimed;
    std::cout << line.str() << std::endl;
  };
  // Waits until `until`, printing progress every 10 s (the hold's length is
  // the subject here: there is nothing to await but time).
  auto wait_out = [&](Clock::time_point until, const std::string& phase) {
    auto next = Clock::now() + 10s;
    while (Clock::now() < until) {
      std::this_thread::sleep_until(std::min(next, until));
      if (Clock::now() >= next) {
        progress(phase);
        next += 10s;
      }
    }
  };
  auto now_us = [] { return NowUs(); };

  // One phase's measurements after its latency window: dry-run claims, then
  // the other statements (printed only).
  auto measure = [&](VariantRun& r, PhaseFigures& f) {
    // A reconcile floor taken now serves the read timed at the end, a few
    // seconds later, as a heartbeat round's serves the next (5 s).
    OwnedJobsFloor floor;
    OwnedRunningJobs(probe, r.worker_id, 0, &floor);
    const auto floor_taken = Clock::now();
    const auto dry_start = Clock::now();
    CommandResult dry = RunCommand({AkadzedBinary(), "claim", "--queue", r.v.name, "--slots",
                                    std::to_string(kSlots), "--mode", r.v.mode, "--dry-run", "--repeat",
                                    std::to_string(kDryRuns), "--json", "--database-url", db},
                                   {}, 300s);
    f.dry_run_wall_ms = MsSince(dry_start);
    INFO("akadzed claim --dry-run: exit " << dry.exit_code << " after " << f.dry_run_wall_ms << " ms\n"
                                          << dry.out << dry.err);
    REQUIRE(dry.exit_code == 0);
    const nlohmann::json j = nlohmann::json::parse(dry.out);
    f.warm_claim_ms = j.at("warm_ms").at("median").get<double>();
    f.cold_claim_ms = j.at("cold_ms").get<double>();
    f.statements_ms["claim --dry-run, its cold run (a new connection)"] = f.cold_claim_ms;
    f.statements_ms["claim --dry-run --repeat 11, the whole process"] = f.dry_run_wall_ms;
    f.statements_ms["heartbeat"] = TimeMs([&] { Heartbeat(probe, r.worker_id); });
    // No floor of this connection (a lease connection replaced): from the
    // floor the daemon's heartbeats stored.
    f.statements_ms["reconcile without a floor in memory (after a reconnect): from the stored floor"] =
        TimeMs([&] { OwnedRunningJobs(probe, r.worker_id); });
    // Scrapes that read the database gauges: each 1.1 s after the last one
    // (the gauges' cache period is what is waited out); the median of three.
    {
      std::vector<double> ms;
      for (int i = 0; i < 3; ++i) {
        std::this_thread::sleep_until(LastScrape()[r.port] + 1100ms);
        ms.push_back(TimeMs([&] { HttpGet(r.port, "/metrics"); }, 1));
        LastScrape()[r.port] = Clock::now();
      }
      f.statements_ms["/metrics scrape (database gauges), median of 3"] = MedianMs(ms);
    }
    INFO("reconcile floor taken " << SecondsSince(floor_taken) << " s before its read");
    f.statements_ms["reconcile with the floor of a read a few seconds before (a heartbeat round's)"] =
        TimeMs([&] { OwnedRunningJobs(probe, r.worker_id, 0, &floor); }, 1);
  };
  // The statements that are the database's, not one daemon's.
  std::map<std::string, double> shared_fresh, shared_held;
  auto measure_shared = [&](std::map<std::string, double>& out) {
    out["rescue (lost jobs, ttl 1 h)"] = TimeMs([&] { RescueLostJobs(probe, 3600LL * 1000000); });
    out["queued sweep"] = TimeMs([&] { SweepQueuedJobs(probe, 100); });
    // A claim of a capped queue (akadze.queue_caps): it counts the queue's
    // running jobs first. A queue nobody serves, empty: the head, the cap's
    // count and an empty window, rolled back.
    {
      SetQueueCap(probe, "endurance cap probe", 10);
      ClaimRequest capped;
      capped.queue = "endurance cap probe";
      capped.slots = kSlots;
      capped.dry_run = true;
      out["claim of a capped queue (dry run, nothing queued)"] = TimeMs([&] { RunClaim(probe, capped); });
    }
    // A finish as a daemon's finisher sends it: a job of a queue nobody
    // serves, made running under a worker id of the test's, written
    // succeeded (each of five: written, then timed alone).
    {
      const std::string finisher = RandomUuid();
      std::vector<double> ms;
      for (int i = 0; i < 5; ++i) {
        const std::int64_t id =
            probe.exec("INSERT INTO akadze.jobs (task, queue, state, run_count, worker_id, started_at)"
                       " VALUES ('noop', 'endurance finish probe', 'running', 1, $1::uuid, now()) RETURNING id",
                       pg::Params().add(finisher))
                .int64(0, 0);
        FinishRequest request;
        request.job_id = id;
        request.run_count = 1;
        ms.push_back(TimeMs([&] {
          const std::vector<FinishResult> done = FinishJobs(probe, finisher, {request});
          if (done.size() != 1 || !done[0].applied) throw std::runtime_error("the probe's finish was not applied");
        }, 1));
      }
      out["finish (one job, by id)"] = MedianMs(ms);
    }
    // The daemons prune nothing (pruning is off): a batch with a week's
    // retention finds no finished job old enough, and with the keys no
    // start mark past every window; what it reads to find that out is what
    // a hold can grow (start marks: every one the claims purged).
    out["pruning batch (retention 7 days: nothing to delete)"] =
        TimeMs([&] { PruneBatch(probe, 7LL * 24 * 3600 * 1'000'000, 1000); });
    out["status report"] = TimeMs([&] { ReadStatusReport(probe, CountQueuedJobs); });
    // Its parts, each as the report runs it (read only, no JIT), to say
    // which of them a hold slows.
    const auto part = [&](const auto& read) {
      return TimeMs([&] {
        pg::Transaction tx(probe, "BEGIN READ ONLY");
        tx.exec("SET LOCAL jit = off");
        read();
        tx.commit();
      });
    };
    const StatusReportOptions report_options;
    out["status report: queues (names, running, chart)"] = part([&] {
      ReadQueueSection(probe, [](pg::Connection&, const std::vector<std::string>& queues, std::int64_t) {
        return std::vector<QueuedCount>(queues.size());
      }, report_options);
    });
    out["status report: queued counts past the stored floors"] = part([&] {
      std::vector<std::string> queues;
      for (const auto& r : runs) queues.push_back(r.v.name);
      CountQueuedJobs(probe, queues, report_options.count_cap);
    });
    out["status report: limit rows in use"] = part([&] { ListLimitUse(probe); });
    out["status report: held keys"] = part([&] {
      std::int64_t total = 0;
      ListHeldLimitKeys(probe, report_options.max_held_keys, &total, report_options.count_cap);
    });
    out["status report: workers"] = part([&] { ListWorkers(probe); });
    out["status report: horizon"] = part([&] { ReadHorizon(probe); });
    out["akadzed status --json (process)"] = TimeMs(
        [&] {
          CommandResult s = RunAkadzed({"status", "--json", "--database-url", db});
          if (s.exit_code != 0) throw std::runtime_error("akadzed status: " + s.err);
        },
        3);
  };

  // ---- fresh ----
  // A few seconds for the daemons' first claims and autovacuum's first
  // rounds, then the window.
  wait_out(Clock::now() + 5s, "warm");
  for (auto& r : runs) {
    r.fresh_window.from_us = now_us();
    r.fresh_window.before = ScrapeClaims(r.port, r.v.name);
  }
  wait_out(Clock::now() + std::chrono::seconds(kWindowSeconds), "fresh");
  for (auto& r : runs) {
    r.fresh_window.to_us = now_us();
    r.fresh_window.after = ScrapeClaims(r.port, r.v.name);
  }
  for (auto& r : runs) measure(r, r.fresh);
  measure_shared(shared_fresh);
  progress("fresh");

  // ---- the hold ----
  pg::Connection holder = pg::Connection::Open(db, "endurance snapshot holder");
  holder.exec("BEGIN ISOLATION LEVEL REPEATABLE READ");
  holder.exec("SELECT 1 FROM akadze.jobs LIMIT 1");
  const auto hold_start = Clock::now();
  const double hold_start_t = SecondsSince(t0);
  std::cout << fmt::format("  t={:5.0f}s snapshot held (REPEATABLE READ, one SELECT, left open)",
                           hold_start_t) << std::endl;
  wait_out(hold_start + std::chrono::seconds(hold_s - kWindowSeconds), "held");
  for (auto& r : runs) {
    r.held_window.from_us = now_us();
    r.held_window.before = ScrapeClaims(r.port, r.v.name);
  }
  wait_out(hold_start + std::chrono::seconds(hold_s), "held");
  for (auto& r : runs) {
    r.held_window.to_us = now_us();
    r.held_window.after = ScrapeClaims(r.port, r.v.name);
  }
  // The backlog's bounds hold up to here: the dry runs that follow hold the
  // queue's claim lock, which the daemon's claims wait for.
  const double hold_end_t = SecondsSince(t0);
  for (auto& r : runs) measure(r, r.held);
  measure_shared(shared_held);
  progress("held");
  holder.exec("ROLLBACK");
  std::cout << fmt::format("  t={:5.0f}s snapshot released after {:.0f} s", SecondsSince(t0),
                           SecondsSince(hold_start)) << std::endl;

  // ---- drain: the producers stop, every job they made must start ----
  for (auto& r : runs) r.producer->Stop();
  check_alive();
  const auto drain_start = Clock::now();
  const bool drained = WaitUntil(
      [&] { return Count(conn, "SELECT count(*) FROM akadze.jobs WHERE state IN ('queued', 'running')") == 0; },
      180s);
  const double drain_s = SecondsSince(drain_start);
  sampler.Stop();
  for (auto& r : runs) {
    r.daemon->Signal(SIGTERM);
    CHECK(r.daemon->Wait(60s) == 0);
  }
  {
    INFO("the jobs left unstarted 180 s after the producers stopped: " << Count(conn,
         "SELECT count(*) FROM akadze.jobs WHERE state IN ('queued', 'running')"));
    CHECK(drained);
  }

  // ---- enqueue-to-start per window, from the plugin's records ----
  // The jobs whose handler began inside the window: a job created in it that
  // was still queued at its end would wait out the dry runs that follow,
  // which hold the claim lock. Jobs that never start are the backlog's and
  // the drain's failures.
  for (auto& r : runs) {
    std::unordered_map<std::int64_t, std::int64_t> created_us;
    pg::Result jobs = conn.exec(
        "SELECT id, (extract(epoch FROM created_at) * 1000000)::int8 FROM akadze.jobs WHERE queue = $1",
        pg::Params().add(r.v.name));
    for (int i = 0; i < jobs.rows(); ++i) created_us.emplace(jobs.int64(i, 0), jobs.int64(i, 1));
    std::vector<std::pair<std::int64_t, std::int64_t>> starts;  // job id, start (us)
    {
      std::ifstream in(r.record);
      std::int64_t id = 0, us = 0;
      while (in >> id >> us) starts.emplace_back(id, us);
    }
    for (auto [w, f] : {std::pair{&r.fresh_window, &r.fresh}, std::pair{&r.held_window, &r.held}}) {
      std::vector<double> ms;
      for (auto [id, us] : starts) {
        if (us < w->from_us || us >= w->to_us) continue;
        auto it = created_us.find(id);
        if (it != created_us.end()) ms.push_back(static_cast<double>(us - it->second) / 1000.0);
      }
      f->latency_jobs = static_cast<std::int64_t>(ms.size());
      f->p50_ms = Percentile(ms, 50);
      f->p99_ms = Percentile(ms, 99);
      f->max_ms = ms.empty() ? NAN : *std::max_element(ms.begin(), ms.end());
      const double claims = w->after.count - w->before.count;
      f->daemon_claim_ms = claims > 0 ? 1000 * (w->after.sum_s - w->before.sum_s) / claims : NAN;
    }
  }

  // ---- the report and the bounds ----
  const auto samples = sampler.samples();
  std::vector<std::string> broken;
  std::cout << "\nendurance figures (fresh -> end of a " << hold_s << " s hold), " << rate
            << " jobs/s per variant, slots " << kSlots << ":\n";
  std::cout << "| variant | warm claim ms (median of " << kDryRuns - 1
            << ") | daemon's mean claim ms | p50 ms | p99 ms | max ms | jobs started in window | max backlog | backlog rise over the last third |\n"
            << "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (auto& r : runs) {
    std::int64_t fresh_max = 0, held_max = 0;
    std::vector<std::pair<double, double>> last_third;
    const double third_from = hold_start_t + (hold_end_t - hold_start_t) * 2 / 3;
    for (const auto& s : samples) {
      const std::int64_t b = s.ready.count(r.v.name) ? s.ready.at(r.v.name) : 0;
      if (s.t < hold_start_t) fresh_max = std::max(fresh_max, b);
      if (s.t >= hold_start_t && s.t <= hold_end_t) held_max = std::max(held_max, b);
      if (s.t >= third_from && s.t <= hold_end_t) last_third.emplace_back(s.t, static_cast<double>(b));
    }
    const double rise = Slope(last_third) * (hold_end_t - third_from);
    std::cout << fmt::format("| {} | {} -> {} | {} -> {} | {} -> {} | {} -> {} | {} -> {} | {} / {} | {} -> {} | {:.0f} |\n",
                             r.v.name, Ms(r.fresh.warm_claim_ms), Ms(r.held.warm_claim_ms),
                             Ms(r.fresh.daemon_claim_ms), Ms(r.held.daemon_claim_ms), Ms(r.fresh.p50_ms),
                             Ms(r.held.p50_ms), Ms(r.fresh.p99_ms), Ms(r.held.p99_ms), Ms(r.fresh.max_ms),
                             Ms(r.held.max_ms), r.fresh.latency_jobs, r.held.latency_jobs, fresh_max,
                             held_max, rise);
    // What the suite asserts, issue 41's bounds: the daemon's own claims
    // (2 x fresh + 1 ms; on 4e9efdc 1.3-1.4 -> 27-41 ms in a 60 s hold),
    // the warm dry runs (they start from the queue's stored floor: 0.3 ->
    // 4-5 ms before it, 0.3 -> 0.3 with it), the jobs' enqueue-to-start p99
    // and the backlog (docs/testing.md).
    const double daemon_bound = 2 * r.fresh.daemon_claim_ms + 1;
    if (!(r.held.daemon_claim_ms <= daemon_bound)) {
      broken.push_back(fmt::format("{}: the daemon's mean claim at the end of the hold {} ms > {} ms (2 x fresh {} ms + 1 ms)",
                                 r.v.name, Ms(r.held.daemon_claim_ms), Ms(daemon_bound), Ms(r.fresh.daemon_claim_ms)));
    }
    const double claim_bound = 2 * r.fresh.warm_claim_ms + 1;
    if (!(r.held.warm_claim_ms <= claim_bound)) {
      broken.push_back(fmt::format("{}: warm claim at the end of the hold {} ms > {} ms (2 x fresh {} ms + 1 ms)",
                                    r.v.name, Ms(r.held.warm_claim_ms), Ms(claim_bound), Ms(r.fresh.warm_claim_ms)));
    }
    const double p99_bound = 2 * r.fresh.p99_ms + 10;
    if (!(r.held.p99_ms <= p99_bound)) {
      broken.push_back(fmt::format("{}: p99 enqueue-to-start at the end of the hold {} ms > {} ms (2 x fresh {} ms + 10 ms)",
                                    r.v.name, Ms(r.held.p99_ms), Ms(p99_bound), Ms(r.fresh.p99_ms)));
    }
    if (r.fresh.latency_jobs == 0 || r.held.latency_jobs == 0) {
      broken.push_back(fmt::format("{}: no job started in the {} window", r.v.name,
                                   r.fresh.latency_jobs == 0 ? "fresh" : "held"));
    }
    if (held_max > 2 * rate) {
      broken.push_back(fmt::format("{}: the backlog reached {} during the hold > {} (2 s of arrivals)",
                                    r.v.name, held_max, 2 * rate));
    }
    if (rise > rate / 4.0) {
      broken.push_back(fmt::format("{}: the backlog rose by {:.0f} over the hold's last third (least squares) > {} (a quarter second of arrivals)",
                                    r.v.name, rise, rate / 4));
    }
  }
  std::cout << "\nother statements, median ms fresh -> end of the hold (printed, not asserted):\n";
  for (auto& r : runs) {
    for (auto& [name, ms] : r.fresh.statements_ms) {
      std::cout << fmt::format("  {} daemon, {}: {} -> {}\n", r.v.name, name, Ms(ms), Ms(r.held.statements_ms[name]));
    }
  }
  for (auto& [name, ms] : shared_fresh) {
    std::cout << fmt::format("  {}: {} -> {}\n", name, Ms(ms), Ms(shared_held[name]));
  }
  std::int64_t enqueued = 0;
  double max_call = 0;
  for (auto& r : runs) {
    enqueued += r.producer->enqueued();
    max_call = std::max(max_call, r.producer->max_call_ms());
  }
  std::cout << fmt::format("\n{} jobs enqueued (slowest enqueue_many call {:.1f} ms); drained {:.1f} s after the "
                           "producers stopped; test time {:.0f} s; load {}\n",
                           enqueued, max_call, drain_s, SecondsSince(t0),
                           ReadProcFile("/proc/loadavg").substr(0, 14))
            << std::flush;
  for (const std::string& b : broken) FAIL_CHECK(b);
}

}  // namespace
}  // namespace akadzed::test
