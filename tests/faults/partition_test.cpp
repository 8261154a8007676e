// Partitions (issue 15): daemon A reaches PostgreSQL through a blackholing
// TCP proxy (support/blackhole_proxy.h), daemon B directly. A cut keeps A's
// sockets open and forwards nothing, what a network partition looks like:
// neither A nor the server learns anything until the cut heals.
//
//  [proxy]  the proxy itself, against the test cluster.
//  (a) a cut of the whole of A while its claim holds the queue's claim lock:
//      B's claims of that queue never stop for longer than
//      database.stall_timeout + 2 s.
//  (b) a cut of A's heartbeat connection only, while A runs long jobs whose
//      handlers ignore SIGTERM: A loses its lease and every one of its
//      handlers is dead before B rescues any of its jobs; no job runs twice
//      at the same time.
//  (c) a cut of the whole of A, longer than heartbeat_ttl, starting as A's
//      claim sends its BEGIN: that claim reaches the server after the heal
//      and must take no job; A registers a new worker id, never its old one.
//
// Every scenario ends with the audit of every job (faults/job_audit.h) and a
// report line. The scenarios set database.stall_timeout to 1 s by adding a
// `database:` section to the YAML FaultScenario wrote (every StartDaemon
// reads that file).
#include <catch2/catch.hpp>

#include <dirent.h>
#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "faults/fault_scenario.h"
#include "support/blackhole_proxy.h"
#include "support/run_command.h"
#include "support/test_cluster.h"

