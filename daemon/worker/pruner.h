// Pruning: the thread that runs the store's PruneBatch (store/prune.h) until
// every table is below a full batch, once per interval. Every daemon prunes;
// SKIP LOCKED keeps them out of each other's way.
//
// Thread-safety: a Pruner's Start/Stop are for its owner only.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "config/config.h"
#include "runtime/db_session.h"
#include "runtime/service_loop.h"
#include "store/prune.h"

namespace akadzed {

// The pruning loop, on the service kit (runtime/service_loop.h): a round
// every pruning.interval; a failed round is retried after the guard's
// backoff (1 s doubling up to the interval).
class Pruner {
 public:
  // `stall_timeout` bounds its transactions (pg::Connection::Open).
  Pruner(std::string conninfo, std::chrono::milliseconds stall_timeout, PruningConfig config,
         const ServiceClock& clock = SteadyServiceClock());
  ~Pruner();

  void Start();
  void Stop();

  // One round, on the caller's thread: batches until every table is below
  // a full batch (or stop is requested), logs what it deleted (`prune`) or
  // its failure (`prune_failed`, `prune_recovered` after an outage).
  // Returns the wait before the next round. Its batches read finished jobs
  // from the floor the ones before left (store/prune.h), kept from round to
  // round and dropped every kPruneFloorReset: a job behind it that no batch
  // deleted (locked when its batch ran) is pruned within that.
  std::chrono::microseconds Round();

  static constexpr std::chrono::minutes kPruneFloorReset{10};

 private:
  DbSession session_;
  PruningConfig config_;
  ServiceLoop loop_;
  RoundGuard guard_;
  // The loop's thread only.
  PruneFloor floor_;
  ServiceClock::time_point floor_since_{};
};

}  // namespace akadzed
