// The security review's claims (docs/security.md, issue 6 item 9), end to
// end: what a handler's environment holds, what a handler can read of the
// daemon, plugin and command files that others could change, passwords in
// the log, the systemd unit's exposure, and the database privileges the
// daemon, the admin commands and producers need.
#include <catch2/catch.hpp>

#include <httplib.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/daemon_fixture.h"
#include "pg/connection.h"
#include "pg/pg_error.h"
#include "support/daemon_process.h"
#include "support/http_probe.h"
#include "support/run_command.h"
#include "support/test_cluster.h"

namespace akadzed::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

const fs::path kSourceDir = fs::path(__FILE__).parent_path().parent_path().parent_path();

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::set<std::string> LineSet(const std::string& text) {
  std::vector<std::string> lines = Lines(text);
  return {lines.begin(), lines.end()};
}

bool HasLineStarting(const std::string& text, const std::string& prefix) {
  for (const std::string& line : Lines(text)) {
    if (line.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

// ---------------------------------------------------------------------------
// The handler's environment

TEST_CASE("handlers never see the daemon's database URL, password or libpq settings",
          "[daemon][security]") {
  HandlerTestFixture f;
  std::string envfile = f.dir.path() + "/env.txt";
  std::string script = f.dir.Write("env.sh", "#!/bin/sh\nenv > " + envfile + "\n", true);
  std::string config = f.Config(ShellHandlerYaml(
      "env", script, "      env: {PGHOST: reports.internal, REPORT_MODE: full}\n"));
  // The database comes from the environment, as under the systemd unit's
  // EnvironmentFile=; PGPASSWORD is ignored by the trust authentication.
  auto daemon = f.Start(config, {{"AKADZE_DATABASE_URL", f.db},
                                 {"PGPASSWORD", "hunter2-env"},
                                 {"PGAPPNAME", "akadzed-test"},
                                 {"PGCONNECT_TIMEOUT", "5"},
                                 {"SMTP_RELAY", "mail.internal"}});
  auto id = f.Enqueue("env");
  REQUIRE(f.WaitState(id, "succeeded"));
  const std::string env = ReadAll(envfile);
  INFO(env);
  CHECK(env.find("hunter2-env") == std::string::npos);
  CHECK(env.find(f.db) == std::string::npos);
  for (const char* withheld :
       {"AKADZE_DATABASE_URL=", "PGPASSWORD=", "PGAPPNAME=", "PGCONNECT_TIMEOUT=", "NOTIFY_SOCKET="}) {
    CHECK_FALSE(HasLineStarting(env, withheld));
  }
  const std::set<std::string> lines = LineSet(env);
  CHECK(lines.count("AKADZE_JOB_ID=" + std::to_string(id)) == 1);
  CHECK(lines.count("PGHOST=reports.internal") == 1);  // the handler's own env: wins
  CHECK(lines.count("REPORT_MODE=full") == 1);
  CHECK(lines.count("SMTP_RELAY=mail.internal") == 1);  // the operator's, inherited
  CHECK(HasLineStarting(env, "PATH="));
}

// Lets other users reach the shared cluster's Unix socket for a while (its
// directory is the server user's, mode 0700).
class SocketDirOpen {
 public:
  SocketDirOpen() : dir_(Cluster().socket_directory()) {
    struct stat st {};
    REQUIRE(stat(dir_.c_str(), &st) == 0);
    mode_ = st.st_mode & 07777;
    REQUIRE(chmod(dir_.c_str(), mode_ | 0711) == 0);
  }
  ~SocketDirOpen() { chmod(dir_.c_str(), mode_); }

 private:
  fs::path dir_;
  mode_t mode_ = 0700;
};

TEST_CASE("run as an ordinary user, the daemon's environment and memory are closed to its "
          "handlers",
          "[daemon][security]") {
  struct passwd* nobody = getpwnam("nobody");
  if (geteuid() != 0 || nobody == nullptr || RunCommand({"setpriv", "--version"}).exit_code != 0) {
    WARN("needs root, a 'nobody' user and setpriv(1): skipped");
    return;
  }
  HandlerTestFixture f;
  SocketDirOpen reachable;
  REQUIRE(chmod(f.dir.path().c_str(), 0755) == 0);
  f.conn.exec("CREATE ROLE akadzed_nobody_test LOGIN");
  f.conn.exec("GRANT ALL ON SCHEMA akadze TO akadzed_nobody_test");
  f.conn.exec("GRANT ALL ON ALL TABLES IN SCHEMA akadze TO akadzed_nobody_test");
  // What a curious handler tries: the daemon's environment (where the
  // password is) and its memory.
  std::string script = f.dir.Write(
      "peek.sh",
      "#!/bin/sh\n"
      "if tr '\\0' '\\n' < /proc/$PPID/environ > /dev/null 2>&1; then e=readable; else e=denied; fi\n"
      "if (exec 4< /proc/$PPID/mem) 2> /dev/null; then m=readable; else m=denied; fi\n"
      "printf '{\"result\": {\"environ\": \"%s\", \"mem\": \"%s\", \"uid\": %d, \"pw\": %d}}' "
      "\"$e\" \"$m\" \"$(id -u)\" \"$(env | grep -c hunter2)\" >&3\n",
      true);
  std::string config = f.Config(ShellHandlerYaml("peek", script));
  const std::string url = f.db + " user=akadzed_nobody_test password=hunter2-nobody";
  const std::string uid = std::to_string(nobody->pw_uid);
  const std::string gid = std::to_string(nobody->pw_gid);
  CommandResult run;
  std::thread daemon([&] {
    run = RunCommand({"setpriv", "--reuid=" + uid, "--regid=" + gid, "--clear-groups",
                      AkadzedBinary(), "run", "--config", config},
                     {{"AKADZE_DATABASE_URL", url}}, 120s);
  });
  auto id = f.Enqueue("peek");
  const bool done = f.WaitState(id, "succeeded", 60s);
  // Stop the daemon through its worker row's pid.
  WaitUntil([&] { return f.Count("SELECT count(*) FROM akadze.workers") > 0; }, 10s);
  if (f.Count("SELECT count(*) FROM akadze.workers") > 0) {
    kill(static_cast<pid_t>(f.Count("SELECT pid FROM akadze.workers LIMIT 1")), SIGTERM);
  }
  daemon.join();
  INFO(run.err);
  REQUIRE(done);
  CHECK(run.exit_code == 0);
  json result = f.Row(id)["result"];
  CHECK(result["uid"] == nobody->pw_uid);
  CHECK(result["pw"] == 0);
  CHECK(result["environ"] == "denied");
  CHECK(result["mem"] == "denied");
}

// ---------------------------------------------------------------------------
// Plugin and command files

struct TrustCase {
  std::string config;  // written as akadzed.yaml
  std::string message;  // expected in the one error line; "" when it loads
};

TEST_CASE("plugins and commands that others could change are refused at load, naming the file "
          "and its mode",
          "[daemon][security]") {
  HandlerTestFixture f;
  const bool root = geteuid() == 0;
  const std::string example = std::string(AKADZED_EXAMPLE_PLUGIN_DIR) + "/libakadzed_example.so";
  fs::path plugins = fs::path(f.dir.path()) / "plugins";
  fs::create_directory(plugins);
  chmod(plugins.c_str(), 0755);
  const std::string so = (plugins / "libcheck.so").string();
  fs::copy_file(example, so);
  std::string script = f.dir.Write("job.sh", "#!/bin/sh\n", true);
  auto plugin_config = [&](const std::string& path) {
    return f.Config("  checksum:\n    plugin:\n      path: " + path + "\n");
  };
  auto check = [&](const std::string& config) {
    CommandResult r = RunAkadzed({"check-config", config});
    INFO(r.err);
    CHECK(Lines(r.err).size() <= 1);
    return r;
  };
  auto refused = [&](const std::string& config, const std::string& message) {
    CommandResult r = check(config);
    CHECK(r.exit_code == 78);
    CHECK(r.err.find(message) != std::string::npos);
    CHECK(r.err.find("akadzed.yaml:") != std::string::npos);
  };

  chmod(so.c_str(), 0644);
  CHECK(check(plugin_config(so)).exit_code == 0);
  chmod(so.c_str(), 0666);
  refused(plugin_config(so), "plugin " + so + ": refused: writable by group and others (mode 0666)");
  chmod(so.c_str(), 0664);
  refused(plugin_config(so), "plugin " + so + ": refused: writable by group (mode 0664)");
  chmod(so.c_str(), 0644);
  // Through a symbolic link in a safe directory: the target is judged.
  fs::create_symlink(so, f.dir.path() + "/liblink.so");
  chmod(plugins.c_str(), 0777);
  refused(plugin_config(f.dir.path() + "/liblink.so"),
          "refused: directory " + plugins.string() + " is writable by group and others (mode 0777)");
  // A bare name found on the plugin path is judged the same way.
  CommandResult bare = RunAkadzed({"check-config", plugin_config("libcheck.so")},
                                  {{"AKADZED_PLUGIN_PATH", plugins.string()}});
  CHECK(bare.exit_code == 78);
  CHECK(bare.err.find("is writable by group and others (mode 0777)") != std::string::npos);
  // Sticky, as /tmp: accepted.
  chmod(plugins.c_str(), 01777);
  CHECK(check(plugin_config(so)).exit_code == 0);
  chmod(plugins.c_str(), 0755);

  // `run` refuses as check-config does.
  chmod(so.c_str(), 0646);
  CommandResult run = RunAkadzed({"run", "--config", plugin_config(so), "--database-url", f.db});
  CHECK(run.exit_code == 78);
  CHECK(run.err.find("writable by others (mode 0646)") != std::string::npos);
  chmod(so.c_str(), 0644);

  // Shell commands given as paths.
  chmod(script.c_str(), 0757);
  refused(f.Config(ShellHandlerYaml("job", script)),
          "refusing to execute " + script + ": writable by others (mode 0757)");
  chmod(script.c_str(), 0755);
  CHECK(check(f.Config(ShellHandlerYaml("job", script))).exit_code == 0);
  CHECK(check(f.Config(ShellHandlerYaml("job", "true"))).exit_code == 0);  // PATH: not judged

  if (root) {  // ownership: another user than root and the daemon's
    REQUIRE(chown(so.c_str(), 4242, 4242) == 0);
    refused(plugin_config(so), "plugin " + so + ": refused: owned by uid 4242");
    refused(plugin_config(so), "not root or the daemon's user (root)");
    REQUIRE(chown(so.c_str(), 0, 0) == 0);
    REQUIRE(chown(plugins.c_str(), 4242, 4242) == 0);
    refused(plugin_config(so), "refused: directory " + plugins.string() + " is owned by uid 4242");
    REQUIRE(chown(plugins.c_str(), 0, 0) == 0);
    REQUIRE(chown(script.c_str(), 4242, 4242) == 0);
    refused(f.Config(ShellHandlerYaml("job", script)), "owned by uid 4242");
    REQUIRE(chown(script.c_str(), 0, 0) == 0);
  }

  // A reload that meets a refused plugin keeps the running handlers.
  auto daemon = f.Start(plugin_config(so));
  auto before = f.Enqueue("checksum");
  REQUIRE(f.WaitState(before, "succeeded"));
  chmod(so.c_str(), 0666);
  daemon->Signal(SIGHUP);
  REQUIRE(daemon->WaitForLog("reload_failed"));
  CHECK(daemon->Log().find("writable by group and others (mode 0666)") != std::string::npos);
  auto after = f.Enqueue("checksum");
  CHECK(f.WaitState(after, "succeeded"));
  chmod(so.c_str(), 0644);
}

// ---------------------------------------------------------------------------
// Passwords

TEST_CASE("passwords never reach the log: start failures, lost connections, handler output",
          "[daemon][security]") {
  HandlerTestFixture f;
  std::string script = f.dir.Write(
      "leaky.sh",
      "#!/bin/sh\necho \"connecting to postgresql://app:hunter2-out@db.internal/app\"\n"
      "echo \"login failed: host=db password=hunter2-err\" >&2\nexit 1\n",
      true);
  std::string config = f.Config(ShellHandlerYaml("leaky", script));

  // A database that cannot be reached at start.
  CommandResult start = RunAkadzed(
      {"run", "--config", config, "--database-url",
       "postgresql://akadzed:hunter2-url@/postgres?host=/nonexistent-akadzed-dir"});
  INFO(start.err);
  CHECK(start.exit_code == 1);
  CHECK(start.err.find("start_failed") != std::string::npos);
  CHECK(start.err.find("hunter2") == std::string::npos);
  // libpq quotes a password it cannot decode: the daemon puts *** in its place.
  CommandResult quoted = RunAkadzed(
      {"run", "--config", config, "--database-url",
       "postgresql://akadzed:hunter2%zz@/postgres?host=/nonexistent-akadzed-dir"});
  INFO(quoted.err);
  CHECK(quoted.exit_code == 1);
  CHECK(quoted.err.find("invalid percent-encoded token: \\\"***\\\"") != std::string::npos);
  CHECK(quoted.err.find("hunter2") == std::string::npos);

  // A running daemon whose role is locked out, with the password in a
  // keyword conninfo; and a handler that prints secrets.
  f.conn.exec("CREATE ROLE akadzed_password_test LOGIN SUPERUSER PASSWORD 'hunter2-kw'");
  auto daemon = f.Start(config, {}, f.db + " user=akadzed_password_test password=hunter2-kw");
  auto id = f.Enqueue("leaky", "{}", 1);
  REQUIRE(f.WaitState(id, "failed"));
  json row = f.Row(id);
  CHECK(row["errors"][0]["message"] == "exited with status 1: login failed: host=db password=***");
  REQUIRE(daemon->WaitForLog("postgresql://app:***@db.internal/app"));
  f.conn.exec("ALTER ROLE akadzed_password_test NOLOGIN");
  // A server connection that was logging in at the terminate (PgBouncer
  // opens them as it pleases) has no usename yet and survives it, and the
  // heartbeat may go on through it: terminate again until one fails.
  bool heartbeat_failed = false;
  for (int i = 0; i < 30 && !heartbeat_failed; ++i) {
    f.conn.exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE usename = 'akadzed_password_test'");
    heartbeat_failed = daemon->WaitForLog("heartbeat_failed", std::chrono::seconds(1));
  }
  if (!heartbeat_failed) FAIL("no heartbeat_failed in 30 s; the daemon's log:\n" << daemon->Log());
  REQUIRE(daemon->WaitForLog("claim_failed"));
  f.conn.exec("ALTER ROLE akadzed_password_test LOGIN");
  daemon->Signal(SIGTERM);
  daemon->Wait();
  const std::string log = daemon->Log();
  INFO(log);
  CHECK(log.find("hunter2") == std::string::npos);
}

// ---------------------------------------------------------------------------
// The systemd unit

TEST_CASE("systemd-analyze security rates the unit's exposure at most 2.0", "[security][systemd]") {
  if (RunCommand({"systemd-analyze", "--version"}).exit_code != 0) {
    WARN("systemd-analyze is not installed: skipped");
    return;
  }
  const std::string unit = (kSourceDir / "systemd" / "akadzed.service").string();
  CommandResult r = RunCommand({"systemd-analyze", "security", "--offline=true", "--no-pager",
                                "--threshold=20", unit});
  INFO(r.out << r.err);
  if (r.err.find("Unknown option") != std::string::npos ||
      r.err.find("unrecognized option") != std::string::npos) {
    WARN("this systemd-analyze has no offline security analysis: skipped");
    return;
  }
  CHECK(r.exit_code == 0);
  std::smatch m;
  REQUIRE(std::regex_search(r.out, m, std::regex("Overall exposure level for akadzed.service: ([0-9.]+)")));
  CHECK(std::stod(m[1]) <= 2.0);
}

// ---------------------------------------------------------------------------
// Database privileges

// The SQL of the ```sql block after `<!-- grants:NAME -->` in docs/security.md.
std::string GrantsFromDocs(const std::string& name) {
  const std::string doc = ReadAll((kSourceDir / "docs" / "security.md").string());
  const std::size_t marker = doc.find("<!-- grants:" + name + " -->");
  REQUIRE(marker != std::string::npos);
  const std::size_t start = doc.find("```sql\n", marker);
  REQUIRE(start != std::string::npos);
  const std::size_t end = doc.find("```", start + 7);
  REQUIRE(end != std::string::npos);
  return doc.substr(start + 7, end - start - 7);
}

void CreateRoleOnce(pg::Connection& conn, const std::string& role) {
  if (conn.exec("SELECT count(*) FROM pg_roles WHERE rolname = $1", pg::Params().add(role))
          .int64(0, 0) == 0) {
    conn.exec("CREATE ROLE " + role + " LOGIN");
  }
}


TEST_CASE("minimum privileges: migrate as the owner, run as a worker role with only the "
          "documented grants, admin and producer likewise",
          "[daemon][security][privileges]") {
  // A database without the schema; the superuser only creates roles.
  const std::string db = FreshDatabase(false);
  pg::Connection super = pg::Connection::Open(db);
  const std::string dbname(super.exec("SELECT current_database()").text(0, 0));
  for (const char* role :
       {"akadzed_owner", "akadzed_worker", "akadzed_admin", "app_producer", "app_inserter"}) {
    CreateRoleOnce(super, role);
  }
  super.exec("GRANT CREATE ON DATABASE " + dbname + " TO akadzed_owner");

  CommandResult migrated = RunAkadzed({"migrate", "--database-url", db + " user=akadzed_owner"});
  INFO(migrated.out << migrated.err);
  REQUIRE(migrated.exit_code == 0);
  pg::Connection owner = pg::Connection::Open(db + " user=akadzed_owner");
  owner.exec(GrantsFromDocs("worker"));
  owner.exec(GrantsFromDocs("admin"));
  owner.exec(GrantsFromDocs("producer"));
  owner.exec(GrantsFromDocs("inserter"));

  // What the worker must not do.
  pg::Connection worker = pg::Connection::Open(db + " user=akadzed_worker");
  for (const char* forbidden :
       {"DELETE FROM akadze.schema_migrations", "INSERT INTO akadze.limits (key) VALUES ('x')",
        "INSERT INTO akadze.queue_pauses (queue) VALUES ('x')", "CREATE TABLE akadze.x (i int)",
        "ALTER TABLE akadze.jobs ADD COLUMN x int"}) {
    INFO(forbidden);
    bool refused = false;
    try {
      worker.exec(forbidden);
    } catch (const pg::PgError& e) {
      refused = e.sqlstate() == "42501";  // insufficient_privilege
    }
    CHECK(refused);
  }

  // Work for the daemon, inserted by the superuser: a plain job, a job of
  // a rate-limited key, an old finished job to prune, a dead worker's job
  // to rescue.
  super.exec("INSERT INTO akadze.limits (key, max_running, max_starts, starts_window)"
             " VALUES ('tenant', 1, 100, interval '1 minute')");
  const std::int64_t plain =
      super.exec("INSERT INTO akadze.jobs (task) VALUES ('ok') RETURNING id").int64(0, 0);
  const std::int64_t limited =
      super.exec("INSERT INTO akadze.jobs (task, limit_key) VALUES ('ok', 'tenant') RETURNING id")
          .int64(0, 0);
  const std::int64_t old =
      super.exec("INSERT INTO akadze.jobs (task, state, finished_at) VALUES"
                 " ('ok', 'succeeded', now() - interval '2 days') RETURNING id").int64(0, 0);
  super.exec("INSERT INTO akadze.workers (id, hostname, pid, queues, heartbeat_at) VALUES"
             " ('00000000-0000-4000-8000-000000000001', 'gone', 1, '{default}',"
             "  now() - interval '1 hour')");
  const std::int64_t orphan =
      super.exec("INSERT INTO akadze.jobs (task, state, worker_id, run_count, started_at) VALUES"
                 " ('ok', 'running', '00000000-0000-4000-8000-000000000001', 1,"
                 "  now() - interval '1 hour') RETURNING id").int64(0, 0);

  TempDir dir;
  std::string ok = dir.Write("ok.sh", "#!/bin/sh\necho '{\"result\": 1}' >&3\n", true);
  // heartbeat_ttl 5 s: the log is checked for no `_failed` line at all
  // below, and the fast timings' stall bound (750 ms: lock_timeout and
  // idle_in_transaction_session_timeout) could end a lock wait or a
  // transaction paused between statements on a loaded machine, which says
  // nothing of privileges.
  std::string worker_config = kFastWorkerConfig;
  worker_config.replace(worker_config.find("heartbeat_ttl: 1500ms"), 21, "heartbeat_ttl: 5s");
  std::string config = dir.Write(
      "akadzed.yaml",
      worker_config + "  listen_notify: true\n"
      "queues:\n  - {name: default, slots: 2, mode: fair}\n"
      "handlers:\n" + ShellHandlerYaml("ok", ok) +
      "periodic:\n  tick: {every: 1s, task: ok}\n"
      "pruning: {retention: 1h, interval: 200ms}\n"
      "logging: {level: debug, format: logfmt}\n"
      "metrics: {listen: 127.0.0.1:0}\n");
  DaemonProcess daemon({"run", "--config", config, "--database-url", db + " user=akadzed_worker"},
                       {}, dir.path() + "/daemon.log");
  auto state = [&](std::int64_t id) {
    pg::Result r = super.exec("SELECT state FROM akadze.jobs WHERE id = $1", pg::Params().add(id));
    return r.rows() == 0 ? std::string("pruned") : std::string(r.text(0, 0));
  };
  CHECK(WaitUntil([&] { return state(plain) == "succeeded"; }));
  CHECK(WaitUntil([&] { return state(limited) == "succeeded"; }));
  CHECK(WaitUntil([&] { return state(old) == "pruned"; }));
  CHECK(WaitUntil([&] { return state(orphan) == "succeeded"; }));
  CHECK(WaitUntil([&] {
    return super.exec("SELECT count(*) FROM akadze.jobs j JOIN akadze.periodic_runs r"
                      " ON r.job_id = j.id WHERE j.state = 'succeeded'").int64(0, 0) > 0;
  }));
  CHECK(super.exec("SELECT count(*) FROM akadze.limit_starts").int64(0, 0) >= 1);
  CHECK(super.exec("SELECT count(*) FROM akadze.workers WHERE hostname = 'gone'").int64(0, 0) == 0);
  const int port = ListenerPort(daemon);
  CHECK(WaitUntil([&] { return HttpGet(port, "/readyz").status == 200; }));
  const HttpAnswer metrics = HttpGet(port, "/metrics");
  CHECK(metrics.status == 200);
  const std::string& body = metrics.body;
  CHECK(body.find("akadzed_database_up 1") != std::string::npos);
  // The status page reads, and the finish counts are written, as the worker.
  const HttpAnswer page = HttpGet(port, "/api/status");
  INFO(page.body);
  CHECK(page.status == 200);
  CHECK(WaitUntil([&] {
    return super.exec("SELECT COALESCE(sum(succeeded), 0) FROM akadze.queue_minutes").int64(0, 0) >= 3;
  }));
  CHECK(body.find("akadzed_jobs{") != std::string::npos);

  // The admin commands as the admin role.
  const EnvChanges admin_env{{"AKADZE_DATABASE_URL", db + " user=akadzed_admin"}};
  auto admin = [&](const std::vector<std::string>& args) {
    CommandResult r = RunAkadzed(args, admin_env);
    INFO("akadzed " << args.front() << ": " << r.out << r.err);
    CHECK(r.exit_code == 0);
    return r;
  };
  admin({"queues", "pause", "default"});
  // A cap the daemon's claims read with the worker role's grants (the
  // requeued job below runs under it).
  admin({"queues", "limit", "default", "--max-running", "4"});
  admin({"queues", "limit", "default", "--max-running", "5"});
  json enqueued = json::parse(admin({"enqueue", "ok", "--json"}).out);
  const std::int64_t queued = enqueued["id"];
  admin({"jobs", "cancel", std::to_string(queued)});
  CHECK(state(queued) == "cancelled");
  super.exec("UPDATE akadze.jobs SET state = 'failed', finished_at = now() WHERE id = $1",
             pg::Params().add(plain));
  admin({"jobs", "requeue", std::to_string(plain)});
  admin({"queues", "resume", "default"});
  CHECK(WaitUntil([&] { return state(plain) == "succeeded"; }));
  admin({"limits", "set", "other", "--max-running", "2"});
  admin({"limits", "delete", "other"});
  admin({"jobs", "list"});
  admin({"jobs", "show", std::to_string(plain)});
  admin({"workers", "list"});
  admin({"queues", "list"});
  admin({"status"});
  admin({"queues", "limit", "default", "--clear"});

  // A producer enqueues through the functions, and can do nothing else.
  pg::Connection producer = pg::Connection::Open(db + " user=app_producer");
  const std::int64_t produced =
      producer.exec("SELECT akadze.enqueue('ok', '{\"n\": 1}')").int64(0, 0);
  const std::int64_t produced_many =
      producer.exec("SELECT (akadze.enqueue_many('[{\"task\": \"ok\"}]'))[1]").int64(0, 0);
  CHECK(WaitUntil([&] { return state(produced) == "succeeded" && state(produced_many) == "succeeded"; }));
  for (const char* forbidden :
       {"INSERT INTO akadze.jobs (task) VALUES ('ok')", "SELECT id FROM akadze.jobs",
        "UPDATE akadze.jobs SET state = 'queued'",
        "SELECT akadze.enqueue_jobs('[]', 'skip', 'x')"}) {
    INFO(forbidden);
    CHECK_THROWS_WITH(producer.exec(forbidden), Catch::Contains("permission denied"));
  }
  // An inserter enqueues with a plain INSERT.
  pg::Connection inserter = pg::Connection::Open(db + " user=app_inserter");
  const std::int64_t inserted =
      inserter.exec("INSERT INTO akadze.jobs (task, args) VALUES ('ok', '{\"n\": 1}') RETURNING id")
          .int64(0, 0);
  CHECK(WaitUntil([&] { return state(inserted) == "succeeded"; }));

  daemon.Signal(SIGTERM);
  CHECK(daemon.Wait() == 0);
  const std::string log = daemon.Log();
  INFO(log);
  CHECK(log.find("permission denied") == std::string::npos);
  CHECK(log.find("_failed") == std::string::npos);
}

}  // namespace
}  // namespace akadzed::test
