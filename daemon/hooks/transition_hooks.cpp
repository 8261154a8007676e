#include "hooks/transition_hooks.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <map>
#include <optional>

#include <spdlog/spdlog.h>

#include "core/redact.h"
#include "hooks/plugin_hook.h"
#include "pg/params.h"
#include "pg/pg_error.h"
#include "runtime/log_line.h"
#include "store/job_row.h"

namespace akadzed {

namespace {

// PostgreSQL type OIDs of the SQL hooks' parameters ($1..$15).
constexpr unsigned int kInt8 = 20, kInt4 = 23, kText = 25, kJsonb = 3802, kUuid = 2950;
const std::vector<unsigned int> kParamTypes = {kInt8, kText,  kText,  kText,  kText,
                                               kInt4, kInt4,  kInt4,  kInt4,  kText,
                                               kText, kUuid,  kJsonb, kJsonb, kJsonb};

// The jobs' rows as hooks see them, after the change, by id.
std::map<std::int64_t, JobRow> ReadChangedJobs(pg::Connection& conn,
                                               const std::vector<std::int64_t>& ids) {
  std::map<std::int64_t, JobRow> jobs;
  for (JobRow& row : ReadJobs(conn, ids, kJobRowForHooks)) jobs.emplace(row.id, std::move(row));
  return jobs;
}

// What exec_sql's `host` points at during one on_transition call.
struct ExecHost {
  pg::Connection* conn;
  std::exception_ptr connection_failure;  // rethrown once the plugin returns
};

void WriteError(char* error, size_t size, const std::string& text) {
  if (error == nullptr || size == 0) return;
  const std::size_t n = std::min(text.size(), size - 1);
  std::memcpy(error, text.data(), n);
  error[n] = '\0';
}

extern "C" int ExecSql(const akadzed_transition* transition, const char* sql, int n_params,
                       const char* const* params, char* error, size_t error_size) {
  auto* host = static_cast<ExecHost*>(transition->host);
  if (host->connection_failure) {
    WriteError(error, error_size, "the database connection is gone");
    return -1;
  }
  if (sql == nullptr || n_params < 0 || (n_params > 0 && params == nullptr)) {
    WriteError(error, error_size, "exec_sql: no statement, or params missing");
    return -1;
  }
  try {
    pg::Params p;
    for (int i = 0; i < n_params; ++i) {
      p.add(params[i] ? std::optional<std::string>(params[i]) : std::nullopt);
    }
    host->conn->exec(sql, p);
    return 0;
  } catch (const pg::ConnectionError& e) {
    host->connection_failure = std::current_exception();
    WriteError(error, error_size, OneLine(e.what()));
  } catch (const std::exception& e) {
    WriteError(error, error_size, OneLine(e.what()));
  }
  return -1;
}

}  // namespace

TransitionHooks::TransitionHooks() = default;
TransitionHooks::~TransitionHooks() = default;

void TransitionHooks::Add(const HookConfig& config) {
  Hook hook{config, nullptr};
  if (config.plugin) hook.plugin = std::make_unique<PluginHook>(config.name, *config.plugin);
  hooks_.push_back(std::move(hook));
}

bool TransitionHooks::AnyFrom(JobState from_state) const {
  for (const Hook& hook : hooks_) {
    if (hook.config.from.empty() ||
        std::find(hook.config.from.begin(), hook.config.from.end(), from_state) !=
            hook.config.from.end()) {
      return true;
    }
  }
  return false;
}

void TransitionHooks::Fire(pg::Connection& conn, JobState from_state,
                           const std::vector<std::int64_t>& job_ids) const {
  if (job_ids.empty() || !AnyFrom(from_state)) return;
  const std::map<std::int64_t, JobRow> jobs = ReadChangedJobs(conn, job_ids);
  const JobState from = from_state;
  const std::string from_name(JobStateName(from));
  for (std::int64_t id : job_ids) {
    auto found = jobs.find(id);
    if (found == jobs.end()) continue;  // deleted meanwhile: nothing changed state
    const JobRow& job = found->second;
    const std::string to_name(JobStateName(job.state));
    if (job.state == from) continue;    // not a change of state
    for (const Hook& hook : hooks_) {
      if (!hook.config.Matches(from, job.state)) continue;
      std::string failure;
      if (hook.plugin) {
        ExecHost host{&conn, nullptr};
        akadzed_transition t{};
        t.struct_size = sizeof t;
        t.id = job.id;
        t.queue = job.queue.c_str();
        t.task = job.task.c_str();
        t.from_state = from_name.c_str();
        t.to_state = to_name.c_str();
        t.attempt = job.attempt;
        t.max_attempts = job.max_attempts;
        t.run_count = job.run_count;
        t.priority = job.priority;
        t.limit_key = job.limit_key ? job.limit_key->c_str() : nullptr;
        t.unique_key = job.unique_key ? job.unique_key->c_str() : nullptr;
        t.worker_id = job.worker_id ? job.worker_id->c_str() : nullptr;
        t.args_json = job.args_json.c_str();
        t.result_json = job.result_json ? job.result_json->c_str() : nullptr;
        t.errors_json = job.errors_json.c_str();
        t.exec_sql = &ExecSql;
        t.host = &host;
        failure = hook.plugin->OnTransition(t);
        if (host.connection_failure) std::rethrow_exception(host.connection_failure);
      } else {
        pg::Params params;
        params.add(job.id).add(job.queue).add(job.task).add(from_name).add(to_name)
            .add(job.attempt).add(job.max_attempts).add(job.run_count).add(job.priority)
            .add(job.limit_key).add(job.unique_key).add(job.worker_id).add(job.args_json)
            .add(job.result_json).add(job.errors_json)
            .types(kParamTypes);
        try {
          conn.exec(hook.config.sql, params);
        } catch (const pg::ConnectionError&) {
          throw;
        } catch (const pg::SqlError& e) {
          failure = e.what();
        }
      }
      if (!failure.empty()) {
        HookError error(hook.config.name, job.id, from, job.state, OneLine(RedactSecrets(failure)));
        spdlog::warn("hook_failed hook={} job={} transition={}->{} | {}; the change is rolled back",
                     LogValue(hook.config.name), job.id, from, job.state,
                     OneLine(RedactSecrets(failure)));
        throw error;
      }
    }
  }
}

}  // namespace akadzed
