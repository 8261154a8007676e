// A plugin file: found (PluginSearchPath), trusted (FileTrustProblem),
// opened once per process (dlopen RTLD_NOW | RTLD_LOCAL), its ABI checked
// against akadzed/plugin.h, and shared by every handler and hook that uses
// it; closed when the last of them lets go. Handlers (handlers/
// plugin_handler.h) and hooks (hooks/plugin_hook.h) both load plugins here.
//
// Thread-safety: OpenPlugin, VerifyPlugin and PluginSearchPath may be called
// from any thread (the table of open files has its own lock); a
// LoadedPlugin is immutable.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <akadzed/plugin.h>

#include "plugin_loader/plugin_config.h"

namespace akadzed {

// A plugin that cannot be used. what() is one line naming the file and what
// is wrong with it.
class PluginError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An open plugin file whose ABI has been checked. Closed (dlclose) when its
// last user lets go of it.
class LoadedPlugin {
 public:
  LoadedPlugin(std::string path, void* handle, const akadzed_plugin* api)
      : path_(std::move(path)), handle_(handle), api_(api) {}
  ~LoadedPlugin();  // dlclose
  LoadedPlugin(const LoadedPlugin&) = delete;
  LoadedPlugin& operator=(const LoadedPlugin&) = delete;

  const std::string& path() const { return path_; }
  const akadzed_plugin& api() const { return *api_; }
  // "<name> <version>" for logs and messages.
  std::string label() const;

 private:
  std::string path_;  // canonical
  void* handle_;
  const akadzed_plugin* api_;  // lives in the library
};

// Opens the plugin `configured` names (a path containing '/' is used as is,
// a bare file name is searched in PluginSearchPath()), refusing a file that
// users other than root and the daemon's could change (FileTrustProblem), or
// shares it when it is open already. Checks the ABI, calls no plugin
// function. Throws PluginError.
std::shared_ptr<LoadedPlugin> OpenPlugin(const std::string& configured);

// A new instance of `plugin` made by its init(config_json); `what` names its
// use in the error ("task X", "hook Y"). Throws PluginError.
void* InitPluginInstance(const LoadedPlugin& plugin, const std::string& config_json,
                         const std::string& what);

// What a plugin is configured for: running jobs (handle) or as a
// transition hook (on_transition).
enum class PluginUse { kHandler, kHook };

// Opens config.path (OpenPlugin) and checks that it has the function `use`
// needs, without calling init (for check-config). Throws PluginError.
void VerifyPlugin(const PluginHandlerConfig& config, PluginUse use = PluginUse::kHandler);

// Directories searched for bare plugin file names, in order: each non-empty
// entry of $AKADZED_PLUGIN_PATH (colon-separated), then
// <directory of /proc/self/exe>/plugins and
// <directory of /proc/self/exe>/../lib/akadzed/plugins (normalized).
std::vector<std::string> PluginSearchPath();

}  // namespace akadzed
