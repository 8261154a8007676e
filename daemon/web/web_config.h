// What web.* in the config file says (docs/status-page.md): the web room
// owns it; config/ only parses into it.
#pragma once

#include <string>

namespace akadzed {

// The status page, served on the metrics listener (metrics.listen).
struct WebConfig {
  bool enabled = true;
  // An absolute path to a file holding the admin token; empty: the page's
  // actions (pause, resume, cancel, requeue) are refused. The file is read
  // again for each action, so a new token takes effect without a restart.
  std::string admin_token_file;
};

}  // namespace akadzed
