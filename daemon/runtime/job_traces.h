// Trace context of jobs (docs/operations.md, "Trace context"): a W3C
// `traceparent` an application put in a job's meta, checked, and the trace
// ids of the jobs this daemon has in hand, which the log formatter
// (runtime/log_line.h) adds as `trace_id=` to every line that names one of
// them with `job=` — whichever thread writes it (the executor, the handler's
// output, a plugin's log callback, the finisher).
//
// Thread-safety: ParseTraceparent is a pure function; the registry's
// functions may be called from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace akadzed {

// The trace id (32 lowercase hex digits) of a W3C traceparent
// ("00-<trace-id>-<parent-id>-<flags>"; a later version's longer form is
// read by its first four fields), or nullopt when `text` is not one: wrong
// length or separators, upper-case or non-hex digits, version ff, an
// all-zero trace or parent id.
std::optional<std::string> ParseTraceparent(std::string_view text);

// What is passed on of a traceparent ParseTraceparent accepts: its first
// four fields as version 00 (55 bytes), as W3C says a later version is
// read; whatever follows (unbounded in a later version) is dropped.
std::string W3cTraceparent(std::string_view valid);

// Registers `trace_id` for `job_id` while the job is in this daemon's hands
// (from its start until the finisher is done with it). Counted: a job
// registered twice (rescued and claimed here again) needs two unregisters.
void RegisterJobTrace(std::int64_t job_id, const std::string& trace_id);
void UnregisterJobTrace(std::int64_t job_id);
// The trace id registered for `job_id` (cheap when no job has one).
std::optional<std::string> JobTraceId(std::int64_t job_id);

// Registered for its lifetime (nothing when `trace_id` is empty).
class JobTraceScope {
 public:
  JobTraceScope(std::int64_t job_id, const std::optional<std::string>& trace_id);
  ~JobTraceScope();
  JobTraceScope(const JobTraceScope&) = delete;
  JobTraceScope& operator=(const JobTraceScope&) = delete;

 private:
  std::int64_t job_id_;
  bool registered_;
};

}  // namespace akadzed
