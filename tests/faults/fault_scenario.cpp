#include "faults/fault_scenario.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>
#include <signal.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "core/duration.h"
#include "pg/pg_error.h"
#include "support/test_cluster.h"

namespace akadzed::test {

using namespace std::chrono_literals;

std::int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string ReadProcFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string text;
  char buffer[4096];
  for (;;) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  close(fd);
  return text;
}

bool ProcessRunning(const std::string& needle) {
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return false;
  bool found = false;
  while (dirent* e = readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const std::string cmdline = ReadProcFile(std::string("/proc/") + e->d_name + "/cmdline");
    if (cmdline.find(needle) != std::string::npos) {
      found = true;
      break;
    }
  }
  closedir(proc);
  return found;
}

bool Long() {
  const char* v = std::getenv("AKADZED_LONG_FAULTS");
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}

std::string ShellHandlerScript(const std::string& record, bool ignore_term) {
  return std::string("#!/bin/bash\n") + (ignore_term ? "trap '' TERM\n" : "") +
         "start=${EPOCHREALTIME//[!0-9]/}\n"
         "IFS= read -r args\n"
         "ms=0\n"
         "[[ $args =~ \\\"ms\\\":\\ *([0-9]+) ]] && ms=${BASH_REMATCH[1]}\n"
         "if (( ms > 0 )); then\n"
         "  printf -v frac '%03d' $(( ms % 1000 ))\n"
         "  sleep \"$(( ms / 1000 )).$frac\"\n"
         "fi\n"
         "echo \"$AKADZE_JOB_ID $AKADZE_RUN_COUNT $start ${EPOCHREALTIME//[!0-9]/}\" >> " +
         record + "\n";
}

FaultScenario::FaultScenario(ScenarioOptions options) : options_(std::move(options)) {
  db_ = options_.database.empty() ? FreshDatabase() : options_.database;
  conn_ = std::make_unique<pg::Connection>(pg::Connection::Open(db_));
  std::string name(conn_->exec("SELECT current_database()").text(0, 0));
  conn_->exec("ALTER DATABASE \"" + name + "\" SET synchronous_commit = on");
  *conn_ = pg::Connection::Open(db_);  // sessions from now on commit durably
  InstallAuditLog(*conn_);
  shell_script_ = dir_.Write("handler.sh", ShellHandlerScript(record_path()), true);
  config_ = WriteConfig();
  sampler_ = std::make_unique<LimitSampler>(db_);
}

FaultScenario::~FaultScenario() {
  sampler_->Stop();
  for (auto& d : daemons_) {
    if (d->running()) d->Signal(SIGKILL);
  }
  daemons_.clear();
  WaitHandlersGone(30s);
}

std::string FaultScenario::WriteConfig() {
  std::ostringstream y;
  y << "worker:\n"
    << "  heartbeat_interval: " << options_.heartbeat_interval << "\n"
    << "  heartbeat_ttl: " << options_.heartbeat_ttl << "\n"
    << "  poll_interval: " << options_.poll_interval << "\n"
    << "  shutdown_timeout: 10s\n"
    << "queues:\n"
    << "  - {name: fair, slots: " << options_.slots << ", mode: fair}\n"
    // Queue "ordered" prefetches a job per daemon beyond its slots: those
    // are running in the database while they wait, and faults must not
    // lose, duplicate or overshoot them either.
    << "  - {name: ordered, slots: " << options_.slots << ", prefetch: 1, mode: ordered}\n"
    << "handlers:\n"
    << "  shell:\n"
    << "    shell: {command: [\"" << shell_script_ << "\"], kill_grace: 500ms}\n"
    << "  plugin:\n"
    << "    plugin: {path: libsleepy_plugin.so, config: {record: \"" << record_path() << "\"}}\n"
    << "pruning: {enabled: false}\n"
    << "metrics: {enabled: false}\n"
    << "logging: {level: " << options_.log_level << ", format: logfmt}\n";
  return dir_.Write("akadzed.yaml", y.str());
}

pg::Result FaultScenario::Query(const std::string& sql, const pg::Params& params) {
  auto deadline = std::chrono::steady_clock::now() + 90s;
  for (;;) {
    try {
      if (!conn_->healthy()) *conn_ = pg::Connection::Open(db_);
      return conn_->exec(sql, params);
    } catch (const pg::ConnectionError&) {
      if (std::chrono::steady_clock::now() > deadline) throw;
      // The server is restarting: try again shortly.
      std::this_thread::sleep_for(50ms);
    }
  }
}

std::int64_t FaultScenario::CountJobs(const std::string& where) {
  return Query("SELECT count(*) FROM akadze.jobs WHERE " + where).int64(0, 0);
}

void FaultScenario::SetLimits(int keys) {
  Query(
      "INSERT INTO akadze.limits (key, max_running, max_starts, starts_window)"
      " SELECT 'k' || i, 1 + i % 4, CASE WHEN i % 10 = 0 THEN 20 END,"
      "        CASE WHEN i % 10 = 0 THEN interval '1 second' END"
      " FROM generate_series(0, $1::int / 2 - 1) AS i",
      pg::Params().add(keys));
  Query("INSERT INTO akadze.limits (key, max_running) VALUES ('*', 3)");
  // Queue "fair" is capped cluster-wide below what two daemons' slots allow.
  Query("INSERT INTO akadze.queue_caps (queue, max_running) VALUES ('fair', $1::int)",
        pg::Params().add(options_.slots * 2 - 1));
}

