// The sample jobs of `akadzed demo` and `akadzed run --embedded-demo`: what
// the demos enqueue, and whether jobs are left.
//
// Thread-safety: functions use the connection they are given.
#pragma once

#include <cstdint>

#include "pg/connection.h"

namespace akadzed {

// `run --embedded-demo`'s producer, round `round`: two greet jobs (tenant-a,
// tenant-b; every fifth round tenant-b's fails), a checksum job (tenant-c)
// on `default` and a checksum job on `reports` (snoozing every fourth round).
void EnqueueDemoRound(pg::Connection& conn, int round);

// `akadzed demo`'s `count` jobs on `default`: three tasks over keys tenant-a,
// tenant-b, tenant-c and no key, every seventh at priority 2, run_at a
// millisecond apart in the past.
void EnqueueSampleJobs(pg::Connection& conn, int count);

// Jobs queued or running, in every queue.
std::int64_t CountActiveJobs(pg::Connection& conn);

}  // namespace akadzed
