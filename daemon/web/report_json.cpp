#include "web/report_json.h"

#include "core/job_states.h"

namespace akadzed {

namespace {

using nlohmann::json;

json Opt(const std::optional<std::string>& v) { return v ? json(*v) : json(); }
json Opt(const std::optional<std::int64_t>& v) { return v ? json(*v) : json(); }
json Opt(const std::optional<double>& v) { return v ? json(*v) : json(); }

json LimitJson(const LimitUse& l) {
  return {{"key", l.key},         {"row", Opt(l.row)},     {"running", l.running}, {"max_running", Opt(l.max_running)},
          {"starts", l.starts},   {"max_starts", Opt(l.max_starts)}};
}

json QueueStatusJson(const QueueStatus& q) {
  json minutes = json::array();
  for (const MinuteCount& m : q.finished_per_minute) {
    minutes.push_back(
        {{"minute", m.minute}, {"succeeded", m.succeeded}, {"failed", m.failed}, {"cancelled", m.cancelled}});
  }
  return {{"queue", q.queue},
          {"paused", q.paused},
          {"paused_at", Opt(q.paused_at)},
          {"ready", q.ready},
          {"ready_capped", q.capped},
          {"scheduled", q.scheduled},
          {"scheduled_capped", q.capped},
          {"running", q.running},
          {"max_running", Opt(q.max_running)},
          {"oldest_ready_age_seconds", Opt(q.oldest_ready_age_seconds)},
          {"finished_per_minute", std::move(minutes)}};
}

json HorizonJson(const HorizonReport& h) {
  json holders = json::array();
  for (const HorizonHolder& x : h.holders) {
    holders.push_back({{"kind", x.kind},
                       {"pid", Opt(x.pid)},
                       {"application_name", Opt(x.application_name)},
                       {"state", Opt(x.state)},
                       {"backend_type", Opt(x.backend_type)},
                       {"database", Opt(x.database)},
                       {"slot_name", Opt(x.slot_name)},
                       {"slot_type", Opt(x.slot_type)},
                       {"gid", Opt(x.gid)},
                       {"owner", Opt(x.owner)},
                       {"xact_start", Opt(x.xact_start)},
                       {"backend_start", Opt(x.backend_start)},
                       {"query_start", Opt(x.query_start)},
                       {"age_seconds", Opt(x.age_seconds)},
                       {"xmin", x.xmin},
                       {"xid_age", x.xid_age},
                       {"hidden", x.hidden}});
  }
  return {{"holders", std::move(holders)}, {"holders_total", h.holders_total}, {"stats_visible", h.stats_visible}};
}

}  // namespace

json JobJson(const JobRow& j, JobDetail detail) {
  json out = {{"id", j.id},
              {"task", j.task},
              {"queue", j.queue},
              {"priority", j.priority},
              {"state", std::string(JobStateName(j.state))},
              {"run_count", j.run_count},
              {"attempt", j.attempt},
              {"max_attempts", j.max_attempts},
              {"snoozes", j.snoozes},
              {"run_at", j.run_at},
              {"expires_at", Opt(j.expires_at)},
              {"unique_key", Opt(j.unique_key)},
              {"limit_key", Opt(j.limit_key)},
              {"worker_id", Opt(j.worker_id)},
              {"cancel_requested_at", Opt(j.cancel_requested_at)},
              {"created_at", j.created_at},
              {"started_at", Opt(j.started_at)},
              {"finished_at", Opt(j.finished_at)}};
  if (detail == JobDetail::kSummary) return out;
  out["meta"] = json::parse(j.meta_json);
  out["errors"] = json::parse(j.errors_json);
  const json& meta = out["meta"];
  const auto progress = meta.is_object() ? meta.find("progress") : meta.end();
  out["progress"] = progress != meta.end() && progress->is_number() ? *progress : json();
  if (detail == JobDetail::kWithResult) {
    out["result"] = j.result_json ? json::parse(*j.result_json) : json();
  }
  return out;
}

json WorkerJson(const WorkerRow& w) {
  return {{"id", w.id},         {"hostname", w.hostname},     {"pid", w.pid},
          {"queues", w.queues}, {"started_at", w.started_at}, {"heartbeat_age_seconds", w.heartbeat_age_seconds},
          {"running", w.running}};
}

json StatusJson(const StatusReport& report, bool actions_enabled) {
  json out = {{"generated_at", report.generated_at},
              {"count_cap", report.count_cap},
              {"queues", json::array()},
              {"queues_truncated", report.queues_truncated},
              {"limits", json::array()},
              {"held_keys", json::array()},
              {"held_keys_total", report.held_keys_total},
              {"workers", json::array()},
              {"recent_failures", json::array()},
              {"horizon", HorizonJson(report.horizon)},
              {"actions", {{"enabled", actions_enabled}}}};
  for (const QueueStatus& q : report.queues) out["queues"].push_back(QueueStatusJson(q));
  for (const LimitUse& l : report.limits) out["limits"].push_back(LimitJson(l));
  for (const HeldLimitKey& h : report.held_keys) out["held_keys"].push_back({{"key", h.key}, {"queued", h.queued}, {"queued_capped", h.capped}});
  for (const WorkerRow& w : report.workers) out["workers"].push_back(WorkerJson(w));
  for (const RecentFailure& f : report.recent_failures) {
    out["recent_failures"].push_back({{"id", f.id},
                                      {"task", f.task},
                                      {"queue", f.queue},
                                      {"attempt", f.attempt},
                                      {"max_attempts", f.max_attempts},
                                      {"finished_at", Opt(f.finished_at)},
                                      {"error_kind", Opt(f.error_kind)},
                                      {"error_message", Opt(f.error_message)}});
  }
  return out;
}

std::string DumpJson(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace akadzed
