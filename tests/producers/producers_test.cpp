// The producers of docs/enqueue.md ("From psql, Python and Node.js"), end
// to end: each snippet is read from the doc, written to a file and run by
// its real interpreter (psql; Debian's /usr/bin/python3 with psycopg2;
// node with pg from the npm registry, pinned by tests/producers/
// package-lock.json and installed into the build directory), connected by
// libpq's PG* variables to a fresh database that a real daemon serves. The
// daemon must run the three jobs each enqueued; one with a mistake must get
// the function's message through the driver and leave no job.
#include <catch2/catch.hpp>

#include <libpq-fe.h>

#include <csignal>
#include <cstdint>
#include <optional>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "pg/connection.h"
#include "support/daemon_process.h"
#include "support/run_command.h"
#include "support/test_cluster.h"

namespace akadzed::test {
namespace {

namespace fs = std::filesystem;

const fs::path kSourceDir = fs::path(__FILE__).parent_path().parent_path().parent_path();

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The code block after `<!-- producer:NAME -->` in docs/enqueue.md.
std::string SnippetFromDocs(const std::string& name) {
  const std::string doc = ReadAll(kSourceDir / "docs" / "enqueue.md");
  const std::size_t marker = doc.find("<!-- producer:" + name + " -->");
  REQUIRE(marker != std::string::npos);
  const std::size_t fence = doc.find("```", marker);
  REQUIRE(fence != std::string::npos);
  const std::size_t start = doc.find('\n', fence) + 1;
  const std::size_t end = doc.find("\n```", start);
  REQUIRE(end != std::string::npos);
  return doc.substr(start, end - start + 1);
}

// libpq's PG* variables for `conninfo`, and no DATABASE_URL.
EnvChanges PgEnvironment(const std::string& conninfo) {
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(conninfo.c_str(), &error);
  REQUIRE(options != nullptr);
  EnvChanges env{{"DATABASE_URL", std::nullopt}};
  for (PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    if (o->val == nullptr || o->envvar == nullptr) continue;
    env[o->envvar] = std::string(o->val);
  }
  PQconninfoFree(options);
  return env;
}

struct Producer {
  std::string name;
  std::vector<std::string> command;  // the file's path is appended
  std::string file;
};

}  // namespace

TEST_CASE("the producers of docs/enqueue.md enqueue through the functions; a daemon runs their jobs",
          "[producers]") {
  const std::string db = FreshDatabase();
  pg::Connection conn = pg::Connection::Open(db);
  TempDir dir;
  const std::string ok = dir.Write("ok.sh", "#!/bin/sh\n", true);
  const std::string config = dir.Write(
      "akadzed.yaml",
      "worker: {heartbeat_interval: 200ms, heartbeat_ttl: 1500ms, poll_interval: 100ms,"
      " shutdown_timeout: 2s, listen_notify: true}\n"
      "queues:\n  - {name: default, slots: 4}\n"
      "handlers:\n  send_email:\n    shell: {command: [\"" + ok + "\"], kill_grace: 500ms}\n"
      "logging: {level: info, format: logfmt}\nmetrics: {enabled: false}\n");
  DaemonProcess daemon({"run", "--config", config, "--database-url", db}, {},
                       dir.path() + "/daemon.log");
  REQUIRE(daemon.WaitForLog("listen channel=akadze_jobs"));

  const EnvChanges env = PgEnvironment(db);
  // An .mjs resolves `import "pg"` from its own directory up: Node.js files
  // go next to the node_modules the build installed.
  const std::string node_dir = AKADZED_PRODUCER_NODE_DIR;
  REQUIRE(fs::exists(node_dir + "/node_modules/pg/package.json"));
  const std::vector<Producer> producers = {
      {"psql", {"psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f"}, "enqueue.sql"},
      {"python", {"/usr/bin/python3"}, "enqueue.py"},
      {"node", {"node"}, "enqueue.mjs"},
  };
  std::int64_t expected = 0;
  for (const Producer& p : producers) {
    INFO("producer " << p.name);
    std::string path;
    if (p.name == "node") {
      path = node_dir + "/" + p.file;
      std::ofstream(path) << SnippetFromDocs(p.name);
    } else {
      path = dir.Write(p.file, SnippetFromDocs(p.name));
    }
    std::vector<std::string> argv = p.command;
    argv.push_back(path);
    CommandResult r = RunCommand(argv, env);
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.err.empty());
    expected += 3;
    // The ids it printed are jobs of the function's (not a plain INSERT's:
    // the NOTIFY woke the daemon), and the daemon runs them.
    CHECK(WaitUntil([&] {
      return conn.exec("SELECT count(*) FROM akadze.jobs WHERE task = 'send_email'"
                       " AND state = 'succeeded'").int64(0, 0) == expected;
    }));
    pg::Result ids = conn.exec(
        "SELECT string_agg(id::text, ' ' ORDER BY id) FROM (SELECT id FROM akadze.jobs"
        " ORDER BY id DESC LIMIT 3) AS last");
    std::string printed = r.out;
    for (char& c : printed) {
      if (c == '{' || c == '}' || c == '[' || c == ']' || c == ',' || c == '\n' || c == '\'' ||
          c == '"') {
        c = ' ';
      }
    }
    std::istringstream words(printed);
    std::vector<std::string> numbers;
    for (std::string w; words >> w;) {
      if (w.find_first_not_of("0123456789") == std::string::npos) numbers.push_back(w);
    }
    std::string joined;
    for (const std::string& n : numbers) joined += (joined.empty() ? "" : " ") + n;
    CHECK(joined == std::string(ids.text(0, 0)));
  }

  // A mistake reaches each driver as the function's error, and no job is left.
  const std::int64_t before = conn.exec("SELECT count(*) FROM akadze.jobs").int64(0, 0);
  struct Mistake {
    std::vector<std::string> argv;
    std::string expect;
  };
  // The Node.js one is a file next to node_modules, as above.
  std::ofstream(node_dir + "/mistake.mjs")
      << "import pg from 'pg';\n"
         "const c = new pg.Client();\n"
         "await c.connect();\n"
         "try { await c.query(\"SELECT akadze.enqueue_many('[{\\\"task\\\": \\\"\\\"}]')\"); }\n"
         "catch (e) { console.log(e.code, e.message); } finally { await c.end(); }\n";
  const std::vector<Mistake> mistakes = {
      {{"psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c",
        "SELECT akadze.enqueue('send_email', '[1]')"},
       "akadze.enqueue: args must be a JSON object, not array"},
      {{"/usr/bin/python3", "-c",
        "import psycopg2, psycopg2.errors\n"
        "conn = psycopg2.connect('')\n"
        "try:\n"
        "    conn.cursor().execute(\"SELECT akadze.enqueue('send_email', priority => 99999)\")\n"
        "except psycopg2.errors.InvalidParameterValue as e:\n"
        "    print(e.pgcode, e.diag.message_primary)\n"},
       "22023 akadze.enqueue: priority must be an integer from -32768 to 32767, not 99999"},
      {{"node", node_dir + "/mistake.mjs"},
       "22023 akadze.enqueue_many: jobs[0].task must be a non-empty string"},
  };
  for (const Mistake& m : mistakes) {
    INFO(m.argv.front());
    CommandResult r = RunCommand(m.argv, env, std::chrono::seconds(60));
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    CHECK_THAT(r.out + r.err, Catch::Contains(m.expect));
  }
  CHECK(conn.exec("SELECT count(*) FROM akadze.jobs").int64(0, 0) == before);

  daemon.Signal(SIGTERM);
  CHECK(daemon.Wait() == 0);
}

}  // namespace akadzed::test
