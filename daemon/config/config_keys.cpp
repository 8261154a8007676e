#include "config/config_keys.h"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <variant>

namespace akadzed {

namespace {

using Config = const DaemonConfig&;

// Whether `field` of any entry present in both lists differs.
template <typename T, typename Field>
bool AnyDiffers(const std::vector<T>& a, const std::vector<T>& b, Field field) {
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (!(field(a[i]) == field(b[i]))) return true;
  }
  return false;
}

template <typename T>
std::vector<std::string> Names(const std::vector<T>& entries) {
  std::vector<std::string> names;
  for (const T& e : entries) names.push_back(e.name);
  return names;
}

// A periodic entry's cron text, or "" for an `every` entry.
std::string Cron(const PeriodicConfig& p) {
  const auto* cron = std::get_if<CronSchedule>(&p.schedule.rule);
  return cron ? cron->Text() : "";
}

// A periodic entry's `every` interval, or 0 for a cron entry.
std::int64_t Every(const PeriodicConfig& p) {
  const auto* every = std::get_if<EverySchedule>(&p.schedule.rule);
  return every ? every->IntervalUs() : 0;
}

// A periodic entry's time zone name, or "" for UTC.
std::string Zone(const PeriodicConfig& p) { return p.schedule.zone ? p.schedule.zone->Name() : ""; }

constexpr OnReload kApplied = OnReload::kApplied;
constexpr OnReload kRestart = OnReload::kRestart;
constexpr OnReload kPerKey = OnReload::kPerKey;

// clang-format off
const ConfigKey kKeys[] = {
    {"", "database", kPerKey, nullptr},
    {"", "worker", kPerKey, nullptr},
    {"", "queues", kRestart, [](Config a, Config b) { return a.queues.size() != b.queues.size(); }},
    {"", "handlers", kApplied, nullptr},
    {"", "periodic", kRestart, [](Config a, Config b) { return Names(a.periodic) != Names(b.periodic); }},
    {"", "hooks", kRestart, [](Config a, Config b) { return a.hooks.size() != b.hooks.size(); }},
    {"", "pruning", kPerKey, nullptr},
    {"", "logging", kPerKey, nullptr},
    {"", "metrics", kPerKey, nullptr},
    {"", "web", kPerKey, nullptr},

    {"database", "url", kRestart, [](Config a, Config b) { return a.database.url != b.database.url; }},
    {"database", "stall_timeout", kRestart, [](Config a, Config b) { return a.database.stall_timeout_us != b.database.stall_timeout_us; }},
    {"database", "horizon_warn_after", kRestart, [](Config a, Config b) { return a.database.horizon_warn_after_us != b.database.horizon_warn_after_us; }},

    {"worker", "heartbeat_interval", kRestart, [](Config a, Config b) { return a.worker.heartbeat_interval_us != b.worker.heartbeat_interval_us; }},
    {"worker", "heartbeat_ttl", kRestart, [](Config a, Config b) { return a.worker.heartbeat_ttl_us != b.worker.heartbeat_ttl_us; }},
    {"worker", "poll_interval", kRestart, [](Config a, Config b) { return a.worker.poll_interval_us != b.worker.poll_interval_us; }},
    {"worker", "shutdown_timeout", kRestart, [](Config a, Config b) { return a.worker.shutdown_timeout_us != b.worker.shutdown_timeout_us; }},
    {"worker", "listen_notify", kRestart, [](Config a, Config b) { return a.worker.listen_notify != b.worker.listen_notify; }},
    {"worker", "finish_batch_delay", kRestart, [](Config a, Config b) { return a.worker.finish_batch_delay_us != b.worker.finish_batch_delay_us; }},

    {"queues[]", "name", kRestart, [](Config a, Config b) { return AnyDiffers(a.queues, b.queues, [](const QueueConfig& q) { return q.name; }); }},
    {"queues[]", "slots", kRestart, [](Config a, Config b) { return AnyDiffers(a.queues, b.queues, [](const QueueConfig& q) { return q.slots; }); }},
    {"queues[]", "prefetch", kRestart, [](Config a, Config b) { return AnyDiffers(a.queues, b.queues, [](const QueueConfig& q) { return q.prefetch; }); }},
    {"queues[]", "mode", kRestart, [](Config a, Config b) { return AnyDiffers(a.queues, b.queues, [](const QueueConfig& q) { return q.mode; }); }},
    {"queues[]", "aging", kRestart, [](Config a, Config b) { return AnyDiffers(a.queues, b.queues, [](const QueueConfig& q) { return q.aging_us; }); }},
    {"queues[]", "keep_succeeded", kRestart, [](Config a, Config b) { return AnyDiffers(a.queues, b.queues, [](const QueueConfig& q) { return q.keep_succeeded; }); }},

    {"handlers.*", "shell", kApplied, nullptr},
    {"handlers.*", "plugin", kApplied, nullptr},
    {"handlers.*.shell", "command", kApplied, nullptr},
    {"handlers.*.shell", "env", kApplied, nullptr},
    {"handlers.*.shell", "working_directory", kApplied, nullptr},
    {"handlers.*.shell", "timeout", kApplied, nullptr},
    {"handlers.*.shell", "kill_grace", kApplied, nullptr},
    {"handlers.*.shell", "max_line_bytes", kApplied, nullptr},
    {"handlers.*.shell", "max_output_bytes", kApplied, nullptr},
    {"handlers.*.plugin", "path", kApplied, nullptr},
    {"handlers.*.plugin", "config", kApplied, nullptr},
    {"handlers.*.plugin", "timeout", kApplied, nullptr},

    {"periodic.*", "cron", kRestart, [](Config a, Config b) { return AnyDiffers(a.periodic, b.periodic, [](const PeriodicConfig& e) { return Cron(e); }); }},
    {"periodic.*", "every", kRestart, [](Config a, Config b) { return AnyDiffers(a.periodic, b.periodic, [](const PeriodicConfig& e) { return Every(e); }); }},
    {"periodic.*", "task", kRestart, [](Config a, Config b) { return AnyDiffers(a.periodic, b.periodic, [](const PeriodicConfig& e) { return e.task; }); }},
    {"periodic.*", "queue", kRestart, [](Config a, Config b) { return AnyDiffers(a.periodic, b.periodic, [](const PeriodicConfig& e) { return e.queue; }); }},
    {"periodic.*", "args", kRestart, [](Config a, Config b) { return AnyDiffers(a.periodic, b.periodic, [](const PeriodicConfig& e) { return e.args_json; }); }},
    {"periodic.*", "priority", kRestart, [](Config a, Config b) { return AnyDiffers(a.periodic, b.periodic, [](const PeriodicConfig& e) { return e.priority; }); }},
    {"periodic.*", "max_attempts", kRestart, [](Config a, Config b) { return AnyDiffers(a.periodic, b.periodic, [](const PeriodicConfig& e) { return e.max_attempts; }); }},
    {"periodic.*", "overlap", kRestart, [](Config a, Config b) { return AnyDiffers(a.periodic, b.periodic, [](const PeriodicConfig& e) { return e.overlap; }); }},
    {"periodic.*", "grace", kRestart, [](Config a, Config b) { return AnyDiffers(a.periodic, b.periodic, [](const PeriodicConfig& e) { return e.grace_us; }); }},
    {"periodic.*", "timezone", kRestart, [](Config a, Config b) { return AnyDiffers(a.periodic, b.periodic, [](const PeriodicConfig& e) { return Zone(e); }); }},

    {"hooks[]", "name", kRestart, [](Config a, Config b) { return AnyDiffers(a.hooks, b.hooks, [](const HookConfig& h) { return h.name; }); }},
    {"hooks[]", "from", kRestart, [](Config a, Config b) { return AnyDiffers(a.hooks, b.hooks, [](const HookConfig& e) { return e.from; }); }},
    {"hooks[]", "to", kRestart, [](Config a, Config b) { return AnyDiffers(a.hooks, b.hooks, [](const HookConfig& e) { return e.to; }); }},
    {"hooks[]", "sql", kRestart, [](Config a, Config b) { return AnyDiffers(a.hooks, b.hooks, [](const HookConfig& e) { return e.sql; }); }},
    {"hooks[]", "plugin", kPerKey, nullptr},
    {"hooks[].plugin", "path", kRestart, [](Config a, Config b) { return AnyDiffers(a.hooks, b.hooks, [](const HookConfig& e) { return e.plugin ? std::optional(e.plugin->path) : std::nullopt; }); }},
    {"hooks[].plugin", "config", kRestart, [](Config a, Config b) { return AnyDiffers(a.hooks, b.hooks, [](const HookConfig& e) { return e.plugin ? std::optional(e.plugin->config_json) : std::nullopt; }); }},
    {"hooks[].plugin", "timeout", kRestart, [](Config a, Config b) { return AnyDiffers(a.hooks, b.hooks, [](const HookConfig& e) { return e.plugin ? std::optional(e.plugin->timeout_us) : std::nullopt; }); }},

    {"pruning", "enabled", kRestart, [](Config a, Config b) { return a.pruning.enabled != b.pruning.enabled; }},
    {"pruning", "retention", kRestart, [](Config a, Config b) { return a.pruning.retention_us != b.pruning.retention_us; }},
    {"pruning", "interval", kRestart, [](Config a, Config b) { return a.pruning.interval_us != b.pruning.interval_us; }},
    {"pruning", "batch_size", kRestart, [](Config a, Config b) { return a.pruning.batch_size != b.pruning.batch_size; }},

    {"logging", "level", kApplied, nullptr},
    {"logging", "format", kApplied, nullptr},
    {"logging", "file", kApplied, nullptr},

    {"metrics", "enabled", kRestart, [](Config a, Config b) { return a.metrics.enabled != b.metrics.enabled; }},
    {"metrics", "listen", kRestart, [](Config a, Config b) { return a.metrics.host != b.metrics.host || a.metrics.port != b.metrics.port; }},

    {"web", "enabled", kRestart, [](Config a, Config b) { return a.web.enabled != b.web.enabled; }},
    {"web", "admin_token_file", kRestart, [](Config a, Config b) { return a.web.admin_token_file != b.web.admin_token_file; }},
};
// clang-format on

}  // namespace

std::string ConfigKey::Path() const {
  return section.empty() ? std::string(name) : std::string(section) + "." + std::string(name);
}

std::span<const ConfigKey> ConfigKeys() { return kKeys; }

std::vector<std::string_view> KeysOf(std::string_view section) {
  std::vector<std::string_view> names;
  for (const ConfigKey& key : kKeys) {
    if (key.section == section) names.push_back(key.name);
  }
  if (names.empty()) throw std::logic_error("config_keys.cpp has no keys of '" + std::string(section) + "'");
  return names;
}

std::vector<std::string> RestartKeysChanged(const DaemonConfig& running, const DaemonConfig& fresh) {
  std::vector<std::string> changed;
  for (const ConfigKey& key : kKeys) {
    if (key.on_reload == OnReload::kRestart && key.differs(running, fresh)) {
      changed.push_back(key.Path());
    }
  }
  return changed;
}

}  // namespace akadzed
