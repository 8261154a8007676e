// The horizon warning's episodes (metrics/horizon_watch.h), driven by hand:
// reads fed with a hand-moved clock, the log captured. One warn line per
// episode naming its holder (never a query), one info line when it ends,
// holders without a PostgreSQL time aged from when the watch first saw them,
// and the privilege said once.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>

#include "metrics/horizon_watch.h"
#include "runtime/log_line.h"
#include "support/log_capture.h"
#include "support/manual_clock.h"

namespace akadzed {
namespace {

using namespace std::chrono_literals;

HorizonHolder Backend(double age, std::int64_t pid = 4242) {
  HorizonHolder h;
  h.kind = "backend";
  h.pid = pid;
  h.application_name = "nightly report";
  h.state = "idle in transaction";
  h.backend_type = "client backend";
  h.database = "app";
  h.xact_start = "2026-12-06T10:00:00.000000Z";
  h.age_seconds = age;
  h.xmin = "1000";
  h.xid_age = 77;
  return h;
}

HorizonHolder Slot(const std::string& xmin) {
  HorizonHolder h;
  h.kind = "replication_slot";
  h.slot_name = "standby_1";
  h.slot_type = "physical";
  h.state = "inactive";
  h.xmin = xmin;
  h.xid_age = 500;
  return h;
}

HorizonReport Report(std::vector<HorizonHolder> holders, bool visible = true) {
  HorizonReport r;
  r.holders_total = static_cast<std::int64_t>(holders.size());
  r.holders = std::move(holders);
  r.stats_visible = visible;
  return r;
}

TEST_CASE("horizon watch: one warning per episode naming the holder, one line when it ends",
          "[horizon]") {
  test::LogCapture log;
  test::ManualClock clock;
  HorizonWatch watch(5min, clock);

  // Younger than the bound: no line; the age is PostgreSQL's.
  auto oldest = watch.Observe(Report({Backend(120)}));
  REQUIRE(oldest);
  CHECK(oldest->held_seconds == 120);
  CHECK(oldest->age_from_postgres);
  CHECK(log.Count("horizon_held") == 0);
  CHECK_FALSE(watch.in_episode());

  // Past it: one warning; further reads of the same episode add none, also
  // when another holder becomes the oldest.
  clock.Advance(200s);
  watch.Observe(Report({Backend(320)}));
  CHECK(log.Count("horizon_held") == 1);
  CHECK(watch.in_episode());
  clock.Advance(30s);
  watch.Observe(Report({Backend(350)}));
  watch.Observe(Report({Backend(400, 99), Backend(350)}));
  CHECK(log.Count("horizon_held") == 1);
  CHECK(log.Count("horizon_released") == 0);

  const std::string text = log.text();
  const std::string line = text.substr(text.find("horizon_held"), text.find('\n', text.find("horizon_held")) -
                                                                      text.find("horizon_held"));
  const LogEvent e = ParseLogEvent(line);
  CHECK(e.event == "horizon_held");
  const std::vector<std::pair<std::string, std::string>> fields = {
      {"kind", "backend"},        {"pid", "4242"},
      {"application_name", "nightly report"}, {"state", "idle in transaction"},
      {"backend_type", "client backend"}, {"database", "app"},
      {"xact_start", "2026-12-06T10:00:00.000000Z"}, {"details", "shown"},
      {"held_s", "320"},          {"age_from", "start"},
      {"xid_age", "77"}};
  CHECK(e.fields == fields);
  REQUIRE(e.msg);
  CHECK(e.msg->find("horizon_warn_after (5m)") != std::string::npos);

  // Nothing past the bound: the episode ends with its length, from the
  // start of the hold that opened it (320 s before the warning, 30 s since).
  clock.Advance(10s);
  watch.Observe(Report({Backend(2, 7)}));
  CHECK(log.Count("horizon_released") == 1);
  CHECK(log.Has("info horizon_released episode_s=360 |"));
  CHECK_FALSE(watch.in_episode());
  watch.Observe(Report({}));
  CHECK(log.Count("horizon_released") == 1);

  // A second episode: a second warning.
  watch.Observe(Report({Backend(301)}));
  CHECK(log.Count("horizon_held") == 2);
}

TEST_CASE("horizon watch: a holder without a time is aged from when it was first seen with the "
          "same xmin", "[horizon]") {
  test::LogCapture log;
  test::ManualClock clock;
  HorizonWatch watch(1min, clock);
  auto oldest = watch.Observe(Report({Slot("500")}));
  REQUIRE(oldest);
  CHECK(oldest->held_seconds == 0);
  CHECK_FALSE(oldest->age_from_postgres);
  clock.Advance(40s);
  CHECK(watch.Observe(Report({Slot("500")}))->held_seconds == Approx(40));
  // The slot's xmin moved on: a new hold, aged from now.
  clock.Advance(10s);
  CHECK(watch.Observe(Report({Slot("501")}))->held_seconds == 0);
  clock.Advance(61s);
  oldest = watch.Observe(Report({Slot("501"), Backend(3)}));
  CHECK(oldest->holder.kind == "replication_slot");
  CHECK(oldest->held_seconds == Approx(61));
  CHECK(log.Count("horizon_held kind=replication_slot slot=standby_1 slot_type=physical state=inactive") == 1);
  CHECK(log.Has("age_from=first_seen"));
  // A read without it forgets it: seen again, it starts from 0.
  watch.Observe(Report({}));
  CHECK(log.Count("horizon_released") == 1);
  CHECK(watch.Observe(Report({Slot("501")}))->held_seconds == 0);
}

TEST_CASE("horizon watch: off logs no episode; a role without pg_read_all_stats is said once",
          "[horizon]") {
  test::LogCapture log;
  test::ManualClock clock;
  HorizonWatch watch(0s, clock);
  HorizonHolder hidden = Backend(0);
  hidden.age_seconds.reset();
  hidden.hidden = true;
  watch.Observe(Report({hidden}, false));
  clock.Advance(1h);
  const auto oldest = watch.Observe(Report({hidden}, false));
  REQUIRE(oldest);
  CHECK(oldest->held_seconds == Approx(3600));  // the gauge still reads it
  CHECK(log.Count("horizon_held") == 0);
  CHECK(log.Count("warning horizon_stats_hidden |") == 1);
  CHECK_FALSE(watch.Observe(Report({}, false)));
  CHECK(log.Count("horizon_stats_hidden") == 1);
}

}  // namespace
}  // namespace akadzed
