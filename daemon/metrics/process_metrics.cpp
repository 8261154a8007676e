#include "metrics/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace akadzed {

namespace {

// The fields of /proc/self/stat after the command name, so that fields[0]
// is field 3 (state) of proc(5).
std::vector<std::string> StatFields() {
  std::ifstream in("/proc/self/stat");
  std::string text;
  std::getline(in, text);
  std::vector<std::string> fields;
  std::size_t close = text.rfind(')');
  if (close == std::string::npos) return fields;
  std::istringstream rest(text.substr(close + 1));
  for (std::string field; rest >> field;) fields.push_back(field);
  return fields;
}

// Field `number` (1-based, as in proc(5)) of /proc/self/stat.
std::optional<double> StatField(const std::vector<std::string>& fields, std::size_t number) {
  if (number < 3 || number - 3 >= fields.size()) return std::nullopt;
  try {
    return std::stod(fields[number - 3]);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<double> BootTime() {
  std::ifstream in("/proc/stat");
  for (std::string key; in >> key;) {
    if (key == "btime") {
      double value = 0;
      if (in >> value) return value;
      return std::nullopt;
    }
    in.ignore(1 << 20, '\n');
  }
  return std::nullopt;
}

std::optional<double> OpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return std::nullopt;
  double count = 0;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count - 1;  // the directory's own descriptor
}

}  // namespace

void WriteProcessMetrics(ExpositionWriter& out) {
  const std::vector<std::string> fields = StatFields();
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  auto utime = StatField(fields, 14);
  auto stime = StatField(fields, 15);
  if (utime && stime && ticks > 0) {
    out.Family("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
               "counter");
    out.Sample("process_cpu_seconds_total", {}, (*utime + *stime) / ticks);
  }
  auto start = StatField(fields, 22);
  auto boot = BootTime();
  if (start && boot && ticks > 0) {
    out.Gauge("process_start_time_seconds",
              "Start time of the process since unix epoch in seconds.", *boot + *start / ticks);
  }
  if (auto vsize = StatField(fields, 23)) {
    out.Gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", *vsize);
  }
  if (auto rss = StatField(fields, 24)) {
    out.Gauge("process_resident_memory_bytes", "Resident memory size in bytes.", *rss * page);
  }
  if (auto fds = OpenFds()) out.Gauge("process_open_fds", "Number of open file descriptors.", *fds);
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    out.Gauge("process_max_fds", "Maximum number of open file descriptors.",
              static_cast<double>(limit.rlim_cur));
  }
}

}  // namespace akadzed
