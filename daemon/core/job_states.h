// The states of an akadze job, as akadze.jobs.state spells them (the
// jobs_state_check constraint). States are compared as JobState; text is
// parsed (ParseJobState) and printed (JobStateName, or fmt/spdlog directly)
// here and nowhere else: the config (hook filters), the admin commands
// (--state) and the job store read and write the names through these.
//
// Thread-safety: pure functions and constants.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

namespace akadzed {

enum class JobState { kQueued, kRunning, kSucceeded, kFailed, kCancelled };

// Every state, in the schema's order.
inline constexpr JobState kAllJobStates[] = {JobState::kQueued, JobState::kRunning,
                                             JobState::kSucceeded, JobState::kFailed,
                                             JobState::kCancelled};

// "queued", "running", "succeeded", "failed", "cancelled".
constexpr std::string_view JobStateName(JobState state) {
  switch (state) {
    case JobState::kQueued: return "queued";
    case JobState::kRunning: return "running";
    case JobState::kSucceeded: return "succeeded";
    case JobState::kFailed: return "failed";
    case JobState::kCancelled: return "cancelled";
  }
  return "unknown";
}

// The state `name` spells, or nullopt.
constexpr std::optional<JobState> ParseJobState(std::string_view name) {
  for (JobState state : kAllJobStates) {
    if (JobStateName(state) == name) return state;
  }
  return std::nullopt;
}

// The state `name` spells; throws std::runtime_error for any other text (a
// row the schema's check constraint should have refused).
JobState JobStateFromText(std::string_view name);

// Every state's name, in the schema's order.
std::vector<std::string> JobStateNames();

}  // namespace akadzed

// Log lines and messages print a JobState as its name.
template <>
struct fmt::formatter<akadzed::JobState> : fmt::formatter<std::string_view> {
  template <typename FormatContext>
  auto format(akadzed::JobState state, FormatContext& ctx) const {
    return fmt::formatter<std::string_view>::format(akadzed::JobStateName(state), ctx);
  }
};
