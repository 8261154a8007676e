#include "lesson/priority_lesson.h"

#include <map>

#include "claim/claim_transaction.h"
#include "pg/transaction.h"
#include "store/job_row.h"
#include "sample_rows/lesson_jobs.h"

namespace akadzed {

namespace {

constexpr const char* kQueue = "lesson07";
constexpr const char* kWorkerA = "0000000a-0000-4000-8000-00000000000a";
constexpr const char* kWorkerB = "0000000b-0000-4000-8000-00000000000b";
constexpr std::int64_t kFiveMinutes = 5LL * 60 * 1000000;

// Replaces the lesson queue's rows with `jobs` (explicit ids, run_at
// `minutes_ago` before now).
void Prepare(pg::Connection& conn, const std::vector<LessonSeed>& jobs, const std::string& queue = kQueue) {
  ReplaceLessonJobs(conn, queue, jobs);
}

std::string WorkerName(std::string_view uuid) {
  if (uuid == kWorkerA) return "A";
  if (uuid == kWorkerB) return "B";
  return "";
}

LessonJob Load(pg::Connection& conn, std::int64_t id) {
  LessonJob job;
  job.id = id;
  if (std::optional<JobRow> row = ReadJob(conn, id, kJobRowCore)) {
    job.priority = row->priority;
    job.effective = job.priority;
    job.state = row->state;
    job.worker = WorkerName(row->worker_id.value_or(""));
  }
  return job;
}

// The job's state as the lesson prints it ("" when its row is gone).
std::string StateText(const LessonJob& job) {
  return job.state ? std::string(JobStateName(*job.state)) : "";
}

LessonJob FromClaim(const ClaimedJob& c, const std::string& worker) {
  return LessonJob{c.id, c.priority, c.effective_priority, JobState::kRunning, worker};
}

ClaimRequest Request(int slots, const char* worker) {
  ClaimRequest r;
  r.queue = kQueue;
  r.slots = slots;
  r.worker_id = worker;
  return r;
}

void Finish(pg::Connection& conn, std::int64_t id) {
  MarkLessonJobSucceeded(conn, id);
}

std::string Describe(const LessonJob& j, bool with_effective = false) {
  std::string out = "#" + std::to_string(j.id) + " " + PriorityName(j.priority);
  if (with_effective) out += " (effective " + std::to_string(j.effective) + ")";
  return out;
}

std::vector<std::int64_t> Ids(const std::vector<LessonJob>& jobs) {
  std::vector<std::int64_t> ids;
  for (const auto& j : jobs) ids.push_back(j.id);
  return ids;
}

}  // namespace

std::string PriorityName(int priority) {
  switch (priority) {
    case kHigh: return "HIGH";
    case kMedium: return "MEDIUM";
    case kLow: return "LOW";
    default: return std::to_string(priority);
  }
}

LessonReport StrictPriorityExperiment(pg::Connection& conn, std::vector<LessonJob>* order) {
  LessonReport report;
  report.title = "Experiment 1: strict priority";
  Prepare(conn, {{42, kLow, 40}, {43, kHigh, 30}, {44, kMedium, 20}, {45, kHigh, 10}});
  report.steps = {"creates #42 LOW (the oldest), #43 HIGH, #44 MEDIUM, #45 HIGH",
                  "worker A claims one job at a time (ORDER BY priority DESC, run_at, id)"
                  " and finishes it before the next"};
  report.expected = "#43 HIGH -> #45 HIGH -> #44 MEDIUM -> #42 LOW";
  order->clear();
  for (;;) {
    ClaimResult r = RunClaim(conn, Request(1, kWorkerA));
    if (r.jobs.empty()) break;
    order->push_back(FromClaim(r.jobs.front(), "A"));
    report.observed.push_back("worker A claimed " + Describe(order->back()));
    Finish(conn, r.jobs.front().id);
  }
  report.as_expected = Ids(*order) == std::vector<std::int64_t>{43, 45, 44, 42};
  return report;
}

LessonReport SkipLockedExperiment(pg::Connection& conn, pg::Connection& other,
                                  std::vector<LessonJob>* jobs) {
  LessonReport report;
  report.title = "Experiment 2: two workers and SKIP LOCKED";
  Prepare(conn, {{42, kLow, 40}, {43, kHigh, 30}, {44, kMedium, 20}, {45, kHigh, 10}});
  report.steps = {"worker A opens a transaction and claims #43, without COMMIT yet",
                  "worker B, on another connection, claims one job and commits",
                  "worker A commits"};
  report.expected = "worker B skips the locked #43 and gets #45; both end up running, "
                    "under different workers";
  pg::Transaction a(conn);
  ClaimResult got_a = ClaimInTransaction(a, Request(1, kWorkerA));
  report.observed.push_back("worker A (open transaction) claimed " +
                            (got_a.jobs.empty() ? std::string("nothing")
                                                : Describe(FromClaim(got_a.jobs.front(), "A"))));
  ClaimResult got_b = RunClaim(other, Request(1, kWorkerB));
  report.observed.push_back("worker B claimed " +
                            (got_b.jobs.empty() ? std::string("nothing")
                                                : Describe(FromClaim(got_b.jobs.front(), "B"))) +
                            " and committed");
  a.commit();
  report.observed.push_back("worker A committed");
  jobs->clear();
  for (std::int64_t id : {43, 45}) {
    jobs->push_back(Load(conn, id));
    report.observed.push_back("#" + std::to_string(id) + ": " + StateText(jobs->back()) + ", worker " +
                              (jobs->back().worker.empty() ? "-" : jobs->back().worker));
  }
  report.as_expected = got_a.jobs.size() == 1 && got_a.jobs[0].id == 43 && got_b.jobs.size() == 1 &&
                       got_b.jobs[0].id == 45 && (*jobs)[0].state == JobState::kRunning &&
                       (*jobs)[1].state == JobState::kRunning && (*jobs)[0].worker == "A" &&
                       (*jobs)[1].worker == "B";
  return report;
}

LessonReport StarvationExperiment(pg::Connection& conn, std::vector<LessonJob>* claimed,
                                  LessonJob* low) {
  LessonReport report;
  report.title = "Experiment 3: starvation";
  Prepare(conn, {{42, kLow, 30}});
  report.steps = {"LOW #42 has waited 30 minutes",
                  "five rounds: a new HIGH job arrives, worker A claims one job and finishes it"};
  report.expected = "every round claims the new HIGH job; LOW #42 stays queued";
  claimed->clear();
  bool all_high = true;
  for (int round = 1; round <= 5; ++round) {
    std::int64_t id = 45 + round;
    AddLessonJob(conn, id, kQueue, kHigh);
    ClaimResult r = RunClaim(conn, Request(1, kWorkerA));
    if (r.jobs.empty()) {
      all_high = false;
      report.observed.push_back("round " + std::to_string(round) + ": nothing claimed");
      continue;
    }
    claimed->push_back(FromClaim(r.jobs.front(), "A"));
    all_high = all_high && r.jobs.front().id == id;
    report.observed.push_back("round " + std::to_string(round) + ": new HIGH #" + std::to_string(id) +
                              " arrived; worker A claimed " + Describe(claimed->back()));
    Finish(conn, r.jobs.front().id);
  }
  *low = Load(conn, 42);
  report.observed.push_back("LOW #42 is " + StateText(*low));
  report.as_expected = all_high && claimed->size() == 5 && low->state == JobState::kQueued;
  return report;
}

LessonReport AgingExperiment(pg::Connection& conn, std::vector<LessonJob>* without_aging,
                             std::vector<LessonJob>* with_aging, LessonJob* claimed,
                             std::int64_t* question4) {
  LessonReport report;
  report.title = "Experiment 4: aging (interval 5 minutes)";
  Prepare(conn, {{42, kLow, 30}, {43, kHigh, 1}, {44, kMedium, 2}});
  report.steps = {"creates LOW #42 that has waited 30 minutes, a new HIGH #43 and MEDIUM #44",
                  "orders them without aging (a dry-run claim)",
                  "orders them with aging: effective = priority + floor(waited / 5 min) (dry run)",
                  "worker A claims one job with aging"};
  report.expected = "without aging #43 leads; with aging #42 (1 + 30/5 = 7) -> #43 (3) -> #44 (2); "
                    "worker A gets #42 and its stored priority stays 1";
  ClaimRequest plain = Request(3, kWorkerA);
  plain.dry_run = true;
  without_aging->clear();
  for (const ClaimedJob& j : RunClaim(conn, plain).jobs) without_aging->push_back(FromClaim(j, ""));
  std::string line = "without aging:";
  for (const auto& j : *without_aging) line += " " + Describe(j);
  report.observed.push_back(line);

  ClaimRequest aged = plain;
  aged.aging_us = kFiveMinutes;
  with_aging->clear();
  for (const ClaimedJob& j : RunClaim(conn, aged).jobs) with_aging->push_back(FromClaim(j, ""));
  line = "with aging:";
  for (const auto& j : *with_aging) line += " " + Describe(j, true);
  report.observed.push_back(line);

  ClaimRequest take = Request(1, kWorkerA);
  take.aging_us = kFiveMinutes;
  ClaimResult r = RunClaim(conn, take);
  std::int64_t effective = r.jobs.empty() ? 0 : r.jobs.front().effective_priority;
  *claimed = r.jobs.empty() ? LessonJob{} : Load(conn, r.jobs.front().id);
  claimed->effective = effective;
  report.observed.push_back(
      r.jobs.empty() ? "worker A claimed nothing"
                     : "worker A claimed " + Describe(*claimed, true) + "; stored: state=" +
                           StateText(*claimed) + " priority=" + std::to_string(claimed->priority) +
                           " run_count=" + std::to_string(r.jobs.front().run_count));

  // Question 4: priority 1, waited 17 minutes, interval 5 minutes.
  Prepare(conn, {{60, kLow, 17}}, "lesson07-q4");
  ClaimRequest q4;
  q4.queue = "lesson07-q4";
  q4.slots = 1;
  q4.dry_run = true;
  q4.aging_us = kFiveMinutes;
  ClaimResult q = RunClaim(conn, q4);
  *question4 = q.jobs.empty() ? -1 : q.jobs.front().effective_priority;
  report.observed.push_back("question 4: priority 1 after 17 minutes -> effective " +
                            std::to_string(*question4) + " (1 + floor(17 / 5))");
  DeleteQueueJobs(conn, "lesson07-q4");

  report.as_expected = !without_aging->empty() && without_aging->front().id == 43 &&
                       Ids(*with_aging) == std::vector<std::int64_t>{42, 43, 44} &&
                       with_aging->front().effective == 7 && claimed->id == 42 &&
                       claimed->priority == kLow && claimed->effective == 7 && *question4 == 4;
  return report;
}

}  // namespace akadzed
