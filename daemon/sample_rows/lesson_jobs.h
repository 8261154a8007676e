// The priority lesson's rows (lesson/priority_lesson.h): jobs with the
// lesson's own ids in its own queues, written and cleared around each
// experiment. Nothing here is used by the daemon.
//
// Thread-safety: functions use the connection they are given.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pg/connection.h"

namespace akadzed {

// A job the lesson creates: explicit id, priority, run_at (and created_at)
// `minutes_ago` before now.
struct LessonSeed {
  std::int64_t id;
  int priority;
  int minutes_ago;
};

// Replaces `queue`'s rows with `jobs` (task 'lesson07_task'), in one
// transaction, and moves akadze.jobs' identity past the explicit ids, so
// later inserts of the application never collide with them.
void ReplaceLessonJobs(pg::Connection& conn, const std::string& queue,
                       const std::vector<LessonSeed>& jobs);

// Adds one ready job with an explicit id (task 'lesson07_task') and moves
// the identity past it, in one transaction.
void AddLessonJob(pg::Connection& conn, std::int64_t id, const std::string& queue, int priority);

// Marks the job succeeded, as a finished run would.
void MarkLessonJobSucceeded(pg::Connection& conn, std::int64_t id);

// Deletes every job of `queue`.
void DeleteQueueJobs(pg::Connection& conn, const std::string& queue);

}  // namespace akadzed
