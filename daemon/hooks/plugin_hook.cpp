#include "hooks/plugin_hook.h"

#include <fmt/format.h>

#include <utility>

#include "core/redact.h"

namespace akadzed {

PluginHook::PluginHook(std::string name, const PluginHandlerConfig& config)
    : name_(std::move(name)), plugin_(OpenPlugin(config.path)) {
  const akadzed_plugin& api = plugin_->api();
  if (!AKADZED_HAS_MEMBER(&api, akadzed_plugin, on_transition) || api.on_transition == nullptr) {
    throw PluginError(fmt::format("plugin {}: has no on_transition function, so it cannot be a "
                                  "hook", plugin_->path()));
  }
  instance_ = InitPluginInstance(*plugin_, config.config_json, "hook " + name_);
}

PluginHook::~PluginHook() { plugin_->api().shutdown(instance_); }

std::string PluginHook::OnTransition(const akadzed_transition& transition) const {
  char error[1024] = {};
  int rc = 0;
  try {
    rc = plugin_->api().on_transition(instance_, &transition, error, sizeof error);
  } catch (...) {  // the ABI forbids it; contain it anyway
    return "on_transition let a C++ exception escape";
  }
  if (rc == 0) return "";
  error[sizeof error - 1] = '\0';
  std::string text = OneLine(error);
  return text.empty() ? fmt::format("on_transition returned {}", rc) : text;
}

}  // namespace akadzed
