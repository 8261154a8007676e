// ShellHandler with real child processes (no database): the outcome protocol
// on fd 3, exit statuses and signals, the environment, stdin, timeouts and
// stop requests killing the whole process group, output logging and caps,
// spawn failures, fd hygiene and concurrent runs (docs/handlers.md).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "handlers/shell_handler.h"
#include "support/log_capture.h"

namespace akadzed {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nlohmann::json;
using test::LogCapture;

// The logged stdout lines of one job, in order.
std::vector<std::string> Stdout(const test::LogCapture& log, std::int64_t job) {
  std::vector<std::string> lines;
  std::istringstream in(log.text());
  const std::string prefix = "info output job=" + std::to_string(job) + " task=test stream=stdout | ";
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) == 0) lines.push_back(line.substr(prefix.size()));
  }
  return lines;
}

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "akadzed-shell-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = fs::canonical(pattern);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

// Makes this process the reaper of orphaned descendants (a container's PID 1
// may never reap), so a killed grandchild becomes reapable here.
class Subreaper {
 public:
  Subreaper() { prctl(PR_SET_CHILD_SUBREAPER, 1); }
  ~Subreaper() { prctl(PR_SET_CHILD_SUBREAPER, 0); }
};

ClaimedJob Job(std::int64_t id, std::string args = "{}") {
  ClaimedJob job;
  job.id = id;
  job.task = "test";
  job.queue = "default";
  job.attempt = 0;
  job.max_attempts = 3;
  job.run_count = 1;
  job.args_json = std::move(args);
  return job;
}

// `sh -c script sh extra...`: inside the script, $1.. are `extra`.
ShellHandlerConfig Sh(const std::string& script, std::vector<std::string> extra = {}) {
  ShellHandlerConfig config;
  config.command = {"/bin/sh", "-c", script, "sh"};
  for (std::string& arg : extra) config.command.push_back(std::move(arg));
  return config;
}

