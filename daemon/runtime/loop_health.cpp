#include "runtime/loop_health.h"

#include <fmt/format.h>

namespace akadzed {

std::optional<std::string> StalledLoop(const std::vector<LoopRound>& loops,
                                       std::chrono::steady_clock::time_point now,
                                       std::chrono::microseconds grace) {
  for (const LoopRound& loop : loops) {
    auto age = now - loop.last_round;
    if (age > loop.period + grace) {
      return fmt::format("{}: no round for {:.0f}s", loop.name,
                         std::chrono::duration<double>(age).count());
    }
  }
  return std::nullopt;
}

}  // namespace akadzed
