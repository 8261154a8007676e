// What metrics.* in the config file says (docs/configuration.md): the
// metrics room owns it; config/ only parses into it.
#pragma once

#include <string>

namespace akadzed {

// The HTTP listener for /metrics, /healthz and /readyz.
struct MetricsConfig {
  bool enabled = true;
  std::string host = "127.0.0.1";                // an IP address; "::" or "0.0.0.0" for all
  int port = 9464;                               // 0 = any free port (logged)
};

}  // namespace akadzed
