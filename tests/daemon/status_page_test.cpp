// The status page's HTTP side (web/status_page.h) on a real daemon against a
// real PostgreSQL: /api/status carries what ran and is what `akadzed status
// --json` prints; a job's page never carries args or results; the assets
// come from the binary with their security headers; every action is refused
// without a configured token, without the right one, from another origin or
// as a form, and works with it; web.enabled: false serves nothing. What a
// browser renders is tests/browser/status_page_browser_test.cpp.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/daemon_fixture.h"
#include "support/http_probe.h"
#include "support/run_command.h"

namespace akadzed::test {
namespace {

using nlohmann::json;

constexpr const char* kHostile = "<script>alert(1)</script>\"><img src=x onerror=alert(2)>";

struct PageFixture : HandlerTestFixture {
  std::string ok = dir.Write("ok.sh", "#!/bin/sh\n", true);
  std::string fail = dir.Write(
      "fail.sh",
      std::string("#!/bin/sh\necho '{\"outcome\": \"fail\", \"error\": \"Boom\", \"message\": \"") +
          "<script>alert(1)<\\/script>\\\"><img src=x onerror=alert(2)>" + "\"}' >&3\n",
      true);
  std::string Handlers() const { return ShellHandlerYaml("ok", ok) + ShellHandlerYaml("fail", fail); }

