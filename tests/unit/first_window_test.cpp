// FirstWindowSizer (daemon/claim/first_window.h): the next first window from
// what the last claim needed, by rule.
#include <catch2/catch.hpp>

#include <optional>

#include "claim/first_window.h"

namespace akadzed {
namespace {

TEST_CASE("first window: 4 rows a slot until a claim says what it needed", "[first_window]") {
  FirstWindowSizer sizer;
  CHECK(sizer.per_slot() == FirstWindowSizer::kMaxPerSlot);
  // A claim that planned nothing tells nothing.
  sizer.Observe(0, std::nullopt);
  CHECK(sizer.per_slot() == 4.0);
  sizer.Observe(0, 0);
  CHECK(sizer.per_slot() == 4.0);
}

TEST_CASE("first window: the last claim's rows a job, with the margin, from 1.15 to 4", "[first_window]") {
  FirstWindowSizer sizer;
  // The head of the queue was all it needed: the margin alone.
  sizer.Observe(500, 500);
  CHECK(sizer.per_slot() == Approx(1.15));
  // Two rows a job (half the rows at a key's limit): 2.3.
  sizer.Observe(100, 200);
  CHECK(sizer.per_slot() == Approx(2.3));
  // Four rows a job or more: the fixed size, never beyond it.
  sizer.Observe(10, 100);
  CHECK(sizer.per_slot() == 4.0);
  sizer.Observe(10, 11);
  CHECK(sizer.per_slot() == Approx(1.265));
  // Fewer rows than jobs cannot be: counted as one a job.
  sizer.Observe(10, 3);
  CHECK(sizer.per_slot() == Approx(1.15));
}

TEST_CASE("first window: a claim whose need is unknown puts it back to 4", "[first_window]") {
  FirstWindowSizer sizer;
  sizer.Observe(500, 500);
  REQUIRE(sizer.per_slot() == Approx(1.15));
  sizer.Observe(7, std::nullopt);
  CHECK(sizer.per_slot() == 4.0);
  // An empty claim after it leaves it where it is.
  sizer.Observe(500, 500);
  sizer.Observe(0, std::nullopt);
  CHECK(sizer.per_slot() == Approx(1.15));
}

TEST_CASE("first window: read for every slot of a small queue, else for those free, or for those the last "
          "claim found free at the lock", "[first_window]") {
  FirstWindowSizer sizer;
  // At most 64 slots and prefetched jobs: all of them, whatever is free.
  CHECK(sizer.ExpectedSlots(1, 8) == 8);
  CHECK(sizer.ExpectedSlots(3, 64) == 64);
  // Beyond that, the slots free now (at least 64).
  CHECK(sizer.ExpectedSlots(1, 2000) == 64);
  CHECK(sizer.ExpectedSlots(1000, 2000) == 1000);
  // The last claim found 2,000 free at the lock (other daemons' claims ahead
  // of it): the next reads for as many, never beyond the capacity.
  sizer.ObserveSlotsAtLock(2000);
  CHECK(sizer.ExpectedSlots(1000, 2000) == 2000);
  CHECK(sizer.ExpectedSlots(1000, 1500) == 1500);
  // It follows the last claim, up or down.
  sizer.ObserveSlotsAtLock(700);
  CHECK(sizer.ExpectedSlots(500, 2000) == 700);
  CHECK(sizer.ExpectedSlots(900, 2000) == 900);
  sizer.ObserveSlotsAtLock(0);
  CHECK(sizer.ExpectedSlots(500, 2000) == 500);
}

}  // namespace
}  // namespace akadzed
