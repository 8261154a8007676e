// Trace context (docs/operations.md, "Trace context") through the real
// daemon: a W3C traceparent in a job's meta reaches its shell handler as
// TRACEPARENT, and every log line about the job carries its trace_id; an
// invalid one (or none) gives the handler no TRACEPARENT, not even the
// daemon's own.
#include <catch2/catch.hpp>

#include <signal.h>

#include <nlohmann/json.hpp>

#include <string>

#include "daemon/daemon_fixture.h"

namespace akadzed::test {

TEST_CASE("a job's traceparent reaches its shell handler and every log line about it",
          "[daemon][trace]") {
  HandlerTestFixture f;
  const std::string script = f.dir.Write(
      "traced.sh",
      "#!/bin/sh\n"
      "echo \"working on it\"\n"
      "echo \"{\\\"result\\\": {\\\"traceparent\\\": \\\"${TRACEPARENT-unset}\\\"}}\" >&3\n",
      true);
  const std::string traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  // The daemon's own trace context is not handed to jobs.
  auto daemon = f.Start(f.Config(ShellHandlerYaml("traced", script)),
                        {{"TRACEPARENT", "00-11111111111111111111111111111111-2222222222222222-01"}});
  const std::int64_t traced =
      f.conn.exec("SELECT akadze.enqueue('traced', meta => jsonb_build_object('traceparent', $1::text))",
                  pg::Params().add(traceparent)).int64(0, 0);
  const std::int64_t invalid =
      f.conn.exec("SELECT akadze.enqueue('traced', meta => '{\"traceparent\": \"00-not-a-trace-01\"}')")
          .int64(0, 0);
  const std::int64_t plain = f.conn.exec("SELECT akadze.enqueue('traced')").int64(0, 0);
  for (std::int64_t id : {traced, invalid, plain}) REQUIRE(f.WaitState(id, "succeeded"));
  CHECK(f.Row(traced)["result"] == nlohmann::json{{"traceparent", traceparent}});
  CHECK(f.Row(invalid)["result"] == nlohmann::json{{"traceparent", "unset"}});
  CHECK(f.Row(plain)["result"] == nlohmann::json{{"traceparent", "unset"}});

  // The finisher logs a finish after its commit, and the three in no set order.
  for (std::int64_t id : {traced, invalid, plain}) {
    REQUIRE(daemon->WaitForLog("event=finish job=" + std::to_string(id) + " "));
  }
  const std::string job = "job=" + std::to_string(traced) + " ";
  int lines_about_it = 0;
  std::istringstream log(daemon->Log());
  for (std::string line; std::getline(log, line);) {
    if (line.find(" job=") == std::string::npos) continue;
    const bool about_traced = line.find(job) != std::string::npos;
    INFO(line);
    if (about_traced) {
      ++lines_about_it;
      CHECK(line.find(job + "trace_id=4bf92f3577b34da6a3ce929d0e0e4736 ") != std::string::npos);
    } else {
      CHECK(line.find("trace_id=") == std::string::npos);
    }
  }
  // start, its output line and finish at least.
  CHECK(lines_about_it >= 3);
  daemon->Signal(SIGTERM);
  CHECK(daemon->Wait() == 0);
}

}  // namespace akadzed::test
