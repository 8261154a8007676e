// The daemon end to end: the real `akadzed` binary as a child process against
// a real PostgreSQL, with shell and plugin handlers. Every wait is for a
// condition (a job state, a log line, an exit), never a fixed sleep.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <numeric>
#include <regex>
#include <set>
#include <nlohmann/json.hpp>

#include "pg/connection.h"
#include "support/daemon_process.h"
#include "support/http_probe.h"
#include "support/prometheus_text.h"
#include "support/test_cluster.h"

namespace akadzed::test {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// Fast timings so that leases, retries and drains show within seconds.
constexpr const char* kFastWorker = R"(worker:
  heartbeat_interval: 200ms
  heartbeat_ttl: 1500ms
  poll_interval: 100ms
  shutdown_timeout: 2s
)";

struct DaemonFixture {
  std::string db = FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  TempDir dir;
  int started = 0;

  // A config with `handlers` (YAML under `handlers:`) and one fair queue,
  // with `queue_keys` (YAML lines indented for it) besides its own.
  std::string Config(const std::string& handlers, const std::string& worker = kFastWorker,
                     int slots = 4, int prefetch = 0, const std::string& queue_keys = "") {
    return dir.Write("akadzed.yaml", worker + "queues:\n  - name: default\n    slots: " +
                                         std::to_string(slots) + "\n    prefetch: " +
                                         std::to_string(prefetch) + "\n    mode: fair\n" + queue_keys +
                                         "handlers:\n" +
                                         handlers + "logging:\n  level: debug\n  format: logfmt\n"
                                         // Any free port: tests run side by side.
                                         "metrics: {listen: 127.0.0.1:0}\n");
  }
  // `cgroup_procs`: the daemon joins that cgroup before it execs.
  std::unique_ptr<DaemonProcess> Start(const std::string& config, EnvChanges env = {},
                                       const std::string& cgroup_procs = "") {
    env.emplace("AKADZED_PLUGIN_PATH", std::string(AKADZED_TEST_PLUGIN_DIR) + ":" +
                                           AKADZED_EXAMPLE_PLUGIN_DIR);
    std::string log = dir.path() + "/daemon" + std::to_string(++started) + ".log";
    return std::make_unique<DaemonProcess>(
        std::vector<std::string>{"run", "--config", config, "--database-url", db}, env, log, cgroup_procs);
  }
  std::int64_t Enqueue(const std::string& task, const std::string& args = "{}",
                       int max_attempts = 3) {
    return conn
        .exec("INSERT INTO akadze.jobs (task, args, max_attempts) VALUES ($1, $2::jsonb, $3)"
              " RETURNING id",
              pg::Params().add(task).add(args).add(max_attempts))
        .int64(0, 0);
  }
  json Row(std::int64_t id) {
    return json::parse(conn.exec("SELECT to_jsonb(j) FROM akadze.jobs j WHERE id = $1",
                                 pg::Params().add(id))
                           .text(0, 0));
  }
  std::string State(std::int64_t id) { return Row(id)["state"]; }
  bool WaitState(std::int64_t id, const std::string& state, std::chrono::milliseconds t = 30s) {
    return WaitUntil([&] { return State(id) == state; }, t);
  }
};

std::string Shell(const std::string& task, const std::string& script_path,
                  const std::string& extra = "") {
  // kill_grace 500ms unless `extra` sets it: the fast timings' lease
  // (1500ms - kill_grace - 250ms) must cover two heartbeat intervals.
  const std::string grace = extra.find("kill_grace:") == std::string::npos ? "      kill_grace: 500ms\n" : "";
  return "  " + task + ":\n    shell:\n      command: [\"" + script_path + "\"]\n" + grace + extra;
}

// Gone, or a zombie nobody reaps yet (an orphan's new parent may be slow or,
// in some containers, never reap): either way it runs no more.
bool ProcessGone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return true;
  auto close_paren = text.rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < text.size() &&
         text[close_paren + 2] == 'Z';
}

pid_t ReadPid(const std::string& file) {
  std::ifstream in(file);
  pid_t pid = 0;
  in >> pid;
  return pid;
}

TEST_CASE("a shell job succeeds with its result and the log shows start and finish",
          "[daemon]") {
  DaemonFixture f;
  std::string script = f.dir.Write("ok.sh",
                                   "#!/bin/sh\nread -r args\necho \"job $AKADZE_JOB_ID on $AKADZE_QUEUE\"\n"
                                   "printf '{\"result\": {\"args\": %s, \"attempt\": %s}}' \"$args\" "
                                   "\"$AKADZE_ATTEMPT\" >&3\n",
                                   true);
  auto daemon = f.Start(f.Config(Shell("ok", script)));
  auto id = f.Enqueue("ok", R"({"secret_arg": 7})");
  REQUIRE(f.WaitState(id, "succeeded"));
  json row = f.Row(id);
  // AKADZE_ATTEMPT numbers this run's attempt from 1 (the column counts failures).
  CHECK(row["result"] == json{{"args", {{"secret_arg", 7}}}, {"attempt", 1}});
  CHECK(row["attempt"] == 0);
  REQUIRE(daemon->WaitForLog("finish job=" + std::to_string(id)));
  std::string log = daemon->Log();
  CHECK(log.find("start job=" + std::to_string(id) + " task=ok queue=default") != std::string::npos);
  CHECK(log.find("outcome=success state=succeeded") != std::string::npos);
  CHECK(log.find("job " + std::to_string(id) + " on default") != std::string::npos);
  // Job args and results never reach the log.
  CHECK(log.find("secret_arg") == std::string::npos);
  daemon->Signal(SIGTERM);
  CHECK(daemon->Wait() == 0);
}

TEST_CASE("a failing job is retried with backoff, then succeeds", "[daemon]") {
  DaemonFixture f;
  std::string script = f.dir.Write(
      "flaky.sh", "#!/bin/sh\nif [ \"$AKADZE_ATTEMPT\" = 1 ]; then echo boom >&2; exit 3; fi\n", true);
  auto daemon = f.Start(f.Config(Shell("flaky", script)));
  auto id = f.Enqueue("flaky");
  REQUIRE(f.WaitState(id, "succeeded"));
  json row = f.Row(id);
  CHECK(row["attempt"] == 1);
  CHECK(row["run_count"] == 2);
  REQUIRE(row["errors"].size() == 1);
  CHECK(row["errors"][0]["error"] == "ExitStatus");
  CHECK(row["errors"][0]["message"] == "exited with status 3: boom");
  std::string log = daemon->Log();
  CHECK(log.find("outcome=retry state=queued failed_runs=1") != std::string::npos);
  CHECK(log.find("run_in=1.0s") != std::string::npos);
  // The second run started no earlier than the 1 s backoff after the first.
  auto gap = f.conn.exec("SELECT extract(epoch FROM started_at - created_at) FROM akadze.jobs"
                         " WHERE id = $1", pg::Params().add(id)).float64(0, 0);
  CHECK(gap >= 1.0);
}

