// delay_proxy: a TCP proxy in front of a PostgreSQL server that delays every
// byte by a fixed time each way, as a network hop does (netem is not
// available on the machines the benchmarks run on). Any client can use it:
// psql, pgbench, an older build of akadzed's benchmarks (`--database`), the
// daemon itself.
//
// It is the test suite's BlackholeProxy (tests/support/blackhole_proxy.h)
// with SetDelay(): one background thread, poll() over non-blocking sockets,
// bytes passed on in order no earlier than their delay after they were read.
// It reads the PostgreSQL startup packet, so it answers an SSLRequest with
// 'N': connect with sslmode=disable (or prefer).
//
// Usage: delay_proxy --target HOST:PORT|/socket/dir/.s.PGSQL.PORT
//                    [--delay-ms MS] [--port-file FILE]
// Prints "host=127.0.0.1 port=P sslmode=disable gssencmode=disable" on one
// line (also written to --port-file), then runs until SIGINT or SIGTERM.
#include <CLI/CLI.hpp>

#include <csignal>
#include <fstream>
#include <iostream>
#include <string>

#include "support/blackhole_proxy.h"

namespace {

volatile std::sig_atomic_t g_stop = 0;

extern "C" void OnSignal(int) { g_stop = 1; }

akadzed::test::BlackholeProxy::Target ParseTarget(const std::string& target) {
  using Target = akadzed::test::BlackholeProxy::Target;
  if (!target.empty() && target.front() == '/') return Target::Unix(target);
  const std::size_t colon = target.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == target.size()) {
    throw CLI::ValidationError("--target", "'" + target + "' is neither HOST:PORT nor a socket path");
  }
  return Target::Tcp(target.substr(0, colon), std::stoi(target.substr(colon + 1)));
}

}  // namespace

int main(int argc, char** argv) {
  std::string target;
  double delay_ms = 0.5;
  std::string port_file;
  CLI::App app{"delay_proxy: a TCP proxy that delays every byte by a fixed time each way"};
  app.add_option("--target", target, "HOST:PORT, or a Unix socket path (/dir/.s.PGSQL.5432)")->required();
  app.add_option("--delay-ms", delay_ms, "Delay each way in milliseconds (default 0.5)")
      ->check(CLI::Range(0.0, 10000.0));
  app.add_option("--port-file", port_file, "Also write the conninfo line to FILE");
  CLI11_PARSE(app, argc, argv);
  try {
    akadzed::test::BlackholeProxy proxy(ParseTarget(target));
    proxy.SetDelay(std::chrono::microseconds(static_cast<std::int64_t>(delay_ms * 1000)));
    std::signal(SIGINT, OnSignal);
    std::signal(SIGTERM, OnSignal);
    std::cout << proxy.conninfo() << std::endl;
    if (!port_file.empty()) {
      std::ofstream out(port_file, std::ios::trunc);
      out << proxy.conninfo() << "\n";
      if (!out) throw std::runtime_error("cannot write " + port_file);
    }
    while (g_stop == 0) pause();
  } catch (const std::exception& e) {
    std::cerr << "delay_proxy: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
