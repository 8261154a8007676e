// The standard process metrics of Prometheus client libraries, read from
// /proc at scrape time: process_cpu_seconds_total, process_start_time_seconds,
// process_resident_memory_bytes, process_virtual_memory_bytes,
// process_open_fds, process_max_fds. A value /proc does not give is left out.
//
// Thread-safety: reads /proc only; callable from any thread.
#pragma once

#include "metrics/exposition_writer.h"

namespace akadzed {

void WriteProcessMetrics(ExpositionWriter& out);

}  // namespace akadzed
