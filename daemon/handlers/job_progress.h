// Progress and metadata a running job's handler reports (docs/handlers.md,
// "Reporting progress"; docs/plugins.md, report_progress): a fraction done
// and/or a JSON object of metadata, merged into the job's `meta` column.
//
// A JobProgress holds what the run reported and the database has not yet
// seen, as one JSON object (`{"progress": 0.4, "rows": 1200}`: later reports
// replace earlier values key by key). The lease keeper writes what is
// pending once per heartbeat round (Peek, then MarkWritten with the version
// it wrote), and the finish of the run writes the rest (TakeForFinish), so
// a job's meta changes at most once per heartbeat interval while it runs and
// its last report is kept after it ends. A round's write that lands after
// the finish changes nothing (it is fenced to the running job), and the
// finish re-writes whatever the round had peeked: no report is lost and none
// overwrites a newer one.
//
// Thread-safety: every member may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/thread_annotations.h"

namespace akadzed {

// The largest pending object (its JSON text) a run may accumulate; a report
// that would grow it past this is refused.
inline constexpr std::size_t kMaxProgressBytes = 64 * 1024;

// One report, checked: `progress` a finite number from 0 to 1, `meta` a JSON
// object. At least one is present.
struct ProgressReport {
  std::optional<double> progress;
  std::optional<nlohmann::json> meta;
};

// A report as a handler wrote it: returns the reason it is refused (one
// line), or "" with `out` filled.
std::string CheckProgress(const nlohmann::json& progress, const nlohmann::json& meta,
                          ProgressReport* out);

class JobProgress {
 public:
  // Merges `report` into what is pending. Returns "" or why it is refused
  // (the pending object would pass kMaxProgressBytes).
  std::string Report(const ProgressReport& report);

  struct Pending {
    std::string patch_json;  // a JSON object
    std::uint64_t version = 0;
  };
  // What is pending, left pending (the lease keeper's round).
  std::optional<Pending> Peek() const;
  // The round wrote `version`: pending is cleared unless a report came since.
  void MarkWritten(std::uint64_t version);
  // What is pending (written or not by a round in flight), for the run's
  // finish; empties it.
  std::optional<std::string> TakeForFinish();
  // Empties it for the executor's next job.
  void Reset();

 private:
  mutable Mutex mu_;
  nlohmann::json pending_ GUARDED_BY(mu_);  // null or an object
  std::uint64_t version_ GUARDED_BY(mu_) = 0;  // +1 per report, never reset
};

}  // namespace akadzed
