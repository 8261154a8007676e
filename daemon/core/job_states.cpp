#include "core/job_states.h"

#include <stdexcept>

namespace akadzed {

JobState JobStateFromText(std::string_view name) {
  if (std::optional<JobState> state = ParseJobState(name)) return *state;
  throw std::runtime_error("unknown job state '" + std::string(name) + "'");
}

std::vector<std::string> JobStateNames() {
  std::vector<std::string> names;
  for (JobState state : kAllJobStates) names.emplace_back(JobStateName(state));
  return names;
}

}  // namespace akadzed
