#include "support/http_probe.h"

#include <catch2/catch.hpp>
#include <httplib.h>

#include <regex>

namespace akadzed::test {

namespace {

httplib::Headers Headers(const std::vector<std::pair<std::string, std::string>>& headers) {
  httplib::Headers out;
  for (const auto& [name, value] : headers) out.emplace(name, value);
  return out;
}

HttpAnswer Answer(const httplib::Result& res) {
  if (!res) return {};
  HttpAnswer answer{res->status, res->body, {}};
  for (const auto& [name, value] : res->headers) answer.headers.emplace(name, value);
  return answer;
}

}  // namespace

std::string HttpAnswer::Header(const std::string& name) const {
  const auto found = headers.find(name);
  return found == headers.end() ? "" : found->second;
}

int ListenerPort(const DaemonProcess& daemon) {
  REQUIRE(daemon.WaitForLog("metrics_listening"));
  std::smatch m;
  const std::string log = daemon.Log();
  REQUIRE(std::regex_search(log, m, std::regex("metrics_listening address=127\\.0\\.0\\.1:([0-9]+)")));
  const int port = std::stoi(m[1]);
  REQUIRE(port > 0);
  return port;
}

HttpAnswer HttpGet(int port, const std::string& path,
                   const std::vector<std::pair<std::string, std::string>>& headers) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(10, 0);
  return Answer(client.Get(path, Headers(headers)));
}

HttpAnswer HttpPost(int port, const std::string& path, const std::string& body,
                    const std::string& content_type,
                    const std::vector<std::pair<std::string, std::string>>& headers) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(10, 0);
  return Answer(client.Post(path, Headers(headers), body, content_type));
}

}  // namespace akadzed::test
