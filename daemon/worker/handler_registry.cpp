#include "worker/handler_registry.h"

#include <fmt/format.h>

#include "handlers/plugin_handler.h"
#include "handlers/shell_handler.h"
#include "plugin_loader/file_trust.h"

namespace akadzed {

namespace {

template <typename Action>
void ForEachHandler(const DaemonConfig& config, Action&& action) {
  for (const auto& entry : config.handlers) {
    const std::string& task = entry.first;
    const HandlerConfig& handler = entry.second;
    auto refuse = [&](const std::string& why) {
      return ConfigError(fmt::format("{}:{}: handlers.{}: {}", config.path, handler.line, task, why));
    };
    // Whoever can change a command given as a path runs code as the
    // daemon's user: judged by the same rule as plugin files (OpenPlugin).
    const auto* shell = std::get_if<ShellHandlerConfig>(&handler.kind);
    if (shell != nullptr && shell->command[0].find('/') != std::string::npos) {
      std::string refusal = TrustRefusal(shell->command[0], TrustedUse::kShellCommand);
      if (!refusal.empty()) throw refuse(refusal);
    }
    try {
      action(task, handler);
    } catch (const PluginError& e) {
      throw refuse(e.what());
    }
  }
}

}  // namespace

HandlerMap BuildHandlers(const DaemonConfig& config) {
  HandlerMap map;
  ForEachHandler(config, [&](const std::string& task, const HandlerConfig& handler) {
    if (const auto* shell = std::get_if<ShellHandlerConfig>(&handler.kind)) {
      map[task] = std::make_shared<ShellHandler>(task, *shell);
    } else {
      map[task] = std::make_shared<PluginHandler>(task, std::get<PluginHandlerConfig>(handler.kind));
    }
  });
  return map;
}

void VerifyHandlers(const DaemonConfig& config) {
  ForEachHandler(config, [&](const std::string&, const HandlerConfig& handler) {
    if (const auto* plugin = std::get_if<PluginHandlerConfig>(&handler.kind)) VerifyPlugin(*plugin);
  });
  for (std::size_t i = 0; i < config.hooks.size(); ++i) {
    if (!config.hooks[i].plugin) continue;
    try {
      VerifyPlugin(*config.hooks[i].plugin, PluginUse::kHook);
    } catch (const PluginError& e) {
      throw ConfigError(fmt::format("{}:{}: hooks[{}]: {}", config.path, config.hooks[i].line, i, e.what()));
    }
  }
}

std::unique_ptr<TransitionHooks> BuildHooks(const DaemonConfig& config) {
  auto hooks = std::make_unique<TransitionHooks>();
  for (std::size_t i = 0; i < config.hooks.size(); ++i) {
    try {
      hooks->Add(config.hooks[i]);
    } catch (const PluginError& e) {
      throw ConfigError(fmt::format("{}:{}: hooks[{}]: {}", config.path, config.hooks[i].line, i, e.what()));
    }
  }
  return hooks;
}

std::shared_ptr<JobHandler> HandlerRegistry::Find(const std::string& task) const {
  MutexLock lock(mu_);
  auto it = handlers_.find(task);
  return it == handlers_.end() ? nullptr : it->second;
}

void HandlerRegistry::Replace(HandlerMap handlers) {
  HandlerMap old;
  {
    MutexLock lock(mu_);
    old.swap(handlers_);
    handlers_ = std::move(handlers);
  }
  // `old` is released here, outside the lock; running jobs keep theirs.
}

}  // namespace akadzed
