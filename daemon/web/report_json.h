// The JSON shapes of the operator's reads, one implementation for every
// reader: `akadzed status --json`, `jobs list|show --json` and `workers list
// --json` (cli/admin_commands.cpp) and the status page's /api/
// (web/status_page.h). docs/status-page.md documents each field.
//
// Job args are never included; results only in JobDetail::kWithResult
// (`jobs show --json`), never on the page.
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "store/job_admin.h"
#include "store/status_report.h"

namespace akadzed {

enum class JobDetail {
  kSummary,     // the columns, no meta, errors or result (`jobs list`)
  kPage,        // + meta, errors and progress (meta.progress when a number); the page
  kWithResult,  // kPage + result (`jobs show --json`)
};

nlohmann::json JobJson(const JobRow& job, JobDetail detail);
nlohmann::json WorkerJson(const WorkerRow& worker);
// The status report; `actions_enabled` says whether the page's actions are
// on (always false from the CLI).
nlohmann::json StatusJson(const StatusReport& report, bool actions_enabled);

// One line of JSON; bytes that are not UTF-8 (a database in SQL_ASCII) come
// out as U+FFFD instead of failing the dump.
std::string DumpJson(const nlohmann::json& value);

}  // namespace akadzed
