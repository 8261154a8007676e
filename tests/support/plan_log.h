// The plans auto_explain writes to a throwaway cluster's server log, read
// back: a test or a benchmark turns auto_explain on for its session
// (kAutoExplainSql), runs statements, and reads each statement's plan from
// the log (ThrowawayPostgres::directory()/server.log) to check or print
// which scans they made. Used by tests/pg/status_report_test.cpp and
// bench/status_page_bench.cpp.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace akadzed::test {

// For one session: every statement's plan, with actual rows and buffers, as
// JSON, at LOG level (the server log, not the client).
inline constexpr const char* kAutoExplainSql =
    "LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0; SET auto_explain.log_analyze = on;"
    " SET auto_explain.log_buffers = on; SET auto_explain.log_timing = on;"
    " SET auto_explain.log_nested_statements = on; SET auto_explain.log_format = 'json';"
    " SET auto_explain.log_level = 'log'";

struct LoggedPlan {
  std::string query;    // "Query Text"
  nlohmann::json plan;  // the top "Plan" node
};

// Every plan in `log_text` (a server log, or the part of it after a mark).
std::vector<LoggedPlan> PlansInLog(const std::string& log_text);

struct ScanNode {
  std::string node_type;  // "Index Only Scan", "Seq Scan", ...
  std::string relation;   // "jobs" ("" for a node without one)
  std::string index;      // "" when none
  double actual_rows = 0;  // per loop
  double loops = 0;
  std::int64_t shared_hit = 0;
  std::int64_t shared_read = 0;
};

// The nodes of `plan` (and its subplans) that read a relation or an index.
std::vector<ScanNode> ScanNodes(const nlohmann::json& plan);

// The size of a file in bytes, 0 when it does not exist: a mark to read a
// log from.
std::uintmax_t FileSize(const std::string& path);
// The text of `path` from byte `from` on.
std::string ReadFrom(const std::string& path, std::uintmax_t from);

}  // namespace akadzed::test