namespace akadzed::test {
namespace {

using namespace std::chrono_literals;

std::string Ms(std::int64_t us) {
  std::ostringstream out;
  out << (us / 1000);
  return out.str();
}

// ---------------------------------------------------------------------------
// Raw libpq helpers for the proxy checks: a query sent without waiting, and
// its result awaited with a client-side timeout.

struct Pg {
  PGconn* conn = nullptr;
  explicit Pg(const std::string& conninfo) : conn(PQconnectdb(conninfo.c_str())) {}
  ~Pg() {
    if (conn != nullptr) PQfinish(conn);
  }
  Pg(const Pg&) = delete;
  Pg& operator=(const Pg&) = delete;
  bool ok() const { return conn != nullptr && PQstatus(conn) == CONNECTION_OK; }
  std::string error() const { return conn != nullptr ? PQerrorMessage(conn) : "out of memory"; }
};

struct Awaited {
  bool arrived = false;  // false: nothing within the timeout
  bool ok = false;       // the result was a success
  std::string value;     // first value, or the error message
};

// Waits up to `timeout` for every result of the query in flight on `c`.
Awaited AwaitResult(PGconn* c, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  Awaited out;
  for (;;) {
    if (PQconsumeInput(c) == 0) {  // the connection broke
      out.arrived = true;
      out.value = PQerrorMessage(c);
      return out;
    }
    while (!PQisBusy(c)) {
      PGresult* r = PQgetResult(c);
      if (r == nullptr) {
        out.arrived = true;
        return out;
      }
      const ExecStatusType status = PQresultStatus(r);
      if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK) {
        if (out.value.empty()) out.ok = true;
        if (status == PGRES_TUPLES_OK && PQntuples(r) > 0 && out.value.empty()) {
          out.value = PQgetvalue(r, 0, 0);
        }
      } else {
        out.ok = false;
        out.value = PQresultErrorMessage(r);
      }
      PQclear(r);
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return out;
    pollfd p{PQsocket(c), POLLIN, 0};
    poll(&p, 1, static_cast<int>(left.count()));
  }
}

// Sends `sql` and waits for its result.
Awaited Run(PGconn* c, const std::string& sql, std::chrono::milliseconds timeout) {
  if (PQsendQuery(c, sql.c_str()) == 0) return {true, false, PQerrorMessage(c)};
  return AwaitResult(c, timeout);
}

// A conninfo through `proxy` to a fresh database, with an application_name.
std::string Through(const BlackholeProxy& proxy, const std::string& db, const std::string& app) {
  return db + " " + proxy.conninfo() + " application_name='" + app + "'";
}

std::int64_t Count(pg::Connection& direct, const std::string& sql, const std::string& param) {
  return direct.exec(sql, pg::Params().add(param)).int64(0, 0);
}

constexpr const char* kSessionsNamed =
    "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1";

// ---------------------------------------------------------------------------
// The proxy

TEST_CASE("proxy: a query through the proxy works, and it reads each connection's "
          "application_name, also libpq's fallback_application_name",
          "[faults][proxy][direct]") {
  const std::string db = FreshDatabase();
  BlackholeProxy proxy(BlackholeProxy::ClusterTarget());
  pg::Connection conn = pg::Connection::Open(db + " " + proxy.conninfo(), "akadzed lease");
  CHECK(conn.exec("SELECT 40 + 2").text(0, 0) == "42");
  CHECK(conn.exec("SELECT current_setting('application_name')").text(0, 0) == "akadzed lease");
  Pg named(Through(proxy, db, "akadzed claim fair"));
  REQUIRE(named.ok());
  CHECK(Run(named.conn, "SELECT 'x'", 5s).value == "x");
  std::set<std::string> names;
  for (const auto& c : proxy.Connections()) {
    if (c.named) names.insert(c.application_name);
  }
  CHECK(names == std::set<std::string>{"akadzed lease", "akadzed claim fair"});
  CHECK(proxy.accepted() == 2);
  // A TCP target: a second proxy in front of the first.
  BlackholeProxy chained(BlackholeProxy::Target::Tcp("127.0.0.1", proxy.port()));
  Pg twice(Through(chained, db, "chained"));
  REQUIRE(twice.ok());
  CHECK(Run(twice.conn, "SELECT 'twice'", 5s).value == "twice");
  CHECK(proxy.accepted() == 3);
}

TEST_CASE("proxy: during a cut a query does not return and never reaches the server; after "
          "Heal it completes",
          "[faults][proxy][direct]") {
  const std::string db = FreshDatabase();
  pg::Connection direct = pg::Connection::Open(db);
  BlackholeProxy proxy(BlackholeProxy::ClusterTarget());
  Pg c(Through(proxy, db, "proxycheck"));
  REQUIRE(c.ok());
  REQUIRE(Run(c.conn, "SELECT 1", 5s).value == "1");
  proxy.CutAll();
  REQUIRE(PQsendQuery(c.conn, "SELECT 'through the cut'") == 1);
  Awaited during = AwaitResult(c.conn, 1500ms);
  CHECK_FALSE(during.arrived);
  CHECK(PQstatus(c.conn) == CONNECTION_OK);  // no RST, no FIN
  // The server never saw it: the session is idle, its last query the first.
  pg::Result seen = direct.exec(
      "SELECT state, query FROM pg_stat_activity WHERE application_name = 'proxycheck'");
  REQUIRE(seen.rows() == 1);
  CHECK(seen.text(0, 0) == "idle");
  CHECK(seen.text(0, 1) == "SELECT 1");
  bool held = false;
  for (const auto& info : proxy.Connections()) held = held || (info.cut && info.held_bytes > 0);
  CHECK(held);
  proxy.Heal();
  Awaited after = AwaitResult(c.conn, 5s);
  CHECK(after.arrived);
  CHECK(after.value == "through the cut");
}

TEST_CASE("proxy: a cut by name leaves other connections alone; a new connection during a cut "
          "is accepted and gets nothing until Heal",
          "[faults][proxy][direct]") {
  const std::string db = FreshDatabase();
  BlackholeProxy proxy(BlackholeProxy::ClusterTarget());
  Pg lease(Through(proxy, db, "akadzed lease"));
  Pg claim(Through(proxy, db, "akadzed claim fair"));
  REQUIRE(lease.ok());
  REQUIRE(claim.ok());
  proxy.Cut("lease");
  REQUIRE(PQsendQuery(lease.conn, "SELECT 'late'") == 1);
  CHECK(Run(claim.conn, "SELECT 'free'", 5s).value == "free");
  CHECK_FALSE(AwaitResult(lease.conn, 500ms).arrived);
  // New connections: one the filter matches waits; another goes through.
  auto matched = std::async(std::launch::async, [&] {
    Pg late(Through(proxy, db, "akadzed lease 2") + " connect_timeout=30");
    return late.ok() ? Run(late.conn, "SELECT 'new'", 5s).value : late.error();
  });
  Pg other(Through(proxy, db, "someone else"));
  CHECK(other.ok());
  CHECK(matched.wait_for(700ms) == std::future_status::timeout);
  // Cut("") also holds connections whose startup packet never got through.
  proxy.CutAll();
  auto unnamed = std::async(std::launch::async, [&] {
    Pg late(Through(proxy, db, "anyone") + " connect_timeout=30");
    return late.ok();
  });
  CHECK(unnamed.wait_for(700ms) == std::future_status::timeout);
  proxy.Heal();
  CHECK(AwaitResult(lease.conn, 5s).value == "late");
  REQUIRE(matched.wait_for(10s) == std::future_status::ready);
  CHECK(matched.get() == "new");
  REQUIRE(unnamed.wait_for(10s) == std::future_status::ready);
  CHECK(unnamed.get());
}

TEST_CASE("proxy: a close by either side during a cut is held and delivered after Heal",
          "[faults][proxy][direct]") {
  const std::string db = FreshDatabase();
  pg::Connection direct = pg::Connection::Open(db);
  BlackholeProxy proxy(BlackholeProxy::ClusterTarget());
  auto closing = std::make_unique<Pg>(Through(proxy, db, "heldclose"));
  Pg terminated(Through(proxy, db, "heldterm"));
  REQUIRE(closing->ok());
  REQUIRE(terminated.ok());
  const std::string pid = Run(terminated.conn, "SELECT pg_backend_pid()", 5s).value;
  proxy.CutAll();
  // The client closes: the server must not learn of it.
  closing.reset();
  // The server closes: the client must not learn of it.
  direct.exec("SELECT pg_terminate_backend($1::int)", pg::Params().add(pid));
  REQUIRE(WaitUntil([&] { return Count(direct, kSessionsNamed, "heldterm") == 0; }, 10s));
  std::this_thread::sleep_for(300ms);  // time for a FIN to travel, were one sent
  CHECK(Count(direct, kSessionsNamed, "heldclose") == 1);
  REQUIRE(PQsendQuery(terminated.conn, "SELECT 1") == 1);
  CHECK_FALSE(AwaitResult(terminated.conn, 500ms).arrived);
  CHECK(PQstatus(terminated.conn) == CONNECTION_OK);
  proxy.Heal();
  CHECK(WaitUntil([&] { return Count(direct, kSessionsNamed, "heldclose") == 0; }, 10s));
  Awaited after = AwaitResult(terminated.conn, 5s);
  CHECK(after.arrived);
  CHECK_FALSE(after.ok);
  INFO(after.value);
  CHECK(WaitUntil([&] { return proxy.Connections().empty(); }, 10s));
}

TEST_CASE("proxy: CutWhen cuts at a transaction's n-th statement (the server ran it, its reply "
          "is held) or at an idle session's next message (held before the server)",
          "[faults][proxy][direct]") {
  const std::string db = FreshDatabase();
  pg::Connection direct = pg::Connection::Open(db);
  BlackholeProxy proxy(BlackholeProxy::ClusterTarget());
  Pg c(Through(proxy, db, "trig"));
  REQUIRE(c.ok());
  SECTION("the second statement, a prepared one (a prepare round trip does not count)") {
    proxy.CutWhen("trig", 2, "");
    REQUIRE(Run(c.conn, "BEGIN", 5s).ok);
    PGresult* prepared = PQprepare(c.conn, "lock", "SELECT pg_advisory_xact_lock(42), 'locked'", 0, nullptr);
    REQUIRE(PQresultStatus(prepared) == PGRES_COMMAND_OK);
    PQclear(prepared);
    CHECK_FALSE(proxy.trigger().fired);
    REQUIRE(PQsendQueryPrepared(c.conn, "lock", 0, nullptr, nullptr, nullptr, 0) == 1);
    REQUIRE(proxy.WaitTriggered(5s));
    CHECK(proxy.trigger().application_name == "trig");
    CHECK_FALSE(AwaitResult(c.conn, 500ms).arrived);
    // The server ran it: the lock is held, the session idle in transaction.
    CHECK(direct.exec("SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
                      " WHERE a.application_name = 'trig' AND l.locktype = 'advisory' AND l.granted"
                      "   AND a.state = 'idle in transaction'")
              .int64(0, 0) == 1);
    proxy.Heal();
    CHECK(AwaitResult(c.conn, 5s).ok);
    CHECK(Run(c.conn, "COMMIT", 5s).ok);
  }
  SECTION("an idle session's next message") {
    REQUIRE(Run(c.conn, "SELECT 1", 5s).ok);
    proxy.CutWhen("trig", 0, "trig");
    CHECK_FALSE(proxy.trigger().fired);
    REQUIRE(PQsendQuery(c.conn, "SELECT 'seven'") == 1);
    REQUIRE(proxy.WaitTriggered(5s));
    CHECK_FALSE(AwaitResult(c.conn, 500ms).arrived);
    pg::Result seen =
        direct.exec("SELECT state, query FROM pg_stat_activity WHERE application_name = 'trig'");
    REQUIRE(seen.rows() == 1);
    CHECK(seen.text(0, 0) == "idle");
    CHECK(seen.text(0, 1) == "SELECT 1");
    proxy.Heal();
    CHECK(AwaitResult(c.conn, 5s).value == "seven");
  }
}

// ---------------------------------------------------------------------------
// Scenario helpers

std::string ConfigPath(const FaultScenario& s) { return s.dir().path() + "/akadzed.yaml"; }

// Adds `top_level` (YAML at the top level) and `handlers` (entries of the
// handlers mapping, indented two spaces) to the config FaultScenario wrote,
// and checks it with `akadzed check-config`: a daemon that lacks a key the
// scenario needs fails here, naming it.
void ExtendConfig(FaultScenario& s, const std::string& top_level, const std::string& handlers = "") {
  std::ifstream in(ConfigPath(s));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!handlers.empty()) {
    const std::size_t at = text.find("handlers:\n");
    REQUIRE(at != std::string::npos);
    text.insert(at + std::string("handlers:\n").size(), handlers);
  }
  text += top_level;
  s.dir().Write("akadzed.yaml", text);
  CommandResult check = RunAkadzed({"check-config", ConfigPath(s)},
                                   {{"AKADZED_PLUGIN_PATH", std::string(AKADZED_FAULT_PLUGIN_DIR)}});
  INFO("config:\n" << text << "\ncheck-config: " << check.out << check.err);
  REQUIRE(check.exit_code == 0);
}

// The handler of task "stubborn": like the scenario's shell handler (sleeps
// args.ms, then records its run), but it ignores SIGTERM, so only the SIGKILL
// its daemon sends kill_grace later ends it.
std::string StubbornScript(const FaultScenario& s) {
  return s.dir().Write("stubborn.sh", ShellHandlerScript(s.record_path(), /*ignore_term=*/true), true);
}


// "ts=2026-11-30T12:00:00.123Z ..." -> microseconds since the epoch.
std::optional<std::int64_t> LogTimeUs(const std::string& line) {
  const std::size_t at = line.find("ts=");
  if (at == std::string::npos) return std::nullopt;
  std::tm tm{};
  int ms = 0;
  if (std::sscanf(line.c_str() + at + 3, "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) != 7) {
    return std::nullopt;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<std::int64_t>(timegm(&tm)) * 1000000 + ms * 1000;
}

// Lines of daemon `index`'s log containing `needle`, with their times.
std::vector<std::pair<std::int64_t, std::string>> LogEvents(FaultScenario& s, int index,
                                                            const std::string& needle) {
  std::vector<std::pair<std::int64_t, std::string>> out;
  for (const std::string& line : Lines(s.daemon(index).Log())) {
    if (line.find(needle) == std::string::npos) continue;
    if (auto t = LogTimeUs(line)) out.emplace_back(*t, line);
  }
  return out;
}

// "... <key>=<value> ..." -> value (up to the next space).
std::string Field(const std::string& line, const std::string& key) {
  const std::size_t at = line.find(" " + key + "=");
  if (at == std::string::npos) return "";
  const std::size_t from = at + key.size() + 2;
  return line.substr(from, line.find(' ', from) - from);
}

// Worker ids daemon `pid` registered (inserted rows), in order.
std::vector<std::pair<std::string, std::int64_t>> WorkerIds(FaultScenario& s, pid_t pid) {
  pg::Result r = s.Query(
      "SELECT id::text, (extract(epoch FROM at) * 1000000)::int8 FROM fault_audit.workers"
      " WHERE pid = $1 ORDER BY at",
      pg::Params().add(static_cast<std::int64_t>(pid)));
  std::vector<std::pair<std::string, std::int64_t>> out;
  for (int i = 0; i < r.rows(); ++i) out.emplace_back(std::string(r.text(i, 0)), r.int64(i, 1));
  return out;
}

// Claim instants (server clock, one per claimed job) of the daemon with
// `pid`, in queue `queue` ("" = both), ordered.
std::vector<std::int64_t> ClaimTimes(FaultScenario& s, pid_t pid, const std::string& queue) {
  pg::Result r = s.Query(
      "SELECT (extract(epoch FROM t.at) * 1000000)::int8 FROM fault_audit.transitions t"
      " JOIN fault_audit.workers w ON w.id = t.worker_id"
      " WHERE t.from_state = 'queued' AND t.to_state = 'running' AND w.pid = $1"
      "   AND ($2::text = '' OR t.queue = $2::text) ORDER BY t.at",
      pg::Params().add(static_cast<std::int64_t>(pid)).add(queue));
  std::vector<std::int64_t> out;
  for (int i = 0; i < r.rows(); ++i) out.push_back(r.int64(i, 0));
  return out;
}

// The first claim daemon `pid` logged after `since_us` (0: none yet).
std::int64_t FirstClaimAfter(FaultScenario& s, pid_t pid, std::int64_t since_us) {
  for (std::int64_t t : ClaimTimes(s, pid, "")) {
    if (t > since_us) return t;
  }
  return 0;
}

// The longest stretch of [from, to] without a claim in `times`.
std::int64_t LongestGap(const std::vector<std::int64_t>& times, std::int64_t from, std::int64_t to) {
  std::int64_t last = from, gap = 0;
  for (std::int64_t t : times) {
    if (t <= from) continue;
    if (t > to) break;
    gap = std::max(gap, t - last);
    last = t;
  }
  return std::max(gap, to - last);
}

// Keeps the queue stocked: enqueues `batch` more short shell jobs when fewer
// than `low` are queued.
void TopUp(FaultScenario& s, int low, int batch, int keys, int& round) {
  if (s.CountJobs("state = 'queued'") < low) {
    s.Enqueue("shell", batch, keys, 10, 60, 0.5 + 0.01 * ++round);
  }
}

// Watches the handler processes of one daemon (its direct children running
// `script`) every few milliseconds: when each was first seen, last seen
// alive, and first seen dead (a zombie or gone).
class HandlerWatch {
 public:
  struct Run {
    pid_t pid = 0;
    std::int64_t job = 0;
    int run_count = 0;
    std::int64_t first_seen_us = 0;
    std::int64_t last_alive_us = 0;
    std::int64_t dead_seen_us = 0;  // 0: alive at the last look
  };

  HandlerWatch(pid_t daemon, std::string script) : daemon_(daemon), script_(std::move(script)) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~HandlerWatch() { Stop(); }
  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  std::vector<Run> runs() const {
    std::lock_guard lock(mu_);
    std::vector<Run> out;
    for (const auto& [pid, run] : runs_) {
      if (run.job != 0) out.push_back(run);
    }
    return out;
  }
  int alive() const {
    std::lock_guard lock(mu_);
    int n = 0;
    for (const auto& [pid, run] : runs_) n += run.job != 0 && run.dead_seen_us == 0;
    return n;
  }

 private:
  std::set<pid_t> Children() const {
    std::set<pid_t> out;
    const std::string tasks = "/proc/" + std::to_string(daemon_) + "/task";
    DIR* dir = opendir(tasks.c_str());
    if (dir == nullptr) return out;
    while (dirent* e = readdir(dir)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      std::istringstream list(ReadProcFile(tasks + "/" + e->d_name + "/children"));
      for (pid_t pid; list >> pid;) out.insert(pid);
    }
    closedir(dir);
    return out;
  }

  void Loop() {
    while (!stop_.load()) {
      const std::set<pid_t> children = Children();
      const std::int64_t now = NowUs();
      std::lock_guard lock(mu_);
      for (pid_t pid : children) {
        Run& run = runs_[pid];
        if (run.pid == 0) {
          run.pid = pid;
          run.first_seen_us = now;
        }
        const std::string proc = "/proc/" + std::to_string(pid);
        if (run.job == 0) {  // until its exec: the daemon's own image
          if (ReadProcFile(proc + "/cmdline").find(script_) == std::string::npos) continue;
          std::string env = ReadProcFile(proc + "/environ");
          for (std::size_t at = 0; at < env.size();) {
            std::size_t end = env.find('\0', at);
            if (end == std::string::npos) end = env.size();
            const std::string var = env.substr(at, end - at);
            if (var.rfind("AKADZE_JOB_ID=", 0) == 0) run.job = std::stoll(var.substr(14));
            if (var.rfind("AKADZE_RUN_COUNT=", 0) == 0) run.run_count = std::stoi(var.substr(17));
            at = end + 1;
          }
          if (run.job == 0) continue;
        }
        // /proc/<pid>/stat: "pid (comm) S ...": the state after the last ')'.
        const std::string stat = ReadProcFile(proc + "/stat");
        const std::size_t paren = stat.rfind(')');
        const char state = paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : 'X';
        if (state != 'Z' && state != 'X') {
          run.last_alive_us = now;
        } else if (run.dead_seen_us == 0) {
          run.dead_seen_us = now;
        }
      }
      for (auto& [pid, run] : runs_) {
        if (run.dead_seen_us == 0 && !children.contains(pid)) run.dead_seen_us = now;
      }
      std::this_thread::sleep_for(3ms);
    }
  }

  pid_t daemon_;
  std::string script_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::map<pid_t, Run> runs_;  // guarded by mu_
  std::thread thread_;
};

constexpr std::int64_t kStallTimeoutUs = 1'000'000;
const std::string kStallConfig = "database: {stall_timeout: 1s}\n";

// ---------------------------------------------------------------------------
// (a)

TEST_CASE("partition (a): a cut of the whole daemon during claims never stalls the queue",
          "[faults][partition][direct]") {
  FaultScenario s;  // heartbeat 200 ms, ttl 1.5 s
  ExtendConfig(s, kStallConfig);
  const int keys = 40;
  const auto cut_for = Long() ? 15s : 5s;
  s.SetLimits(keys);
  s.Enqueue("shell", 600, keys, 10, 60, 0.11);
  s.sampler().Start();
  BlackholeProxy proxy(BlackholeProxy::ClusterTarget());
  const int a = s.StartDaemon(s.db() + " " + proxy.conninfo());
  const int b = s.StartDaemon();
  const pid_t a_pid = s.daemon(a).pid(), b_pid = s.daemon(b).pid();
  REQUIRE(WaitUntil([&] {
    return ClaimTimes(s, a_pid, "").size() >= 30 && ClaimTimes(s, b_pid, "").size() >= 30;
  }, 30s));

  // The cut: as A's claim has run its first round trip (BEGIN, the statement
  // that takes the queue's claim lock and the first window, one pipeline),
  // its reply is held and every connection of A cut.
  proxy.CutWhen("akadzed claim", 1, "");
  REQUIRE(proxy.WaitTriggered(10s));
  const BlackholeProxy::TriggerInfo cut = proxy.trigger();
  const std::string queue = cut.application_name.substr(std::string("akadzed claim ").size());
  // A's session holds the lock, idle in transaction, until the server ends it.
  pg::Result holder = s.Query(
      "SELECT DISTINCT a.pid FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid"
      " WHERE a.datname = current_database() AND a.application_name = $1"
      "   AND a.state = 'idle in transaction' AND l.locktype = 'advisory' AND l.granted",
      pg::Params().add(cut.application_name));
  REQUIRE(holder.rows() == 1);
  const std::int64_t holder_pid = holder.int64(0, 0);
  std::int64_t lock_released_us = 0;
  int round = 0;
  const auto cut_end = std::chrono::steady_clock::now() + cut_for;
  while (std::chrono::steady_clock::now() < cut_end) {
    if (lock_released_us == 0 &&
        s.Query("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pg::Params().add(holder_pid))
                .int64(0, 0) == 0) {
      lock_released_us = NowUs();
    }
    TopUp(s, 150, 300, keys, round);
    std::this_thread::sleep_for(20ms);
  }
  proxy.Heal();
  const std::int64_t heal_us = NowUs();
  // A recovers: claims again.
  std::int64_t a_back_us = 0;
  CHECK(WaitUntil([&] { return (a_back_us = FirstClaimAfter(s, a_pid, heal_us)) != 0; }, 30s));
  REQUIRE(s.WaitAllFinished(120s));
  CHECK(s.StopDaemons() == 0);
  REQUIRE(s.WaitHandlersGone(30s));
  AuditReport audit = s.RunAudit();

  const std::vector<std::int64_t> b_claims = ClaimTimes(s, b_pid, queue);
  const std::int64_t gap = LongestGap(b_claims, cut.at_us, heal_us);
  const std::int64_t gap_other = LongestGap(ClaimTimes(s, b_pid, queue == "fair" ? "ordered" : "fair"),
                                            cut.at_us, heal_us);
  std::int64_t lock_timeouts = s.CountLogLines(b, "claim_lock_timeout");
  std::ostringstream faults, recovery;
  faults << "all of A cut for " << Ms(heal_us - cut.at_us) << " ms, as its claim of '" << queue
         << "' held the queue's claim lock";
  recovery << "A's claim session ended by the server after "
           << (lock_released_us ? Ms(lock_released_us - cut.at_us) + " ms" : std::string("never (cut)"))
           << "; B's longest gap between claims of '" << queue << "' during the cut: " << Ms(gap)
           << " ms (other queue " << Ms(gap_other) << " ms), " << b_claims.size() << " claims, "
           << lock_timeouts << " claim_lock_timeout; A claimed again "
           << (a_back_us ? Ms(a_back_us - heal_us) + " ms" : std::string("never")) << " after the heal; "
           << s.CountLogLines(a, "event=lease_lost") << " lease lost by A";
  s.Report("15a. Partition of a daemon during claims", audit, faults.str(), recovery.str());
  INFO(audit.Summary());
  INFO(recovery.str());
  CHECK(gap < kStallTimeoutUs + 2'000'000);
  CHECK(lock_released_us != 0);
  CHECK(audit.ok());
  CHECK(audit.lost == 0);
  CHECK(audit.succeeded + audit.failed_spent == audit.jobs);
  CHECK(audit.handler_overlap_keys == 0);
  CHECK(a_back_us != 0);
}

// ---------------------------------------------------------------------------
// (b)

TEST_CASE("partition (b): a daemon whose heartbeat connection is cut stops its handlers before "
          "any rescue",
          "[faults][partition][direct]") {
  FaultScenario s;  // heartbeat 200 ms, ttl 1.5 s, kill_grace 500 ms
  const std::string stubborn = StubbornScript(s);
  ExtendConfig(s, kStallConfig,
               "  stubborn:\n    shell: {command: [\"" + stubborn + "\"], kill_grace: 500ms}\n");
  const int keys = 20;
  s.SetLimits(keys);
  s.Enqueue("stubborn", 40, keys, 2000, 3500, 0.21);
  s.sampler().Start();
  BlackholeProxy proxy(BlackholeProxy::ClusterTarget());
  const int a = s.StartDaemon(s.db() + " " + proxy.conninfo());
  const pid_t a_pid = s.daemon(a).pid();
  HandlerWatch watch(a_pid, stubborn);
  REQUIRE(WaitUntil([&] { return !WorkerIds(s, a_pid).empty(); }, 30s));
  const std::string a_old = WorkerIds(s, a_pid).front().first;
  const int b = s.StartDaemon();
  // A runs a full load of handlers that ignore SIGTERM. (The watch reads
  // /proc/<pid>/task/*/children: a kernel without CONFIG_PROC_CHILDREN
  // shows none.)
  REQUIRE(WaitUntil([&] { return watch.alive() >= 6; }, 30s));

  proxy.Cut("akadzed lease");
  const std::int64_t cut_us = NowUs();
  // A's last heartbeat as the server recorded it (the row goes with the rescue).
  std::int64_t last_heartbeat_us = 0;
  auto read_heartbeat = [&] {
    pg::Result r = s.Query(
        "SELECT (extract(epoch FROM heartbeat_at) * 1000000)::int8 FROM akadze.workers WHERE id = $1::uuid",
        pg::Params().add(a_old));
    if (r.rows() == 1) last_heartbeat_us = std::max(last_heartbeat_us, r.int64(0, 0));
  };
  REQUIRE(WaitUntil([&] {
    read_heartbeat();
    return s.CountLogLines(a, "event=lease_lost") > 0;
  }, 15s));
  // The cut lasts until B has rescued every job of A's old id.
  REQUIRE(WaitUntil([&] {
    read_heartbeat();
    return s.CountJobs("state = 'running' AND worker_id = '" + a_old + "'") == 0 &&
           s.CountLogLines(b, "rescue job=") > 0;
  }, 20s));
  bool others_flowed = true;  // A's other connections were never cut
  for (const auto& c : proxy.Connections()) {
    if (c.application_name != "akadzed lease") others_flowed = others_flowed && !c.cut;
  }
  proxy.Heal();
  const std::int64_t heal_us = NowUs();
  REQUIRE(s.WaitAllFinished(90s));
  // Recovery: A's first claim after the heal, if any job was left for it.
  const std::int64_t a_back_us = FirstClaimAfter(s, a_pid, heal_us);
  CHECK(s.StopDaemons() == 0);
  REQUIRE(WaitUntil([&] { return !ProcessRunning(stubborn); }, 30s));
  watch.Stop();
  AuditReport audit = s.RunAudit();

  // Rescues of A's old id's jobs (B's lease keeper; A's was cut).
  pg::Result rescues = s.Query(
      "SELECT job_id, (extract(epoch FROM at) * 1000000)::int8 FROM fault_audit.transitions"
      " WHERE from_state = 'running' AND to_state IN ('queued', 'failed') AND worker_id = $1::uuid"
      "   AND app = 'akadzed lease' ORDER BY at",
      pg::Params().add(a_old));
  REQUIRE(rescues.rows() > 0);
  const std::int64_t first_rescue_us = rescues.int64(0, 1);
  // A's runs that were alive at the cut or started during it: each must be
  // dead (seen dead: an upper bound) before the first rescue.
  std::int64_t last_death_us = 0;
  int stopped = 0, alive_at_rescue = 0;
  std::vector<std::string> late;
  for (const HandlerWatch::Run& run : watch.runs()) {
    if (run.first_seen_us > heal_us) continue;  // A's runs under its new id
    if (run.dead_seen_us != 0 && run.dead_seen_us < cut_us) continue;
    ++stopped;
    const std::int64_t dead = run.dead_seen_us != 0 ? run.dead_seen_us : INT64_MAX;
    last_death_us = std::max(last_death_us, dead);
    if (dead >= first_rescue_us) {
      ++alive_at_rescue;
      late.push_back("job " + std::to_string(run.job) + " run " + std::to_string(run.run_count) +
                     ": last seen alive " + Ms(run.last_alive_us - first_rescue_us) +
                     " ms after the first rescue");
    }
  }
  // No job ran twice at the same time: every run, from the execution records
  // (completed runs) and the watch (A's runs, killed ones included).
  std::map<std::int64_t, std::map<int, std::pair<std::int64_t, std::int64_t>>> runs;
  for (const Execution& e : ReadExecutions(s.record_path())) runs[e.job_id][e.run_count] = {e.start_us, e.end_us};
  for (const HandlerWatch::Run& run : watch.runs()) {
    auto& slot = runs[run.job][run.run_count];
    if (slot.first == 0) slot = {run.first_seen_us, run.dead_seen_us != 0 ? run.dead_seen_us : INT64_MAX};
  }
  int overlaps = 0;
  std::int64_t worst_overlap_us = 0;
  for (const auto& [job, by_run] : runs) {
    std::vector<std::pair<std::int64_t, std::int64_t>> spans;
    for (const auto& [run_count, span] : by_run) spans.push_back(span);
    std::sort(spans.begin(), spans.end());
    for (std::size_t i = 1; i < spans.size(); ++i) {
      if (spans[i].first < spans[i - 1].second) {
        ++overlaps;
        worst_overlap_us = std::max(worst_overlap_us, spans[i - 1].second - spans[i].first);
      }
    }
  }
  const auto lost_events = LogEvents(s, a, "event=lease_lost");
  REQUIRE_FALSE(lost_events.empty());
  const std::int64_t lost_us = lost_events.front().first;
  std::ostringstream faults, recovery;
  faults << "A's heartbeat connection cut for " << Ms(heal_us - cut_us) << " ms, " << stopped
         << " handlers of A (SIGTERM ignored, kill_grace 500 ms) running";
  recovery << "from A's last heartbeat: lease_lost after " << Ms(lost_us - last_heartbeat_us)
           << " ms (log, ms precision), last handler dead by " << Ms(last_death_us - last_heartbeat_us)
           << " ms, first rescue by B " << Ms(first_rescue_us - last_heartbeat_us) << " ms (margin "
           << (last_death_us == INT64_MAX ? std::string("none") : Ms(first_rescue_us - last_death_us))
           << " ms), " << rescues.rows() << " jobs rescued; " << alive_at_rescue
           << " handlers alive at the first rescue; runs of one job overlapping: " << overlaps
           << " (worst " << Ms(worst_overlap_us) << " ms); A claimed again "
           << (a_back_us ? Ms(a_back_us - heal_us) + " ms after the heal" : std::string("no more (queue empty)"));
  s.Report("15b. Heartbeat connection cut", audit, faults.str(), recovery.str());
  INFO(audit.Summary());
  INFO(recovery.str());
  for (const std::string& l : late) INFO(l);
  CHECK(last_heartbeat_us != 0);
  CHECK(others_flowed);
  CHECK(stopped >= 6);
  CHECK(alive_at_rescue == 0);
  CHECK(last_death_us < first_rescue_us);
  CHECK(overlaps == 0);
  CHECK(s.CountLogLines(b, "rescue job=") > 0);
  CHECK(audit.ok());
  CHECK(audit.lost == 0);
  CHECK(audit.succeeded + audit.failed_spent == audit.jobs);
  CHECK(audit.handler_overlap_keys == 0);
}

// ---------------------------------------------------------------------------
// (c)

TEST_CASE("partition (c): a claim cut mid-flight takes no job under a lost lease, and the daemon "
          "comes back under a new worker id",
          "[faults][partition][direct]") {
  FaultScenario s;  // heartbeat 200 ms, ttl 1.5 s
  ExtendConfig(s, kStallConfig);
  const int keys = 40;
  const auto min_cut = Long() ? 15s : 3s;
  s.SetLimits(keys);
  s.Enqueue("shell", 500, keys, 10, 60, 0.31);
  s.sampler().Start();
  BlackholeProxy proxy(BlackholeProxy::ClusterTarget());
  const int a = s.StartDaemon(s.db() + " " + proxy.conninfo());
  const int b = s.StartDaemon();
  const pid_t a_pid = s.daemon(a).pid(), b_pid = s.daemon(b).pid();
  REQUIRE(WaitUntil([&] {
    return ClaimTimes(s, a_pid, "").size() >= 30 && ClaimTimes(s, b_pid, "").size() >= 30;
  }, 30s));
  const std::string a_old = WorkerIds(s, a_pid).front().first;

  // The cut: as one of A's claims sends its BEGIN, which is held.
  proxy.CutWhen("akadzed claim", 0, "");
  REQUIRE(proxy.WaitTriggered(10s));
  const BlackholeProxy::TriggerInfo cut = proxy.trigger();
  const auto cut_start = std::chrono::steady_clock::now();
  int round = 0;
  // Longer than heartbeat_ttl: A loses its lease and B rescues its jobs.
  REQUIRE(WaitUntil([&] {
    TopUp(s, 200, 300, keys, round);
    return std::chrono::steady_clock::now() - cut_start >= min_cut &&
           s.CountLogLines(a, "event=lease_lost") > 0 &&
           s.CountJobs("state = 'running' AND worker_id = '" + a_old + "'") == 0;
  }, 30s));
  // Jobs are queued for a late claim to take.
  TopUp(s, 200, 300, keys, round);
  proxy.Heal();
  const std::int64_t heal_us = NowUs();
  std::int64_t a_back_us = 0;
  CHECK(WaitUntil([&] { return (a_back_us = FirstClaimAfter(s, a_pid, heal_us)) != 0; }, 30s));
  REQUIRE(s.WaitAllFinished(120s));
  CHECK(s.StopDaemons() == 0);
  REQUIRE(s.WaitHandlersGone(30s));
  AuditReport audit = s.RunAudit();

  // Claims under A's old id that the server ran after the cut began (+100 ms
  // for bytes already on their way): statements delivered late.
  pg::Result late = s.Query(
      "SELECT count(*), count(*) FILTER (WHERE at > to_timestamp($2::float8 / 1000000))"
      " FROM fault_audit.transitions WHERE from_state = 'queued' AND to_state = 'running'"
      "   AND worker_id = $1::uuid AND at > to_timestamp($3::float8 / 1000000)",
      pg::Params().add(a_old).add(heal_us).add(cut.at_us + 100'000));
  const std::int64_t late_claims = late.int64(0, 0), claims_after_heal = late.int64(0, 1);
  // A's worker ids: the old one is never registered again.
  const auto ids = WorkerIds(s, a_pid);
  std::vector<std::string> new_ids;
  for (const auto& [id, at] : ids) {
    if (at > cut.at_us) new_ids.push_back(id);
  }
  int old_registered = 0, new_id_lines = 0;
  for (const auto& [t, line] : LogEvents(s, a, "registered worker=")) {
    if (Field(line, "worker") == a_old) ++old_registered;
    if (line.find("new id") != std::string::npos) ++new_id_lines;
  }
  // Attempts spent by the rescue on jobs A never started (dropped: "lease
  // lost before it started"), split by when their claim ran.
  std::set<std::int64_t> dropped;
  for (const auto& [t, line] : LogEvents(s, a, "lease lost before it started")) {
    dropped.insert(std::stoll(Field(line, "job")));
  }
  int dropped_claimed_before_cut = 0, dropped_claimed_late = 0;
  for (std::int64_t job : dropped) {
    pg::Result r = s.Query(
        "SELECT count(*) FILTER (WHERE at <= to_timestamp($3::float8 / 1000000)),"
        "       count(*) FILTER (WHERE at > to_timestamp($3::float8 / 1000000))"
        " FROM fault_audit.transitions WHERE job_id = $1 AND worker_id = $2::uuid"
        "   AND from_state = 'queued' AND to_state = 'running'",
        pg::Params().add(job).add(a_old).add(cut.at_us + 100'000));
    dropped_claimed_before_cut += r.int64(0, 0) > 0;
    dropped_claimed_late += r.int64(0, 1) > 0;
  }
  const std::int64_t worker_lost = s.CountJobs("errors::text LIKE '%WorkerLost%'");
  std::ostringstream faults, recovery;
  faults << "all of A cut for " << Ms(heal_us - cut.at_us) << " ms from the BEGIN of its claim ("
         << cut.application_name << ")";
  recovery << "claims under A's old id after the cut: " << late_claims << " (" << claims_after_heal
           << " after the heal); worker ids A registered since the cut: " << new_ids.size()
           << ", its old id registered " << old_registered << "x in all; " << s.CountLogLines(a, "claim_fenced")
           << " claim_fenced lines; A claimed again "
           << (a_back_us ? Ms(a_back_us - heal_us) + " ms" : std::string("never"))
           << " after the heal; jobs A dropped unstarted: " << dropped.size() << " (claimed before the cut "
           << dropped_claimed_before_cut << ", late " << dropped_claimed_late << "); jobs with a WorkerLost error: "
           << worker_lost;
  s.Report("15c. Claim cut mid-flight", audit, faults.str(), recovery.str());
  INFO(audit.Summary());
  INFO(recovery.str());
  std::string a_lines;
  for (const std::string& line : Lines(s.daemon(a).Log())) {
    if (line.find("registered worker=") != std::string::npos || line.find("lease_") != std::string::npos ||
        line.find("claim_fenced") != std::string::npos || line.find("drop job=") != std::string::npos) {
      a_lines += line + "\n";
    }
  }
  INFO("A's lease lines (the old id " << a_old << "):\n" << a_lines);
  CHECK(late_claims == 0);
  CHECK(dropped_claimed_late == 0);
  // One new id: the held heartbeat that finds its row gone registers it, and
  // that also serves as the re-registration the lost lease asks for.
  CHECK(new_ids.size() == 1);
  for (const std::string& id : new_ids) CHECK(id != a_old);
  CHECK(old_registered == 1);  // its first registration only
  CHECK(new_id_lines >= 1);
  CHECK(a_back_us != 0);
  CHECK(audit.ok());
  CHECK(audit.lost == 0);
  CHECK(audit.succeeded + audit.failed_spent == audit.jobs);
  CHECK(audit.handler_overlap_keys == 0);
}

}  // namespace
}  // namespace akadzed::test
