// The states of an akadze job, as akadze.jobs.state spells them (the
// jobs_state_check constraint): the one list the config (hook filters) and
// the admin commands (--state) check names against.
//
// Thread-safety: constants only.
#pragma once

namespace akadzed {

inline constexpr const char* kJobStates[] = {"queued", "running", "succeeded", "failed",
                                             "cancelled"};

}  // namespace akadzed
