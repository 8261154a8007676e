#include "worker/finish_count_writer.h"

#include <vector>

#include <spdlog/spdlog.h>

#include "store/status_report.h"

namespace akadzed {

FinishCountWriter::FinishCountWriter(SharedDbSession& session, FinishTally& tally,
                                     std::chrono::microseconds interval, const ServiceClock& clock)
    // An outage is logged once (warn, then debug); anything else at warn.
    : PeriodicService({.name = "finish_counts", .thread = "finish counts", .interval = interval,
                       .level_cap = spdlog::level::warn},
                      clock),
      session_(session),
      tally_(tally) {}

FinishCountWriter::~FinishCountWriter() { Stop(); }

bool FinishCountWriter::Round() {
  const std::vector<QueueFinishCount> counts = tally_.Take();
  if (counts.empty()) return false;
  bool written = false;
  try {
    written = session_.RunIfConnected([&](pg::Connection& c) { AddQueueMinutes(c, counts); });
  } catch (...) {
    tally_.PutBack(counts);  // for a later round (and minute)
    throw;
  }
  if (!written) tally_.PutBack(counts);  // the lease keeper reopens it
  return written;
}

}  // namespace akadzed
