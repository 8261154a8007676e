// The configuration error type, shared by the config parser and every room
// that validates what it builds from a config (handlers, hooks, logging).
#pragma once

#include <stdexcept>

namespace akadzed {

// Exit code for a configuration error (sysexits.h EX_CONFIG).
inline constexpr int kExitConfig = 78;

// A rejected configuration. what() is one line: "<file>:<line>: <message>"
// (line is 1-based; "<file>: <message>" when no line applies, e.g. the file
// cannot be read).
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace akadzed
