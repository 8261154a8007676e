// The status page in a real browser: a daemon on the program's throwaway
// PostgreSQL with jobs in every state (queued, scheduled, running with
// progress, succeeded, failed, cancelled), a paused queue, a held key and a
// limited key; Debian's headless Chromium loads each page and the test reads
// the DOM after the page's scripts ran (--dump-dom). It checks what is
// rendered, that task names and error messages holding `<script>` and
// `"><img src=x onerror=...>` show as text (no element made of them), and
// that the page logged no script error. Each page's screenshot is written to
// $AKADZED_SCREENSHOT_DIR when set (docs/img/status-page-*.png are made
// that way).
//
// Chromium: $AKADZED_CHROMIUM, else /usr/bin/chromium (scripts/install-deps).
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "pg/connection.h"
#include "support/daemon_process.h"
#include "support/http_probe.h"
#include "support/run_command.h"
#include "support/test_cluster.h"

namespace akadzed::test {
namespace {

constexpr const char* kScript = "<script>alert(1)</script>";
constexpr const char* kImage = "\"><img src=x onerror=alert(2)>";

std::string Chromium() {
  const char* set = std::getenv("AKADZED_CHROMIUM");
  return set && *set ? set : "/usr/bin/chromium";
}

struct Page {
  std::string dom;
  std::string console;  // Chromium's stderr: console messages, script errors
};

// Loads `url` in a fresh headless Chromium and returns the DOM after its
// scripts ran for up to `budget_ms` of virtual time (network waits pause
// it). With `screenshot`, also writes a PNG of the page there.
Page Load(const TempDir& dir, const std::string& url, const std::string& screenshot = "",
          int budget_ms = 8000) {
  const std::string profile = dir.path() + "/chromium-profile";
  std::vector<std::string> argv{Chromium(),
                                "--headless",
                                "--no-sandbox",  // tests run as root in CI
                                "--disable-gpu",
                                "--no-first-run",
                                "--disable-extensions",
                                "--disable-background-networking",
                                "--user-data-dir=" + profile,
                                "--enable-logging=stderr",
                                "--v=0",
                                "--window-size=1280,1000",
                                "--virtual-time-budget=" + std::to_string(budget_ms)};
  argv.push_back(screenshot.empty() ? "--dump-dom" : "--screenshot=" + screenshot);
  argv.push_back(url);
  CommandResult r = RunCommand(argv, {}, std::chrono::seconds(90));
  INFO("chromium stderr: " << r.err.substr(0, 4000));
  REQUIRE_FALSE(r.timed_out);
  REQUIRE(r.exit_code == 0);
  return {r.out, r.err};
}

// Loads until `rendered(page)` says it is done, a few tries with a larger
// budget each: a slow first start of Chromium can use up the budget.
template <class Rendered>
Page LoadUntil(const TempDir& dir, const std::string& url, const std::string& screenshot,
               Rendered rendered, const std::string& what) {
  Page page;
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (!screenshot.empty()) std::filesystem::remove(screenshot);  // none of an earlier run
    page = Load(dir, url, screenshot, 8000 + attempt * 8000);
    if (rendered(page)) return page;
  }
  INFO(page.dom.substr(0, 6000));
  FAIL("the page never rendered " << what);
  return page;
}

// Loads until the page says its view rendered data (data-loaded="view").
Page LoadView(const TempDir& dir, const std::string& url, const std::string& view) {
  return LoadUntil(
      dir, url, "",
      [&](const Page& page) { return page.dom.find("data-loaded=\"" + view + "\"") != std::string::npos; },
      "its " + view + " view");
}

// `text` as the DOM serializes it in a text node (& < > escaped).
std::string AsText(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else out += c;
  }
  return out;
}

// No element was made of the hostile strings, and none ran.
void CheckNoInjection(const Page& page) {
  CHECK(page.dom.find("<img") == std::string::npos);
  CHECK(page.dom.find("<script>alert") == std::string::npos);
  CHECK(page.console.find("Uncaught") == std::string::npos);
  CHECK(page.console.find("alert(") == std::string::npos);
}

