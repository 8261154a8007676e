#include "core/job_outcome.h"

namespace akadzed {

const char* OutcomeKindName(OutcomeKind kind) {
  switch (kind) {
    case OutcomeKind::kSuccess: return "success";
    case OutcomeKind::kRetry: return "retry";
    case OutcomeKind::kSnooze: return "snooze";
    case OutcomeKind::kFail: return "fail";
    case OutcomeKind::kCancel: return "cancel";
    case OutcomeKind::kRelease: return "release";
  }
  return "unknown";
}

}  // namespace akadzed
