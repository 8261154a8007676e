// CPU time of this process (the benchmark's client side) and of another
// process by pid (a session's backend: the server side), for the
// benchmarks' per-job and per-read CPU figures.
//
// Thread-safety: pure reads of the kernel's counters.
#pragma once

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
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

// A process's parent pid and user + system CPU seconds, from
// /proc/PID/stat (clock-tick resolution, 10 ms: measure over many
// operations); nullopt when it is gone or unreadable. read(2), not a
// stream: a process that exits while it is read makes the read fail with
// ESRCH.
struct ProcStat {
  int ppid = 0;
  double cpu_s = 0;
  double reaped_children_cpu_s = 0;  // cutime + cstime: children it waited for
};

inline std::optional<ProcStat> ReadProcStat(int pid) {
  const int fd = open(("/proc/" + std::to_string(pid) + "/stat").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text;
  char buffer[1024];
  for (;;) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  close(fd);
  const std::size_t close_paren = text.rfind(')');
  if (close_paren == std::string::npos || close_paren + 2 >= text.size()) return std::nullopt;
  std::istringstream fields(text.substr(close_paren + 2));
  std::vector<std::string> f;
  for (std::string w; fields >> w;) f.push_back(w);
  if (f.size() < 15) return std::nullopt;
  // After "pid (comm) ": state (field 3), ppid, ..., utime (14), stime,
  // cutime, cstime (17).
  static const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  return ProcStat{std::stoi(f[1]), (std::stod(f[11]) + std::stod(f[12])) / ticks,
                  (std::stod(f[13]) + std::stod(f[14])) / ticks};
}

// User + system CPU seconds of process `pid` (e.g. pg_backend_pid()).
inline double ProcessCpuSeconds(int pid) {
  const std::optional<ProcStat> s = ReadProcStat(pid);
  if (!s) throw std::runtime_error("cannot read /proc/" + std::to_string(pid) + "/stat");
  return s->cpu_s;
}

}  // namespace akadzed::bench
