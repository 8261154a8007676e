// CPU time of this process (the benchmark's client side) and of another
// process by pid (a session's backend: the server side), for the
// benchmarks' per-job and per-read CPU figures.
//
// Thread-safety: pure reads of the kernel's counters.
#pragma once

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace akadzed::bench {

// User + system CPU seconds of this process so far.
inline double ClientCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// User + system CPU seconds of process `pid` (e.g. pg_backend_pid()), from
// /proc; clock-tick resolution (10 ms), so measure over many operations.
inline double ProcessCpuSeconds(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t close = text.rfind(')');
  if (close == std::string::npos) throw std::runtime_error("cannot read /proc/" + std::to_string(pid) + "/stat");
  std::istringstream fields(text.substr(close + 2));
  std::vector<std::string> f;
  for (std::string w; fields >> w;) f.push_back(w);
  // After "pid (comm) ": state is field 3, utime 14, stime 15 (1-based).
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  return (std::stod(f.at(11)) + std::stod(f.at(12))) / ticks;
}

}  // namespace akadzed::bench