JobOutcome RunOnce(ShellHandlerConfig config, const ClaimedJob& job = Job(1)) {
  ShellHandler handler("test", std::move(config));
  JobStop stop;
  return handler.Run(job, stop);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Polls `done` every 10 ms for up to 20 s (a loaded machine may be slow;
// the loop ends as soon as it holds).
template <typename Done>
bool Await(Done done) {
  const auto until = Clock::now() + std::chrono::seconds(20);
  while (!done()) {
    if (Clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// True once `pid` no longer exists; reaps it if it was re-parented to us.
bool AwaitGone(pid_t pid) {
  return Await([pid] {
    waitpid(pid, nullptr, WNOHANG);
    return kill(pid, 0) != 0 && errno == ESRCH;
  });
}

pid_t AwaitPidFile(const std::string& path) {
  pid_t pid = 0;
  Await([&] {
    std::string text = ReadFile(path);
    if (text.empty() || text.back() != '\n') return false;
    pid = std::stoi(text);
    return true;
  });
  return pid;
}

std::size_t OpenFdCount() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

TEST_CASE("a result written on fd 3 makes a successful job's result", "[shell]") {
  LogCapture log;
  JobOutcome outcome =
      RunOnce(Sh(R"(cat >/dev/null; echo hi; printf '{"result": {"n": 1, "s": "r3sult"}}' >&3)"));
  CHECK(outcome.kind == OutcomeKind::kSuccess);
  REQUIRE(outcome.result_json);
  CHECK(json::parse(*outcome.result_json) == json{{"n", 1}, {"s", "r3sult"}});
  CHECK(outcome.error.empty());
  CHECK(log.Has("info output job=1 task=test stream=stdout | hi\n"));
  CHECK_FALSE(log.Has("r3sult"));  // results are never logged
}

TEST_CASE("exit 0 with nothing on fd 3 is success without a result; args are never logged",
          "[shell]") {
  LogCapture log;
  JobOutcome outcome = RunOnce(Sh("echo out; echo err >&2"), Job(7, R"({"token": "hunter2"})"));
  CHECK(outcome.kind == OutcomeKind::kSuccess);
  CHECK_FALSE(outcome.result_json);
  CHECK(log.Has("info output job=7 task=test stream=stdout | out\n"));
  CHECK(log.Has("info output job=7 task=test stream=stderr | err\n"));
  CHECK_FALSE(log.Has("hunter2"));
  // {"result": null} is no result.
  outcome = RunOnce(Sh(R"(echo '{"result": null}' >&3)"));
  CHECK(outcome.kind == OutcomeKind::kSuccess);
  CHECK_FALSE(outcome.result_json);
}

TEST_CASE("a non-zero exit is a retry naming the status and the last stderr line", "[shell]") {
  LogCapture log;
  JobOutcome outcome = RunOnce(
      Sh("echo first >&2; echo 'connect postgres://u:hunter2@db failed' >&2; echo >&2; exit 3"));
  CHECK(outcome.kind == OutcomeKind::kRetry);
  CHECK(outcome.error == "ExitStatus");
  CHECK(outcome.message == "exited with status 3: connect postgres://u:***@db failed");
  CHECK(log.Has("stream=stderr | connect postgres://u:***@db failed\n"));
  CHECK_FALSE(log.Has("hunter2"));
  CHECK_FALSE(outcome.delay_us);

  outcome = RunOnce(Sh("exit 1"));
  CHECK(outcome.error == "ExitStatus");
  CHECK(outcome.message == "exited with status 1");
  // A result without an explicit outcome does not turn a failure into success.
  outcome = RunOnce(Sh(R"(echo '{"result": 1}' >&3; exit 2)"));
  CHECK(outcome.kind == OutcomeKind::kRetry);
  CHECK(outcome.message == "exited with status 2");
}

TEST_CASE("a job killed by a signal is a retry naming the signal", "[shell]") {
  LogCapture log;
  JobOutcome outcome = RunOnce(Sh("kill -KILL $$"));
  CHECK(outcome.kind == OutcomeKind::kRetry);
  CHECK(outcome.error == "Signal");
  CHECK(outcome.message == "killed by SIGKILL");

  outcome = RunOnce(Sh("printf '{\"outc' >&3; kill -TERM $$"));  // crashed mid-report
  CHECK(outcome.error == "Signal");
  CHECK(outcome.message == "killed by SIGTERM");
}

struct Explicit {
  std::string report;
  int exit_code;
  OutcomeKind kind;
  std::optional<std::int64_t> delay_us;
  std::string error;
  std::string message;
};

TEST_CASE("an explicit outcome on fd 3 wins over the exit status", "[shell]") {
  LogCapture log;
  const std::vector<Explicit> cases = {
      {R"({"outcome": "retry", "delay": "30s", "error": "RateLimited", "message": "slow down"})",
       0, OutcomeKind::kRetry, 30'000'000, "RateLimited", "slow down"},
      {R"({"outcome": "retry", "delay": 1.5})", 4, OutcomeKind::kRetry, 1'500'000, "Retry", ""},
      {R"({"outcome": "retry"})", 0, OutcomeKind::kRetry, std::nullopt, "Retry", ""},
      {R"({"outcome": "snooze", "delay": "1h30m"})", 0, OutcomeKind::kSnooze, 5'400'000'000, "",
       ""},
      {R"({"outcome": "snooze", "delay": 5})", 1, OutcomeKind::kSnooze, 5'000'000, "", ""},
      {R"({"outcome": "fail", "error": "Invalid", "message": "bad input"})", 1, OutcomeKind::kFail,
       std::nullopt, "Invalid", "bad input"},
      {R"({"outcome": "fail"})", 0, OutcomeKind::kFail, std::nullopt, "Failed", ""},
      {R"({"outcome": "cancel", "message": "not needed"})", 0, OutcomeKind::kCancel, std::nullopt,
       "Cancelled", "not needed"},
  };
  for (const Explicit& c : cases) {
    INFO(c.report << " exit " << c.exit_code);
    JobOutcome outcome =
        RunOnce(Sh(R"(printf '%s' "$1" >&3; exit "$2")", {c.report, std::to_string(c.exit_code)}));
    CHECK(outcome.kind == c.kind);
    CHECK(outcome.delay_us == c.delay_us);
    CHECK(outcome.error == c.error);
    CHECK(outcome.message == c.message);
    CHECK_FALSE(outcome.result_json);
  }
  JobOutcome outcome = RunOnce(Sh(R"(echo '{"outcome": "success", "result": [1, 2]}' >&3)"));
  CHECK(outcome.kind == OutcomeKind::kSuccess);
  REQUIRE(outcome.result_json);
  CHECK(json::parse(*outcome.result_json) == json::array({1, 2}));
}

TEST_CASE("a malformed outcome on fd 3 is a BadOutcome retry naming the problem", "[shell]") {
  LogCapture log;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not json", "not valid JSON"},
      {"[1]", "must be a JSON object"},
      {R"({"outcome": "maybe"})", "field 'outcome': unknown outcome 'maybe'"},
      {R"({"outcome": 5})", "field 'outcome' must be a string"},
      {R"({"outcome": "snooze"})", "outcome snooze requires field 'delay'"},
      {R"({"outcome": "retry", "delay": "soon"})", "field 'delay': invalid duration"},
      {R"({"outcome": "retry", "delay": -1})", "field 'delay' must be >= 0"},
      {R"({"outcome": "snooze", "delay": "366d"})", "field 'delay' must be at most 365 days"},
      {R"({"outcome": "snooze", "delay": 1e12})", "field 'delay' must be at most 365 days"},
      {R"({"outcome": "retry", "delay": true})", "field 'delay' must be a duration string"},
      {R"({"outcome": "fail", "delay": "1s"})", "field 'delay' is not allowed with outcome fail"},
      {R"({"outcome": "fail", "error": 3})", "field 'error' must be a string"},
      {R"({"outcome": "fail", "result": 1})", "field 'result' is not allowed with outcome fail"},
      {R"({"result": 1, "message": "x"})", "field 'message' is not allowed with outcome success"},
      {R"({"delays": "1s"})", "unknown field 'delays'"},
  };
  for (const auto& [report, reason] : cases) {
    INFO(report);
    JobOutcome outcome = RunOnce(Sh(R"(printf '%s' "$1" >&3)", {report}));
    CHECK(outcome.kind == OutcomeKind::kRetry);
    CHECK(outcome.error == "BadOutcome");
    CHECK(outcome.message.find(reason) != std::string::npos);
    CHECK(outcome.message.find('\n') == std::string::npos);
  }
  JobOutcome outcome = RunOnce(Sh(R"(echo '{"outcome": "success"}' >&3; exit 2)"));
  CHECK(outcome.error == "BadOutcome");
  CHECK(outcome.message == "outcome success contradicts: exited with status 2");

  outcome = RunOnce(Sh("head -c 1100000 /dev/zero | tr '\\0' ' ' >&3"));
  CHECK(outcome.error == "BadOutcome");
  CHECK(outcome.message == "outcome on fd 3 is larger than 1 MiB");

  outcome = RunOnce(Sh(R"(printf '{"result": ' >&3; head -c 100000 /dev/zero | tr '\0' '[' >&3)"));
  CHECK(outcome.error == "BadOutcome");
  CHECK(outcome.message.find("nested deeper than") != std::string::npos);
}

// Sets environment variables for the test's duration.
class EnvGuard {
 public:
  void Set(const char* name, const char* value) {
    names_.push_back(name);
    setenv(name, value, 1);
  }
  ~EnvGuard() {
    for (const char* name : names_) unsetenv(name);
  }

 private:
  std::vector<const char*> names_;
};

TEST_CASE("the child gets the job in its environment, not the daemon's systemd variables",
          "[shell]") {
  EnvGuard env;
  env.Set("NOTIFY_SOCKET", "/run/akadzed-test/notify");
  env.Set("WATCHDOG_USEC", "30000000");
  env.Set("WATCHDOG_PID", "1");
  env.Set("LISTEN_FDS", "2");
  env.Set("AKADZED_TEST_INHERITED", "yes");
  env.Set("AKADZED_TEST_OVERRIDDEN", "daemon");
  TempDir dir;
  LogCapture log;

  ShellHandlerConfig config = Sh("env; pwd");
  config.env = {{"GREETING", "hello there"}, {"AKADZED_TEST_OVERRIDDEN", "config"}};
  config.working_directory = dir.str();
  ClaimedJob job = Job(42);
  job.task = "mail.send";
  job.queue = "mail";
  job.attempt = 1;
  job.max_attempts = 5;
  job.run_count = 2;
  REQUIRE(RunOnce(config, job).kind == OutcomeKind::kSuccess);

  const std::vector<std::string> lines = Stdout(log, 42);
  const std::set<std::string> seen(lines.begin(), lines.end());
  for (const char* expected :
       {"AKADZE_JOB_ID=42", "AKADZE_TASK=mail.send", "AKADZE_QUEUE=mail", "AKADZE_ATTEMPT=2",
        "AKADZE_MAX_ATTEMPTS=5", "AKADZE_RUN_COUNT=2", "AKADZE_LIMIT_KEY=", "AKADZE_OUTCOME_FD=3",
        "GREETING=hello there", "AKADZED_TEST_INHERITED=yes", "AKADZED_TEST_OVERRIDDEN=config"}) {
    INFO(expected);
    CHECK(seen.count(expected) == 1);
  }
  CHECK(seen.count(dir.str()) == 1);  // pwd
  for (const std::string& line : lines) {
    for (const char* dropped :
         {"NOTIFY_SOCKET=", "WATCHDOG_USEC=", "WATCHDOG_PID=", "LISTEN_FDS="}) {
      CHECK(line.rfind(dropped, 0) == std::string::npos);
    }
  }

  job.id = 43;
  job.limit_key = "tenant-9";
  REQUIRE(RunOnce(Sh("env"), job).kind == OutcomeKind::kSuccess);
  const std::vector<std::string> keyed = Stdout(log, 43);
  CHECK(std::count(keyed.begin(), keyed.end(), "AKADZE_LIMIT_KEY=tenant-9") == 1);
}

TEST_CASE("the daemon's database settings and AKADZE_* never reach the child; env may set PG*",
          "[shell]") {
  EnvGuard env;
  env.Set("AKADZE_DATABASE_URL", "postgresql://app:hunter2@db/app");
  env.Set("AKADZE_JOB_ID", "999");  // a stale one, e.g. a daemon started by a handler
  env.Set("AKADZE_SOMETHING_ELSE", "x");
  env.Set("PGPASSWORD", "hunter2");
  env.Set("PGPASSFILE", "/etc/akadzed/pgpass");
  env.Set("PGSERVICEFILE", "/etc/akadzed/pg_service.conf");
  env.Set("PGSSLKEY", "/etc/akadzed/client.key");
  env.Set("PGHOST", "db.internal");
  env.Set("PGUSER", "akadzed");
  env.Set("PGP_KEY_ID", "kept");       // not libpq's
  env.Set("AKADZED_TEST_KEPT", "kept");  // AKADZED_, not the reserved AKADZE_
  LogCapture log;
  ShellHandlerConfig config = Sh("env");
  config.env = {{"PGHOST", "reports.internal"}};  // explicit: the handler's own database
  REQUIRE(RunOnce(config, Job(7)).kind == OutcomeKind::kSuccess);
  const std::vector<std::string> lines = Stdout(log, 7);
  const std::set<std::string> seen(lines.begin(), lines.end());
  CHECK(seen.count("AKADZE_JOB_ID=7") == 1);
  CHECK(seen.count("PGHOST=reports.internal") == 1);
  CHECK(seen.count("PGP_KEY_ID=kept") == 1);
  CHECK(seen.count("AKADZED_TEST_KEPT=kept") == 1);
  for (const std::string& line : lines) {
    INFO(line);
    CHECK(line.find("hunter2") == std::string::npos);
    for (const char* withheld : {"AKADZE_DATABASE_URL=", "AKADZE_SOMETHING_ELSE=", "PGPASSWORD=",
                                 "PGPASSFILE=", "PGSERVICEFILE=", "PGSSLKEY=", "PGUSER="}) {
      CHECK(line.rfind(withheld, 0) == std::string::npos);
    }
  }
  CHECK(std::count_if(lines.begin(), lines.end(), [](const std::string& line) {
          return line.rfind("AKADZE_JOB_ID=", 0) == 0;
        }) == 1);
}

TEST_CASE("the child starts with default signals even when the daemon blocks or ignores them",
          "[shell]") {
  LogCapture log;
  // As the daemon does: SIGPIPE ignored, shutdown signals blocked in its threads.
  struct sigaction ignore {};
  struct sigaction previous {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &previous);
  sigset_t blocked;
  sigset_t old_mask;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGTERM);
  sigaddset(&blocked, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &blocked, &old_mask);
  ShellHandlerConfig config;  // no shell: dash would clear the mask itself
  config.command = {"grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"};
  JobOutcome outcome = RunOnce(config);
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  sigaction(SIGPIPE, &previous, nullptr);

  CHECK(outcome.kind == OutcomeKind::kSuccess);
  const std::vector<std::string> lines = Stdout(log, 1);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "SigBlk:\t0000000000000000");
  // Bits 0-30 are signals 1-31. glibc's posix_spawn leaves its own internal
  // real-time signals (32, 33) ignored; every glibc program resets them.
  REQUIRE(lines[1].rfind("SigIgn:\t", 0) == 0);
  CHECK((std::stoull(lines[1].substr(8), nullptr, 16) & 0x7fffffffULL) == 0);
}

TEST_CASE("the args JSON arrives intact on stdin, large or unread", "[shell]") {
  LogCapture log;
  const std::string args = R"({"text": "h\u00e9llo \"quoted\"\nline", "n": [1, 2.5, null]})";
  JobOutcome outcome =
      RunOnce(Sh(R"({ printf '{"result": '; cat; printf '}'; } >&3)"), Job(1, args));
  REQUIRE(outcome.kind == OutcomeKind::kSuccess);
  REQUIRE(outcome.result_json);
  CHECK(json::parse(*outcome.result_json) == json::parse(args));

  TempDir dir;
  const std::string big = R"({"data": ")" + std::string(1'000'000, 'x') + R"("})";
  outcome = RunOnce(Sh(R"(cat > "$1")", {dir / "args"}), Job(2, big));
  CHECK(outcome.kind == OutcomeKind::kSuccess);
  CHECK(ReadFile(dir / "args") == big);

  // Children that never read stdin: one exits at once, one after a while.
  CHECK(RunOnce(Sh("exit 0"), Job(3, big)).kind == OutcomeKind::kSuccess);
  CHECK(RunOnce(Sh("sleep 0.2"), Job(4, big)).kind == OutcomeKind::kSuccess);
  // One closes stdin early and keeps running.
  CHECK(RunOnce(Sh("exec 0<&-; sleep 0.2; echo done"), Job(5, big)).kind == OutcomeKind::kSuccess);
  CHECK(Stdout(log, 5) == std::vector<std::string>{"done"});
}