TEST_CASE("a job that always fails is failed after max_attempts", "[daemon]") {
  DaemonFixture f;
  std::string script = f.dir.Write("bad.sh", "#!/bin/sh\nexit 1\n", true);
  auto daemon = f.Start(f.Config(Shell("bad", script)));
  auto id = f.Enqueue("bad", "{}", 2);
  REQUIRE(f.WaitState(id, "failed"));
  json row = f.Row(id);
  CHECK(row["attempt"] == 2);
  CHECK(row["errors"].size() == 2);
  CHECK_FALSE(row["finished_at"].is_null());
}

TEST_CASE("keep_succeeded: false deletes a queue's jobs as they succeed; a failed job stays",
          "[daemon][keep_succeeded]") {
  DaemonFixture f;
  std::string ok = f.dir.Write("ok.sh", "#!/bin/sh\nprintf '{\"result\": 1}' >&3\n", true);
  std::string bad = f.dir.Write("bad.sh", "#!/bin/sh\nexit 1\n", true);
  const std::string config =
      f.Config(Shell("ok", ok) + Shell("bad", bad), kFastWorker, 4, 4, "    keep_succeeded: false\n");
  std::vector<std::int64_t> oks;
  for (int i = 0; i < 20; ++i) oks.push_back(f.Enqueue("ok"));
  const std::int64_t failed = f.Enqueue("bad", "{}", 1);
  // An application's row points at one of them: its row cannot be deleted,
  // so it is kept as succeeded, and the others of its batch go.
  const std::int64_t referenced = oks[7];
  f.conn.exec("CREATE TABLE receipts (job_id bigint REFERENCES akadze.jobs (id))");
  f.conn.exec("INSERT INTO receipts VALUES ($1)", pg::Params().add(referenced));
  auto daemon = f.Start(config);
  REQUIRE(f.WaitState(failed, "failed"));
  REQUIRE(f.WaitState(referenced, "succeeded"));
  REQUIRE(WaitUntil([&] { return Count(f.conn, "SELECT count(*) FROM akadze.jobs WHERE task = 'ok'") == 1; },
                    30s));
  CHECK(f.Row(referenced)["result"] == 1);
  CHECK(daemon->WaitForLog("event=delete_refused job=" + std::to_string(referenced)));
  CHECK(f.Row(failed)["errors"].size() == 1);
  // Each deleted job's finish is logged as a success.
  for (std::int64_t id : oks) {
    CHECK(daemon->WaitForLog("finish job=" + std::to_string(id) +
                             " task=ok queue=default outcome=success state=succeeded"));
  }
  daemon->Signal(SIGTERM);
  CHECK(daemon->Wait() == 0);
}

TEST_CASE("a snoozed job runs again after its delay without spending an attempt", "[daemon]") {
  DaemonFixture f;
  std::string script = f.dir.Write(
      "snooze.sh",
      "#!/bin/sh\nif [ \"$AKADZE_RUN_COUNT\" = 1 ]; then echo '{\"outcome\": \"snooze\", \"delay\": \"1s\"}' >&3; fi\n",
      true);
  auto daemon = f.Start(f.Config(Shell("sleepy", script)));
  auto id = f.Enqueue("sleepy");
  REQUIRE(f.WaitState(id, "succeeded"));
  json row = f.Row(id);
  CHECK(row["attempt"] == 0);
  CHECK(row["snoozes"] == 1);
  CHECK(row["run_count"] == 2);
  CHECK(row["errors"].empty());
}

TEST_CASE("a timeout kills the handler's whole process group", "[daemon]") {
  DaemonFixture f;
  std::string pidfile = f.dir.path() + "/grandchild.pid";
  std::string script = f.dir.Write(
      "slow.sh", "#!/bin/sh\nsleep 300 &\necho $! > " + pidfile + "\nwait\n", true);
  auto daemon = f.Start(f.Config(Shell("slow", script, "      timeout: 1s\n      kill_grace: 500ms\n")));
  auto id = f.Enqueue("slow", "{}", 1);
  REQUIRE(f.WaitState(id, "failed"));
  json row = f.Row(id);
  CHECK(row["errors"][0]["error"] == "Timeout");
  pid_t grandchild = ReadPid(pidfile);
  REQUIRE(grandchild > 0);
  CHECK(WaitUntil([&] { return ProcessGone(grandchild); }, 10s));
}

TEST_CASE("cancelling a running job kills its handler within a heartbeat", "[daemon]") {
  DaemonFixture f;
  std::string pidfile = f.dir.path() + "/child.pid";
  std::string script =
      f.dir.Write("long.sh", "#!/bin/sh\necho $$ > " + pidfile + "\nexec sleep 300\n", true);
  auto daemon = f.Start(f.Config(Shell("long", script)));
  auto id = f.Enqueue("long");
  REQUIRE(f.WaitState(id, "running"));
  REQUIRE(WaitUntil([&] { return ReadPid(pidfile) > 0; }));
  f.conn.exec("UPDATE akadze.jobs SET cancel_requested_at = now() WHERE id = $1",
              pg::Params().add(id));
  REQUIRE(f.WaitState(id, "cancelled", 10s));
  CHECK(WaitUntil([&] { return ProcessGone(ReadPid(pidfile)); }, 10s));
  CHECK(f.Row(id)["attempt"] == 0);
  // Logged by the lease keeper after it asked the handler to stop: the
  // cancel can be recorded before the line is written.
  CHECK(daemon->WaitForLog("cancel_requested job=" + std::to_string(id)));
}

TEST_CASE("SIGTERM drains short jobs and releases long ones", "[daemon]") {
  DaemonFixture f;
  std::string pidfile = f.dir.path() + "/long.pid";
  std::string script = f.dir.Write(
      "sleep.sh",
      "#!/bin/sh\nread -r args\ncase \"$args\" in *long*) echo $$ > " + pidfile +
          "; exec sleep 300;; esac\nsleep 0.5\n",
      true);
  auto daemon = f.Start(f.Config(Shell("nap", script, "      kill_grace: 500ms\n")));
  auto long_job = f.Enqueue("nap", R"({"kind": "long"})");
  auto short_job = f.Enqueue("nap", R"({"kind": "short"})");
  REQUIRE(WaitUntil([&] { return f.State(long_job) == "running" && f.State(short_job) == "running"; }));
  REQUIRE(WaitUntil([&] { return ReadPid(pidfile) > 0; }));
  daemon->Signal(SIGTERM);
  CHECK(daemon->Wait(30s) == 0);
  std::string log = daemon->Log();
  INFO(log);
  CHECK(f.State(short_job) == "succeeded");
  json row = f.Row(long_job);
  CHECK(row["state"] == "queued");
  CHECK(row["attempt"] == 0);
  CHECK(row["worker_id"].is_null());
  CHECK(row["errors"].empty());
  CHECK(f.conn.exec("SELECT count(*) FROM akadze.workers").int64(0, 0) == 0);
  CHECK(log.find("outcome=release state=queued") != std::string::npos);
  CHECK(log.find("stopped worker=") != std::string::npos);
  CHECK(ProcessGone(ReadPid(pidfile)));
}

