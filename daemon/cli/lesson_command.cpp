// `akadzed lesson`: runs the priority lesson's four experiments with
// akadzed's claim and prints, for each, what it does, what is expected and
// what PostgreSQL returned.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "lesson/priority_lesson.h"

namespace akadzed::cli {

namespace {

struct LessonOptions {
  std::string url;
  std::string experiment = "all";
};

void Print(const LessonReport& r) {
  std::cout << "\n== " << r.title << " ==\n";
  for (const auto& s : r.steps) std::cout << "  does:     " << s << '\n';
  std::cout << "  expected: " << r.expected << '\n';
  for (const auto& o : r.observed) std::cout << "  observed: " << o << '\n';
  std::cout << "  result:   " << (r.as_expected ? "as expected" : "NOT as expected") << std::endl;
}

int RunLesson(const LessonOptions& o) {
  std::unique_ptr<ThrowawayPostgres> server;
  std::string conninfo = o.url;
  if (conninfo.empty()) {
    server = StartEmbeddedDatabase();
    conninfo = server->conninfo();
  }
  pg::Connection conn = pg::Connection::Open(conninfo, "akadzed lesson");
  pg::Connection other = pg::Connection::Open(conninfo, "akadzed lesson worker B");
  bool ok = true;
  auto want = [&](const std::string& name) { return o.experiment == "all" || o.experiment == name; };
  if (want("priority")) {
    std::vector<LessonJob> order;
    LessonReport r = StrictPriorityExperiment(conn, &order);
    Print(r);
    ok = ok && r.as_expected;
  }
  if (want("skip-locked")) {
    std::vector<LessonJob> jobs;
    LessonReport r = SkipLockedExperiment(conn, other, &jobs);
    Print(r);
    ok = ok && r.as_expected;
  }
  if (want("starvation")) {
    std::vector<LessonJob> claimed;
    LessonJob low;
    LessonReport r = StarvationExperiment(conn, &claimed, &low);
    Print(r);
    ok = ok && r.as_expected;
  }
  if (want("aging")) {
    std::vector<LessonJob> plain, aged;
    LessonJob claimed;
    std::int64_t q4 = 0;
    LessonReport r = AgingExperiment(conn, &plain, &aged, &claimed, &q4);
    Print(r);
    ok = ok && r.as_expected;
  }
  return ok ? kExitOk : kExitFailure;
}

}  // namespace

void AddLessonCommand(CLI::App& app, Action& action) {
  auto o = std::make_shared<LessonOptions>();
  CLI::App* cmd = app.add_subcommand(
      "lesson", "Run the priority lesson's experiments (strict priority, SKIP LOCKED, starvation, aging)");
  cmd->add_option("--database-url", o->url,
                  "Run against this database instead of a throwaway one (uses queue 'lesson07' and "
                  "job ids 42-60)");
  cmd->add_option("--experiment", o->experiment, "priority, skip-locked, starvation, aging or all")
      ->check(CLI::IsMember({"all", "priority", "skip-locked", "starvation", "aging"}));
  cmd->callback([&action, o] {
    action = [o]() -> int {
      return RunCommand("lesson", [&] { return RunLesson(*o); });
    };
  });
}

}  // namespace akadzed::cli
