#include "sample_rows/lesson_jobs.h"

#include "pg/params.h"
#include "pg/transaction.h"

namespace akadzed {

namespace {

// Moves akadze.jobs' identity past the explicit ids the lesson inserted, so
// later inserts of the application never collide with them.
void AdvanceIdentity(pg::Transaction& tx) {
  tx.exec("SELECT setval(pg_get_serial_sequence('akadze.jobs', 'id'),"
          " GREATEST((SELECT max(id) FROM akadze.jobs),"
          "          (SELECT last_value FROM akadze.jobs_id_seq)))");
}

}  // namespace

void ReplaceLessonJobs(pg::Connection& conn, const std::string& queue,
                       const std::vector<LessonSeed>& jobs) {
  pg::Transaction tx(conn);
  tx.exec("DELETE FROM akadze.jobs WHERE queue = $1", pg::Params().add(queue));
  std::vector<std::int64_t> ids, priorities, minutes;
  for (const LessonSeed& s : jobs) {
    ids.push_back(s.id);
    priorities.push_back(s.priority);
    minutes.push_back(s.minutes_ago);
  }
  tx.exec(
      "INSERT INTO akadze.jobs (id, task, queue, priority, run_at, created_at)"
      " OVERRIDING SYSTEM VALUE"
      " SELECT i, 'lesson07_task', $4, p, now() - m * interval '1 minute',"
      "        now() - m * interval '1 minute'"
      " FROM unnest($1::int8[], $2::int[], $3::int[]) AS u(i, p, m)",
      pg::Params().add_array(ids).add_array(priorities).add_array(minutes).add(queue));
  AdvanceIdentity(tx);
  tx.commit();
}

void AddLessonJob(pg::Connection& conn, std::int64_t id, const std::string& queue, int priority) {
  pg::Transaction tx(conn);
  tx.exec("INSERT INTO akadze.jobs (id, task, queue, priority) OVERRIDING SYSTEM VALUE"
          " VALUES ($1, 'lesson07_task', $2, $3)",
          pg::Params().add(id).add(queue).add(priority));
  AdvanceIdentity(tx);
  tx.commit();
}

void MarkLessonJobSucceeded(pg::Connection& conn, std::int64_t id) {
  conn.exec("UPDATE akadze.jobs SET state = 'succeeded', finished_at = now() WHERE id = $1",
            pg::Params().add(id));
}

void DeleteQueueJobs(pg::Connection& conn, const std::string& queue) {
  conn.exec("DELETE FROM akadze.jobs WHERE queue = $1", pg::Params().add(queue));
}

}  // namespace akadzed