// The daemon's threads named "exec <queue>" (the executors; the name is cut
// to 15 bytes).
int ExecutorThreads(pid_t pid, const std::string& queue) {
  int n = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    if (std::getline(comm, name) && name == ("exec " + queue).substr(0, 15)) ++n;
  }
  return n;
}

TEST_CASE("executors start as jobs need them, up to the slots, and stop with the daemon", "[daemon]") {
  DaemonFixture f;
  const std::string pids = f.dir.path() + "/pids";
  std::string script =
      f.dir.Write("long.sh", "#!/bin/sh\ncat >/dev/null\necho $$ >> " + pids + "\nexec sleep 300\n", true);
  auto lines_in = [&] {
    std::ifstream in(pids);
    return std::count(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>(), '\n');
  };
  auto daemon = f.Start(f.Config(Shell("nap", script), kFastWorker, 12));
  REQUIRE(daemon->WaitForLog("started worker="));
  // Idle, it has one executor, not one per slot (named once it runs).
  CHECK(WaitUntil([&] { return ExecutorThreads(daemon->pid(), "default") == 1; }));
  std::vector<std::int64_t> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(f.Enqueue("nap"));
  REQUIRE(WaitUntil([&] { return lines_in() == 5; }));
  // Five jobs at once on five executors; a sixth may have started for a
  // job another took first (at most one is on its way to a job).
  const int five = ExecutorThreads(daemon->pid(), "default");
  CHECK(five >= 5);
  CHECK(five <= 6);
  // Twenty more: the slots bound the executors, and the jobs beyond them
  // wait queued.
  for (int i = 0; i < 20; ++i) ids.push_back(f.Enqueue("nap"));
  REQUIRE(WaitUntil([&] { return lines_in() == 12; }));
  CHECK(ExecutorThreads(daemon->pid(), "default") == 12);
  CHECK(test::JobsInState(f.conn, "running") == 12);
  CHECK(test::JobsInState(f.conn, "queued") == 13);
  daemon->Signal(SIGTERM);
  CHECK(daemon->Wait(30s) == 0);
  INFO(daemon->Log());
  // The long ones were stopped at shutdown_timeout and released.
  CHECK(test::JobsInState(f.conn, "queued") == 25);
}

// A pids cgroup of its own (cgroup v1's pids hierarchy, or v2 with the pids
// controller), removed with the object; path() is empty where none can be
// made (not root, no cgroupfs).
class PidsCgroup {
 public:
  PidsCgroup() {
    namespace fs = std::filesystem;
    const std::string name = "akadzed-test-" + std::to_string(getpid());
    std::error_code ec;
    if (fs::exists("/sys/fs/cgroup/pids/cgroup.procs", ec)) {
      if (fs::create_directory("/sys/fs/cgroup/pids/" + name, ec)) path_ = "/sys/fs/cgroup/pids/" + name;
      return;
    }
    std::ifstream controllers("/sys/fs/cgroup/cgroup.controllers");
    std::string line;
    if (!std::getline(controllers, line) || line.find("pids") == std::string::npos) return;
    std::ofstream("/sys/fs/cgroup/cgroup.subtree_control") << "+pids";
    const std::string dir = "/sys/fs/cgroup/" + name;
    if (!fs::create_directory(dir, ec)) return;
    if (fs::exists(dir + "/pids.max", ec)) {
      path_ = dir;
    } else {
      rmdir(dir.c_str());  // made, but the pids controller is not enabled under the root
    }
  }
  ~PidsCgroup() {
    if (!path_.empty()) rmdir(path_.c_str());  // empty once the process in it ended
  }
  const std::string& path() const { return path_; }
  std::string procs() const { return path_ + "/cgroup.procs"; }
  void Limit(int max) const { std::ofstream(path_ + "/pids.max") << max; }
  // Moves `pid` (all its threads) into the group, with at most `max` tasks.
  bool Confine(pid_t pid, int max) const {
    std::ofstream(path_ + "/pids.max") << max;
    std::ofstream procs(path_ + "/cgroup.procs");
    procs << pid << std::flush;
    return procs.good();
  }

 private:
  std::string path_;
};

int ThreadCount(pid_t pid) {
  const auto tasks = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task");
  return static_cast<int>(std::distance(std::filesystem::begin(tasks), std::filesystem::end(tasks)));
}