TEST_CASE("a timeout kills the whole process group, a grandchild ignoring TERM included",
          "[shell]") {
  Subreaper subreaper;
  TempDir dir;
  LogCapture log;
  ShellHandlerConfig config =
      Sh(R"(trap '' TERM; sleep 60 & echo $! > "$1"; sleep 60)", {dir / "grandchild.pid"});
  config.timeout_us = 1'500'000;
  config.kill_grace_us = 200'000;
  const auto started = Clock::now();
  JobOutcome outcome = RunOnce(config);
  CHECK(Clock::now() - started < std::chrono::seconds(30));  // not the 60 s sleep
  CHECK(outcome.kind == OutcomeKind::kRetry);
  CHECK(outcome.error == "Timeout");
  CHECK(outcome.message == "timed out after 1s500ms");
  CHECK(log.Has("timed out after 1s500ms: SIGTERM to process group"));
  CHECK(log.Has("SIGKILL to process group"));

  const pid_t grandchild = AwaitPidFile(dir / "grandchild.pid");
  REQUIRE(grandchild > 0);
  CHECK(AwaitGone(grandchild));
}

TEST_CASE("background children still running when the leader exits are killed", "[shell]") {
  Subreaper subreaper;
  TempDir dir;
  LogCapture log;
  const auto started = Clock::now();
  JobOutcome outcome =
      RunOnce(Sh(R"(sleep 60 & echo $! > "$1"; echo leaving)", {dir / "stray.pid"}));
  CHECK(Clock::now() - started < std::chrono::seconds(30));  // the stray held stdout open
  CHECK(outcome.kind == OutcomeKind::kSuccess);
  CHECK(Stdout(log, 1) == std::vector<std::string>{"leaving"});
  const pid_t stray = AwaitPidFile(dir / "stray.pid");
  REQUIRE(stray > 0);
  CHECK(AwaitGone(stray));
}

