// One reader of a job row: the column list of akadze.jobs a statement
// selects (or returns) and the parse of those columns into a JobRow. The
// claim (what it hands the worker), the transition hooks (the row after a
// change) and the admin commands (jobs list/show) all read rows through it,
// each asking for the parts it needs.
//
// Thread-safety: pure functions, except ReadJob(s), which use the
// connection they are given.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/job_states.h"
#include "pg/connection.h"
#include "pg/result.h"

namespace akadzed {

// Which columns beyond the core ones (always read) a read selects.
struct JobRowParts {
  bool times = false;   // run_at ... finished_at, as ISO-8601 UTC text
  bool args = false;    // args (never printed, never logged)
  bool output = false;  // meta, errors, result
  bool trace = false;   // meta's "traceparent" (text, or NULL)
};

// What the admin commands show: everything but args.
inline constexpr JobRowParts kJobRowForAdmin{.times = true, .args = false, .output = true};
// What a transition hook is given.
inline constexpr JobRowParts kJobRowForHooks{.times = false, .args = true, .output = true};
// What a claim hands the worker.
inline constexpr JobRowParts kJobRowForClaim{.times = false, .args = true, .output = false,
                                             .trace = true};
// The core columns only.
inline constexpr JobRowParts kJobRowCore{};

// A row of akadze.jobs; the fields of parts not read keep their defaults.
struct JobRow {
  // core
  std::int64_t id = 0;
  std::string task;
  std::string queue;
  std::int32_t priority = 0;
  JobState state = JobState::kQueued;
  std::int32_t run_count = 0;
  std::int32_t attempt = 0;
  std::int32_t max_attempts = 0;
  std::int32_t snoozes = 0;
  std::optional<std::string> unique_key;
  std::optional<std::string> limit_key;
  std::optional<std::string> worker_id;
  // times: ISO-8601 UTC text, e.g. "2026-11-30T01:23:05.123456Z"; 'infinity'
  // and '-infinity' as themselves
  std::string run_at;
  std::optional<std::string> expires_at;
  std::optional<std::string> cancel_requested_at;
  std::string created_at;
  std::optional<std::string> started_at;
  std::optional<std::string> finished_at;
  // args
  std::string args_json;
  // output
  std::string meta_json = "{}";
  std::string errors_json = "[]";
  std::optional<std::string> result_json;
  // trace: meta's "traceparent" as stored (unchecked)
  std::optional<std::string> traceparent;
};

// The select list of `parts` over the columns of `alias` ("" or e.g. "j"),
// in the order ReadJobRow parses them.
std::string JobRowColumns(JobRowParts parts, std::string_view alias = "");

// How many columns JobRowColumns(parts) has: a statement's own columns
// after them start there.
int JobRowColumnCount(JobRowParts parts);

// Parses row `row` of `result`, whose columns from `first_column` on are
// JobRowColumns(parts).
JobRow ReadJobRow(const pg::Result& result, int row, JobRowParts parts, int first_column = 0);

// The jobs among `ids` that exist, in id order.
std::vector<JobRow> ReadJobs(pg::Connection& conn, const std::vector<std::int64_t>& ids,
                             JobRowParts parts);

// The job `id`, or nullopt.
std::optional<JobRow> ReadJob(pg::Connection& conn, std::int64_t id, JobRowParts parts);

}  // namespace akadzed
