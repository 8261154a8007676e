// Pruning: the thread that runs the store's PruneBatch (store/prune.h) until
// every table is below a full batch, once per interval. Every daemon prunes;
// SKIP LOCKED keeps them out of each other's way.
//
// Thread-safety: a Pruner's Start/Stop are for its owner only.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "config/config.h"
#include "runtime/db_session.h"
#include "store/prune.h"

namespace akadzed {

class Pruner {
 public:
  // `stall_timeout` bounds its transactions (pg::Connection::Open).
  Pruner(std::string conninfo, std::chrono::milliseconds stall_timeout, PruningConfig config);
  ~Pruner();

  void Start();
  void Stop();

 private:
  void Loop();

  DbSession session_;
  PruningConfig config_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // guarded by mu_
};

}  // namespace akadzed