TEST_CASE("a queue that cannot start an executor runs its jobs on those it has, claims no more than they run, and tries again",
          "[daemon]") {
  PidsCgroup cgroup;
  if (cgroup.path().empty()) {
    WARN("no pids cgroup can be made here (not root, or no cgroupfs): not tested");
    return;
  }
  DaemonFixture f;
  // Paused from before the daemon starts, so that its claims wait for the
  // twelve jobs below.
  f.conn.exec("INSERT INTO akadze.queue_pauses (queue) VALUES ('default')");
  auto daemon = f.Start(f.Config("  sleepy:\n    plugin: {path: libsleepy_plugin.so}\n", kFastWorker, 12));
  REQUIRE(daemon->WaitForLog("started worker="));
  REQUIRE(WaitUntil([&] { return ExecutorThreads(daemon->pid(), "default") == 1; }));
  // The metrics listener's pool starts just after the log says "started":
  // once it answered, the daemon's own threads are all there, and
  // executors are the only ones a burst of jobs starts.
  const int port = ListenerPort(*daemon);
  REQUIRE(WaitUntil([&] { return HttpGet(port, "/healthz").status == 200; }));
  // Room for two more threads.
  REQUIRE(cgroup.Confine(daemon->pid(), ThreadCount(daemon->pid()) + 2));
  // Twelve jobs that one claim takes together, claimed for twelve
  // executors of which only three start. Enqueued in one statement, ready
  // since a minute ago: a claim counts as ready the jobs whose run_at is at
  // most its transaction's start, so jobs enqueued one by one, ready at
  // their INSERT, were split between claims whenever a claim's backend was
  // held up between its BEGIN and its read while they were inserted (seen
  // in CI: a claim of 3, then one of 9; under TSan 8, then 4).
  f.conn.exec("INSERT INTO akadze.jobs (task, args, run_at)"
              " SELECT 'sleepy', '{\"ms\": 1500}', now() - interval '1 minute' FROM generate_series(1, 12)");
  f.conn.exec("DELETE FROM akadze.queue_pauses");
  REQUIRE(daemon->WaitForLog("executor_start_failed queue=default executors=3 slots=12"));
  INFO(daemon->Log());
  CHECK(daemon->Log().find("claim queue=default jobs=12 ") != std::string::npos);
  // The nine the missing executors would have run go back to queued at
  // once (no attempt spent), not held here until a running job ends 1.5 s
  // later: when no more than three run, none has ended yet (one
  // snapshot of both counts: a margin of the jobs' 1.5 s, where waiting for
  // the count alone had 700 ms).
  std::int64_t running = 0, ended = 0;
  REQUIRE(WaitUntil([&] {
    pg::Result r = f.conn.exec("SELECT count(*) FILTER (WHERE state = 'running'),"
                               " count(*) FILTER (WHERE state = 'succeeded') FROM akadze.jobs");
    running = r.int64(0, 0);
    ended = r.int64(0, 1);
    return running <= 3;
  }));
  CHECK(ended == 0);
  // Every job runs, three at a time at most, none lost or failed.
  CHECK(WaitUntil([&] { return test::JobsInState(f.conn, "succeeded") == 12; }, 60s));
  // No attempt spent; the nine were claimed a second time.
  CHECK(f.conn.exec("SELECT max(attempt) FROM akadze.jobs").int64(0, 0) == 0);
  CHECK(f.conn.exec("SELECT count(*) FROM akadze.jobs WHERE run_count = 2").int64(0, 0) == 9);
  CHECK(ExecutorThreads(daemon->pid(), "default") == 3);
  // While the limit holds, the queue takes no more than the three
  // executors run: the others stay queued for another daemon, not held
  // here, and its try for one more executor 10 s after the failure (which
  // fails again: logged at debug) claims nothing.
  for (int i = 0; i < 6; ++i) f.Enqueue("sleepy", R"({"ms": 600000})");
  REQUIRE(WaitUntil([&] {
    return test::JobsInState(f.conn, "running") == 3 && test::JobsInState(f.conn, "queued") == 3;
  }));
  // A try from now on (tries come every 10 s while they fail; one during the
  // twelve jobs above, on a slow machine, would say nothing of these six).
  const std::size_t from = daemon->Log().size();
  REQUIRE(WaitUntil(
      [&] {
        return daemon->Log().find("level=debug event=executor_start_failed queue=default executors=3",
                                  from) != std::string::npos;
      },
      30s));
  CHECK_FALSE(WaitUntil([&] { return test::JobsInState(f.conn, "running") > 3; }, 500ms));
  CHECK(test::JobsInState(f.conn, "queued") == 3);
  CHECK(f.conn.exec("SELECT max(run_count) FROM akadze.jobs WHERE args->>'ms' = '600000'").int64(0, 0) == 1);
  // Once the limit is raised, its next try starts an executor and it has
  // all its slots again: the other three run.
  cgroup.Limit(1000);
  CHECK(WaitUntil([&] { return test::JobsInState(f.conn, "running") == 6; }, 30s));
  CHECK(daemon->WaitForLog("executor_start_recovered queue=default executors=4 slots=12"));
  CHECK(WaitUntil([&] { return ExecutorThreads(daemon->pid(), "default") == 6; }));
  daemon->Signal(SIGTERM);
  CHECK(daemon->Wait(30s) == 0);
  CHECK(test::JobsInState(f.conn, "queued") == 6);
  // Logged as an error once, not at every try that failed.
  const std::string log = daemon->Log();
  const auto error = log.find("level=error event=executor_start_failed");
  CHECK(error != std::string::npos);
  CHECK(log.find("level=error event=executor_start_failed", error + 1) == std::string::npos);
}

// A daemon started under a limit on threads (systemd's TasksMax, a pids
// cgroup) too low for its own threads: wherever the limit cuts in (the
// lease keeper, the finisher, a claim loop, the listener, the metrics
// listener's request threads...) it exits 1 with one `start_failed` line,
// never an abort (before, the metrics listener's thread pool ended the
// process in std::terminate, and a claim loop that could not start left
// an uncaught exception); what it claimed meanwhile runs or goes back to
// queued. With room for all of them it starts and runs.
TEST_CASE("a daemon that cannot start its threads exits 1 with one start_failed line and loses no job",
          "[daemon]") {
  PidsCgroup cgroup;
  if (cgroup.path().empty()) {
    WARN("no pids cgroup can be made here (not root, or no cgroupfs): not tested");
    return;
  }
  DaemonFixture f;
  const std::string config = f.Config("  sleepy:\n    plugin: {path: libsleepy_plugin.so}\n", kFastWorker, 4);
  for (int i = 0; i < 40; ++i) f.Enqueue("sleepy", R"({"ms": 20})");
  std::set<std::string> failed_at;
  // Under AddressSanitizer (.ci/run) the leak check at exit runs in a task
  // of its own, which a daemon at its limit cannot start: LeakSanitizer
  // ends with a "fatal error" report instead of a check. The daemons
  // started under the limit run without it; the one with room below keeps
  // it.
  EnvChanges confined_env;
  if (const char* asan = std::getenv("ASAN_OPTIONS"); asan != nullptr) {
    confined_env.emplace("ASAN_OPTIONS", std::string(asan) + ":detect_leaks=0");
  }
  int limit = 1;
  for (;; ++limit) {
    REQUIRE(limit <= 40);
    cgroup.Limit(limit);
    auto daemon = f.Start(config, confined_env, cgroup.procs());
    REQUIRE(WaitUntil([&] { return !daemon->running() || daemon->Log().find("started worker=") != std::string::npos; }));
    const std::string log = daemon->Log();
    INFO("pids.max " << limit << ":\n" << log);
    if (log.find("started worker=") != std::string::npos) {
      daemon->Signal(SIGTERM);
      // It ran under the limit: no start line failed, and it stops cleanly.
      CHECK(daemon->Wait(30s) == 0);
      break;
    }
    REQUIRE(daemon->Wait(30s) == 1);
    const auto at = log.find("event=start_failed");
    REQUIRE(at != std::string::npos);
    CHECK(log.find("event=start_failed", at + 1) == std::string::npos);
    CHECK(log.find("terminate") == std::string::npos);
    const auto end = log.find('\n', at);
    const std::string line = log.substr(at, end - at);
    CHECK(line.find("cannot start ") != std::string::npos);
    failed_at.insert(line.substr(0, line.find(':')));
    // Nothing it claimed is left running under it.
    CHECK(test::JobsInState(f.conn, "running") == 0);
  }
  INFO("failures seen: " << failed_at.size());
  // The metrics listener's request threads were one of the places it failed.
  CHECK(std::any_of(failed_at.begin(), failed_at.end(),
                    [](const std::string& line) { return line.find("the metrics listener") != std::string::npos; }));
  CHECK(failed_at.size() >= 3);
  // With room for its threads, a daemon runs every job: none failed or was
  // lost in the failed starts.
  cgroup.Limit(limit + 8);
  auto daemon = f.Start(config, {}, cgroup.procs());
  CHECK(WaitUntil([&] { return test::JobsInState(f.conn, "succeeded") == 40; }, 60s));
  daemon->Signal(SIGTERM);
  CHECK(daemon->Wait(30s) == 0);
}