  // A token file readable by the owner only; returns its path.
  std::string TokenFile(const std::string& token, const std::string& name = "admin-token") {
    const std::string path = dir.Write(name, token + "\n");
    std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    return path;
  }
};

json Body(const HttpAnswer& answer) {
  INFO(answer.status << " " << answer.body);
  REQUIRE(!answer.body.empty());
  return json::parse(answer.body);
}

std::int64_t HourTotal(const json& queue, const char* field) {
  std::int64_t total = 0;
  for (const json& m : queue["finished_per_minute"]) total += m[field].get<std::int64_t>();
  return total;
}

const json* QueueNamed(const json& status, const std::string& name) {
  for (const json& q : status["queues"]) {
    if (q["queue"] == name) return &q;
  }
  return nullptr;
}

// The object without the fields that change from one read to the next.
json Steady(json status) {
  status.erase("generated_at");
  status.erase("actions");
  for (json& w : status["workers"]) w.erase("heartbeat_age_seconds");
  for (json& q : status["queues"]) {
    q.erase("oldest_ready_age_seconds");
    q.erase("finished_per_minute");
  }
  for (json& h : status["horizon"]["holders"]) {
    h.erase("age_seconds");
    h.erase("xid_age");
  }
  return status;
}

TEST_CASE("status page: /api/status shows what ran and equals `akadzed status --json`",
          "[daemon][web]") {
  PageFixture f;
  auto daemon = f.Start(f.Config(f.Handlers()));
  const int port = ListenerPort(*daemon);
  for (int i = 0; i < 3; ++i) f.Enqueue("ok", R"({"secret": "s3cr3t-arg"})");
  const std::int64_t failed = f.Enqueue("fail", "{}", 1);
  f.conn.exec("INSERT INTO akadze.jobs (task, run_at) VALUES ('ok', now() + interval '1 hour')");
  f.conn.exec("INSERT INTO akadze.queue_pauses (queue) VALUES ('held')");
  f.conn.exec("INSERT INTO akadze.jobs (task, queue, limit_key) VALUES ($1, 'held', 'nobody')",
              pg::Params().add(std::string("task") + kHostile));
  REQUIRE(f.WaitState(failed, "failed"));
  REQUIRE(WaitUntil([&] { return f.Count("SELECT count(*) FROM akadze.jobs WHERE state = 'succeeded'") == 3; }));

  // The finish counts reach akadze.queue_minutes with the next heartbeat
  // round; the reply is reused for a second at most.
  json status;
  REQUIRE(WaitUntil([&] {
    status = Body(HttpGet(port, "/api/status"));
    const json* q = QueueNamed(status, "default");
    return q != nullptr && HourTotal(*q, "succeeded") == 3 && HourTotal(*q, "failed") == 1;
  }));
  const json& def = *QueueNamed(status, "default");
  CHECK(def["ready"] == 0);
  CHECK(def["scheduled"] == 1);
  CHECK(def["running"] == 0);
  CHECK(def["paused"] == false);
  CHECK(def["finished_per_minute"].size() == 60);
  const json* held = QueueNamed(status, "held");
  REQUIRE(held != nullptr);
  CHECK((*held)["paused"] == true);
  CHECK((*held)["ready"] == 1);
  CHECK((*held)["oldest_ready_age_seconds"].is_number());
  CHECK(status["held_keys"] == json::array({{{"key", "nobody"}, {"queued", 1}, {"queued_capped", false}}}));
  REQUIRE(status["recent_failures"].size() == 1);
  const json& failure = status["recent_failures"][0];
  CHECK(failure["id"] == failed);
  CHECK(failure["task"] == "fail");
  CHECK(failure["error_kind"] == "Boom");
  CHECK(failure["error_message"] == "<script>alert(1)</script>\"><img src=x onerror=alert(2)>");
  REQUIRE(status["workers"].size() == 1);
  CHECK(status["workers"][0]["running"] == 0);
  CHECK(status["actions"]["enabled"] == false);
  CHECK(status.dump().find("s3cr3t-arg") == std::string::npos);

  // One implementation: the CLI prints the same report.
  CommandResult cli = RunAkadzed({"status", "--json", "--database-url", f.db});
  INFO(cli.err);
  REQUIRE(cli.exit_code == 0);
  const json printed = json::parse(cli.out);
  CHECK(Steady(printed) == Steady(status));
  CHECK(printed["actions"]["enabled"] == false);
}

TEST_CASE("status page: a job's page, the assets and the errors of the API", "[daemon][web]") {
  PageFixture f;
  auto daemon = f.Start(f.Config(f.Handlers()));
  const int port = ListenerPort(*daemon);
  const std::int64_t id = f.Enqueue("ok", R"({"secret": "s3cr3t-arg"})");
  REQUIRE(f.WaitState(id, "succeeded"));
  f.conn.exec("UPDATE akadze.jobs SET meta = '{\"progress\": 0.5, \"step\": \"copy\"}',"
              " result = '{\"answer\": \"s3cr3t-result\"}' WHERE id = $1",
              pg::Params().add(id));

  const HttpAnswer job = HttpGet(port, "/api/jobs/" + std::to_string(id));
  REQUIRE(job.status == 200);
  CHECK(job.Header("Cache-Control") == "no-store");
  const json page = Body(job);
  CHECK(page["id"] == id);
  CHECK(page["state"] == "succeeded");
  CHECK(page["progress"] == 0.5);
  CHECK(page["meta"]["step"] == "copy");
  CHECK(page["errors"] == json::array());
  CHECK_FALSE(page.contains("args"));
  CHECK_FALSE(page.contains("result"));
  CHECK(job.body.find("s3cr3t") == std::string::npos);

  CHECK(HttpGet(port, "/api/jobs/999999").status == 404);
  CHECK(Body(HttpGet(port, "/api/jobs/999999"))["error"] == "job 999999 not found");
  for (const char* bad : {"/api/jobs/abc", "/api/jobs/-1", "/api/jobs/0", "/api/jobs/99999999999999999999"}) {
    INFO(bad);
    const HttpAnswer answer = HttpGet(port, bad);
    CHECK(answer.status == 400);
    CHECK(Body(answer)["error"].get<std::string>().find("job id must be a positive integer") == 0);
  }
  CHECK(HttpGet(port, "/api/nothing").status == 404);
  CHECK(HttpPost(port, "/api/status", "{}", "application/json").status == 404);

  const HttpAnswer index = HttpGet(port, "/");
  REQUIRE(index.status == 200);
  CHECK(index.Header("Content-Type") == "text/html; charset=utf-8");
  CHECK(index.Header("Content-Security-Policy").find("script-src 'self'") != std::string::npos);
  CHECK(index.Header("X-Frame-Options") == "DENY");
  CHECK(index.body.find("src=\"assets/app.js\"") != std::string::npos);  // relative: works under a proxy's prefix
  for (const char* asset : {"/assets/app.js", "/assets/app.css"}) {
    INFO(asset);
    const HttpAnswer answer = HttpGet(port, asset);
    CHECK(answer.status == 200);
    CHECK(answer.body.size() > 100);
    CHECK(answer.Header("X-Content-Type-Options") == "nosniff");
  }
  CHECK(HttpGet(port, "/assets/nothing.js").status == 404);
  CHECK(HttpGet(port, "/metrics").status == 200);  // the listener's own paths stay
}

TEST_CASE("status page: every action is refused without an admin token configured", "[daemon][web]") {
  PageFixture f;
  auto daemon = f.Start(f.Config(f.Handlers()));
  const int port = ListenerPort(*daemon);
  f.conn.exec("INSERT INTO akadze.queue_pauses (queue) VALUES ('held')");
  const std::int64_t queued = f.conn.exec("INSERT INTO akadze.jobs (task, queue) VALUES ('ok', 'held') RETURNING id")
                                  .int64(0, 0);
  const std::int64_t failed = f.Enqueue("fail", "{}", 1);
  REQUIRE(f.WaitState(failed, "failed"));
  // Even with a token that would be right, had one been configured.
  const std::vector<std::pair<std::string, std::string>> auth{{"Authorization", "Bearer 0123456789abcdef0123"}};
  for (const std::string& path :
       {std::string("/api/queues/default/pause"), std::string("/api/queues/held/resume"),
        "/api/jobs/" + std::to_string(queued) + "/cancel", "/api/jobs/" + std::to_string(failed) + "/requeue"}) {
    INFO(path);
    const HttpAnswer answer = HttpPost(port, path, "{}", "application/json", auth);
    CHECK(answer.status == 403);
    CHECK(Body(answer)["error"] == "actions are off: set web.admin_token_file in the config to turn them on");
  }
  CHECK(f.Count("SELECT count(*) FROM akadze.queue_pauses WHERE queue = 'default'") == 0);
  CHECK(f.Count("SELECT count(*) FROM akadze.queue_pauses WHERE queue = 'held'") == 1);
  CHECK(f.State(queued) == "queued");
  CHECK(f.State(failed) == "failed");
}

TEST_CASE("status page: actions need the token, the same origin and JSON; a new token applies at once",
          "[daemon][web]") {
  PageFixture f;
  const std::string token = "0123456789abcdef0123456789abcdef";
  const std::string token_file = f.TokenFile(token);
  auto daemon = f.Start(f.Config(f.Handlers(), "web: {admin_token_file: " + token_file + "}\n"));
  const int port = ListenerPort(*daemon);
  CHECK(Body(HttpGet(port, "/api/status"))["actions"]["enabled"] == true);
  const std::string pause = "/api/queues/default/pause";
  const std::vector<std::pair<std::string, std::string>> good{{"Authorization", "Bearer " + token}};

  struct Refusal {
    std::string what;
    std::string content_type;
    std::vector<std::pair<std::string, std::string>> headers;
    int status;
  };
  const std::vector<Refusal> refusals = {
      {"no token", "application/json", {}, 401},
      {"a wrong token", "application/json", {{"Authorization", "Bearer 0123456789abcdef0123456789abcdeX"}}, 401},
      {"a prefix of the token", "application/json", {{"Authorization", "Bearer " + token.substr(0, 20)}}, 401},
      {"not a bearer", "application/json", {{"Authorization", "Basic " + token}}, 401},
      {"a form", "application/x-www-form-urlencoded", good, 415},
      {"no content type", "", good, 415},
      {"another origin", "application/json",
       {{"Authorization", "Bearer " + token}, {"Origin", "http://evil.example"}}, 403},
      {"another site", "application/json",
       {{"Authorization", "Bearer " + token}, {"Sec-Fetch-Site", "cross-site"}}, 403},
  };
  for (const Refusal& r : refusals) {
    INFO(r.what);
    const HttpAnswer answer = HttpPost(port, pause, "{}", r.content_type, r.headers);
    CHECK(answer.status == r.status);
    CHECK(Body(answer).contains("error"));
  }
  CHECK(f.Count("SELECT count(*) FROM akadze.queue_pauses") == 0);
  CHECK(daemon->Log().find(token) == std::string::npos);

  // The right token, from the page's own origin.
  const std::string origin = "http://127.0.0.1:" + std::to_string(port);
  std::vector<std::pair<std::string, std::string>> same = good;
  same.emplace_back("Origin", origin);
  same.emplace_back("Sec-Fetch-Site", "same-origin");
  HttpAnswer answer = HttpPost(port, pause, "{}", "application/json", same);
  CHECK(answer.status == 200);
  CHECK(Body(answer)["message"] == "paused default");
  CHECK(f.Count("SELECT count(*) FROM akadze.queue_pauses WHERE queue = 'default'") == 1);
  CHECK(Body(HttpGet(port, "/api/status"))["queues"][0]["paused"] == true);  // not the cached reply
  CHECK(Body(HttpPost(port, pause, "{}", "application/json", good))["message"] == "default was already paused");
  // A queue name with '/', '%' and UTF-8, percent-encoded as the page does
  // (encodeURIComponent): decoded once, as one segment.
  answer = HttpPost(port, "/api/queues/a%2Fb%2541%20caf%C3%A9/pause", "{}", "application/json", good);
  CHECK(answer.status == 200);
  CHECK(f.Count("SELECT count(*) FROM akadze.queue_pauses WHERE queue = 'a/b%41 café'") == 1);

  // Cancel a queued job (the queue is paused, so it waits), then requeue a failed one.
  const std::int64_t queued = f.Enqueue("ok");
  answer = HttpPost(port, "/api/jobs/" + std::to_string(queued) + "/cancel", "{}", "application/json", good);
  CHECK(answer.status == 200);
  CHECK(f.State(queued) == "cancelled");
  answer = HttpPost(port, "/api/jobs/" + std::to_string(queued) + "/cancel", "{}", "application/json", good);
  CHECK(answer.status == 409);
  CHECK(Body(answer)["error"] == "job " + std::to_string(queued) + " is already cancelled");
  CHECK(HttpPost(port, "/api/jobs/999999/requeue", "{}", "application/json", good).status == 404);

  CHECK(Body(HttpPost(port, "/api/queues/default/resume", "{}", "application/json", good))["message"] ==
        "resumed default");
  const std::int64_t failed = f.Enqueue("fail", "{}", 1);
  REQUIRE(f.WaitState(failed, "failed"));
  f.conn.exec("UPDATE akadze.jobs SET task = 'ok' WHERE id = $1", pg::Params().add(failed));
  answer = HttpPost(port, "/api/jobs/" + std::to_string(failed) + "/requeue", "{}", "application/json", good);
  CHECK(answer.status == 200);
  CHECK(Body(answer)["message"] == "requeued job " + std::to_string(failed));
  CHECK(f.WaitState(failed, "succeeded"));

  // A new token in the file: the old one is refused from the next action on.
  const std::string next = "fedcba9876543210fedcba9876543210";
  {
    std::ofstream(token_file, std::ios::trunc) << next << "\n";
  }
  CHECK(HttpPost(port, pause, "{}", "application/json", good).status == 401);
  CHECK(HttpPost(port, pause, "{}", "application/json", {{"Authorization", "Bearer " + next}}).status == 200);
  // A token file made unreadable: actions are off, with a line in the log.
  std::filesystem::permissions(token_file, std::filesystem::perms::owner_read | std::filesystem::perms::others_read);
  CHECK(HttpPost(port, pause, "{}", "application/json", {{"Authorization", "Bearer " + next}}).status == 403);
  CHECK(daemon->WaitForLog("event=web_token_unreadable"));
}

TEST_CASE("status page: a stalled database gets 503s, never the listener's threads",
          "[daemon][web][direct]") {
  PageFixture f;
  // A stall bound (lock_timeout) above the page's one-second wait for its
  // turn, and a heartbeat_ttl that allows it.
  auto daemon = f.Start(f.Config(f.Handlers(), "database: {stall_timeout: 3s}\n", 4,
                                 "worker:\n  heartbeat_interval: 1s\n  heartbeat_ttl: 10s\n"
                                 "  poll_interval: 100ms\n  shutdown_timeout: 2s\n"));
  const int port = ListenerPort(*daemon);
  // The status read needs akadze.queue_pauses: hold it away.
  pg::Connection locker = pg::Connection::Open(f.db);
  locker.exec("BEGIN");
  locker.exec("LOCK TABLE akadze.queue_pauses IN ACCESS EXCLUSIVE MODE");
  HttpAnswer stalled;
  std::thread first([&] { stalled = HttpGet(port, "/api/status"); });
  REQUIRE(WaitUntil([&] {
    return f.Count("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'akadzed web'"
                   " AND wait_event_type = 'Lock'") == 1;
  }));
  // Another API request waits a second for its turn, then is told so; the
  // listener's own paths answer meanwhile.
  const auto asked = std::chrono::steady_clock::now();
  const HttpAnswer busy = HttpGet(port, "/api/jobs/1");
  CHECK(busy.status == 503);
  CHECK(busy.Header("Retry-After") == "1");
  CHECK(Body(busy)["error"].get<std::string>().rfind("busy:", 0) == 0);
  CHECK(std::chrono::steady_clock::now() - asked < std::chrono::seconds(3));
  CHECK(HttpGet(port, "/metrics").status == 200);
  CHECK(HttpGet(port, "/healthz").status == 200);
  // The stalled read ends at its lock_timeout (the stall bound, 3 s) with the database's error.
  first.join();
  CHECK(stalled.status == 503);
  CHECK(Body(stalled)["error"].get<std::string>().find("database: ") == 0);
  locker.exec("ROLLBACK");
  CHECK(WaitUntil([&] { return HttpGet(port, "/api/status").status == 200; }));
}

TEST_CASE("status page: web.enabled false serves no page and no API", "[daemon][web]") {
  PageFixture f;
  auto daemon = f.Start(f.Config(f.Handlers(), "web: {enabled: false}\n"));
  const int port = ListenerPort(*daemon);
  CHECK(HttpGet(port, "/metrics").status == 200);
  CHECK(HttpGet(port, "/").status == 404);
  CHECK(HttpGet(port, "/api/status").status == 404);
  CHECK(HttpPost(port, "/api/queues/default/pause", "{}", "application/json").status == 404);
}

}  // namespace
}  // namespace akadzed::test
