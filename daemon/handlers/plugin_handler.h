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
#include <string>
#include <vector>

#include "handlers/job_handler.h"
#include "plugin_loader/loaded_plugin.h"

namespace akadzed {

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
  JobOutcome Run(const ClaimedJob& job, JobStop& stop, JobProgress* progress = nullptr) override;
  const char* kind() const override { return "plugin"; }

 private:
  std::string task_;
  std::shared_ptr<LoadedPlugin> plugin_;
  void* instance_ = nullptr;  // the plugin's; shared by concurrent Runs
  std::int64_t timeout_us_ = 0;
  std::unique_ptr<OverrunWatch> overrun_watch_;  // only with a timeout
};

}  // namespace akadzed
