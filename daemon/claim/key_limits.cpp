#include "claim/key_limits.h"

#include <algorithm>

namespace akadzed {

std::int64_t StartsAllowed(const ApplicableLimits& limits, const KeyCounts& counts) {
  if (!limits.exists) return 0;
  std::int64_t allowed = kUnlimited;
  if (limits.max_running) allowed = std::min(allowed, *limits.max_running - counts.running);
  if (limits.max_starts) allowed = std::min(allowed, *limits.max_starts - counts.starts);
  return std::max<std::int64_t>(allowed, 0);
}

}  // namespace akadzed
