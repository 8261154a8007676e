// Liveness of the daemon's loops: each claim loop and the lease keeper
// finishes a round every period (poll_interval, heartbeat_interval), or at
// least every period plus a grace (a round that waits on the database, a
// claim loop backing off). The systemd watchdog (grace: WatchdogSec) and
// /healthz ask the same question through StalledLoop.
//
// Thread-safety: pure functions over values.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace akadzed {

struct LoopRound {
  std::string name;                                // e.g. "claim loop of queue default"
  std::chrono::steady_clock::time_point last_round;
  std::chrono::microseconds period{0};
};

// nullopt when every loop finished a round within its period plus `grace`
// of `now`; else one line naming the first loop that did not, e.g. "lease
// keeper: no round for 75s".
std::optional<std::string> StalledLoop(const std::vector<LoopRound>& loops,
                                       std::chrono::steady_clock::time_point now,
                                       std::chrono::microseconds grace);

}  // namespace akadzed
