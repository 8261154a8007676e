// A delayed network between a benchmark and its PostgreSQL: the tests'
// proxy (tests/support/blackhole_proxy.h) with a fixed delay each way, in
// front of the server `conninfo` names. claim_bench and claim_load_bench
// report their figures through it beside the direct ones ("0.5 ms each
// way": a round trip costs 1 ms more, as on a network hop to a managed
// database).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "pg/connection.h"
#include "support/blackhole_proxy.h"

namespace akadzed::bench {

class DelayedNetwork {
 public:
  // Starts the proxy in front of the server `conninfo` connects to (TCP or
  // a Unix socket), delaying `each_way`.
  DelayedNetwork(const std::string& conninfo, std::chrono::microseconds each_way) {
    pg::Connection direct = pg::Connection::Open(conninfo, "delayed_network");
    const std::string host = PQhost(direct.raw());
    const int port = std::atoi(PQport(direct.raw()));
    using Target = test::BlackholeProxy::Target;
    proxy_ = std::make_unique<test::BlackholeProxy>(
        !host.empty() && host.front() == '/' ? Target::Unix(host + "/.s.PGSQL." + std::to_string(port))
                                             : Target::Tcp(host, port));
    proxy_->SetDelay(each_way);
    conninfo_ = proxy_->conninfo() + " dbname='" + Quoted(PQdb(direct.raw())) + "' user='" +
                Quoted(PQuser(direct.raw())) + "'";
    if (const char* password = PQpass(direct.raw()); password != nullptr && *password != '\0') {
      conninfo_ += " password='" + Quoted(password) + "'";
    }
  }

  // A keyword conninfo of the same database through the proxy.
  const std::string& conninfo() const { return conninfo_; }

 private:
  static std::string Quoted(const std::string& value) {
    std::string out;
    for (char c : value) {
      if (c == '\'' || c == '\\') out += '\\';
      out += c;
    }
    return out;
  }

  std::unique_ptr<test::BlackholeProxy> proxy_;
  std::string conninfo_;
};

}  // namespace akadzed::bench