TEST_CASE("SIGTERM during a claim: the jobs it brings run before the daemon stops",
          "[daemon][direct]") {  // a session advisory lock: not through a pooler
  DaemonFixture f;
  std::string script = f.dir.Write("quick.sh", "#!/bin/sh\ncat >/dev/null\n", true);
  // Another session holds the queue's claim lock (claim_transaction.cpp):
  // the daemon's first claim waits for it, in flight.
  pg::Connection holder = pg::Connection::Open(f.db);
  holder.exec("SELECT pg_advisory_lock(hashtextextended('akadze.claim_queue:' || 'default', 0))");
  const auto id = f.Enqueue("quick");
  auto daemon = f.Start(f.Config(Shell("quick", script)));
  REQUIRE(WaitUntil([&] {
    return test::AdvisoryLockWaiters(f.conn) == 1;
  }));
  daemon->Signal(SIGTERM);
  REQUIRE(daemon->WaitForLog("draining for up to"));
  // The claim ends after the stop was asked for; the drain waits for it and
  // for the job it took, which runs (before, the executors had stopped and
  // the job stayed running under a worker gone, for the rescue).
  holder.exec("SELECT pg_advisory_unlock_all()");
  CHECK(daemon->Wait(30s) == 0);
  INFO(daemon->Log());
  CHECK(f.State(id) == "succeeded");
  CHECK(test::JobsInState(f.conn, "running") == 0);
}

TEST_CASE("prefetch: jobs beyond the slots wait claimed, start one slot at a time, and go back on SIGTERM",
          "[daemon][prefetch]") {
  DaemonFixture f;
  const std::string starts = f.dir.path() + "/starts";
  const std::string lock = f.dir.path() + "/running";
  const std::string overlaps = f.dir.path() + "/overlaps";
  // Each run leaves a line in `starts`; two at once would find `lock` made.
  std::string script = f.dir.Write(
      "nap.sh",
      "#!/bin/sh\nread -r args\necho x >> " + starts + "\nmkdir " + lock + " 2>/dev/null || echo x >> " +
          overlaps + "\ncase \"$args\" in *long*) exec sleep 300;; esac\nsleep 0.1\nrmdir " + lock + "\n",
      true);
  auto lines_in = [](const std::string& path) {
    std::ifstream in(path);
    return std::count(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>(), '\n');
  };
  std::string config = f.Config(Shell("nap", script), kFastWorker, 1, 2);
  std::vector<std::int64_t> quick;
  for (int i = 0; i < 6; ++i) quick.push_back(f.Enqueue("nap"));
  auto daemon = f.Start(config);
  // One slot and two prefetched: three running in the database at once,
  // never more, and the handler never twice at a time.
  auto running = [&] { return test::JobsInState(f.conn, "running"); };
  std::int64_t peak = 0;
  REQUIRE(WaitUntil([&] {
    peak = std::max(peak, running());
    return test::JobsInState(f.conn, "succeeded") == 6;
  }));
  CHECK(peak <= 3);
  CHECK(daemon->Log().find("claim queue=default jobs=3 free_slots=3") != std::string::npos);
  CHECK(lines_in(starts) == 6);
  CHECK_FALSE(std::filesystem::exists(overlaps));

  // A long job takes the slot; two more wait behind it, claimed.
  const auto long_job = f.Enqueue("nap", R"({"kind": "long"})");
  REQUIRE(f.WaitState(long_job, "running"));
  const auto second = f.Enqueue("nap");
  const auto third = f.Enqueue("nap");
  REQUIRE(WaitUntil([&] { return running() == 3; }));
  CHECK(lines_in(starts) == 7);
  daemon->Signal(SIGTERM);
  CHECK(daemon->Wait(30s) == 0);
  INFO(daemon->Log());
  // The prefetched ones never started and are queued again, no attempt
  // spent; the long one was stopped at shutdown_timeout and released.
  for (const auto id : {second, third, long_job}) {
    json row = f.Row(id);
    CHECK(row["state"] == "queued");
    CHECK(row["attempt"] == 0);
    CHECK(row["worker_id"].is_null());
  }
  CHECK(lines_in(starts) == 7);
  CHECK(daemon->Log().find("prefetched, not started, and the daemon is stopping") != std::string::npos);
}

// The sizes of the claims that took jobs, from the daemon's "claim" lines.
std::vector<int> ClaimSizes(const std::string& log) {
  std::vector<int> sizes;
  static const std::regex line("claim queue=default jobs=([0-9]+) ");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), line); it != std::sregex_iterator(); ++it) {
    sizes.push_back(std::stoi((*it)[1]));
  }
  return sizes;
}

TEST_CASE("prefetch: a claim waits until half the prefetch is free, not one claim per freed slot",
          "[daemon][prefetch]") {
  DaemonFixture f;
  std::string script = f.dir.Write("nap.sh", "#!/bin/sh\ncat >/dev/null\nsleep 0.1\n", true);
  std::string config = f.Config(Shell("nap", script), kFastWorker, 1, 4);
  for (int i = 0; i < 12; ++i) f.Enqueue("nap");
  auto daemon = f.Start(config);
  REQUIRE(WaitUntil([&] {
    return test::JobsInState(f.conn, "succeeded") == 12;
  }));
  const std::vector<int> sizes = ClaimSizes(daemon->Log());
  INFO(daemon->Log());
  // The first claim takes the slot and the 4 prefetched; then one claim per
  // 2 freed (half of 4): 5, 2, 2, 2, 1. A claim per freed slot would make 8.
  REQUIRE_FALSE(sizes.empty());
  CHECK(sizes.front() == 5);
  CHECK(std::accumulate(sizes.begin(), sizes.end(), 0) == 12);
  CHECK(sizes.size() <= 6);
}

TEST_CASE("finish_batch_delay: finishes wait for each other and go out in one statement",
          "[daemon][prefetch]") {
  DaemonFixture f;
  std::string script = f.dir.Write("quick.sh", "#!/bin/sh\ncat >/dev/null\n", true);
  std::string worker = std::string(kFastWorker) + "  finish_batch_delay: 800ms\n";
  std::string config = f.Config(Shell("quick", script), worker, 2, 8);
  for (int i = 0; i < 10; ++i) f.Enqueue("quick");
  auto daemon = f.Start(config);
  REQUIRE(WaitUntil([&] {
    return test::JobsInState(f.conn, "succeeded") == 10;
  }));
  INFO(daemon->Log());
  // One claim of 10, run two at a time in well under the delay: their
  // finishes share one statement's now(), a run or two apart at most. With
  // no delay each finish goes out as its job ends, one or two a statement.
  CHECK(f.conn.exec("SELECT count(DISTINCT finished_at) FROM akadze.jobs").int64(0, 0) <= 2);
  daemon->Signal(SIGTERM);
  CHECK(daemon->Wait(30s) == 0);
}

TEST_CASE("a second SIGTERM cuts the drain short", "[daemon]") {
  DaemonFixture f;
  std::string script = f.dir.Write("forever.sh", "#!/bin/sh\nexec sleep 300\n", true);
  std::string worker = std::string(kFastWorker) + "";
  worker.replace(worker.find("shutdown_timeout: 2s"), 20, "shutdown_timeout: 1h");
  auto daemon = f.Start(f.Config(Shell("forever", script, "      kill_grace: 500ms\n"), worker));
  auto id = f.Enqueue("forever");
  REQUIRE(f.WaitState(id, "running"));
  daemon->Signal(SIGTERM);
  REQUIRE(daemon->WaitForLog("draining for up to 1h"));
  daemon->Signal(SIGTERM);
  CHECK(daemon->Wait(30s) == 0);
  CHECK(f.State(id) == "queued");
}

