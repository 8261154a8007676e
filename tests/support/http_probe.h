// HTTP requests to a daemon's listener (metrics, health, the status page),
// with cpp-httplib's client, for the daemon tests.
//
// Thread-safety: free functions; each request opens its own connection.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "support/daemon_process.h"

namespace akadzed::test {

struct HttpAnswer {
  int status = 0;  // 0: no answer
  std::string body;
  std::multimap<std::string, std::string> headers;  // names as sent

  // The first header named `name` (exact case as httplib keeps it), or "".
  std::string Header(const std::string& name) const;
};

// The port of `metrics_listening address=127.0.0.1:PORT` in the daemon's
// log (REQUIREs it within the log wait's default timeout).
int ListenerPort(const DaemonProcess& daemon);

HttpAnswer HttpGet(int port, const std::string& path,
                   const std::vector<std::pair<std::string, std::string>>& headers = {});
// POSTs `body` with `content_type` ("" sends none) and `headers`.
HttpAnswer HttpPost(int port, const std::string& path, const std::string& body,
                    const std::string& content_type,
                    const std::vector<std::pair<std::string, std::string>>& headers = {});

}  // namespace akadzed::test