TEST_CASE("a process that left the group holds Run only for the drain bound", "[shell]") {
  Subreaper subreaper;
  TempDir dir;
  LogCapture log;
  const auto started = Clock::now();
  // The leader waits until the background process has left the group.
  JobOutcome outcome = RunOnce(Sh(R"(setsid sh -c 'echo $$ > "$1"; exec sleep 30' sh "$1" &
while [ ! -s "$1" ]; do sleep 0.05; done; echo bye)",
                                  {dir / "escaped.pid"}));
  CHECK(Clock::now() - started < std::chrono::seconds(20));  // not the 30 s sleep
  CHECK(outcome.kind == OutcomeKind::kSuccess);
  CHECK(Stdout(log, 1) == std::vector<std::string>{"bye"});
  const pid_t escaped = AwaitPidFile(dir / "escaped.pid");
  REQUIRE(escaped > 0);
  kill(escaped, SIGKILL);  // out of the handler's reach by design
  CHECK(AwaitGone(escaped));
}

TEST_CASE("a stop requested from another thread kills the group and Run returns", "[shell]") {
  Subreaper subreaper;
  TempDir dir;
  LogCapture log;

  SECTION("a group ignoring TERM is killed after the grace") {
    ShellHandlerConfig config =
        Sh(R"(trap '' TERM; sleep 60 & echo $! > "$1"; sleep 60)", {dir / "grandchild.pid"});
    config.kill_grace_us = 300'000;
    ShellHandler handler("test", config);
    JobStop stop;
    std::thread stopper([&] {
      AwaitPidFile(dir / "grandchild.pid");
      stop.Request(StopReason::kCancelRequested);
    });
    const auto started = Clock::now();
    JobOutcome outcome = handler.Run(Job(1), stop);
    stopper.join();
    CHECK(Clock::now() - started < std::chrono::seconds(30));
    CHECK(outcome.error == "Stopped");
    CHECK(outcome.message == "stopped: cancel requested");
    CHECK(log.Has("stopping (cancel requested): SIGTERM to process group"));
    const pid_t grandchild = AwaitPidFile(dir / "grandchild.pid");
    REQUIRE(grandchild > 0);
    CHECK(AwaitGone(grandchild));
  }

  SECTION("a child that obeys TERM ends well before the grace") {
    ShellHandlerConfig config = Sh(R"(echo $$ > "$1"; sleep 60)", {dir / "leader.pid"});
    config.kill_grace_us = 120'000'000;
    ShellHandler handler("test", config);
    JobStop stop;
    std::thread stopper([&] {
      AwaitPidFile(dir / "leader.pid");
      stop.Request(StopReason::kShutdown);
    });
    const auto started = Clock::now();
    JobOutcome outcome = handler.Run(Job(1), stop);
    stopper.join();
    CHECK(Clock::now() - started < std::chrono::seconds(60));
    CHECK(outcome.message == "stopped: shutdown");
    CHECK_FALSE(log.Has("SIGKILL"));
  }

  SECTION("a stop requested before Run starts nothing") {
    JobStop stop;
    stop.Request(StopReason::kLeaseLost);
    ShellHandler handler("test", Sh(R"(touch "$1")", {dir / "ran"}));
    JobOutcome outcome = handler.Run(Job(1), stop);
    CHECK(outcome.error == "Stopped");
    CHECK_FALSE(fs::exists(dir / "ran"));
  }
}

