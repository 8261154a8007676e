// The handlers by task name, built from the config's `handlers:` section and
// swapped as a whole on reload (SIGHUP). A job keeps the handler it started
// with until it ends, even across a reload.
//
// Thread-safety: Find and Replace may be called from any thread.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "config/config.h"
#include "handlers/job_handler.h"
#include "hooks/transition_hooks.h"
#include "core/thread_annotations.h"

namespace akadzed {

using HandlerMap = std::map<std::string, std::shared_ptr<JobHandler>>;

// Builds every handler of `handlers` (plugins are opened and initialised).
// Throws ConfigError ("<file>:<line>: handlers.<task>: ...") when one cannot
// be built, e.g. a plugin with the wrong ABI.
HandlerMap BuildHandlers(const DaemonConfig& config);

// Checks what BuildHandlers and BuildHooks would, without initialising
// plugins (for check-config). Throws ConfigError.
void VerifyHandlers(const DaemonConfig& config);

// Builds the transition hooks of `hooks:` (plugin hooks are opened and
// initialised). Throws ConfigError ("<file>:<line>: hooks: ...").
std::unique_ptr<TransitionHooks> BuildHooks(const DaemonConfig& config);

class HandlerRegistry {
 public:
  explicit HandlerRegistry(HandlerMap handlers) : handlers_(std::move(handlers)) {}

  // The handler for `task`, or nullptr.
  std::shared_ptr<JobHandler> Find(const std::string& task) const;
  void Replace(HandlerMap handlers);

 private:
  mutable Mutex mu_;
  HandlerMap handlers_ GUARDED_BY(mu_);
};

}  // namespace akadzed