TEST_CASE("status page in Chromium: every view renders the database's jobs, hostile text as text",
          "[browser][web]") {
  REQUIRE(access(Chromium().c_str(), X_OK) == 0);  // scripts/install-deps installs it
  const std::string db = FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  TempDir dir;
  const std::string hostile_task = std::string("import") + kScript + kImage;
  const std::string ok = dir.Write("ok.sh", "#!/bin/sh\n", true);
  // Fails with a message holding both hostile strings.
  const std::string fail = dir.Write(
      "fail.sh",
      "#!/bin/sh\necho '{\"outcome\": \"fail\", \"error\": \"Boom\", \"message\": "
      "\"disk full <script>alert(1)<\\/script>\\\"><img src=x onerror=alert(2)>\"}' >&3\n",
      true);
  // Reports progress and meta, then runs until the test ends.
  const std::string slow = dir.Write(
      "slow.sh",
      "#!/bin/sh\necho '{\"progress\": 0.4, \"meta\": {\"step\": \"copy <b>files</b>\"}}' >&3\n"
      "exec sleep 600\n",
      true);
  const std::string token = dir.Write("admin-token", "0123456789abcdef0123456789abcdef\n");
  chmod(token.c_str(), 0600);
  const std::string config = dir.Write(
      "akadzed.yaml",
      "worker:\n  heartbeat_interval: 200ms\n  heartbeat_ttl: 1500ms\n  poll_interval: 100ms\n"
      "  shutdown_timeout: 1s\n"
      "queues:\n  - {name: default, slots: 4, mode: fair}\n  - {name: reports, slots: 2}\n"
      "handlers:\n"
      "  ok: {shell: {command: [\"" + ok + "\"], kill_grace: 500ms}}\n"
      "  fail: {shell: {command: [\"" + fail + "\"], kill_grace: 500ms}}\n"
      "  slow: {shell: {command: [\"" + slow + "\"], kill_grace: 500ms}}\n"
      "logging: {level: info, format: logfmt}\n"
      "metrics: {listen: 127.0.0.1:0}\n"
      "web: {admin_token_file: " + token + "}\n");

  // Jobs in every state, some before the daemon starts.
  conn.exec("INSERT INTO akadze.limits (key, max_running) VALUES ('tenant-a', 2)");
  const auto insert = [&](const std::string& sql) { return conn.exec(sql + " RETURNING id").int64(0, 0); };
  for (int i = 0; i < 5; ++i) insert("INSERT INTO akadze.jobs (task) VALUES ('ok')");
  const std::int64_t failed = insert("INSERT INTO akadze.jobs (task, max_attempts) VALUES ('fail', 1)");
  const std::int64_t unknown = conn.exec("INSERT INTO akadze.jobs (task, max_attempts) VALUES ($1, 1) RETURNING id",
                                         pg::Params().add(hostile_task))
                                   .int64(0, 0);
  const std::int64_t running =
      insert("INSERT INTO akadze.jobs (task, queue, limit_key) VALUES ('slow', 'reports', 'tenant-a')");
  const std::int64_t scheduled = insert("INSERT INTO akadze.jobs (task, run_at) VALUES ('ok', now() + interval '2 hours')");
  const std::int64_t cancelled =
      insert("INSERT INTO akadze.jobs (task, run_at) VALUES ('ok', now() + interval '3 hours')");
  conn.exec("INSERT INTO akadze.queue_pauses (queue) VALUES ('archive')");
  conn.exec("INSERT INTO akadze.jobs (task, queue, limit_key) VALUES ('ok', 'archive', 'nobody')");

  DaemonProcess daemon({"run", "--config", config, "--database-url", db}, {}, dir.path() + "/daemon.log");
  const int port = ListenerPort(daemon);
  const auto state = [&](std::int64_t id) {
    return std::string(conn.exec("SELECT state FROM akadze.jobs WHERE id = $1", pg::Params().add(id)).text(0, 0));
  };
  REQUIRE(RunAkadzed({"jobs", "cancel", std::to_string(cancelled), "--database-url", db}).exit_code == 0);
  REQUIRE(WaitUntil([&] {
    return state(failed) == "failed" && state(unknown) == "failed" && state(running) == "running" &&
           test::JobsInState(conn, "succeeded") == 5 &&
           conn.exec("SELECT count(*) FROM akadze.jobs WHERE meta ? 'progress'").int64(0, 0) == 1 &&
           conn.exec("SELECT COALESCE(sum(succeeded), 0) FROM akadze.queue_minutes").int64(0, 0) == 5;
  }));
  const std::string base = "http://127.0.0.1:" + std::to_string(port);

  SECTION("the overview") {
    const Page page = LoadView(dir, base + "/", "overview");
    INFO(page.dom.substr(0, 20000));
    CheckNoInjection(page);
    for (const char* id : {"id=\"queues\"", "id=\"limits\"", "id=\"held-keys\"", "id=\"workers\"", "id=\"failures\""}) {
      CHECK(page.dom.find(id) != std::string::npos);
    }
    for (const char* queue : {">default<", ">reports<", ">archive<"}) CHECK(page.dom.find(queue) != std::string::npos);
    CHECK(page.dom.find(">tenant-a<") != std::string::npos);  // a limit key in use
    CHECK(page.dom.find(">nobody<") != std::string::npos);    // a held key
    // The recent failures: the hostile task name and message, as text.
    CHECK(page.dom.find(AsText(hostile_task)) != std::string::npos);
    CHECK(page.dom.find(AsText(std::string("disk full ") + kScript + kImage)) != std::string::npos);
    CHECK(page.dom.find("#/jobs/" + std::to_string(failed)) != std::string::npos);
    CHECK(page.dom.find("<svg") != std::string::npos);  // the finished-per-minute charts
    CHECK(page.dom.find("5 succeeded") != std::string::npos);
    CHECK(page.dom.find("type=\"password\"") != std::string::npos);  // actions on: the token field
    // Nothing reached the page's window from the hostile strings.
    CHECK(page.dom.find("onerror=\"") == std::string::npos);
  }
  SECTION("a running job's page: progress and meta, never args") {
    conn.exec("UPDATE akadze.jobs SET args = '{\"secret\": \"s3cr3t-arg\"}' WHERE id = $1", pg::Params().add(running));
    const Page page = LoadView(dir, base + "/#/jobs/" + std::to_string(running), "job");
    INFO(page.dom.substr(0, 20000));
    CheckNoInjection(page);
    CHECK(page.dom.find("id=\"job\"") != std::string::npos);
    CHECK(page.dom.find("<progress") != std::string::npos);
    CHECK(page.dom.find("40%") != std::string::npos);
    CHECK(page.dom.find(AsText("copy <b>files</b>")) != std::string::npos);
    CHECK(page.dom.find(">running<") != std::string::npos);
    CHECK(page.dom.find("s3cr3t-arg") == std::string::npos);
  }
  SECTION("a failed job's page: its errors as text, and the requeue action") {
    const Page page = LoadView(dir, base + "/#/jobs/" + std::to_string(unknown), "job");
    INFO(page.dom.substr(0, 20000));
    CheckNoInjection(page);
    CHECK(page.dom.find(AsText(hostile_task)) != std::string::npos);
    CHECK(page.dom.find("UnknownTask") != std::string::npos);
    CHECK(page.dom.find(">failed<") != std::string::npos);
    CHECK(page.dom.find("Requeue") != std::string::npos);
  }
  SECTION("scheduled and cancelled jobs' pages, and an unknown job") {
    Page page = LoadView(dir, base + "/#/jobs/" + std::to_string(scheduled), "job");
    CHECK(page.dom.find(">queued<") != std::string::npos);
    CHECK(page.dom.find("Cancel") != std::string::npos);
    page = LoadView(dir, base + "/#/jobs/" + std::to_string(cancelled), "job");
    CHECK(page.dom.find(">cancelled<") != std::string::npos);
    const std::string not_found = "job 987654 not found";
    page = LoadUntil(
        dir, base + "/#/jobs/987654", "",
        [&](const Page& p) { return p.dom.find(not_found) != std::string::npos; }, "'" + not_found + "'");
    CHECK(page.dom.find(not_found) != std::string::npos);
    CheckNoInjection(page);
  }
  SECTION("screenshots of the main pages") {
    const char* out = std::getenv("AKADZED_SCREENSHOT_DIR");
    const std::string shots = out && *out ? std::string(out) : dir.path();
    std::filesystem::create_directories(shots);
    for (const auto& [name, path] :
         std::vector<std::pair<std::string, std::string>>{{"status-page-overview.png", "/"},
                                                          {"status-page-job.png", "/#/jobs/" + std::to_string(running)},
                                                          {"status-page-failed-job.png", "/#/jobs/" + std::to_string(unknown)}}) {
      INFO(name);
      const std::string file = shots + "/" + name;
      // Over 20 kB: the page drawn, not a blank one.
      auto drawn = [&](const Page&) {
        std::error_code ec;
        const auto size = std::filesystem::file_size(file, ec);
        return !ec && size > 20'000;
      };
      LoadUntil(dir, base + path, file, drawn, "a screenshot over 20 kB");
      CHECK(std::filesystem::file_size(file) > 20'000);
    }
  }
}

}  // namespace
}  // namespace akadzed::test