TEST_CASE("kill -9 of a daemon: another rescues its jobs after heartbeat_ttl", "[daemon]") {
  DaemonFixture f;
  std::string pids = f.dir.path() + "/pids";
  std::string script = f.dir.Write(
      "work.sh",
      "#!/bin/sh\nif [ \"$AKADZE_RUN_COUNT\" = 1 ]; then echo $$ >> " + pids + "; exec sleep 300; fi\n",
      true);
  std::string config = f.Config(Shell("work", script), kFastWorker, 3);
  auto first = f.Start(config);
  std::vector<std::int64_t> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(f.Enqueue("work"));
  REQUIRE(WaitUntil([&] {
    return test::JobsInState(f.conn, "running") == 3;
  }));
  first->Signal(SIGKILL);
  REQUIRE(first->Wait() == 128 + SIGKILL);
  auto second = f.Start(config);
  for (auto id : ids) {
    REQUIRE(f.WaitState(id, "succeeded"));
    json row = f.Row(id);
    CHECK(row["attempt"] == 1);
    CHECK(row["errors"][0]["error"] == "WorkerLost");
  }
  CHECK(second->WaitForLog("rescue job="));
  // The killed daemon's handlers outlived it (their own process groups);
  // end them.
  std::ifstream in(pids);
  for (pid_t pid = 0; in >> pid;) kill(pid, SIGKILL);
}

TEST_CASE("a finish that lost its fence is discarded and logged", "[daemon]") {
  DaemonFixture f;
  std::string go = f.dir.path() + "/go";
  std::string script = f.dir.Write(
      "wait.sh", "#!/bin/sh\nwhile [ ! -e " + go + " ]; do sleep 0.05; done\n", true);
  // A long heartbeat so that the lease keeper doesn't stop the job first.
  std::string worker = std::string(kFastWorker);
  worker.replace(worker.find("heartbeat_interval: 200ms"), 25, "heartbeat_interval: 20s");
  worker.replace(worker.find("heartbeat_ttl: 1500ms"), 21, "heartbeat_ttl: 60s");
  auto daemon = f.Start(f.Config(Shell("waiter", script), worker));
  auto id = f.Enqueue("waiter");
  REQUIRE(f.WaitState(id, "running"));
  // As if the job had been rescued and claimed again elsewhere.
  f.conn.exec("UPDATE akadze.jobs SET run_count = run_count + 1 WHERE id = $1", pg::Params().add(id));
  f.dir.Write("go", "");
  REQUIRE(daemon->WaitForLog("stale_finish job=" + std::to_string(id)));
  json row = f.Row(id);
  CHECK(row["state"] == "running");
  CHECK(row["run_count"] == 2);
}

TEST_CASE("plugin jobs run through the example plugin", "[daemon]") {
  DaemonFixture f;
  auto daemon = f.Start(f.Config(
      "  checksum:\n    plugin:\n      path: libakadzed_example.so\n      config: {algorithm: fnv1a}\n"));
  auto id = f.Enqueue("checksum", R"({"text": "abc"})");
  REQUIRE(f.WaitState(id, "succeeded"));
  json result = f.Row(id)["result"];
  CHECK(result["checksum"].get<std::string>().size() == 16);
  CHECK(result["bytes"].get<int>() > 0);
}

TEST_CASE("a plugin with the wrong ABI is refused at startup with exit 78", "[daemon]") {
  DaemonFixture f;
  std::string config = f.Config("  x:\n    plugin:\n      path: libwrong_abi_plugin.so\n");
  EnvChanges env{{"AKADZED_PLUGIN_PATH", std::string(AKADZED_TEST_PLUGIN_DIR)}};
  CommandResult check = RunAkadzed({"check-config", config}, env);
  CHECK(check.exit_code == 78);
  CHECK(check.err.find("akadzed.yaml:") != std::string::npos);
  CHECK(check.err.find("ABI") != std::string::npos);
  CommandResult run = RunAkadzed({"run", "--config", config, "--database-url", f.db}, env);
  CHECK(run.exit_code == 78);
  CHECK(run.err.find("ABI") != std::string::npos);
  CHECK(Lines(run.err).size() == 1);
}

TEST_CASE("bad configs give file:line and exit 78", "[daemon][config]") {
  TempDir dir;
  struct Case {
    std::string text;
    std::string message;
  };
  std::string ok_handlers = "handlers:\n  t:\n    shell:\n      command: [\"true\"]\n";
  std::vector<Case> cases = {
      {"queues:\n  - name: q\nhandlers_typo: {}\n", ":3:"},
      {"worker:\n  poll_interval: soon\nqueues:\n  - name: q\n" + ok_handlers, ":2:"},
      {"queues:\n  - name: q\n    slots: many\n" + ok_handlers, ":3:"},
      {"queues: [\n", "akadzed.yaml:"},
      {"worker:\n  heartbeat_interval: 10s\n  heartbeat_ttl: 5s\nqueues:\n  - name: q\n" + ok_handlers,
       "heartbeat_ttl"},
  };
  for (const Case& c : cases) {
    std::string path = dir.Write("akadzed.yaml", c.text);
    CommandResult r = RunAkadzed({"check-config", path});
    INFO(c.text << "\n-> " << r.err);
    CHECK(r.exit_code == 78);
    CHECK(r.err.find(c.message) != std::string::npos);
    CHECK(Lines(r.err).size() == 1);
    CommandResult run = RunAkadzed({"run", "--config", path});
    CHECK(run.exit_code == 78);
  }
  CommandResult missing = RunAkadzed({"check-config", dir.path() + "/nope.yaml"});
  CHECK(missing.exit_code == 78);
  CHECK(missing.err.find("nope.yaml") != std::string::npos);
}

