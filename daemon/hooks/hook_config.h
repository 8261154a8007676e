// What hooks[] in the config file says (docs/configuration.md): the hooks
// room owns it; config/ only parses into it.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/job_states.h"
#include "plugin_loader/plugin_config.h"

namespace akadzed {

// A transition hook: runs in the transaction that moves a job from one of
// `from` to one of `to` (empty = any); if it fails, the transition is rolled
// back. Exactly one of `sql` (a statement with the job's fields as $1..$N,
// docs/configuration.md lists them) or `plugin` (a .so exporting
// akadzed_hook_v1, docs/plugins.md).
struct HookConfig {
  std::string name;
  std::vector<JobState> from;
  std::vector<JobState> to;
  std::string sql;
  std::optional<PluginHandlerConfig> plugin;     // path and config; timeout unused
  int line = 0;

  // True if this hook fires for from -> to.
  bool Matches(JobState from_state, JobState to_state) const {
    const auto in = [](const std::vector<JobState>& states, JobState state) {
      return states.empty() || std::find(states.begin(), states.end(), state) != states.end();
    };
    return in(from, from_state) && in(to, to_state);
  }
};

}  // namespace akadzed
