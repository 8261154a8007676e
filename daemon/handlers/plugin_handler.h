// A job handler that runs jobs in a plugin: a shared object speaking the C
// ABI of akadzed/plugin.h (docs/plugins.md).
//
// A plugin file is opened once per process (dlopen RTLD_NOW | RTLD_LOCAL) and
// shared by every handler that uses it; it is closed when the last of them is
// destroyed. Each handler owns one plugin instance (init with its task's
// config, shutdown in the destructor).
//
// Thread-safety: Run is called concurrently from many threads; it calls the
// plugin's handle() in the calling thread with the shared instance (plugins
// are required to allow that). Construction and destruction of handlers may
// happen on any thread; a handler must outlive its Runs.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/config.h"
#include <akadzed/plugin.h>

#include "handlers/job_handler.h"

namespace akadzed {

// A plugin that cannot be used. what() is one line naming the file and what
// is wrong with it.
class PluginError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class LoadedPlugin;  // an open plugin file, shared by its handlers
class OverrunWatch;  // logs plugin calls still running past their timeout

class PluginHandler : public JobHandler {
 public:
  // Opens the plugin config.path (see VerifyPlugin), checks its ABI and
  // calls init with config.config_json. Throws PluginError.
  PluginHandler(std::string task, const PluginHandlerConfig& config);
  // Calls the plugin's shutdown(instance); the file is closed with its last
  // handler.
  ~PluginHandler() override;
  PluginHandler(const PluginHandler&) = delete;
  PluginHandler& operator=(const PluginHandler&) = delete;

  // Calls handle() in this thread. stop_requested() turns true once `stop`
  // is requested or config.timeout_us (if > 0) has passed since this call
  // started; a timeout is reported (kRetry "Timeout") only after the plugin
  // returns, so plugins must poll stop_requested. A call still running when
  // its timeout passes is logged then (warn, once per call), so that a plugin
  // that never polls is seen while it holds its slot. A plugin's bad report
  // (unknown code, result not JSON, snooze without a delay) is kRetry
  // "BadOutcome". Never throws.
  JobOutcome Run(const ClaimedJob& job, JobStop& stop) override;
  const char* kind() const override { return "plugin"; }

 private:
  std::string task_;
  std::shared_ptr<LoadedPlugin> plugin_;
  void* instance_ = nullptr;  // the plugin's; shared by concurrent Runs
  std::int64_t timeout_us_ = 0;
  std::unique_ptr<OverrunWatch> overrun_watch_;  // only with a timeout
};

// A plugin's on_transition as a transition hook (config `hooks:` with
// `plugin:`): its own instance, made by init(config.config_json) and shut
// down with the hook. Thread-safety: OnTransition may be called from many
// threads at once (the plugin must allow it).
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

// What a plugin is configured for: running jobs (handle) or as a
// transition hook (on_transition).
enum class PluginUse { kHandler, kHook };

// Resolves config.path (a path containing '/' is used as is, a bare file
// name is searched in PluginSearchPath()), refuses a file that users other
// than root and the daemon's could change (FileTrustProblem), opens it and
// checks its ABI and that it has the function `use` needs, without calling
// init (for check-config). Throws PluginError.
void VerifyPlugin(const PluginHandlerConfig& config, PluginUse use = PluginUse::kHandler);

// Directories searched for bare plugin file names, in order: each non-empty
// entry of $AKADZED_PLUGIN_PATH (colon-separated), then
// <directory of /proc/self/exe>/plugins and
// <directory of /proc/self/exe>/../lib/akadzed/plugins (normalized).
std::vector<std::string> PluginSearchPath();

}  // namespace akadzed