TEST_CASE("a program that cannot be started is a SpawnFailed retry", "[shell]") {
  LogCapture log;
  TempDir dir;
  ShellHandlerConfig config;
  config.command = {"/nonexistent/akadzed-test-program", "arg"};
  JobOutcome outcome = RunOnce(config);
  CHECK(outcome.kind == OutcomeKind::kRetry);
  CHECK(outcome.error == "SpawnFailed");
  CHECK(outcome.message == "/nonexistent/akadzed-test-program: No such file or directory");

  config.command = {"akadzed-no-such-program-in-path"};
  outcome = RunOnce(config);
  CHECK(outcome.error == "SpawnFailed");
  CHECK(outcome.message == "akadzed-no-such-program-in-path: No such file or directory");

  const std::string script = dir / "not-executable.sh";
  std::ofstream(script) << "#!/bin/sh\nexit 0\n";
  chmod(script.c_str(), 0644);
  config.command = {script};
  outcome = RunOnce(config);
  CHECK(outcome.error == "SpawnFailed");
  CHECK(outcome.message == script + ": Permission denied");

  config = Sh("exit 0");
  config.working_directory = dir / "missing";
  outcome = RunOnce(config);
  CHECK(outcome.error == "SpawnFailed");
  CHECK(outcome.message ==
        "working_directory " + (dir / "missing") + ": No such file or directory");

  CHECK_THROWS_AS(ShellHandler("test", ShellHandlerConfig{}), std::invalid_argument);
}

