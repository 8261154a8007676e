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

namespace akadzed {

namespace {

// PostgreSQL type OIDs of the SQL hooks' parameters ($1..$15).
constexpr unsigned int kInt8 = 20, kInt4 = 23, kText = 25, kJsonb = 3802, kUuid = 2950;
const std::vector<unsigned int> kParamTypes = {kInt8, kText,  kText,  kText,  kText,
                                               kInt4, kInt4,  kInt4,  kInt4,  kText,
                                               kText, kUuid,  kJsonb, kJsonb, kJsonb};

// One job's row as hooks see it, after the change.
struct JobFields {
  std::int64_t id = 0;
  std::string queue, task, state;
  std::int32_t attempt = 0, max_attempts = 0, run_count = 0, priority = 0;
  std::optional<std::string> limit_key, unique_key, worker_id;
  std::string args_json;
  std::optional<std::string> result_json;
  std::string errors_json;
};

std::map<std::int64_t, JobFields> ReadJobs(pg::Connection& conn,
                                           const std::vector<std::int64_t>& ids) {
  pg::Result r = conn.exec(
      "SELECT id, queue, task, state, attempt, max_attempts, run_count, priority, limit_key,"
      " unique_key, worker_id::text, args::text, result::text, errors::text"
      " FROM akadze.jobs WHERE id = ANY($1::int8[])",
      pg::Params().add_array(ids));
  std::map<std::int64_t, JobFields> jobs;
  for (int i = 0; i < r.rows(); ++i) {
    JobFields f;
    f.id = r.int64(i, 0);
    f.queue = r.text(i, 1);
    f.task = r.text(i, 2);
    f.state = r.text(i, 3);
    f.attempt = static_cast<std::int32_t>(r.int64(i, 4));
    f.max_attempts = static_cast<std::int32_t>(r.int64(i, 5));
    f.run_count = static_cast<std::int32_t>(r.int64(i, 6));
    f.priority = static_cast<std::int32_t>(r.int64(i, 7));
    f.limit_key = r.optional_text(i, 8);
    f.unique_key = r.optional_text(i, 9);
    f.worker_id = r.optional_text(i, 10);
    f.args_json = r.text(i, 11);
    f.result_json = r.optional_text(i, 12);
    f.errors_json = r.text(i, 13);
    jobs.emplace(f.id, std::move(f));
  }
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

HookError::HookError(std::string hook, std::int64_t job_id, std::string from, std::string to,
                     const std::string& message)
    : std::runtime_error("hook " + hook + " refused job " + std::to_string(job_id) + " " + from +
                         "->" + to + ": " + message),
      hook_(std::move(hook)),
      job_id_(job_id),
      from_(std::move(from)),
      to_(std::move(to)) {}

TransitionHooks::TransitionHooks() = default;
TransitionHooks::~TransitionHooks() = default;

void TransitionHooks::Add(const HookConfig& config) {
  Hook hook{config, nullptr};
  if (config.plugin) hook.plugin = std::make_unique<PluginHook>(config.name, *config.plugin);
  hooks_.push_back(std::move(hook));
}

bool TransitionHooks::AnyFrom(std::string_view from_state) const {
  for (const Hook& hook : hooks_) {
    if (hook.config.from.empty() ||
        std::find(hook.config.from.begin(), hook.config.from.end(), from_state) !=
            hook.config.from.end()) {
      return true;
    }
  }
  return false;
}

void TransitionHooks::Fire(pg::Connection& conn, std::string_view from_state,
                           const std::vector<std::int64_t>& job_ids) const {
  if (job_ids.empty() || !AnyFrom(from_state)) return;
  const std::map<std::int64_t, JobFields> jobs = ReadJobs(conn, job_ids);
  const std::string from(from_state);
  for (std::int64_t id : job_ids) {
    auto found = jobs.find(id);
    if (found == jobs.end()) continue;  // deleted meanwhile: nothing changed state
    const JobFields& job = found->second;
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
        t.from_state = from.c_str();
        t.to_state = job.state.c_str();
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
        params.add(job.id).add(job.queue).add(job.task).add(from).add(job.state)
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
