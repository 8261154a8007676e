// Progress and metadata from handlers (docs/handlers.md, "Reporting
// progress") through the real daemon: a shell job's fd-3 progress lines
// reach the job's meta while it runs, merged into what the application
// stored, at most once per heartbeat round however many it writes, shown by
// `akadzed jobs show`, and its last report is kept after it ends.
#include <catch2/catch.hpp>

#include <signal.h>

#include <nlohmann/json.hpp>

#include "daemon/daemon_fixture.h"
#include "support/run_command.h"

namespace akadzed::test {
namespace {

using nlohmann::json;

}  // namespace

TEST_CASE("a shell job's progress reaches its meta while it runs, throttled, and stays after it ends",
          "[daemon][progress]") {
  HandlerTestFixture f;
  const std::string go = f.dir.path() + "/go";
  const std::string script = f.dir.Write(
      "import.sh",
      "#!/bin/sh\n"
      "echo '{\"progress\": 0.1}' >&3\n"
      "i=0\n"
      "while [ $i -lt 50 ]; do\n"
      "  echo \"{\\\"progress\\\": 0.2, \\\"meta\\\": {\\\"i\\\": $i}}\" >&3\n"
      "  i=$((i + 1))\n"
      "done\n"
      "while [ ! -e " + go + " ]; do sleep 0.02; done\n"
      "echo '{\"progress\": 1, \"meta\": {\"rows\": 1200}}' >&3\n"
      "echo '{\"result\": {\"ok\": true}}' >&3\n",
      true);
  // Every change of a job's meta, as the database saw it.
  f.conn.exec("CREATE TABLE meta_writes (job_id bigint, meta jsonb, at timestamptz DEFAULT clock_timestamp());"
              "CREATE FUNCTION public.record_meta() RETURNS trigger LANGUAGE plpgsql AS $$"
              " BEGIN INSERT INTO meta_writes (job_id, meta) VALUES (NEW.id, NEW.meta); RETURN NEW; END $$;"
              "CREATE TRIGGER record_meta AFTER UPDATE ON akadze.jobs FOR EACH ROW"
              " WHEN (OLD.meta IS DISTINCT FROM NEW.meta) EXECUTE FUNCTION public.record_meta()");
  auto daemon = f.Start(f.Config(ShellHandlerYaml("import", script)));
  const std::int64_t id =
      f.conn.exec("SELECT akadze.enqueue('import', meta => '{\"source\": \"test\"}')").int64(0, 0);

  // All 51 reports are in before the job waits: the rounds (every 200 ms)
  // write what is pending, the last of it {"progress": 0.2, "i": 49}.
  auto meta = [&] { return f.Row(id)["meta"]; };
  REQUIRE(WaitUntil([&] { return meta() == json{{"source", "test"}, {"progress", 0.2}, {"i", 49}}; }));
  CHECK(f.State(id) == "running");
  // One write per round at most: the reports came within a round or two.
  const std::int64_t writes = f.Count("SELECT count(*) FROM meta_writes");
  CHECK(writes >= 1);
  CHECK(writes <= 3);
  CHECK(f.Count("SELECT count(*) FROM (SELECT at - lag(at) OVER (ORDER BY at) AS gap FROM meta_writes) g"
                " WHERE gap < interval '100 ms'") == 0);

  CommandResult shown = RunAkadzed({"jobs", "show", std::to_string(id), "--json", "--database-url", f.db});
  REQUIRE(shown.exit_code == 0);
  CHECK(json::parse(shown.out)["meta"] == json{{"source", "test"}, {"progress", 0.2}, {"i", 49}});

  f.dir.Write("go", "");
  REQUIRE(f.WaitState(id, "succeeded"));
  // The last report came with the finish: kept after the job ended.
  CHECK(meta() == json{{"source", "test"}, {"progress", 1.0}, {"i", 49}, {"rows", 1200}});
  CHECK(f.Row(id)["result"] == json{{"ok", true}});
  daemon->Signal(SIGTERM);
  CHECK(daemon->Wait() == 0);
}

TEST_CASE("progress the database refuses is dropped; the run's outcome is still recorded",
          "[daemon][progress]") {
  HandlerTestFixture f;
  const std::string script = f.dir.Write(
      "report.sh",
      "#!/bin/sh\n"
      "echo '{\"meta\": {\"forbidden\": 1}}' >&3\n"
      "echo '{\"result\": {\"ok\": true}}' >&3\n",
      true);
  // An application's trigger refuses any meta with that key.
  f.conn.exec("CREATE FUNCTION public.no_forbidden() RETURNS trigger LANGUAGE plpgsql AS $$"
              " BEGIN IF NEW.meta ? 'forbidden' THEN RAISE EXCEPTION 'forbidden meta'; END IF;"
              " RETURN NEW; END $$;"
              "CREATE TRIGGER no_forbidden BEFORE UPDATE ON akadze.jobs FOR EACH ROW"
              " EXECUTE FUNCTION public.no_forbidden()");
  auto daemon = f.Start(f.Config(ShellHandlerYaml("report", script)));
  const std::int64_t id = f.Enqueue("report");
  REQUIRE(f.WaitState(id, "succeeded"));
  CHECK(f.Row(id)["result"] == json{{"ok", true}});
  CHECK(f.Row(id)["meta"] == json::object());
  CHECK(daemon->WaitForLog("event=progress_dropped job=" + std::to_string(id)));
  daemon->Signal(SIGTERM);
  CHECK(daemon->Wait() == 0);
}

}  // namespace akadzed::test