TEST_CASE("output lines are cut, the run's output is capped, partial lines are kept", "[shell]") {
  SECTION("long lines are cut and the total is capped with one warning") {
    LogCapture log;
    ShellHandlerConfig config =
        Sh("echo 0123456789012345678901234567890123456789; "
           "i=0; while [ $i -lt 50 ]; do echo \"line $i\"; i=$((i+1)); done; echo late >&2");
    config.max_line_bytes = 20;
    config.max_output_bytes = 100;
    REQUIRE(RunOnce(config).kind == OutcomeKind::kSuccess);
    const std::vector<std::string> lines = Stdout(log, 1);
    REQUIRE(lines.size() >= 2);
    CHECK(lines[0] == "01234567890123456...");
    std::size_t total = 0;
    for (const std::string& line : lines) total += line.size();
    CHECK(total <= 100);
    CHECK(lines.back() != "line 49");
    CHECK(log.Count("output job=1 task=test | truncated after ") == 1);
    CHECK(log.Has("warning output job=1 task=test | truncated after " + std::to_string(total) +
                  " bytes"));
    CHECK_FALSE(log.Has("| late"));
  }

  SECTION("max_output_bytes 0 logs no output at all") {
    LogCapture log;
    ShellHandlerConfig config = Sh("echo; echo a; echo b >&2");
    config.max_output_bytes = 0;
    REQUIRE(RunOnce(config).kind == OutcomeKind::kSuccess);
    CHECK_FALSE(log.Has("stream="));
    CHECK(log.Count("output job=1 task=test | truncated after 0 bytes") == 1);
  }

  SECTION("a partial last line is logged at EOF") {
    LogCapture log;
    REQUIRE(RunOnce(Sh("printf 'first\\nno newline at end'")).kind == OutcomeKind::kSuccess);
    CHECK(Stdout(log, 1) == std::vector<std::string>{"first", "no newline at end"});
  }

  SECTION("a huge line without newlines is cut, the next line is intact") {
    LogCapture log;
    ShellHandlerConfig config =
        Sh("head -c 300000 /dev/zero | tr '\\0' a; printf '\\r\\nafter\\n'; "
           "echo 'multi-byte: \xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
           "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9' >&2; "
           "exit 9");
    config.max_line_bytes = 20;
    JobOutcome outcome = RunOnce(config);
    CHECK(Stdout(log, 1) == std::vector<std::string>{"aaaaaaaaaaaaaaaaa...", "after"});
    // The stderr line in the message is the cut one, not split inside a character.
    CHECK(outcome.message == "exited with status 9: multi-byte: \xc3\xa9\xc3\xa9...");
  }
}

