// The priority lesson's four experiments (seed 002: HIGH/MEDIUM/LOW, SKIP
// LOCKED, starvation, aging), run with akadzed's own claim against a real
// database. `akadzed lesson` prints them for a person; tests/pg/lesson_test.cpp
// asserts them.
//
// Each experiment deletes and recreates the rows of its own queues
// ("lesson07", "lesson07-q4") with the lesson's job ids (#42...), so the
// database must not use those ids for other jobs.
//
// Thread-safety: functions use the connections they are given.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/job_states.h"
#include "pg/connection.h"

namespace akadzed {

inline constexpr int kLow = 1;
inline constexpr int kMedium = 2;
inline constexpr int kHigh = 3;

// One job as the experiment observed it.
struct LessonJob {
  std::int64_t id = 0;
  int priority = 0;                 // as stored
  std::int64_t effective = 0;       // what the claim ordered by
  std::optional<JobState> state;    // nullopt: the row is gone
  std::string worker;               // "A", "B" or "" (the lesson's worker names)
};

// What an experiment did, expected and observed, for printing.
struct LessonReport {
  std::string title;
  std::vector<std::string> steps;     // what the program does
  std::string expected;
  std::vector<std::string> observed;  // what PostgreSQL returned
  bool as_expected = false;
};

// Experiment 1: #42 LOW (oldest), #43 HIGH, #44 MEDIUM, #45 HIGH; worker A
// claims one at a time. `order` receives the claimed jobs in claim order.
LessonReport StrictPriorityExperiment(pg::Connection& conn, std::vector<LessonJob>* order);

// Experiment 2: worker A claims #43 in a transaction it keeps open; worker B,
// on `other`, claims and gets #45; B commits, then A. `jobs` receives #43 and
// #45 as they end up.
LessonReport SkipLockedExperiment(pg::Connection& conn, pg::Connection& other,
                                  std::vector<LessonJob>* jobs);

// Experiment 3: five rounds, each adding a new HIGH job and claiming one;
// `claimed` receives each round's job; `low` the state of LOW #42 after.
LessonReport StarvationExperiment(pg::Connection& conn, std::vector<LessonJob>* claimed,
                                  LessonJob* low);

// Experiment 4: aging with a 5-minute interval. LOW #42 waited 30 minutes,
// HIGH #43 and MEDIUM #44 are new. `without_aging` gets the plain claim order,
// `with_aging` the aged one (a dry run), `claimed` what worker A then claims
// with aging, as stored afterwards; `question4` the effective priority of a
// priority-1 job that waited 17 minutes.
LessonReport AgingExperiment(pg::Connection& conn, std::vector<LessonJob>* without_aging,
                             std::vector<LessonJob>* with_aging, LessonJob* claimed,
                             std::int64_t* question4);

// "HIGH", "MEDIUM", "LOW" or the number.
std::string PriorityName(int priority);

}  // namespace akadzed
