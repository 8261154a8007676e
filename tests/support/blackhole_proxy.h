// A TCP proxy for the partition tests that can blackhole connections: what a
// network partition looks like to both ends. It listens on 127.0.0.1 on an
// ephemeral port and forwards each accepted connection to a target, a TCP
// host:port or a Unix socket path (the test cluster listens on a Unix socket
// only: `<socket_directory>/.s.PGSQL.<port>`).
//
// Cut(filter): every connection the filter matches, existing and new,
// forwards nothing in either direction, and its sockets stay open: no RST, no
// FIN to either side. The kernel still ACKs what arrives (so TCP keepalives
// and tcp_user_timeout on the client see a live peer), and the proxy reads
// and holds those bytes (up to 64 MiB a direction; past that it stops
// reading and the TCP window closes); a close by either side is read and
// held too. New connections are accepted but get nothing forwarded.
// Heal(): the held bytes are delivered in order, then any held close (as a
// half-close, shutdown(SHUT_WR), of the other side; a reset or error on one
// side closes both once the other side's pending bytes are written).
//
// Filters see the connection's application_name, read from the PostgreSQL
// startup packet (the client's first message; libpq sends
// fallback_application_name there when no application_name is set, so the
// daemon's connections are "akadzed lease", "akadzed claim <queue>",
// "akadzed finisher", ...). Until its startup packet is complete a
// connection forwards nothing; a CancelRequest connection has the name "".
// Cut("") (or CutAll()) matches every connection, also those whose startup
// packet has not arrived. With another filter, a connection is matched as
// soon as its name is known.
//
// Encryption: the proxy reads the startup packet, so it cannot pass TLS or
// GSSAPI encryption through. conninfo() asks for sslmode=disable and
// gssencmode=disable; a client that sends an SSLRequest or GSSENCRequest
// anyway gets 'N' from the proxy itself (the server's "not supported"), and
// libpq's default "prefer" modes then go on unencrypted.
//
// SetDelay(d): every byte is passed on no earlier than `d` after the proxy
// read it, in each direction, as a network hop adds latency (a round trip
// then costs 2d more). netem is not available on the machines the benches
// run on; this is its fixed-delay part, for benches that report figures
// "with 0.5 ms each way" (bench/claim_bench, bench/claim_load_bench).
//
// One background thread, poll() over non-blocking sockets and a wake-up
// pipe; the destructor stops it and closes every socket (a FIN to both sides
// of each connection).
//
// Thread-safety: every public member may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace akadzed::test {

class BlackholeProxy {
 public:
  struct Target {
    std::string host;       // TCP: a numeric IPv4/IPv6 address or a name (getaddrinfo)
    int port = 0;
    std::string unix_path;  // or a Unix socket path (then host/port are unused)

    static Target Tcp(std::string host, int port) { return {std::move(host), port, ""}; }
    static Target Unix(std::string path) { return {"", 0, std::move(path)}; }
  };

  // The test cluster's socket: `<socket_directory>/.s.PGSQL.<port>`.
  static Target ClusterTarget();

  // A predicate on a connection's application_name.
  using Filter = std::function<bool(const std::string& application_name)>;

  // Listens at once (throws std::system_error when it cannot); connects to
  // `target` for each accepted connection (a connection whose target cannot
  // be reached is closed).
  explicit BlackholeProxy(Target target);
  ~BlackholeProxy();
  BlackholeProxy(const BlackholeProxy&) = delete;
  BlackholeProxy& operator=(const BlackholeProxy&) = delete;

  int port() const { return port_; }
  // "host=127.0.0.1 port=<port> sslmode=disable gssencmode=disable": appended
  // to a keyword conninfo, these override its host and port (libpq keeps the
  // last value of a keyword).
  std::string conninfo() const;