TEST_CASE("runs leak no fds and the child holds only fds 0-3", "[shell]") {
  Subreaper subreaper;
  LogCapture log;
  // An fd the test opens without O_CLOEXEC must not reach the child either.
  const int null_fd = open("/dev/null", O_RDONLY);
  const int inheritable = fcntl(null_fd, F_DUPFD, 10);  // a dup is never close-on-exec
  close(null_fd);
  REQUIRE(inheritable >= 10);
  const std::size_t before = OpenFdCount();

  REQUIRE(RunOnce(Sh("ls /proc/$$/fd; exit 0")).kind == OutcomeKind::kSuccess);
  CHECK(Stdout(log, 1) == std::vector<std::string>{"0", "1", "2", "3"});
  RunOnce(Sh("exit 4"));
  RunOnce(Sh("printf 'junk' >&3"));
  ShellHandlerConfig missing;
  missing.command = {"/nonexistent/program"};
  RunOnce(missing);
  ShellHandlerConfig slow = Sh("sleep 60");
  slow.timeout_us = 100'000;
  slow.kill_grace_us = 100'000;
  CHECK(RunOnce(slow).error == "Timeout");
  close(inheritable);
  CHECK(OpenFdCount() == before - 1);
}

TEST_CASE("many threads run jobs at once, each seeing only its own pipes", "[shell]") {
  LogCapture log;
  ShellHandler handler("test", Sh(R"(ls /proc/$$/fd
{ printf '{"result": {"job": %s, "args": ' "$AKADZE_JOB_ID"; cat; printf '}}'; } >&3)"));
  const std::size_t before = OpenFdCount();
  constexpr int kThreads = 8;
  constexpr int kRunsEach = 6;
  std::atomic<int> good{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRunsEach; ++i) {
        const std::int64_t id = 1000 + t * 100 + i;
        const std::size_t pad = static_cast<std::size_t>(id % 7) * 30'000;
        const json args = {{"n", id}, {"pad", std::string(pad, 'p')}};
        JobStop stop;
        JobOutcome outcome = handler.Run(Job(id, args.dump()), stop);
        if (outcome.kind == OutcomeKind::kSuccess && outcome.result_json &&
            json::parse(*outcome.result_json) == json{{"job", id}, {"args", args}}) {
          ++good;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(good == kThreads * kRunsEach);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kRunsEach; ++i) {
      const std::int64_t id = 1000 + t * 100 + i;
      INFO("job " << id);
      CHECK(Stdout(log, id) == std::vector<std::string>{"0", "1", "2", "3"});
    }
  }
  CHECK(OpenFdCount() == before);
}

TEST_CASE("shell: AKADZE_ATTEMPT of a job claimed with attempt at its maximum is 2147483647, not an "
          "overflow", "[shell]") {
  LogCapture log;
  ClaimedJob job = Job(43);
  job.attempt = 2147483647;
  REQUIRE(RunOnce(Sh("echo \"$AKADZE_ATTEMPT\""), job).kind == OutcomeKind::kSuccess);
  CHECK(Stdout(log, 43) == std::vector<std::string>{"2147483647"});
}

}  // namespace
}  // namespace akadzed
