// The priority lesson's four experiments (seed 002) with its own data, run
// through akadzed's claim against PostgreSQL: strict priority, SKIP LOCKED
// between two workers, starvation, aging (and the lesson's question 4).
#include <catch2/catch.hpp>

#include <vector>

#include "lesson/priority_lesson.h"
#include "support/test_cluster.h"

namespace akadzed {
namespace {

std::vector<std::int64_t> Ids(const std::vector<LessonJob>& jobs) {
  std::vector<std::int64_t> ids;
  for (const auto& j : jobs) ids.push_back(j.id);
  return ids;
}

TEST_CASE("lesson 1: strict priority claims #43, #45 (HIGH), #44 (MEDIUM), #42 (LOW)", "[lesson]") {
  pg::Connection conn = pg::Connection::Open(test::FreshDatabase());
  std::vector<LessonJob> order;
  LessonReport r = StrictPriorityExperiment(conn, &order);
  CHECK(Ids(order) == std::vector<std::int64_t>{43, 45, 44, 42});
  REQUIRE(order.size() == 4);
  CHECK(order[0].priority == kHigh);
  CHECK(order[2].priority == kMedium);
  CHECK(order[3].priority == kLow);
  CHECK(r.as_expected);
}

TEST_CASE("lesson 2: worker B skips #43 held by worker A and takes #45", "[lesson]") {
  std::string db = test::FreshDatabase();
  pg::Connection a = pg::Connection::Open(db);
  pg::Connection b = pg::Connection::Open(db);
  std::vector<LessonJob> jobs;
  LessonReport r = SkipLockedExperiment(a, b, &jobs);
  REQUIRE(jobs.size() == 2);
  CHECK(jobs[0].id == 43);
  CHECK(jobs[0].state == JobState::kRunning);
  CHECK(jobs[0].worker == "A");
  CHECK(jobs[1].id == 45);
  CHECK(jobs[1].state == JobState::kRunning);
  CHECK(jobs[1].worker == "B");
  CHECK(r.as_expected);
}

TEST_CASE("lesson 3: five new HIGH jobs starve LOW #42", "[lesson]") {
  pg::Connection conn = pg::Connection::Open(test::FreshDatabase());
  std::vector<LessonJob> claimed;
  LessonJob low;
  LessonReport r = StarvationExperiment(conn, &claimed, &low);
  CHECK(Ids(claimed) == std::vector<std::int64_t>{46, 47, 48, 49, 50});
  for (const auto& j : claimed) CHECK(j.priority == kHigh);
  CHECK(low.id == 42);
  CHECK(low.state == JobState::kQueued);
  CHECK(r.as_expected);
}

TEST_CASE("lesson 4: aged LOW #42 (effective 7) beats new HIGH and MEDIUM; priority stays 1",
          "[lesson][aging]") {
  pg::Connection conn = pg::Connection::Open(test::FreshDatabase());
  std::vector<LessonJob> plain, aged;
  LessonJob claimed;
  std::int64_t question4 = 0;
  LessonReport r = AgingExperiment(conn, &plain, &aged, &claimed, &question4);
  CHECK(Ids(plain) == std::vector<std::int64_t>{43, 44, 42});
  CHECK(Ids(aged) == std::vector<std::int64_t>{42, 43, 44});
  REQUIRE(aged.size() == 3);
  CHECK(aged[0].effective == 7);
  CHECK(aged[1].effective == 3);
  CHECK(aged[2].effective == 2);
  CHECK(claimed.id == 42);
  CHECK(claimed.state == JobState::kRunning);
  CHECK(claimed.priority == kLow);  // the stored priority never changes
  CHECK(claimed.effective == 7);
  CHECK(question4 == 4);            // 1 + floor(17 / 5)
  CHECK(r.as_expected);
}

}  // namespace
}  // namespace akadzed
