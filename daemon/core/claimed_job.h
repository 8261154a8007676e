// One job as a claim hands it to the worker: the row's fields a handler,
// a hook and the finisher need. A value; args are never logged.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace akadzed {

struct ClaimedJob {
  std::int64_t id = 0;
  std::string task;
  std::string queue;
  std::optional<std::string> limit_key;
  std::int32_t priority = 0;
  std::int32_t attempt = 0;
  std::int32_t max_attempts = 0;
  std::int32_t run_count = 0;  // after the claim (the fencing token)
  std::int64_t effective_priority = 0;  // the claim's ordering priority (aged, or priority)
  std::string args_json;       // never logged
  // The W3C traceparent of the job's meta when it is a valid one, as
  // version 00 (runtime/job_traces.h, W3cTraceparent), and its trace id;
  // else both empty.
  std::optional<std::string> traceparent;
  std::optional<std::string> trace_id;

  // The attempt this run counts as, from 1 (attempt counts failed runs):
  // attempt + 1, or 2,147,483,647 for a job claimed with attempt at that
  // maximum (the claim runs it, as akadze's worker does; the finish
  // saturates the column the same way). What handlers are told.
  std::int32_t run_attempt() const { return attempt < kMaxInt32 ? attempt + 1 : kMaxInt32; }

  static constexpr std::int32_t kMaxInt32 = 2147483647;
};

}  // namespace akadzed
