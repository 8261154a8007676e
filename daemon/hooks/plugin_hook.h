// A plugin's on_transition as a transition hook (config `hooks:` with
// `plugin:`): its own instance, made by init(config.config_json) and shut
// down with the hook. The plugin file is shared with handlers using the same
// file (plugin_loader/loaded_plugin.h).
//
// Thread-safety: OnTransition may be called from many threads at once (the
// plugin must allow it).
#pragma once

#include <memory>
#include <string>

#include <akadzed/plugin.h>

#include "plugin_loader/loaded_plugin.h"

namespace akadzed {

class PluginHook {
 public:
  // Opens the plugin (shared with handlers using the same file), checks it
  // has on_transition and calls init. Throws PluginError.
  PluginHook(std::string name, const PluginHandlerConfig& config);
  ~PluginHook();
  PluginHook(const PluginHook&) = delete;
  PluginHook& operator=(const PluginHook&) = delete;

  // Calls on_transition; returns "" when it accepted the transition, else
  // its one-line message. Never throws.
  std::string OnTransition(const akadzed_transition& transition) const;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::shared_ptr<LoadedPlugin> plugin_;
  void* instance_ = nullptr;  // the plugin's
};

}  // namespace akadzed
