#include "handlers/job_progress.h"

#include <cmath>

namespace akadzed {

namespace {

// A U+0000 in a key or a string, at any depth (the depth is bounded: a
// shell's line by kMaxOutcomeReportDepth, a plugin's report by the JSON
// parser's input).
bool HoldsNul(const nlohmann::json& value) {
  if (value.is_string()) return value.get_ref<const std::string&>().find('\0') != std::string::npos;
  if (value.is_object()) {
    for (const auto& item : value.items()) {
      if (item.key().find('\0') != std::string::npos || HoldsNul(item.value())) return true;
    }
  } else if (value.is_array()) {
    for (const auto& element : value) {
      if (HoldsNul(element)) return true;
    }
  }
  return false;
}

}  // namespace

std::string CheckProgress(const nlohmann::json& progress, const nlohmann::json& meta,
                          ProgressReport* out) {
  ProgressReport report;
  if (!progress.is_null()) {
    if (!progress.is_number()) return "progress must be a number from 0 to 1";
    const double p = progress.get<double>();
    if (!std::isfinite(p) || p < 0 || p > 1) return "progress must be a number from 0 to 1";
    report.progress = p;
  }
  if (!meta.is_null()) {
    if (!meta.is_object()) return "meta must be a JSON object";
    // PostgreSQL's jsonb cannot hold U+0000 in a key or a string.
    if (HoldsNul(meta)) {
      return "meta must not hold the character U+0000 (jsonb cannot store it)";
    }
    report.meta = meta;
  }
  if (!report.progress && !report.meta) return "a progress report needs progress or meta";
  *out = std::move(report);
  return "";
}

std::string JobProgress::Report(const ProgressReport& report) {
  MutexLock lock(mu_);
  nlohmann::json merged = pending_.is_object() ? pending_ : nlohmann::json::object();
  if (report.meta) {
    for (const auto& item : report.meta->items()) merged[item.key()] = item.value();
  }
  if (report.progress) merged["progress"] = *report.progress;
  if (merged.dump().size() > kMaxProgressBytes) {
    return "the job's pending progress and meta would exceed " + std::to_string(kMaxProgressBytes) +
           " bytes";
  }
  pending_ = std::move(merged);
  ++version_;
  return "";
}

std::optional<JobProgress::Pending> JobProgress::Peek() const {
  MutexLock lock(mu_);
  if (!pending_.is_object()) return std::nullopt;
  return Pending{pending_.dump(), version_};
}

void JobProgress::MarkWritten(std::uint64_t version) {
  MutexLock lock(mu_);
  if (version == version_) pending_ = nullptr;
}

std::optional<std::string> JobProgress::TakeForFinish() {
  MutexLock lock(mu_);
  if (!pending_.is_object()) return std::nullopt;
  std::string text = pending_.dump();
  pending_ = nullptr;
  return text;
}

void JobProgress::Reset() {
  MutexLock lock(mu_);
  pending_ = nullptr;
}

}  // namespace akadzed
