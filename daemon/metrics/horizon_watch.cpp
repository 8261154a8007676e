#include "metrics/horizon_watch.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <utility>

#include "core/duration.h"
#include "runtime/log_line.h"

namespace akadzed {

namespace {

// A holder's identity and the xmin it holds: the same key in two reads is
// the same hold.
std::string HoldKey(const HorizonHolder& h) {
  return fmt::format("{}|{}|{}|{}|{}", h.kind, h.pid.value_or(0), h.slot_name.value_or(""),
                     h.gid.value_or(""), h.xmin);
}

double Seconds(std::chrono::duration<double> d) { return d.count(); }

std::string Text(const std::optional<std::string>& value) { return value.value_or(""); }

// The line that opens an episode: the holder by its kind, never a query.
void LogHeld(const HorizonWatch::Oldest& o, std::chrono::microseconds warn_after) {
  const HorizonHolder& h = o.holder;
  const char* from = o.age_from_postgres ? "start" : "first_seen";
  const std::string why = fmt::format(
      "held longer than horizon_warn_after ({}): vacuum cannot remove the row versions that "
      "claims and finishes leave dead in akadze.jobs (docs/operations.md, \"The MVCC horizon\")",
      FormatDuration(warn_after.count()));
  if (h.kind == "replication_slot") {
    spdlog::warn("horizon_held kind=replication_slot slot={} slot_type={} state={} pid={} database={} "
                 "held_s={:.0f} age_from={} xid_age={} | {}",
                 LogValue(Text(h.slot_name)), LogValue(Text(h.slot_type)), LogValue(Text(h.state)),
                 h.pid.value_or(0), LogValue(Text(h.database)), o.held_seconds, from, h.xid_age, why);
  } else if (h.kind == "prepared_transaction") {
    spdlog::warn("horizon_held kind=prepared_transaction gid={} owner={} database={} xact_start={} "
                 "held_s={:.0f} age_from={} xid_age={} | {}",
                 LogValue(Text(h.gid)), LogValue(Text(h.owner)), LogValue(Text(h.database)),
                 LogValue(Text(h.xact_start)), o.held_seconds, from, h.xid_age, why);
  } else {
    spdlog::warn("horizon_held kind=backend pid={} application_name={} state={} backend_type={} "
                 "database={} xact_start={} details={} held_s={:.0f} age_from={} xid_age={} | {}",
                 h.pid.value_or(0), LogValue(Text(h.application_name)), LogValue(Text(h.state)),
                 LogValue(Text(h.backend_type)), LogValue(Text(h.database)), LogValue(Text(h.xact_start)),
                 h.hidden ? "hidden" : "shown", o.held_seconds, from, h.xid_age, why);
  }
}

}  // namespace

HorizonWatch::HorizonWatch(std::chrono::microseconds warn_after, const ServiceClock& clock)
    : warn_after_(warn_after), clock_(clock) {}

std::optional<HorizonWatch::Oldest> HorizonWatch::Observe(const HorizonReport& report) {
  const ServiceClock::time_point now = clock_.Now();
  if (!report.stats_visible && !hidden_logged_) {
    hidden_logged_ = true;
    spdlog::warn(
        "horizon_stats_hidden | this role lacks the privileges of pg_read_all_stats: other roles' "
        "sessions that hold the horizon are seen without state or start time, their age only from "
        "when akadzed first saw them (GRANT pg_read_all_stats TO the daemon's role; docs/security.md)");
  }
  std::map<std::string, ServiceClock::time_point> seen;
  std::optional<Oldest> oldest;
  for (const HorizonHolder& h : report.holders) {
    Oldest candidate{h, 0, h.age_seconds.has_value()};
    if (h.age_seconds) {
      candidate.held_seconds = *h.age_seconds;
    } else {
      const std::string key = HoldKey(h);
      const auto found = first_seen_.find(key);
      const ServiceClock::time_point since = found == first_seen_.end() ? now : found->second;
      seen.emplace(key, since);
      candidate.held_seconds = Seconds(now - since);
    }
    if (!oldest || candidate.held_seconds > oldest->held_seconds) oldest = std::move(candidate);
  }
  first_seen_ = std::move(seen);  // a hold missing from this read starts again

  if (warn_after_.count() <= 0) return oldest;
  const bool past = oldest && oldest->held_seconds >= Seconds(warn_after_);
  if (past && !episode_start_) {
    episode_start_ = now - std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                               std::chrono::duration<double>(oldest->held_seconds));
    LogHeld(*oldest, warn_after_);
  } else if (!past && episode_start_) {
    spdlog::info("horizon_released episode_s={:.0f} | nothing holds the horizon longer than "
                 "horizon_warn_after any more",
                 Seconds(now - *episode_start_));
    episode_start_.reset();
  }
  return oldest;
}

}  // namespace akadzed