// `akadzed periodic next` prints what the scheduler computes for an entry
// (Schedule::NextFireAfterUs), here across New York's spring change, where
// 02:30 does not exist and fires at the jump (docs/configuration.md).
TEST_CASE("periodic next prints an entry's fires in UTC and on its zone's clock", "[daemon][config][periodic]") {
  TempDir dir;
  const std::string path = dir.Write(
      "akadzed.yaml",
      "queues:\n  - name: q\n    slots: 1\nhandlers:\n  t:\n    shell:\n      command: [\"true\"]\n"
      "periodic:\n  nightly:\n    cron: \"30 2 * * *\"\n    timezone: America/New_York\n"
      "  often:\n    every: 90s\n");
  CommandResult r = RunAkadzed(
      {"periodic", "next", "nightly", "--config", path, "--after", "2026-03-07T00:00:00Z", "--count", "3"});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out ==
        "nightly: cron \"30 2 * * *\" in America/New_York\n"
        "2026-03-07T07:30:00Z  2026-03-07 02:30:00 EST\n"
        "2026-03-08T07:00:00Z  2026-03-08 03:00:00 EDT\n"
        "2026-03-09T06:30:00Z  2026-03-09 02:30:00 EDT\n");
  CommandResult j = RunAkadzed({"periodic", "next", "often", "--config", path, "--after", "2026-03-07T00:00:00Z",
                                "--count", "2", "--json"});
  CHECK(j.exit_code == 0);
  const nlohmann::json out = nlohmann::json::parse(j.out);
  CHECK(out.at("schedule") == "every 1m30s");
  CHECK(out.at("fires").size() == 2);
  CHECK(out.at("fires")[0].at("utc") == "2026-03-07T00:01:30Z");
  CHECK(out.at("fires")[0].at("abbreviation") == "UTC");
  // An entry the file does not have, a bad time: usage (2), one line each.
  CommandResult unknown = RunAkadzed({"periodic", "next", "weekly", "--config", path});
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.err == "akadzed periodic next: no periodic entry \"weekly\" in " + path +
                           " (entries: nightly, often)\n");
  for (const char* after : {"tomorrow", "2026-02-30T00:00:00Z", "2026-03-07T24:00:00Z", "2026-3-7T00:00:00Z"}) {
    CommandResult bad_time = RunAkadzed({"periodic", "next", "nightly", "--config", path, "--after", after});
    INFO(after);
    CHECK(bad_time.exit_code == 2);
    CHECK(bad_time.err == std::string("akadzed periodic next: --after \"") + after +
                              "\": expected a UTC time as YYYY-MM-DDTHH:MM:SSZ\n");
  }
  // A zone the database does not have: a config error (78) at its line.
  const std::string bad = dir.Write(
      "bad.yaml",
      "queues:\n  - name: q\n    slots: 1\nhandlers:\n  t:\n    shell:\n      command: [\"true\"]\n"
      "periodic:\n  nightly:\n    cron: \"30 2 * * *\"\n    timezone: America/Gotham\n");
  CommandResult zone = RunAkadzed({"periodic", "next", "nightly", "--config", bad});
  CHECK(zone.exit_code == 78);
  CHECK(zone.err.find("bad.yaml:11: periodic.nightly.timezone: timezone \"America/Gotham\"") != std::string::npos);
  CHECK(Lines(zone.err).size() == 1);
}

TEST_CASE("READY=1 and STOPPING=1 arrive on the notify socket", "[daemon][systemd]") {
  DaemonFixture f;
  std::string socket_path = f.dir.path() + "/notify.sock";
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket_path.c_str());
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  timeval tv{0, 100'000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string messages;
  auto receive = [&] {
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n > 0) messages.append(buf, static_cast<std::size_t>(n)).append("\n");
  };
  std::string script = f.dir.Write("noop.sh", "#!/bin/sh\n", true);
  auto daemon = f.Start(f.Config(Shell("noop", script)),
                        {{"NOTIFY_SOCKET", socket_path}, {"WATCHDOG_USEC", "1000000"}});
  CHECK(WaitUntil([&] { receive(); return messages.find("READY=1") != std::string::npos; }));
  CHECK(WaitUntil([&] { receive(); return messages.find("WATCHDOG=1") != std::string::npos; }));
  daemon->Signal(SIGTERM);
  CHECK(WaitUntil([&] { receive(); return messages.find("STOPPING=1") != std::string::npos; }));
  CHECK(daemon->Wait() == 0);
  close(fd);
}

TEST_CASE("SIGHUP reloads handlers; a bad new config keeps the old one", "[daemon]") {
  DaemonFixture f;
  std::string one = f.dir.Write("one.sh", "#!/bin/sh\necho '{\"result\": 1}' >&3\n", true);
  std::string two = f.dir.Write("two.sh", "#!/bin/sh\necho '{\"result\": 2}' >&3\n", true);
  std::string config = f.Config(Shell("pick", one));
  auto daemon = f.Start(config);
  auto first = f.Enqueue("pick");
  REQUIRE(f.WaitState(first, "succeeded"));
  CHECK(f.Row(first)["result"] == 1);

  f.Config(Shell("pick", two));
  daemon->Signal(SIGHUP);
  REQUIRE(daemon->WaitForLog("reload config="));
  auto second = f.Enqueue("pick");
  REQUIRE(f.WaitState(second, "succeeded"));
  CHECK(f.Row(second)["result"] == 2);

  f.dir.Write("akadzed.yaml", "queues: [\n");
  daemon->Signal(SIGHUP);
  REQUIRE(daemon->WaitForLog("reload_failed"));
  auto third = f.Enqueue("pick");
  REQUIRE(f.WaitState(third, "succeeded"));
  CHECK(f.Row(third)["result"] == 2);
  CHECK(daemon->running());
}

}  // namespace
}  // namespace akadzed::test

namespace akadzed::test {
namespace {

// [direct]: LISTEN needs a session; through PgBouncer in transaction mode no
// notification arrives (pgbouncer_test.cpp checks the daemon says so).
TEST_CASE("with listen_notify a NOTIFY wakes the claim loop before poll_interval",
          "[daemon][direct]") {
  DaemonFixture f;
  std::string script = f.dir.Write("noop.sh", "#!/bin/sh\n", true);
  std::string worker = std::string(kFastWorker) + "  listen_notify: true\n";
  worker.replace(worker.find("poll_interval: 100ms"), 20, "poll_interval: 1h");
  auto daemon = f.Start(f.Config(Shell("noop", script), worker));
  REQUIRE(daemon->WaitForLog("listen channel=akadze_jobs"));
  // The first claims (at start and on LISTEN) found nothing; the loop now
  // sleeps for an hour unless woken.
  REQUIRE(daemon->WaitForLog("started worker="));
  // Two rounds: by the second, the wake-ups of start, LISTEN and the freed
  // slot have passed, so only the NOTIFY can bring the job in.
  for (int round = 0; round < 2; ++round) {
    auto id = f.Enqueue("noop");
    f.conn.exec("NOTIFY akadze_jobs, 'default'");
    CHECK(f.WaitState(id, "succeeded", 20s));
  }
}

}  // namespace
}  // namespace akadzed::test

namespace akadzed::test {
namespace {

// Also through PgBouncer. There it once seemed to hang (nothing logged for
// 90 s): the log shown was read before the wait, not after it, and the
// daemon had taken its new id by the other path. Every reply now has a
// deadline anyway (pg::SessionBounds).
TEST_CASE("a daemon that cannot heartbeat for heartbeat_ttl stops its handlers; no job is lost",
          "[daemon][lease]") {
  DaemonFixture f;
  // The daemon logs in as its own role, so that the test can lock it out.
  f.conn.exec("CREATE ROLE akadzed_lease_test LOGIN SUPERUSER");
  std::string daemon_db = f.db + " user=akadzed_lease_test";
  std::string pidfile = f.dir.path() + "/handler.pid";
  std::string script = f.dir.Write(
      "hold.sh",
      "#!/bin/sh\nif [ \"$AKADZE_RUN_COUNT\" = 1 ]; then echo $$ > " + pidfile +
          "; exec sleep 300; fi\n",
      true);
  std::string log = f.dir.path() + "/lease.log";
  DaemonProcess daemon({"run", "--config", f.Config(Shell("hold", script)), "--database-url",
                        daemon_db},
                       {}, log);
  auto id = f.Enqueue("hold");
  REQUIRE(WaitUntil([&] { return ReadPid(pidfile) > 0; }));
  pid_t handler = ReadPid(pidfile);

  f.conn.exec("ALTER ROLE akadzed_lease_test NOLOGIN");
  f.conn.exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
              " WHERE usename = 'akadzed_lease_test'");
  REQUIRE(daemon.WaitForLog("lease_lost"));
  CHECK(WaitUntil([&] { return ProcessGone(handler); }, 10s));
  CHECK(daemon.WaitForLog("drop job=" + std::to_string(id), 10s));

