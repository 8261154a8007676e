// What running a job came to: the handler's report (docs/handlers.md), which
// the finisher turns into the job's next state (SPEC §4, akadze's rules).
//
// Thread-safety: a plain value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace akadzed {

enum class OutcomeKind {
  kSuccess,  // succeeded; result_json optional
  kRetry,    // failed run: attempt+1, queued again after delay_us or the
             // backoff min(2^(attempt-1), 300) s, failed when attempts are spent
  kSnooze,   // queued again after delay_us; no attempt spent (snoozes+1)
  kFail,     // permanent failure: attempt+1, failed now
  kCancel,   // cancelled
  kRelease,  // daemon-internal (shutdown): queued now, no attempt spent
};

struct JobOutcome {
  OutcomeKind kind = OutcomeKind::kSuccess;
  std::optional<std::string> result_json;  // kSuccess: a valid JSON text
  std::optional<std::int64_t> delay_us;    // kRetry (optional), kSnooze (required)
  std::string error;    // kRetry/kFail/kCancel: error class, e.g. "Timeout"
  std::string message;  // human text; stored redacted, cut to 500 chars
  // The run was cut short by a JobStop request: the daemon records what the
  // stop reason stands for instead (cancelled, released, nothing). A run
  // that ended on its own just as a stop came keeps its real outcome.
  bool interrupted = false;
  // What the run reported of its progress and the database has not seen
  // yet (a JSON object, handlers/job_progress.h): merged into the job's
  // meta by its finish, whatever the outcome.
  std::optional<std::string> meta_patch = std::nullopt;
};

// A failed run (kRetry) with its error class and message.
inline JobOutcome RetryOutcome(std::string error, std::string message) {
  JobOutcome outcome;
  outcome.kind = OutcomeKind::kRetry;
  outcome.error = std::move(error);
  outcome.message = std::move(message);
  return outcome;
}

// Back to queued without spending an attempt (kRelease): a job stopped at
// shutdown, prefetched and never started, or orphaned by its runner.
inline JobOutcome ReleaseOutcome() {
  JobOutcome outcome;
  outcome.kind = OutcomeKind::kRelease;
  return outcome;
}

// Lower-case names for logs and docs: "success", "retry", "snooze", "fail",
// "cancel", "release".
const char* OutcomeKindName(OutcomeKind kind);

}  // namespace akadzed
