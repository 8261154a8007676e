// What a plugin entry in the config file says (handlers.<task>.plugin and
// hooks[].plugin, docs/plugins.md): the plugin room owns it; config/ only
// parses into it.
#pragma once

#include <cstdint>
#include <string>

namespace akadzed {

struct PluginHandlerConfig {
  // Path of the .so: absolute, relative to the config file's directory when
  // it contains '/', else a file name searched in the plugin directories.
  std::string path;
  std::string config_json = "{}";                // `config:` mapping as JSON
  std::int64_t timeout_us = 0;                   // 0 = no timeout
};

}  // namespace akadzed
