// One HTTP request and its reply as plain values: the HTTP listener
// (metrics/metrics_server.h, on cpp-httplib) hands requests for the status
// page to the web room (web/status_page.h) in these, so that neither the
// page nor its tests see the HTTP library.
//
// Thread-safety: plain values.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace akadzed {

struct HttpRequest {
  std::string method;  // "GET", "POST"
  std::string path;    // without the query string, as received (percent-encoded)
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string remote_address;

  // The first header named `name` (case-insensitive), or "" when absent.
  std::string Header(std::string_view name) const {
    for (const auto& [key, value] : headers) {
      if (key.size() != name.size()) continue;
      bool same = true;
      for (std::size_t i = 0; i < key.size() && same; ++i) {
        same = (key[i] | 0x20) == (name[i] | 0x20);
      }
      if (same) return value;
    }
    return "";
  }
};

struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

}  // namespace akadzed