  // Cuts the connections whose application_name contains `substring`; ""
  // cuts every connection. Replaces any earlier cut's filter. Cut and Heal
  // return once the proxy's thread applies them: no byte is forwarded
  // under the old filter after they return.
  void Cut(const std::string& substring);
  void CutAll() { Cut(""); }
  // Cuts the connections `filter` returns true for (it runs on the proxy's
  // thread, under the proxy's lock: it must not call the proxy).
  void Cut(Filter filter);
  // Ends the cut: held bytes are delivered in order, then held closes.
  // Also disarms a CutWhen that has not fired.
  void Heal();

  // Delays every byte read from now on by `each_way` in its direction (0:
  // none, the default). Bytes already delayed keep their time.
  void SetDelay(std::chrono::microseconds each_way);

  // Arms a one-shot cut at a chosen point of a transaction, for cuts "while
  // a claim is in flight": the first time a connection whose
  // application_name contains `on` reaches that point, the proxy cuts as
  // Cut(cut) does, on its own thread, before passing on another byte of it.
  //  - statements == 0: the client sends a message while its session is
  //    idle (the last ReadyForQuery said 'I'): that message (a BEGIN, say)
  //    is held, and reaches the server only after Heal.
  //  - statements == n > 0: the server's reply to the n-th statement of a
  //    transaction arrives, that is the n-th ReadyForQuery in a row with
  //    status 'T' after a CommandComplete (a round trip that only prepares a
  //    statement does not count). The server has run it (and holds its
  //    locks); the reply is held.
  // The proxy follows the server's message framing to see ReadyForQuery.
  // Replaces an armed trigger that has not fired.
  void CutWhen(const std::string& on, int statements, const std::string& cut);
  struct TriggerInfo {
    bool fired = false;
    std::int64_t at_us = 0;        // CLOCK_REALTIME microseconds when it fired
    std::string application_name;  // of the connection that fired it
  };
  TriggerInfo trigger() const;
  // Waits until the armed trigger fired; false after `timeout`.
  bool WaitTriggered(std::chrono::milliseconds timeout);

  struct ConnectionInfo {
    std::string application_name;  // "" until the startup packet is read
    bool named = false;            // the startup packet was read
    bool cut = false;
    std::int64_t held_bytes = 0;   // read, not yet delivered (both directions)
    std::int64_t forwarded_bytes = 0;  // delivered (both directions)
  };
  // The open connections, as the proxy's thread last saw them.
  std::vector<ConnectionInfo> Connections() const;
  // Connections accepted since construction.
  std::int64_t accepted() const { return accepted_.load(); }

 private:
  struct Conn;
  void Loop();
  void Wake();
  // Runs `change` under mu_, then waits until the proxy thread applied it.
  void Apply(const std::function<void()>& change);
  void Accept();
  // Moves bytes and closes along one connection; false when it is done.
  bool Pump(Conn& c);
  bool Matches(const Conn& c) const;  // under mu_
  // Fires the armed trigger if `c` matches it (the loop thread).
  void Fire(Conn& c);
  // Follows the server's messages in c.s_in past c.scanned; true when the
  // armed trigger fired on them.
  bool ScanServer(Conn& c);
  void Publish();

  Target target_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<std::int64_t> accepted_{0};
  std::atomic<std::int64_t> delay_us_{0};
  mutable std::mutex mu_;
  bool cut_active_ = false;  // guarded by mu_
  bool cut_all_ = false;     // guarded by mu_
  Filter filter_;            // guarded by mu_
  struct Armed {
    std::string on;
    int statements = 0;
    std::string cut;
  };
  std::optional<Armed> armed_;  // guarded by mu_
  TriggerInfo trigger_;         // guarded by mu_
  std::uint64_t generation_ = 0;  // Cut/Heal calls; guarded by mu_
  std::uint64_t acked_ = 0;       // the generation the loop applies; guarded by mu_
  std::condition_variable acked_cv_;
  std::vector<ConnectionInfo> snapshot_;  // guarded by mu_
  std::vector<std::unique_ptr<Conn>> conns_;  // the loop thread only
  std::thread thread_;
};

}  // namespace akadzed::test
