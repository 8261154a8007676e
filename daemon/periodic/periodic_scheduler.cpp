#include "periodic/periodic_scheduler.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <limits>

#include <spdlog/spdlog.h>

#include "core/redact.h"
#include "pg/transaction.h"
#include "runtime/log_line.h"
#include "store/periodic_runs.h"

namespace akadzed {

namespace {

// The wall time of `clock` in Unix microseconds.
std::int64_t WallNowUs(const ServiceClock& clock) {
  return std::chrono::duration_cast<std::chrono::microseconds>(clock.WallNow().time_since_epoch()).count();
}

// Unix microseconds as ISO-8601 UTC text for log lines.
std::string Iso(std::int64_t unix_us) {
  const std::time_t seconds = static_cast<std::time_t>(unix_us / 1'000'000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

}  // namespace

std::optional<std::int64_t> LatestFire(const Schedule& schedule, std::int64_t now_us,
                                       std::int64_t grace_us) {
  std::optional<std::int64_t> latest;
  if (const auto* every = std::get_if<EverySchedule>(&schedule.rule)) {
    const std::int64_t interval = every->IntervalUs();
    std::int64_t floor = now_us / interval * interval;
    if (floor > now_us) floor -= interval;  // negative now_us
    latest = floor;
  } else {
    // Cron fires on whole minutes: at most grace/1min steps forward.
    for (auto t = schedule.NextFireAfterUs(now_us - grace_us - 1); t && *t <= now_us;
         t = schedule.NextFireAfterUs(*t)) {
      latest = t;
    }
  }
  if (latest && now_us - *latest > grace_us) return std::nullopt;
  return latest;
}

FireResult FirePeriodic(pg::Connection& conn, const PeriodicConfig& entry) {
  FireResult result;
  pg::Transaction tx(conn);
  // now() is the transaction's start: every statement below sees one instant.
  result.db_now_us = TransactionNowUs(tx);
  const std::optional<std::int64_t> fire = LatestFire(entry.schedule, result.db_now_us, entry.grace_us);
  if (!fire) {
    tx.rollback();
    return result;
  }
  result.fire_at_us = *fire;
  const std::optional<std::string> unique_key =
      entry.overlap ? std::nullopt : std::optional<std::string>("periodic:" + entry.name);
  // The fire row first: a concurrent daemon inserting the same (name,
  // fire_at) waits here for our commit or rollback. The job only if the fire
  // row is ours, and not while the entry's previous job holds the unique key.
  const FireInsert inserted = InsertFire(
      tx, PeriodicJob{entry.name, entry.task, entry.args_json, entry.queue, entry.priority, entry.max_attempts, unique_key},
      *fire);
  if (!inserted.fire_recorded) {
    tx.rollback();
    result.kind = FireResult::Kind::kTaken;
    return result;
  }
  const std::optional<std::int64_t> job_id = inserted.job_id;
  if (!job_id) {
    // akadze's rule: the fire is not recorded, so a later tick within the
    // grace may still enqueue it once the previous job is done.
    tx.rollback();
    result.kind = FireResult::Kind::kOverlapped;
    return result;
  }
  LinkFireJob(tx, entry.name, *fire, *job_id);
  tx.commit();
  result.kind = FireResult::Kind::kEnqueued;
  result.job_id = *job_id;
  return result;
}

PeriodicScheduler::PeriodicScheduler(std::string conninfo, std::chrono::milliseconds stall_timeout,
                                     std::vector<PeriodicConfig> entries, const ServiceClock& clock)
    : session_(std::move(conninfo), "akadzed periodic", stall_timeout),
      entries_(std::move(entries)),
      handled_(entries_.size(), std::numeric_limits<std::int64_t>::min()),
      reported_overlap_(entries_.size(), std::numeric_limits<std::int64_t>::min()),
      guard_(clock, LoopBackoff(std::chrono::seconds(1), std::chrono::seconds(1))),
      loop_(clock) {}

PeriodicScheduler::~PeriodicScheduler() { Stop(); }

void PeriodicScheduler::Start() {
  if (entries_.empty()) return;
  for (const PeriodicConfig& e : entries_) {
    spdlog::info("periodic name={} task={} queue={} overlap={} | {}", LogValue(e.name), LogValue(e.task), LogValue(e.queue),
                 e.overlap, e.schedule.Describe());
  }
  loop_.Start("periodic", [this] { Loop(); });
}

void PeriodicScheduler::Stop() { loop_.Stop(); }

void PeriodicScheduler::Loop() {
  for (;;) {
    const auto wake = Round();
    loop_.MarkRound();
    MutexLock lock(loop_.mu());
    if (loop_.WaitUntil(lock, wake, [] { return false; })) return;
  }
}

ServiceClock::time_point PeriodicScheduler::Round() {
  using std::chrono::microseconds;
  const auto started = loop_.clock().Now();
  // Wake at least once a second: overlapped fires are retried and the clock
  // estimate corrected; and never sooner than 10 ms, should the estimate run
  // ahead of the database's clock.
  std::int64_t sleep_us = 1'000'000;
  try {
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      const PeriodicConfig& entry = entries_[i];
      const std::int64_t now_estimate = WallNowUs(loop_.clock()) + clock_offset_us_;
      const std::optional<std::int64_t> due = LatestFire(entry.schedule, now_estimate, entry.grace_us);
      if (due && *due > handled_[i]) {
        const std::int64_t before = WallNowUs(loop_.clock());
        const FireResult fire = session_.Run([&](pg::Connection& conn) { return FirePeriodic(conn, entry); });
        clock_offset_us_ = fire.db_now_us - (before + WallNowUs(loop_.clock())) / 2;
        switch (fire.kind) {
          case FireResult::Kind::kEnqueued:
            spdlog::info("periodic_enqueued name={} fire_at={} job={} task={} queue={}", LogValue(entry.name),
                         Iso(fire.fire_at_us), fire.job_id, LogValue(entry.task), LogValue(entry.queue));
            handled_[i] = fire.fire_at_us;
            break;
          case FireResult::Kind::kTaken:
            handled_[i] = fire.fire_at_us;
            break;
          case FireResult::Kind::kOverlapped:
            if (reported_overlap_[i] != fire.fire_at_us) {
              spdlog::info("periodic_skipped name={} fire_at={} reason=overlap"
                           " | the previous job of this entry is still queued or running",
                           LogValue(entry.name), Iso(fire.fire_at_us));
              reported_overlap_[i] = fire.fire_at_us;
            }
            break;
          case FireResult::Kind::kNone:
            break;
        }
      }
      const std::int64_t now = WallNowUs(loop_.clock()) + clock_offset_us_;
      if (auto next = entry.schedule.NextFireAfterUs(now)) {
        sleep_us = std::min(sleep_us, *next - now);
      }
    }
    if (auto ended = guard_.Succeeded()) {
      spdlog::info("periodic_recovered failures={} outage_ms={}", ended->failures, ended->ms);
    }
  } catch (const std::exception&) {
    const RoundFailure f = guard_.Failed(std::current_exception());
    spdlog::log(f.level, "periodic_failed | {}; retrying every second", RedactSecrets(f.message));
    return started + std::chrono::duration_cast<microseconds>(f.retry_in);
  }
  return started + microseconds(std::clamp<std::int64_t>(sleep_us, 10'000, 1'000'000));
}

}  // namespace akadzed
