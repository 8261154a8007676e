// What handlers.<task> in the config file says (docs/configuration.md): the
// handlers room owns it; config/ only parses into it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "plugin_loader/plugin_config.h"

namespace akadzed {

struct ShellHandlerConfig {
  // argv; command[0] is looked up in PATH when it has no '/', a relative
  // path with '/' is resolved against the config file's directory.
  std::vector<std::string> command;
  std::map<std::string, std::string> env;        // added to the child's env
  std::string working_directory;                 // "" = the daemon's cwd
  std::int64_t timeout_us = 0;                   // 0 = no timeout
  std::int64_t kill_grace_us = 10'000'000;       // TERM -> KILL
  std::size_t max_line_bytes = 4096;             // a log line is cut there
  std::size_t max_output_bytes = 1 << 20;        // stdout+stderr logged per run
};

struct HandlerConfig {
  std::string task;
  std::variant<ShellHandlerConfig, PluginHandlerConfig> kind;
  int line = 0;
};

}  // namespace akadzed