  f.conn.exec("ALTER ROLE akadzed_lease_test LOGIN");
  // One new id, by either path: the lease keeper re-registers after the
  // lost lease ("new id after a lost lease"), or a heartbeat that was in
  // flight when the lease ran out reaches the server late, is fenced, and
  // takes the new id itself ("new id: the worker row had vanished, or ...").
  // Through PgBouncer the second is common: the pooler holds the heartbeat
  // while its server logins fail.
  const bool renewed = daemon.WaitForLog("msg=\"new id");
  INFO(daemon.Log());  // as it is after the wait, not before
  REQUIRE(renewed);
  // The old id's job is rescued (by this very daemon) and runs again.
  REQUIRE(f.WaitState(id, "succeeded"));
  json row = f.Row(id);
  CHECK(row["attempt"] == 1);
  CHECK(row["errors"][0]["error"] == "WorkerLost");
  daemon.Signal(SIGTERM);
  CHECK(daemon.Wait() == 0);
}

TEST_CASE("a worker row deleted under a running daemon: its jobs stop, it registers a new id, never the old",
          "[daemon][lease]") {
  DaemonFixture f;
  std::string pidfile = f.dir.path() + "/handler.pid";
  std::string script = f.dir.Write(
      "hold.sh",
      "#!/bin/sh\nif [ \"$AKADZE_RUN_COUNT\" = 1 ]; then echo $$ > " + pidfile + "; exec sleep 300; fi\n", true);
  auto daemon = f.Start(f.Config(Shell("hold", script)));
  auto id = f.Enqueue("hold");
  REQUIRE(WaitUntil([&] { return ReadPid(pidfile) > 0; }));
  pid_t handler = ReadPid(pidfile);
  const std::string old_id(f.conn.exec("SELECT worker_id::text FROM akadze.jobs WHERE id = $1",
                                       pg::Params().add(id)).text(0, 0));
  // What a rescue does to a worker it judged dead: its job back to the
  // queue, its row deleted.
  f.conn.exec("UPDATE akadze.jobs SET state = 'queued', worker_id = NULL WHERE id = $1", pg::Params().add(id));
  f.conn.exec("DELETE FROM akadze.workers");
  REQUIRE(daemon->WaitForLog("new id: the worker row had vanished"));
  CHECK(WaitUntil([&] { return ProcessGone(handler); }, 10s));
  // The job runs again (run 2), under the new id.
  REQUIRE(f.WaitState(id, "succeeded"));
  json row = f.Row(id);
  CHECK(row["worker_id"] != old_id);
  CHECK(f.conn.exec("SELECT count(*) FROM akadze.workers WHERE id = $1::uuid", pg::Params().add(old_id))
            .int64(0, 0) == 0);
  CHECK(f.conn.exec("SELECT count(*) FROM akadze.workers").int64(0, 0) == 1);
  daemon->Signal(SIGTERM);
  CHECK(daemon->Wait() == 0);
}

TEST_CASE("reconcile: a job running under this worker in the database that it does not hold is released "
          "within a heartbeat round, no attempt spent",
          "[daemon][lease]") {
  DaemonFixture f;
  std::string script = f.dir.Write("noop.sh", "#!/bin/sh\n", true);
  // The queue is paused, so the job below can only come back through the
  // reconcile; and polled once a minute, so that no claim is in flight
  // across a heartbeat round's read (a paused queue's claim still runs, to
  // read the pause) and the release takes the quiet path, not the one that
  // waits for heartbeat_ttl.
  f.conn.exec("INSERT INTO akadze.queue_pauses (queue) VALUES ('default')");
  std::string worker = kFastWorker;
  worker.replace(worker.find("poll_interval: 100ms"), 20, "poll_interval: 1m");
  auto daemon = f.Start(f.Config(Shell("noop", script), worker));
  REQUIRE(WaitUntil([&] { return f.conn.exec("SELECT count(*) FROM akadze.workers").int64(0, 0) == 1; }));
  // The claim loop's first claim (at its start, with its connection's
  // opening) done before the job is put: then none is in flight.
  const int port = ListenerPort(*daemon);
  REQUIRE(WaitUntil([&] {
    const HttpAnswer metrics = HttpGet(port, "/metrics");
    return metrics.status == 200 && ParsePrometheusText(metrics.body)
                                            .Value("akadzed_claim_duration_seconds_count", {{"queue", "default"}})
                                            .value_or(0) >= 1;
  }));
  auto id = f.Enqueue("noop");
  // What a failover that lost the finish leaves: the job running under a
  // live worker that holds nothing (just claimed, not over heartbeat_ttl ago).
  f.conn.exec("UPDATE akadze.jobs SET state = 'running', run_count = 1, started_at = now(),"
              " worker_id = (SELECT id FROM akadze.workers) WHERE id = $1",
              pg::Params().add(id));
  const auto put = std::chrono::steady_clock::now();
  REQUIRE(WaitUntil([&] { return f.State(id) == "queued"; }, 10s));
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - put);
  CHECK(ms < 1500ms);  // a round or two of 200 ms, not heartbeat_ttl and two rounds
  CHECK(daemon->WaitForLog("orphan_released job=" + std::to_string(id)));
  json row = f.Row(id);
  CHECK(row["attempt"] == 0);
  CHECK(row["errors"].empty());
  daemon->Signal(SIGTERM);
  CHECK(daemon->Wait() == 0);
}

TEST_CASE("journald format: priority prefixes and no timestamps", "[daemon]") {
  DaemonFixture f;
  std::string script = f.dir.Write("noop.sh", "#!/bin/sh\necho to-the-journal\n", true);
  std::string config = f.Config(Shell("noop", script));
  // Same config with the journald format forced.
  {
    std::ifstream in(config);
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    all.replace(all.find("format: logfmt"), 14, "format: journald");
    f.dir.Write("akadzed.yaml", all);
  }
  auto daemon = f.Start(config);
  auto id = f.Enqueue("noop");
  REQUIRE(f.WaitState(id, "succeeded"));
  REQUIRE(daemon->WaitForLog("finish job="));
  daemon->Signal(SIGTERM);
  REQUIRE(daemon->Wait() == 0);
  for (const std::string& line : Lines(daemon->Log())) {
    INFO(line);
    REQUIRE(line.size() > 3);
    CHECK(line[0] == '<');
    CHECK(line[2] == '>');
  }
  CHECK(daemon->Log().find("<6>level=info event=output job=" + std::to_string(id)) !=
        std::string::npos);
}

}  // namespace
}  // namespace akadzed::test
