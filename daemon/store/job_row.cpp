#include "store/job_row.h"

#include "pg/params.h"
#include "store/job_sql.h"

namespace akadzed {

namespace {

constexpr int kCoreColumns = 12;
constexpr int kTimeColumns = 6;
constexpr int kOutputColumns = 3;

std::string Ts(const std::string& column) { return IsoTimestampSql(column); }

std::int32_t Int32(const pg::Result& r, int row, int column) {
  return static_cast<std::int32_t>(r.int64(row, column));
}

}  // namespace

std::string JobRowColumns(JobRowParts parts, std::string_view alias) {
  const std::string t = alias.empty() ? "" : std::string(alias) + ".";
  std::string out = t + "id, " + t + "task, " + t + "queue, " + t + "priority, " + t + "state, " + t +
                    "run_count, " + t + "attempt, " + t + "max_attempts, " + t + "snoozes, " + t +
                    "unique_key, " + t + "limit_key, " + t + "worker_id::text";
  if (parts.times) {
    out += ", " + Ts(t + "run_at") + ", " + Ts(t + "expires_at") + ", " + Ts(t + "cancel_requested_at") +
           ", " + Ts(t + "created_at") + ", " + Ts(t + "started_at") + ", " + Ts(t + "finished_at");
  }
  if (parts.args) out += ", " + t + "args::text";
  if (parts.output) out += ", " + t + "meta::text, " + t + "errors::text, " + t + "result::text";
  // ->> of a meta that is not an object is NULL, never an error.
  if (parts.trace) out += ", " + t + "meta ->> 'traceparent'";
  return out;
}

int JobRowColumnCount(JobRowParts parts) {
  return kCoreColumns + (parts.times ? kTimeColumns : 0) + (parts.args ? 1 : 0) +
         (parts.output ? kOutputColumns : 0) + (parts.trace ? 1 : 0);
}

JobRow ReadJobRow(const pg::Result& r, int i, JobRowParts parts, int first_column) {
  JobRow j;
  int c = first_column;
  j.id = r.int64(i, c++);
  j.task = std::string(r.text(i, c++));
  j.queue = std::string(r.text(i, c++));
  j.priority = Int32(r, i, c++);
  j.state = JobStateFromText(r.text(i, c++));
  j.run_count = Int32(r, i, c++);
  j.attempt = Int32(r, i, c++);
  j.max_attempts = Int32(r, i, c++);
  j.snoozes = Int32(r, i, c++);
  j.unique_key = r.optional_text(i, c++);
  j.limit_key = r.optional_text(i, c++);
  j.worker_id = r.optional_text(i, c++);
  if (parts.times) {
    j.run_at = std::string(r.text(i, c++));
    j.expires_at = r.optional_text(i, c++);
    j.cancel_requested_at = r.optional_text(i, c++);
    j.created_at = std::string(r.text(i, c++));
    j.started_at = r.optional_text(i, c++);
    j.finished_at = r.optional_text(i, c++);
  }
  if (parts.args) j.args_json = std::string(r.text(i, c++));
  if (parts.output) {
    j.meta_json = std::string(r.text(i, c++));
    j.errors_json = std::string(r.text(i, c++));
    j.result_json = r.optional_text(i, c++);
  }
  if (parts.trace) j.traceparent = r.optional_text(i, c++);
  return j;
}

std::vector<JobRow> ReadJobs(pg::Connection& conn, const std::vector<std::int64_t>& ids,
                             JobRowParts parts) {
  pg::Result r = conn.exec("SELECT " + JobRowColumns(parts) +
                               " FROM akadze.jobs WHERE id = ANY($1::int8[]) ORDER BY id",
                           pg::Params().add_array(ids));
  std::vector<JobRow> rows;
  for (int i = 0; i < r.rows(); ++i) rows.push_back(ReadJobRow(r, i, parts));
  return rows;
}

std::optional<JobRow> ReadJob(pg::Connection& conn, std::int64_t id, JobRowParts parts) {
  pg::Result r = conn.exec("SELECT " + JobRowColumns(parts) + " FROM akadze.jobs WHERE id = $1",
                           pg::Params().add(id));
  if (r.rows() == 0) return std::nullopt;
  return ReadJobRow(r, 0, parts);
}

}  // namespace akadzed
