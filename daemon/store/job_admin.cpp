#include "store/job_admin.h"

#include <nlohmann/json.hpp>

#include "store/job_sql.h"
#include "pg/pg_error.h"
#include "pg/transaction.h"

namespace akadzed {

namespace {

std::string Ts(const std::string& column) { return IsoTimestampSql(column); }

// Throws std::invalid_argument unless PostgreSQL reads `text` as timestamptz.
void CheckTimestamp(pg::Connection& conn, const std::optional<std::string>& text,
                    const std::string& option) {
  if (!text) return;
  try {
    conn.exec("SELECT $1::timestamptz", pg::Params().add(*text));
  } catch (const pg::SqlError& e) {
    if (e.sqlstate().rfind("22", 0) == 0) {
      throw std::invalid_argument(option + ": not a timestamp: '" + *text +
                                  "' (use ISO-8601, e.g. 2026-12-01T09:00:00Z)");
    }
    throw;
  }
}

// The active job holding `unique_key`, for the duplicate message.
std::string ActiveHolder(pg::Connection& conn, const std::string& unique_key) {
  pg::Result r = conn.exec(
      "SELECT id, state FROM akadze.jobs WHERE unique_key = $1 AND state IN ('queued','running')",
      pg::Params().add(unique_key));
  if (r.empty()) return "another active job";
  return "job " + std::string(r.text(0, 0)) + " (" + std::string(r.text(0, 1)) + ")";
}

[[noreturn]] void NotFound(std::int64_t id) {
  throw AdminError("job " + std::to_string(id) + " not found");
}

}  // namespace

void ValidateEnqueue(const EnqueueRequest& request) {
  if (request.task.empty()) throw std::invalid_argument("TASK must not be empty");
  if (request.queue.empty()) throw std::invalid_argument("--queue must not be empty");
  nlohmann::json args = nlohmann::json::parse(request.args_json, nullptr, false);
  if (args.is_discarded()) throw std::invalid_argument("--args: not valid JSON");
  if (!args.is_object()) throw std::invalid_argument("--args: must be a JSON object");
  if (request.priority < -32768 || request.priority > 32767) {
    throw std::invalid_argument("--priority must be between -32768 and 32767");
  }
  if (request.max_attempts < 1 || request.max_attempts > 2147483647) {
    throw std::invalid_argument("--max-attempts must be between 1 and 2147483647");
  }
  if (request.delay_us && *request.delay_us < 0) {
    throw std::invalid_argument("--delay must not be negative");
  }
  if (request.delay_us && request.run_at) {
    throw std::invalid_argument("--delay and --run-at exclude each other");
  }
  if (request.unique_key && request.unique_key->empty()) {
    throw std::invalid_argument("--unique-key must not be empty");
  }
  if (request.limit_key && request.limit_key->empty()) {
    throw std::invalid_argument("--limit-key must not be empty");
  }
}

JobRow EnqueueJob(pg::Connection& conn, const EnqueueRequest& request) {
  ValidateEnqueue(request);
  CheckTimestamp(conn, request.run_at, "--run-at");
  CheckTimestamp(conn, request.expires_at, "--expires-at");
  std::int64_t id = 0;
  try {
    // The producers' function (migrations/006_enqueue.sql): the same checks,
    // conflict handling and NOTIFY as an application's enqueue.
    pg::Result r = conn.exec(
        "SELECT akadze.enqueue(task => $1, args => $2::jsonb, queue => $3,"
        " priority => $4::int8, run_at => $5::timestamptz,"
        " delay => $6::int8 * interval '1 microsecond', limit_key => $7, unique_key => $8,"
        " on_conflict => 'raise', max_attempts => $9::int8, expires_at => $10::timestamptz)",
        pg::Params()
            .add(request.task)
            .add(request.args_json)
            .add(request.queue)
            .add(request.priority)
            .add(request.run_at)
            .add(request.delay_us)
            .add(request.limit_key)
            .add(request.unique_key)
            .add(request.max_attempts)
            .add(request.expires_at));
    id = r.int64(0, 0);
  } catch (const pg::SqlError& e) {
    // The function's own refusals: its message without the statement's and
    // the function's prefixes.
    const std::string message = e.what();
    constexpr std::string_view kPrefix = "akadze.enqueue: ";
    const std::size_t at = message.find(kPrefix);
    if (at == std::string::npos) throw;
    const std::string why = message.substr(at + kPrefix.size());
    if (e.sqlstate() == "23505") throw AdminError(why);
    if (e.sqlstate() == "22023") throw std::invalid_argument(why);
    throw;
  }
  std::optional<JobRow> job = ReadJob(conn, id, kJobRowForAdmin);
  if (!job) throw AdminError("job " + std::to_string(id) + " ended before it could be shown");
  return *job;
}

std::vector<JobRow> ListJobs(pg::Connection& conn, const std::optional<std::string>& queue,
                             const std::optional<JobState>& state, std::int64_t limit) {
  if (limit < 1 || limit > 1000) throw std::invalid_argument("--limit must be between 1 and 1000");
  std::optional<std::string> state_name;
  if (state) state_name = std::string(JobStateName(*state));
  pg::Result r = conn.exec(
      "SELECT " + JobRowColumns(kJobRowForAdmin) +
          " FROM akadze.jobs WHERE ($1::text IS NULL OR queue = $1)"
          " AND ($2::text IS NULL OR state = $2) ORDER BY id DESC LIMIT $3::int8",
      pg::Params().add(queue).add(state_name).add(limit));
  std::vector<JobRow> rows;
  for (int i = 0; i < r.rows(); ++i) rows.push_back(ReadJobRow(r, i, kJobRowForAdmin));
  return rows;
}

JobRow ShowJob(pg::Connection& conn, std::int64_t id) {
  std::optional<JobRow> row = ReadJob(conn, id, kJobRowForAdmin);
  if (!row) NotFound(id);
  return *row;
}

CancelOutcome CancelJob(pg::Connection& conn, std::int64_t id) {
  pg::Transaction tx(conn);
  pg::Result r = tx.exec(
      "SELECT state, cancel_requested_at IS NOT NULL FROM akadze.jobs WHERE id = $1 FOR UPDATE",
      pg::Params().add(id));
  if (r.empty()) NotFound(id);
  const JobState state = JobStateFromText(r.text(0, 0));
  CancelOutcome outcome;
  if (state == JobState::kQueued) {
    tx.exec(
        "UPDATE akadze.jobs SET state = 'cancelled', finished_at = now(),"
        " cancel_requested_at = COALESCE(cancel_requested_at, now()) WHERE id = $1",
        pg::Params().add(id));
    outcome = CancelOutcome::kCancelled;
  } else if (state == JobState::kRunning) {
    if (r.boolean(0, 1)) {
      outcome = CancelOutcome::kAlreadyRequested;
    } else {
      tx.exec("UPDATE akadze.jobs SET cancel_requested_at = now() WHERE id = $1",
              pg::Params().add(id));
      outcome = CancelOutcome::kCancelRequested;
    }
  } else {
    throw AdminError("job " + std::to_string(id) + " is already " + std::string(JobStateName(state)));
  }
  tx.commit();
  return outcome;
}

JobRow RequeueJob(pg::Connection& conn, std::int64_t id) {
  pg::Transaction tx(conn);
  pg::Result r = tx.exec("SELECT state, unique_key FROM akadze.jobs WHERE id = $1 FOR UPDATE",
                         pg::Params().add(id));
  if (r.empty()) NotFound(id);
  const JobState state = JobStateFromText(r.text(0, 0));
  if (state != JobState::kFailed) {
    throw AdminError("job " + std::to_string(id) + " is " + std::string(JobStateName(state)) +
                     "; only failed jobs can be requeued");
  }
  const std::optional<std::string> unique_key = r.optional_text(0, 1);
  // A savepoint keeps the transaction usable to name the holder of the key.
  tx.exec("SAVEPOINT requeue");
  try {
    pg::Result u = tx.exec(
        "UPDATE akadze.jobs AS j SET state = 'queued', run_at = now(),"
        // akadze's requeue: the failed runs stay counted, and the job gets
        // one more attempt (int4's maximum saturates).
        " max_attempts = GREATEST(j.max_attempts, LEAST(j.attempt::int8 + 1, 2147483647))::int,"
        " worker_id = NULL, started_at = NULL, finished_at = NULL, cancel_requested_at = NULL"
        " WHERE id = $1 RETURNING " + JobRowColumns(kJobRowForAdmin, "j"),
        pg::Params().add(id));
    JobRow row = ReadJobRow(u, 0, kJobRowForAdmin);
    tx.commit();
    return row;
  } catch (const pg::SqlError& e) {
    if (e.sqlstate() != "23505" || !unique_key) throw;
    tx.exec("ROLLBACK TO SAVEPOINT requeue");
    throw AdminError("job " + std::to_string(id) + " cannot be requeued: unique_key '" +
                     *unique_key + "' is held by " + ActiveHolder(conn, *unique_key));
  }
}

std::vector<QueueRow> ListQueues(pg::Connection& conn) {
  pg::Result r = conn.exec(
      std::string("WITH c AS (SELECT queue,"
                  " count(*) FILTER (WHERE state = 'queued') AS queued,"
                  " count(*) FILTER (WHERE ") + kReadyJobSql + ") AS ready,"
                  " count(*) FILTER (WHERE state = 'running') AS running,"
                  " count(*) FILTER (WHERE state = 'succeeded') AS succeeded,"
                  " count(*) FILTER (WHERE state = 'failed') AS failed,"
                  " count(*) FILTER (WHERE state = 'cancelled') AS cancelled,"
                  " min(run_at) FILTER (WHERE " + kReadyJobSql + ") AS oldest"
                  " FROM akadze.jobs GROUP BY queue)"
                  " SELECT q.queue, COALESCE(c.queued, 0), COALESCE(c.ready, 0),"
                  " COALESCE(c.running, 0), COALESCE(c.succeeded, 0), COALESCE(c.failed, 0),"
                  " COALESCE(c.cancelled, 0),"
                  " COALESCE(" + AgeSecondsSql("c.oldest") + ", 0)::float8,"
                  " p.queue IS NOT NULL, " + Ts("p.paused_at") + ", cap.max_running"
                  " FROM (SELECT queue FROM c UNION SELECT queue FROM akadze.queue_pauses"
                  "       UNION SELECT queue FROM akadze.queue_caps) q"
                  " LEFT JOIN c ON c.queue = q.queue"
                  " LEFT JOIN akadze.queue_pauses p ON p.queue = q.queue"
                  " LEFT JOIN akadze.queue_caps cap ON cap.queue = q.queue ORDER BY q.queue");
  std::vector<QueueRow> rows;
  for (int i = 0; i < r.rows(); ++i) {
    QueueRow q;
    q.queue = std::string(r.text(i, 0));
    q.queued = r.int64(i, 1);
    q.ready = r.int64(i, 2);
    q.running = r.int64(i, 3);
    q.succeeded = r.int64(i, 4);
    q.failed = r.int64(i, 5);
    q.cancelled = r.int64(i, 6);
    q.lag_seconds = r.float64(i, 7);
    q.paused = r.boolean(i, 8);
    q.paused_at = r.optional_text(i, 9);
    q.max_running = r.optional_int64(i, 10);
    rows.push_back(std::move(q));
  }
  return rows;
}

bool PauseQueue(pg::Connection& conn, const std::string& queue) {
  if (queue.empty()) throw std::invalid_argument("queue name must not be empty");
  return conn
             .exec("INSERT INTO akadze.queue_pauses (queue) VALUES ($1) ON CONFLICT DO NOTHING",
                   pg::Params().add(queue))
             .affected() > 0;
}

bool ResumeQueue(pg::Connection& conn, const std::string& queue) {
  if (queue.empty()) throw std::invalid_argument("queue name must not be empty");
  return conn.exec("DELETE FROM akadze.queue_pauses WHERE queue = $1", pg::Params().add(queue))
             .affected() > 0;
}

std::optional<std::int64_t> SetQueueCap(pg::Connection& conn, const std::string& queue,
                                        std::int64_t max_running) {
  if (queue.empty()) throw std::invalid_argument("queue name must not be empty");
  if (max_running < 1 || max_running > 2147483647) {
    throw std::invalid_argument("max_running must be between 1 and 2147483647 (to stop claims, pause the queue)");
  }
  // The row's old value comes back from a self-join on the locked row.
  pg::Result r = conn.exec(
      "WITH old AS (SELECT max_running FROM akadze.queue_caps WHERE queue = $1 FOR UPDATE),"
      " new AS (INSERT INTO akadze.queue_caps (queue, max_running) VALUES ($1, $2::int)"
      "         ON CONFLICT (queue) DO UPDATE SET max_running = EXCLUDED.max_running, set_at = now())"
      " SELECT (SELECT max_running FROM old)",
      pg::Params().add(queue).add(max_running));
  return r.optional_int64(0, 0);
}

std::optional<std::int64_t> ClearQueueCap(pg::Connection& conn, const std::string& queue) {
  if (queue.empty()) throw std::invalid_argument("queue name must not be empty");
  pg::Result r = conn.exec("DELETE FROM akadze.queue_caps WHERE queue = $1 RETURNING max_running",
                           pg::Params().add(queue));
  if (r.rows() == 0) return std::nullopt;
  return r.int64(0, 0);
}

std::vector<WorkerRow> ListWorkers(pg::Connection& conn) {
  pg::Result r = conn.exec(
      "SELECT w.id::text, w.hostname, w.pid, to_json(array_remove(w.queues, NULL))::text, " + Ts("w.started_at") +
      ", " + AgeSecondsSql("w.heartbeat_at") + ","
      " COALESCE(r.n, 0) FROM akadze.workers w"
      " LEFT JOIN (SELECT worker_id, count(*) AS n FROM " + RunningJobsOfWorkersSql() + " rj GROUP BY worker_id) r"
      "   ON r.worker_id = w.id"
      " ORDER BY w.started_at, w.id",
      pg::Params());  // prepared: the status page reads it every few seconds
  std::vector<WorkerRow> rows;
  for (int i = 0; i < r.rows(); ++i) {
    WorkerRow w;
    w.id = std::string(r.text(i, 0));
    w.hostname = std::string(r.text(i, 1));
    w.pid = r.int64(i, 2);
    w.queues = nlohmann::json::parse(r.text(i, 3)).get<std::vector<std::string>>();
    w.started_at = std::string(r.text(i, 4));
    w.heartbeat_age_seconds = r.float64(i, 5);
    w.running = r.int64(i, 6);
    rows.push_back(std::move(w));
  }
  return rows;
}

std::vector<LimitUse> ListLimitUse(pg::Connection& conn) {
  pg::Result r = conn.exec(
      "WITH running AS (SELECT limit_key AS key, count(*) AS n FROM " + RunningJobsOfWorkersSql() + " rj"
      "   WHERE limit_key IS NOT NULL GROUP BY limit_key),"
      " keys AS (SELECT key FROM running UNION SELECT key FROM akadze.limits WHERE key <> '*'),"
      " applied AS (SELECT k.key, COALESCE(own.key, star.key) AS row_key,"
      "   COALESCE(own.max_running, CASE WHEN own.key IS NULL THEN star.max_running END) AS max_running,"
      "   COALESCE(own.max_starts, CASE WHEN own.key IS NULL THEN star.max_starts END) AS max_starts,"
      "   COALESCE(own.starts_window, CASE WHEN own.key IS NULL THEN star.starts_window END) AS win"
      "   FROM keys k LEFT JOIN akadze.limits own ON own.key = k.key"
      "   LEFT JOIN akadze.limits star ON star.key = '*')"
      " SELECT a.key, a.row_key, COALESCE(r.n, 0), a.max_running,"
      "   CASE WHEN a.win IS NULL THEN 0 ELSE (SELECT count(*) FROM akadze.limit_starts s"
      "     WHERE s.key = a.key AND s.started_at > now() - a.win"
      "       AND s.started_at <= now() + a.win + interval '1 minute') END, a.max_starts"
      " FROM applied a LEFT JOIN running r ON r.key = a.key ORDER BY a.key",
      pg::Params());  // prepared: the status page reads it every few seconds
  std::vector<LimitUse> rows;
  for (int i = 0; i < r.rows(); ++i) {
    rows.push_back(LimitUse{std::string(r.text(i, 0)), r.optional_text(i, 1), r.int64(i, 2),
                            r.optional_int64(i, 3), r.int64(i, 4), r.optional_int64(i, 5)});
  }
  return rows;
}

}  // namespace akadzed
