#include "store/transition_listener.h"

#include <fmt/format.h>

namespace akadzed {

HookError::HookError(std::string hook, std::int64_t job_id, JobState from, JobState to,
                     const std::string& message)
    : std::runtime_error(fmt::format("hook {} refused job {} {}->{}: {}", hook, job_id, from, to, message)),
      hook_(std::move(hook)),
      job_id_(job_id),
      from_(from),
      to_(to) {}

std::string HookError::transition() const { return fmt::format("{}->{}", from_, to_); }

}  // namespace akadzed