void FaultScenario::Enqueue(const std::string& task, int count, int keys, int min_ms, int max_ms,
                            double seed) {
  // setseed and the INSERT in one session and statement order: the same jobs
  // on every run.
  Query("SELECT setseed($1::float8)", pg::Params().add(std::to_string(seed)));
  Query(
      "INSERT INTO akadze.jobs (task, queue, priority, limit_key, args, max_attempts)"
      " SELECT $1, CASE WHEN i % 2 = 0 THEN 'fair' ELSE 'ordered' END, (random() * 2)::int,"
      "        CASE WHEN i % 10 = 9 THEN NULL ELSE 'k' || floor(random() * $3::int)::int END,"
      "        jsonb_build_object('ms', $4::int + floor(random() * ($5::int - $4::int + 1))::int),"
      "        $6::int"
      " FROM generate_series(0, $2::int - 1) AS i",
      pg::Params().add(task).add(count).add(keys).add(min_ms).add(max_ms).add(
          options_.max_attempts));
}

int FaultScenario::StartDaemon(const std::string& database_url) {
  EnvChanges env{{"AKADZED_PLUGIN_PATH", std::string(AKADZED_FAULT_PLUGIN_DIR)}};
  int index = static_cast<int>(daemons_.size());
  std::string log = dir_.path() + "/daemon" + std::to_string(index) + ".log";
  daemons_.push_back(std::make_unique<DaemonProcess>(
      std::vector<std::string>{"run", "--config", config_, "--database-url",
                               database_url.empty() ? db_ : database_url},
      env, log));
  return index;
}

void FaultScenario::KillDaemon(int index) {
  daemon(index).Signal(SIGKILL);
  daemon(index).Wait(30s);
}

std::vector<int> FaultScenario::LiveDaemons() {
  std::vector<int> live;
  for (int i = 0; i < daemons_started(); ++i) {
    if (daemon(i).running()) live.push_back(i);
  }
  return live;
}

bool FaultScenario::WaitAllFinished(std::chrono::milliseconds timeout) {
  return WaitUntil(
      [&] { return CountJobs("state NOT IN ('succeeded', 'failed', 'cancelled')") == 0; },
      timeout);
}

bool FaultScenario::WaitHandlersGone(std::chrono::milliseconds timeout) {
  return WaitUntil([&] { return !ProcessRunning(shell_script_); }, timeout);
}

int FaultScenario::StopDaemons() {
  int bad = 0;
  const std::vector<int> live = LiveDaemons();
  // A daemon started a moment ago may not have blocked its signals yet: a
  // SIGTERM then ends it by the default action (exit 143, which systemd
  // counts as a clean stop too), before it could drain. Stop it once up.
  for (int i : live) daemon(i).WaitForLog("event=started", 30s);
  for (int i : live) daemon(i).Signal(SIGTERM);
  for (int i : live) {
    const int code = daemon(i).Wait(60s);
    if (code == 0) continue;
    ++bad;
    // Its exit and the end of its log, for the failure's report.
    std::vector<std::string> lines;
    std::istringstream log(daemon(i).Log());
    for (std::string line; std::getline(log, line);) lines.push_back(line);
    std::cerr << "daemon " << i << " did not stop cleanly after SIGTERM: exit " << code
              << " (-1: still running after 60 s); its last log lines:\n";
    for (std::size_t k = lines.size() > 8 ? lines.size() - 8 : 0; k < lines.size(); ++k) std::cerr << lines[k] << "\n";
  }
  return bad;
}

AuditReport FaultScenario::RunAudit(bool records_complete) {
  return RunAudit(ReadExecutions(record_path()), records_complete);
}

AuditReport FaultScenario::RunAudit(std::vector<Execution> executions, bool records_complete) {
  sampler_->Stop();
  Query("SELECT 1");  // a healthy connection (after a restart or a failover)
  AuditOptions options;
  options.executions = std::move(executions);
  options.records_complete = records_complete;
  options.heartbeat_ttl_us = ParseDuration(options_.heartbeat_ttl).value_or(options.heartbeat_ttl_us);
  options.sampler = sampler_.get();
  return Audit(*conn_, options);
}

void FaultScenario::Report(const std::string& scenario, const AuditReport& audit,
                           const std::string& faults, const std::string& recovery) {
  double seconds = static_cast<double>(audit.last_finish_us - audit.first_claim_us) / 1e6;
  std::ostringstream line;
  line << scenario << (Long() ? " (long)" : " (CI)") << ": " << audit.jobs << " jobs in "
       << seconds << " s (" << (seconds > 0 ? static_cast<double>(audit.jobs) / seconds : 0)
       << " jobs/s), faults: " << faults << ", recovery: " << recovery << " | "
       << audit.Summary();
  std::cout << line.str() << std::endl;
  if (const char* file = std::getenv("AKADZED_FAULT_REPORT"); file != nullptr && *file != '\0') {
    std::ofstream out(file, std::ios::app);
    out << "| " << scenario << (Long() ? " (long)" : " (CI)") << " | " << audit.jobs << " | "
        << faults << " | " << audit.lost << " | " << audit.duplicates() << " | "
        << audit.overshoots() << " | " << recovery << " |\n";
    out << "<!-- " << line.str() << " -->\n";
  }
}

int FaultScenario::CountLogLines(int index, const std::string& needle) {
  int n = 0;
  for (const std::string& line : Lines(daemon(index).Log())) {
    if (line.find(needle) != std::string::npos) ++n;
  }
  return n;
}

}  // namespace akadzed::test
