#include "runtime/job_traces.h"

#include <atomic>
#include <map>
#include <utility>

#include "core/thread_annotations.h"

namespace akadzed {

namespace {

bool LowerHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool AllZeros(std::string_view s) { return s.find_first_not_of('0') == std::string_view::npos; }

struct Registry {
  Mutex mu;
  std::map<std::int64_t, std::pair<std::string, int>> traces GUARDED_BY(mu);  // id -> (trace, count)
  std::atomic<int> size{0};  // traces.size(), read without the lock
};

Registry& TheRegistry() {
  static Registry* registry = new Registry();  // never destroyed: logging may outlive main's objects
  return *registry;
}

}  // namespace

std::optional<std::string> ParseTraceparent(std::string_view text) {
  // version "-" trace-id "-" parent-id "-" flags: 2 + 1 + 32 + 1 + 16 + 1 + 2.
  constexpr std::size_t kLength = 55;
  if (text.size() < kLength) return std::nullopt;
  const std::string_view version = text.substr(0, 2), trace = text.substr(3, 32),
                         parent = text.substr(36, 16), flags = text.substr(53, 2);
  if (text[2] != '-' || text[35] != '-' || text[52] != '-') return std::nullopt;
  if (!LowerHex(version) || !LowerHex(trace) || !LowerHex(parent) || !LowerHex(flags)) {
    return std::nullopt;
  }
  if (version == "ff" || AllZeros(trace) || AllZeros(parent)) return std::nullopt;
  // Version 00 is exactly this long; a later one may append "-..." fields.
  if (text.size() > kLength && (version == "00" || text[kLength] != '-')) return std::nullopt;
  return std::string(trace);
}

std::string W3cTraceparent(std::string_view valid) {
  return "00" + std::string(valid.substr(2, 53));
}

void RegisterJobTrace(std::int64_t job_id, const std::string& trace_id) {
  Registry& r = TheRegistry();
  MutexLock lock(r.mu);
  auto& entry = r.traces[job_id];
  entry.first = trace_id;
  ++entry.second;
  r.size.store(static_cast<int>(r.traces.size()), std::memory_order_release);
}

void UnregisterJobTrace(std::int64_t job_id) {
  Registry& r = TheRegistry();
  MutexLock lock(r.mu);
  auto it = r.traces.find(job_id);
  if (it == r.traces.end()) return;
  if (--it->second.second == 0) r.traces.erase(it);
  r.size.store(static_cast<int>(r.traces.size()), std::memory_order_release);
}

std::optional<std::string> JobTraceId(std::int64_t job_id) {
  Registry& r = TheRegistry();
  if (r.size.load(std::memory_order_acquire) == 0) return std::nullopt;
  MutexLock lock(r.mu);
  auto it = r.traces.find(job_id);
  if (it == r.traces.end()) return std::nullopt;
  return it->second.first;
}

JobTraceScope::JobTraceScope(std::int64_t job_id, const std::optional<std::string>& trace_id)
    : job_id_(job_id), registered_(trace_id && !trace_id->empty()) {
  if (registered_) RegisterJobTrace(job_id_, *trace_id);
}

JobTraceScope::~JobTraceScope() {
  if (registered_) UnregisterJobTrace(job_id_);
}

}  // namespace akadzed
