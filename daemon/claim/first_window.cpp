#include "claim/first_window.h"

#include <algorithm>

namespace akadzed {

void FirstWindowSizer::Observe(std::int64_t planned, std::optional<std::int64_t> rows_needed) {
  if (planned <= 0) return;
  if (!rows_needed) {
    per_slot_ = kMaxPerSlot;
    return;
  }
  const double needed = static_cast<double>(std::max(*rows_needed, planned)) / static_cast<double>(planned);
  per_slot_ = std::clamp(kMargin * needed, kMargin, kMaxPerSlot);
}

int FirstWindowSizer::ExpectedSlots(int free_now, int capacity) const {
  return std::min(capacity, std::max({free_now, kWholeWindowSlots, free_at_lock_}));
}

}  // namespace akadzed
