#include "worker/finish_count_writer.h"

#include <algorithm>
#include <vector>

#include <spdlog/spdlog.h>

#include "store/status_report.h"

namespace akadzed {

FinishCountWriter::FinishCountWriter(SharedDbSession& session, FinishTally& tally,
                                     std::chrono::microseconds interval, const ServiceClock& clock)
    : session_(session), tally_(tally), interval_(interval), guard_(clock, RetryBackoff(interval, interval)),
      loop_(clock) {}

FinishCountWriter::~FinishCountWriter() { Stop(); }

void FinishCountWriter::Start() {
  loop_.Start("finish counts", [this] {
    while (!loop_.Sleep(interval_)) RunRound();
  });
}

void FinishCountWriter::Stop() { loop_.Stop(); }

void FinishCountWriter::RunRound() {
  try {
    // A round that sent nothing says nothing of the database.
    if (!Round()) {
      loop_.MarkRound();
      return;
    }
    if (auto ended = guard_.Succeeded()) {
      spdlog::info("finish_counts_recovered failures={} outage_ms={}", ended->failures, ended->ms);
    }
  } catch (const std::exception&) {
    // An outage is logged once (warn, then debug); anything else at warn.
    const RoundFailure f = guard_.Failed(std::current_exception());
    const spdlog::level::level_enum level = std::min(f.level, spdlog::level::warn);
    spdlog::log(level, "finish_counts_failed | {}", f.message);
  }
  loop_.MarkRound();
}

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
