// Fuzz target: config/config.h's ParseConfig on arbitrary YAML text, as if
// read from config/akadzed.example.yaml's directory (so the example's
// relative handler path resolves; ParseConfig checks such paths on disk).
// Properties:
//  - ParseConfig returns or throws ConfigError; nothing else escapes;
//  - a ConfigError is one line and starts with "<path>:";
//  - an accepted configuration is one `akadzed run` can start with: at
//    least one queue with unique names and 1..10000 slots, at least one
//    handler with a non-empty command or plugin path, heartbeat_ttl >
//    heartbeat_interval > 0, positive intervals, unique periodic entries and
//    hooks, JSON objects as plugin configs and periodic args, an absolute
//    log file, a port in 0..65535.
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "fuzz_check.h"

#ifndef AKADZED_FUZZ_CONFIG_PATH
#error "AKADZED_FUZZ_CONFIG_PATH must name the file the text is parsed as"
#endif

namespace {

using akadzed::DaemonConfig;

bool IsJsonObject(const std::string& text) {
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  return !doc.is_discarded() && doc.is_object();
}

void CheckAccepted(const DaemonConfig& c, const std::string& path) {
  FUZZ_CHECK(c.path == path, "path " + c.path);
  const akadzed::WorkerConfig& w = c.worker;
  FUZZ_CHECK(w.heartbeat_interval_us > 0 && w.heartbeat_ttl_us > w.heartbeat_interval_us,
             "heartbeats " + std::to_string(w.heartbeat_interval_us) + "/" +
                 std::to_string(w.heartbeat_ttl_us));
  FUZZ_CHECK(w.poll_interval_us > 0 && w.shutdown_timeout_us >= 0, "worker intervals");

  FUZZ_CHECK(!c.queues.empty(), "no queue");
  std::set<std::string> queues;
  for (const akadzed::QueueConfig& q : c.queues) {
    FUZZ_CHECK(!q.name.empty() && queues.insert(q.name).second, "queue name '" + q.name + "'");
    FUZZ_CHECK(q.slots >= 1 && q.slots <= 10000, "slots of " + q.name);
    FUZZ_CHECK(!q.aging_us || *q.aging_us > 0, "aging of " + q.name);
  }

  FUZZ_CHECK(!c.handlers.empty(), "no handler");
  for (const auto& [task, h] : c.handlers) {
    FUZZ_CHECK(!task.empty() && h.task == task, "handler task '" + task + "'");
    if (const auto* shell = std::get_if<akadzed::ShellHandlerConfig>(&h.kind)) {
      FUZZ_CHECK(!shell->command.empty() && !shell->command[0].empty(), "command of " + task);
      FUZZ_CHECK(shell->timeout_us >= 0 && shell->kill_grace_us >= 0, "timeouts of " + task);
      FUZZ_CHECK(shell->max_line_bytes >= 1, "max_line_bytes of " + task);
      for (const auto& [name, value] : shell->env) {
        FUZZ_CHECK(!name.empty() && !name.starts_with("AKADZE_"), "env name '" + name + "'");
      }
    } else {
      const auto& plugin = std::get<akadzed::PluginHandlerConfig>(h.kind);
      FUZZ_CHECK(!plugin.path.empty() && plugin.timeout_us >= 0, "plugin of " + task);
      FUZZ_CHECK(IsJsonObject(plugin.config_json), "plugin config " + plugin.config_json);
    }
  }

  FUZZ_CHECK(c.pruning.retention_us > 0 && c.pruning.interval_us > 0, "pruning intervals");
  FUZZ_CHECK(c.pruning.batch_size >= 1 && c.pruning.batch_size <= 100000, "batch_size");
  FUZZ_CHECK(c.logging.file.empty() || c.logging.file.front() == '/', "log file " + c.logging.file);
  FUZZ_CHECK(c.metrics.port >= 0 && c.metrics.port <= 65535, "metrics port");

  std::set<std::string> periodic;
  for (const akadzed::PeriodicConfig& p : c.periodic) {
    FUZZ_CHECK(!p.name.empty() && periodic.insert(p.name).second, "periodic '" + p.name + "'");
    FUZZ_CHECK(!p.task.empty() && !p.queue.empty(), "periodic task/queue of " + p.name);
    FUZZ_CHECK(IsJsonObject(p.args_json), "periodic args " + p.args_json);
    FUZZ_CHECK(p.priority >= -32768 && p.priority <= 32767 && p.max_attempts >= 1,
               "periodic numbers of " + p.name);
    FUZZ_CHECK(p.grace_us > 0, "grace of " + p.name);
  }
  std::set<std::string> hooks;
  for (const akadzed::HookConfig& h : c.hooks) {
    FUZZ_CHECK(!h.name.empty() && hooks.insert(h.name).second, "hook '" + h.name + "'");
    FUZZ_CHECK(h.sql.empty() != !h.plugin.has_value(), "hook " + h.name + ": sql xor plugin");
    if (h.plugin) FUZZ_CHECK(IsJsonObject(h.plugin->config_json), "hook plugin config");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string path = AKADZED_FUZZ_CONFIG_PATH;
  DaemonConfig config;
  try {
    config = akadzed::ParseConfig(text, path);
  } catch (const akadzed::ConfigError& e) {
    const std::string_view message = e.what();
    FUZZ_CHECK(message.starts_with(path + ":"), std::string("message: ") + e.what());
    FUZZ_CHECK(akadzed::fuzz::IsOneLine(message), std::string("message not one line: ") + e.what());
    return 0;
  }
  CheckAccepted(config, path);
  return 0;
}
