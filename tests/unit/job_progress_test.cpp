// Progress reports (handlers/job_progress.h): which fd-3 lines are progress
// lines, what a report may hold, how reports merge, and the round/finish
// hand-off that loses no report; and the shell handler taking progress
// lines out of fd 3 while the outcome report stays intact.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <string>

#include "handlers/job_progress.h"
#include "handlers/outcome_report.h"
#include "handlers/shell_handler.h"
#include "support/log_capture.h"

namespace akadzed {
namespace {

using nlohmann::json;

// "-" when `line` is not a progress line, "refused: <why>" or the report as
// {"progress": ..., "meta": ...}.
std::string Line(const std::string& line) {
  ProgressReport report;
  std::string invalid;
  if (!ParseProgressLine(line, &report, &invalid)) return "-";
  if (!invalid.empty()) return "refused: " + invalid;
  json out = json::object();
  if (report.progress) out["progress"] = *report.progress;
  if (report.meta) out["meta"] = *report.meta;
  return out.dump();
}

ClaimedJob Job() {
  ClaimedJob job;
  job.id = 5;
  job.task = "import";
  job.queue = "default";
  job.max_attempts = 3;
  job.run_count = 1;
  return job;
}

}  // namespace

TEST_CASE("progress lines: objects of progress and meta only; everything else is the outcome's",
          "[progress]") {
  CHECK(Line(R"({"progress": 0.4})") == R"({"progress":0.4})");
  CHECK(Line(R"(  {"progress": 1, "meta": {"rows": 1200}}  )") ==
        R"({"meta":{"rows":1200},"progress":1.0})");
  CHECK(Line(R"({"meta": {"phase": "load"}})") == R"({"meta":{"phase":"load"}})");
  CHECK(Line(R"({"progress": 0})") == R"({"progress":0.0})");
  // Not progress lines: part of the outcome report.
  CHECK(Line(R"({"result": 1})") == "-");
  CHECK(Line(R"({"progress": 0.5, "result": 1})") == "-");
  CHECK(Line("{}") == "-");
  CHECK(Line("{") == "-");
  CHECK(Line(R"(  "meta": {"a": 1},)") == "-");
  CHECK(Line("[1, 2]") == "-");
  CHECK(Line("") == "-");
  CHECK(Line(std::string(600, '{') + std::string(600, '}')) == "-");
  // Progress lines that are refused.
  CHECK(Line(R"({"progress": 1.5})") == "refused: progress must be a number from 0 to 1");
  CHECK(Line(R"({"progress": -0.1})") == "refused: progress must be a number from 0 to 1");
  CHECK(Line(R"({"progress": "half"})") == "refused: progress must be a number from 0 to 1");
  CHECK(Line(R"({"progress": null})") == "refused: a progress report needs progress or meta");
  CHECK(Line(R"({"meta": [1]})") == "refused: meta must be a JSON object");
  CHECK(Line(R"({"meta": "x"})") == "refused: meta must be a JSON object");
  CHECK(Line(R"({"meta": {"k": "a\u0000b"}})") ==
        "refused: meta must not hold the character U+0000 (jsonb cannot store it)");
  CHECK(Line(R"({"meta": {"deep": [{"k\u0000": 1}]}})") ==
        "refused: meta must not hold the character U+0000 (jsonb cannot store it)");
}

TEST_CASE("JobProgress merges reports key by key; a round's write and the finish lose nothing",
          "[progress]") {
  JobProgress p;
  CHECK_FALSE(p.Peek());
  CHECK(p.Report({0.25, std::nullopt}).empty());
  CHECK(p.Report({std::nullopt, json{{"rows", 10}, {"phase", "load"}}}).empty());
  CHECK(p.Report({0.5, json{{"rows", 20}}}).empty());
  std::optional<JobProgress::Pending> peeked = p.Peek();
  REQUIRE(peeked);
  CHECK(json::parse(peeked->patch_json) == json{{"progress", 0.5}, {"rows", 20}, {"phase", "load"}});

  SECTION("written by the round with nothing new: cleared") {
    p.MarkWritten(peeked->version);
    CHECK_FALSE(p.Peek());
    CHECK_FALSE(p.TakeForFinish());
  }
  SECTION("a report after the round's peek: kept whole for the next write") {
    CHECK(p.Report({0.75, std::nullopt}).empty());
    p.MarkWritten(peeked->version);
    std::optional<std::string> rest = p.TakeForFinish();
    REQUIRE(rest);
    CHECK(json::parse(*rest) == json{{"progress", 0.75}, {"rows", 20}, {"phase", "load"}});
    CHECK_FALSE(p.Peek());
  }
  SECTION("the finish takes what a round in flight peeked") {
    std::optional<std::string> rest = p.TakeForFinish();
    REQUIRE(rest);
    CHECK(*rest == peeked->patch_json);
    p.MarkWritten(peeked->version);  // the round lands later: nothing to clear
    CHECK_FALSE(p.Peek());
  }
  SECTION("more than 64 KiB pending is refused, what was pending stays") {
    const std::string why = p.Report({std::nullopt, json{{"blob", std::string(kMaxProgressBytes, 'x')}}});
    CHECK(why == "the job's pending progress and meta would exceed 65536 bytes");
    CHECK(p.Peek()->patch_json == peeked->patch_json);
  }
  SECTION("Reset empties it for the next job") {
    p.Reset();
    CHECK_FALSE(p.Peek());
  }
}

TEST_CASE("a shell handler's progress lines reach the sink; the outcome report around them stands",
          "[progress][shell]") {
  test::LogCapture log;
  ShellHandlerConfig config;
  // Progress lines, a refused one, then a report written over several lines
  // with a line inside it that is no progress line, and progress after it.
  config.command = {"/bin/sh", "-c",
                    "echo '{\"progress\": 0.1}' >&3\n"
                    "printf '{\"progress\": 0.5, \"meta\": {\"rows\": 1200}}\\n{\"progress\": 7}\\n' >&3\n"
                    "printf '{\\n  \"result\": {\"rows\": 1200},\\n' >&3\n"
                    "echo '{\"meta\": {\"phase\": \"done\"}}' >&3\n"
                    "printf '  \"outcome\": \"success\"\\n}\\n' >&3\n"};
  ShellHandler handler("import", config);
  JobStop stop;
  JobProgress progress;
  JobOutcome outcome = handler.Run(Job(), stop, &progress);
  INFO(outcome.error << ": " << outcome.message);
  CHECK(outcome.kind == OutcomeKind::kSuccess);
  REQUIRE(outcome.result_json);
  CHECK(json::parse(*outcome.result_json) == json{{"rows", 1200}});
  std::optional<std::string> pending = progress.TakeForFinish();
  REQUIRE(pending);
  CHECK(json::parse(*pending) == json{{"progress", 0.5}, {"rows", 1200}, {"phase", "done"}});
  CHECK(log.text().find("warning progress_refused job=5 task=import | fd 3: progress must be a number "
                        "from 0 to 1; the run goes on\n") != std::string::npos);

  SECTION("progress lines do not count towards the report's 1 MiB") {
    ShellHandlerConfig big;
    // A report of 1,000,020 bytes, then 3,000 progress lines (90 KB).
    big.command = {"/bin/sh", "-c",
                   "{ printf '{\"result\": \"'; head -c 1000000 /dev/zero | tr '\\0' x; echo '\"}';"
                   "  i=0; while [ $i -lt 3000 ]; do echo '{\"progress\": 0.5}'; i=$((i + 1)); done; } >&3"};
    ShellHandler handler_big("import", big);
    JobProgress p;
    JobOutcome o = handler_big.Run(Job(), stop, &p);
    INFO(o.error << ": " << o.message);
    CHECK(o.kind == OutcomeKind::kSuccess);
    REQUIRE(o.result_json);
    CHECK(o.result_json->size() == 1000002);
    CHECK(json::parse(*p.TakeForFinish()) == json{{"progress", 0.5}});
  }
  SECTION("only progress lines: no outcome report, the exit status decides") {
    ShellHandlerConfig only;
    only.command = {"/bin/sh", "-c", "echo '{\"progress\": 1}' >&3; exit 3"};
    ShellHandler failing("import", only);
    JobProgress p;
    JobOutcome o = failing.Run(Job(), stop, &p);
    CHECK(o.kind == OutcomeKind::kRetry);
    CHECK(o.error == "ExitStatus");
    CHECK(json::parse(*p.TakeForFinish()) == json{{"progress", 1.0}});
  }
}

}  // namespace akadzed
