#include "support/blackhole_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <system_error>


namespace akadzed::test {

namespace {

constexpr std::size_t kHoldCap = 64u << 20;   // per direction; past it, stop reading
constexpr std::size_t kChunk = 64u << 10;
constexpr std::uint32_t kSslRequest = 80877103;
constexpr std::uint32_t kGssEncRequest = 80877104;
constexpr std::uint32_t kCancelRequest = 80877102;
constexpr std::uint32_t kMaxStartupLength = 10000;  // the server's own limit (MAX_STARTUP_PACKET_LENGTH)

std::system_error SysError(const std::string& what) {
  return std::system_error(errno, std::generic_category(), "BlackholeProxy: " + what);
}

bool SetNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  return flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

std::uint32_t ReadBe32(const std::string& s, std::size_t at) {
  return (static_cast<std::uint32_t>(static_cast<unsigned char>(s[at])) << 24) |
         (static_cast<std::uint32_t>(static_cast<unsigned char>(s[at + 1])) << 16) |
         (static_cast<std::uint32_t>(static_cast<unsigned char>(s[at + 2])) << 8) |
         static_cast<std::uint32_t>(static_cast<unsigned char>(s[at + 3]));
}

// What reading a socket found.
enum class ReadEnd { kMore, kEof, kError };

// Appends what `fd` has (non-blocking) to `buf`, up to kHoldCap.
ReadEnd ReadAvailable(int fd, std::string& buf) {
  char chunk[kChunk];
  while (buf.size() < kHoldCap) {
    ssize_t n = recv(fd, chunk, sizeof chunk, 0);
    if (n > 0) {
      buf.append(chunk, static_cast<std::size_t>(n));
      continue;
    }
    if (n == 0) return ReadEnd::kEof;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return ReadEnd::kMore;
    return ReadEnd::kError;
  }
  return ReadEnd::kMore;
}

// Writes what it can of `buf` to `fd`; false on an error (the peer is gone).
bool WriteAvailable(int fd, std::string& buf, std::int64_t& counter) {
  std::size_t done = 0;
  while (done < buf.size()) {
    ssize_t n = send(fd, buf.data() + done, buf.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    buf.clear();
    return false;
  }
  buf.erase(0, done);
  counter += static_cast<std::int64_t>(done);
  return true;
}

}  // namespace

struct BlackholeProxy::Conn {
  int client = -1;
  int server = -1;
  bool connecting = false;  // non-blocking TCP connect in progress
  bool named = false;
  std::string app;
  bool cut = false;
  std::string c_in;       // read from the client, not yet passed on
  std::string s_in;       // read from the server, not yet passed on
  std::string to_server;  // passed on, not yet written
  std::string to_client;
  // Passed on, waiting for their time (SetDelay), in order.
  struct Delayed {
    std::chrono::steady_clock::time_point due;
    std::string bytes;
  };
  std::deque<Delayed> c_delayed, s_delayed;
  bool client_eof = false, client_err = false, client_shut = false;
  bool server_eof = false, server_err = false, server_shut = false;
  std::int64_t forwarded = 0;
  // Following the server's messages (ScanServer).
  std::size_t scanned = 0;  // bytes of s_in already followed
  std::string header;       // the current message's type and length, as they arrive
  std::uint32_t body_left = 0;
  bool body_started = false;
  char ready_status = 0;    // of the current ReadyForQuery
  char status = '?';        // of the last ReadyForQuery: 'I', 'T', 'E'
  bool saw_command = false;  // a CommandComplete since the last ReadyForQuery
  int tx_statements = 0;     // ReadyForQuery 'T' in a row after a CommandComplete

  ~Conn() {
    if (client >= 0) close(client);
    if (server >= 0) close(server);
  }
};

BlackholeProxy::BlackholeProxy(Target target) : target_(std::move(target)) {
  try {
    if (pipe2(wake_, O_NONBLOCK | O_CLOEXEC) != 0) throw SysError("pipe2");
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) throw SysError("socket");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) throw SysError("bind");
    if (listen(listen_fd_, 128) != 0) throw SysError("listen");
    socklen_t len = sizeof addr;
    if (getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      throw SysError("getsockname");
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Loop(); });
  } catch (...) {
    for (int fd : {listen_fd_, wake_[0], wake_[1]}) {
      if (fd >= 0) close(fd);
    }
    throw;
  }
}

BlackholeProxy::~BlackholeProxy() {
  stop_.store(true);
  Wake();
  if (thread_.joinable()) thread_.join();
  conns_.clear();  // closes every socket
  if (listen_fd_ >= 0) close(listen_fd_);
  for (int fd : wake_) {
    if (fd >= 0) close(fd);
  }
}

std::string BlackholeProxy::conninfo() const {
  return "host=127.0.0.1 port=" + std::to_string(port_) + " sslmode=disable gssencmode=disable";
}

void BlackholeProxy::Cut(const std::string& substring) {
  if (substring.empty()) {
    Apply([&] {
      cut_active_ = true;
      cut_all_ = true;
      filter_ = nullptr;
    });
    return;
  }
  Cut(Filter([substring](const std::string& name) { return name.find(substring) != std::string::npos; }));
}

void BlackholeProxy::Cut(Filter filter) {
  Apply([&] {
    cut_active_ = true;
    cut_all_ = false;
    filter_ = std::move(filter);
  });
}

void BlackholeProxy::Apply(const std::function<void()>& change) {
  std::unique_lock lock(mu_);
  change();
  const std::uint64_t gen = ++generation_;
  lock.unlock();
  Wake();
  lock.lock();
  acked_cv_.wait(lock, [&] { return acked_ >= gen || stop_.load(); });
}

void BlackholeProxy::CutWhen(const std::string& on, int statements, const std::string& cut) {
  std::lock_guard lock(mu_);
  armed_ = Armed{on, statements, cut};
  trigger_ = TriggerInfo{};
}

BlackholeProxy::TriggerInfo BlackholeProxy::trigger() const {
  std::lock_guard lock(mu_);
  return trigger_;
}

bool BlackholeProxy::WaitTriggered(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return acked_cv_.wait_for(lock, timeout, [&] { return trigger_.fired; });
}

void BlackholeProxy::Fire(Conn& c) {
  {
    std::lock_guard lock(mu_);
    if (!armed_ || c.app.find(armed_->on) == std::string::npos) return;
    trigger_.fired = true;
    trigger_.at_us = std::chrono::duration_cast<std::chrono::microseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    trigger_.application_name = c.app;
    cut_active_ = true;
    cut_all_ = armed_->cut.empty();
    filter_ = nullptr;
    if (!cut_all_) {
      filter_ = [sub = armed_->cut](const std::string& name) {
        return name.find(sub) != std::string::npos;
      };
    }
    armed_.reset();
    // Applied here and now, on every connection.
    acked_ = ++generation_;
    for (auto& other : conns_) other->cut = Matches(*other);
  }
  acked_cv_.notify_all();
}

bool BlackholeProxy::ScanServer(Conn& c) {
  bool fired = false;
  auto complete = [&] {
    const char type = c.header[0];
    if (type == 'C') c.saw_command = true;
    if (type == 'Z') {
      c.status = c.ready_status;
      if (c.status == 'T') {
        if (c.saw_command) ++c.tx_statements;
      } else {
        c.tx_statements = 0;
      }
      c.saw_command = false;
      bool armed;
      int statements = 0;
      {
        std::lock_guard lock(mu_);
        armed = armed_.has_value();
        if (armed) statements = armed_->statements;
      }
      if (armed && statements > 0 && c.status == 'T' && c.tx_statements == statements) {
        Fire(c);
        fired = fired || c.cut;
      }
    }
    c.header.clear();
  };
  while (c.scanned < c.s_in.size()) {
    if (c.header.size() < 5) {
      c.header += c.s_in[c.scanned++];
      if (c.header.size() < 5) continue;
      const std::uint32_t len = ReadBe32(c.header, 1);
      c.body_left = len >= 4 ? len - 4 : 0;
      c.body_started = false;
      c.ready_status = 0;
      if (c.body_left == 0) complete();
      continue;
    }
    const std::size_t take = std::min<std::size_t>(c.body_left, c.s_in.size() - c.scanned);
    if (c.header[0] == 'Z' && !c.body_started && take > 0) c.ready_status = c.s_in[c.scanned];
    c.body_started = true;
    c.scanned += take;
    c.body_left -= static_cast<std::uint32_t>(take);
    if (c.body_left == 0) complete();
  }
  return fired;
}

void BlackholeProxy::SetDelay(std::chrono::microseconds each_way) {
  delay_us_.store(std::max<std::int64_t>(0, each_way.count()));
  Wake();
}

void BlackholeProxy::Heal() {
  Apply([&] {
    armed_.reset();
    cut_active_ = false;
    cut_all_ = false;
    filter_ = nullptr;
  });
}

std::vector<BlackholeProxy::ConnectionInfo> BlackholeProxy::Connections() const {
  std::lock_guard lock(mu_);
  return snapshot_;
}

void BlackholeProxy::Wake() {
  const char byte = 1;
  // A full pipe already holds a wake-up.
  [[maybe_unused]] ssize_t n = write(wake_[1], &byte, 1);
}

bool BlackholeProxy::Matches(const Conn& c) const {
  if (!cut_active_) return false;
  if (cut_all_) return true;
  return c.named && filter_ && filter_(c.app);
}

void BlackholeProxy::Accept() {
  for (;;) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      return;  // EAGAIN, or out of fds: the next wake-up tries again
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto c = std::make_unique<Conn>();
    c->client = fd;
    conns_.push_back(std::move(c));
    accepted_.fetch_add(1);
  }
}

namespace {

// Reads the startup packet at the front of c_in. SSLRequest/GSSENCRequest:
// answered 'N' here and consumed. A complete startup packet (or cancel
// request, or anything unknown) names the connection and stays in c_in, to
// be forwarded. Returns true once the connection is named.
bool ParseStartup(std::string& c_in, std::string& to_client, std::string& app) {
  while (c_in.size() >= 8) {
    const std::uint32_t len = ReadBe32(c_in, 0);
    const std::uint32_t code = ReadBe32(c_in, 4);
    if (len == 8 && (code == kSslRequest || code == kGssEncRequest)) {
      c_in.erase(0, 8);
      to_client += 'N';
      continue;
    }
    if (len < 8 || len > kMaxStartupLength) return true;  // not a startup packet: forwarded as is
    if (c_in.size() < len) return false;
    if (code == kCancelRequest || (code >> 16) != 3) return true;
    // Protocol 3.x: name\0value\0 ... \0
    std::size_t at = 8;
    while (at < len && c_in[at] != '\0') {
      const std::size_t key_end = c_in.find('\0', at);
      if (key_end == std::string::npos || key_end >= len) break;
      const std::size_t value_end = c_in.find('\0', key_end + 1);
      if (value_end == std::string::npos || value_end >= len) break;
      if (c_in.compare(at, key_end - at, "application_name") == 0) {
        app = c_in.substr(key_end + 1, value_end - key_end - 1);
      }
      at = value_end + 1;
    }
    return true;
  }
  return false;
}

// Opens a non-blocking socket to `target`; -1 when it cannot. Sets
// `connecting` when a TCP connect is still in progress.
int ConnectTarget(const BlackholeProxy::Target& target, bool& connecting) {
  connecting = false;
  if (!target.unix_path.empty()) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (target.unix_path.size() >= sizeof addr.sun_path) {
      close(fd);
      return -1;
    }
    std::memcpy(addr.sun_path, target.unix_path.c_str(), target.unix_path.size() + 1);
    // A local connect: blocking is immediate (a non-blocking AF_UNIX connect
    // fails with EAGAIN on a full backlog instead of waiting).
    int rc;
    do {
      rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      close(fd);
      return -1;
    }
    if (!SetNonBlocking(fd)) {
      close(fd);
      return -1;
    }
    return fd;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(target.host.c_str(), std::to_string(target.port).c_str(), &hints, &res) != 0) {
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
    if (errno == EINPROGRESS) {
      connecting = true;
      break;
    }
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd >= 0) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return fd;
}

}  // namespace

bool BlackholeProxy::Pump(Conn& c) {
  if (c.cut) return true;  // hold everything, closes included
  if (!c.named) {
    if (ParseStartup(c.c_in, c.to_client, c.app)) {
      c.named = true;
      std::lock_guard lock(mu_);
      c.cut = Matches(c);
      if (c.cut) return true;
    } else if (c.client_eof || c.client_err) {
      c.c_in.clear();  // an incomplete startup packet: nothing to forward
    }
  }
  if (c.named && !c.c_in.empty() && c.status == 'I') {
    // A CutWhen(on, 0, ...) fires on a message sent on an idle session.
    bool idle_trigger;
    {
      std::lock_guard lock(mu_);
      idle_trigger = armed_ && armed_->statements == 0;
    }
    if (idle_trigger) {
      Fire(c);
      if (c.cut) return true;
    }
  }
  if (ScanServer(c)) return true;  // the reply that fired it is held
  // Bytes go on at once, or after the delay (SetDelay), in order.
  const auto now = std::chrono::steady_clock::now();
  const std::chrono::microseconds delay(delay_us_.load());
  auto pass = [&](std::string& in, std::deque<Conn::Delayed>& delayed, std::string& out, bool gone) {
    if (!in.empty() && !gone) {
      if (delay.count() > 0 || !delayed.empty()) {
        delayed.push_back(Conn::Delayed{now + delay, std::move(in)});
      } else {
        out += in;
      }
    }
    in.clear();
    while (!delayed.empty() && delayed.front().due <= now) {
      if (!gone) out += delayed.front().bytes;
      delayed.pop_front();
    }
  };
  if (c.named) pass(c.c_in, c.c_delayed, c.to_server, c.server_err);
  if (!c.s_in.empty()) c.scanned = 0;
  pass(c.s_in, c.s_delayed, c.to_client, c.client_err);
  // The server is connected lazily, when there is something to send: no
  // SYN reaches it while a new connection is cut.
  if (c.server < 0 && !c.server_err && !c.to_server.empty()) {
    c.server = ConnectTarget(target_, c.connecting);
    if (c.server < 0) c.server_err = true;
  }
  if (c.server_err) c.to_server.clear();
  if (c.client_err) c.to_client.clear();
  if (c.server >= 0 && !c.connecting && !c.server_err && !c.to_server.empty()) {
    if (!WriteAvailable(c.server, c.to_server, c.forwarded)) c.server_err = true;
  }
  if (!c.client_err && !c.to_client.empty()) {
    if (!WriteAvailable(c.client, c.to_client, c.forwarded)) c.client_err = true;
  }
  // A side that errored (reset, refused): the other side gets what is
  // pending for it, then the whole connection closes.
  if (c.client_err && ((c.to_server.empty() && c.c_delayed.empty()) || c.server_err || c.server < 0)) return false;
  if (c.server_err && c.to_client.empty() && c.s_delayed.empty()) return false;
  // Half-closes, in order after the bytes.
  const bool c2s_done =
      (c.client_eof || c.client_err) && c.c_in.empty() && c.c_delayed.empty() && c.to_server.empty();
  if (c2s_done && c.server >= 0 && !c.connecting && !c.server_shut) {
    shutdown(c.server, SHUT_WR);
    c.server_shut = true;
  }
  const bool s2c_done =
      (c.server < 0 || c.server_eof) && c.s_in.empty() && c.s_delayed.empty() && c.to_client.empty();
  if (c.server_eof && s2c_done && !c.client_shut) {
    shutdown(c.client, SHUT_WR);
    c.client_shut = true;
  }
  return !(c2s_done && s2c_done);
}

void BlackholeProxy::Publish() {
  std::vector<ConnectionInfo> snap;
  snap.reserve(conns_.size());
  for (const auto& c : conns_) {
    ConnectionInfo info;
    info.application_name = c->app;
    info.named = c->named;
    info.cut = c->cut;
    std::size_t delayed = 0;
    for (const auto& d : c->c_delayed) delayed += d.bytes.size();
    for (const auto& d : c->s_delayed) delayed += d.bytes.size();
    info.held_bytes = static_cast<std::int64_t>(c->c_in.size() + c->s_in.size() + c->to_server.size() +
                                                c->to_client.size() + delayed);
    info.forwarded_bytes = c->forwarded;
    snap.push_back(std::move(info));
  }
  std::lock_guard lock(mu_);
  snapshot_ = std::move(snap);
}

void BlackholeProxy::Loop() {
  std::vector<pollfd> fds;
  while (!stop_.load()) {
    fds.clear();
    fds.push_back({wake_[0], POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (const auto& cp : conns_) {
      const Conn& c = *cp;
      // Reads go on during a cut (the bytes and closes are held); an ended
      // side is left out unless something must be written to it, so that a
      // peer's hang-up (POLLHUP stays set) does not spin the loop.
      short ce = 0, se = 0;
      if (!c.client_eof && !c.client_err && c.c_in.size() < kHoldCap) ce |= POLLIN;
      if (!c.cut && !c.client_err && !c.to_client.empty()) ce |= POLLOUT;
      if (c.server >= 0 && !c.server_eof && !c.server_err && c.s_in.size() < kHoldCap) se |= POLLIN;
      if (c.server >= 0 && !c.server_err && (c.connecting || (!c.cut && !c.to_server.empty()))) {
        se |= POLLOUT;
      }
      fds.push_back({ce != 0 ? c.client : -1, ce, 0});
      fds.push_back({se != 0 ? c.server : -1, se, 0});
    }
    // Until the next delayed bytes' time, if any (SetDelay): ppoll(), as a
    // delay is often below poll()'s millisecond.
    std::optional<std::chrono::steady_clock::time_point> next;
    for (const auto& cp : conns_) {
      if (cp->cut) continue;
      for (const auto* q : {&cp->c_delayed, &cp->s_delayed}) {
        if (!q->empty() && (!next || q->front().due < *next)) next = q->front().due;
      }
    }
    timespec wait{};
    if (next) {
      const auto left = std::max(std::chrono::nanoseconds(0), *next - std::chrono::steady_clock::now());
      wait.tv_sec = static_cast<time_t>(left.count() / 1000000000);
      wait.tv_nsec = static_cast<long>(left.count() % 1000000000);
    }
    const int polled_n = ppoll(fds.data(), fds.size(), next ? &wait : nullptr, nullptr);
    if (polled_n < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) {
      char buf[256];
      while (read(wake_[0], buf, sizeof buf) > 0) {
      }
    }
    // The connections polled above are the first conns_.size() - new ones.
    const std::size_t polled = conns_.size();
    if (fds[1].revents != 0) Accept();
    {
      std::lock_guard lock(mu_);
      acked_ = generation_;
      for (auto& c : conns_) c->cut = Matches(*c);
    }
    acked_cv_.notify_all();
    for (std::size_t i = 0; i < polled; ++i) {
      Conn& c = *conns_[i];
      const short cr = fds[2 + 2 * i].revents;
      const short sr = fds[3 + 2 * i].revents;
      if (cr != 0 && !c.client_eof && !c.client_err) {
        ReadEnd end = ReadAvailable(c.client, c.c_in);
        if (end == ReadEnd::kEof) c.client_eof = true;
        if (end == ReadEnd::kError) c.client_err = true;
      }
      if (sr != 0 && c.server >= 0) {
        if (c.connecting) {
          int err = 0;
          socklen_t len = sizeof err;
          getsockopt(c.server, SOL_SOCKET, SO_ERROR, &err, &len);
          if (err != 0) {
            c.server_err = true;
          } else if (sr & (POLLOUT | POLLIN | POLLHUP)) {
            c.connecting = false;
          }
        }
        if (!c.connecting && !c.server_eof && !c.server_err && (sr & (POLLIN | POLLHUP | POLLERR))) {
          ReadEnd end = ReadAvailable(c.server, c.s_in);
          if (end == ReadEnd::kEof) c.server_eof = true;
          if (end == ReadEnd::kError) c.server_err = true;
        }
      }
    }
    for (std::size_t i = 0; i < conns_.size();) {
      if (Pump(*conns_[i])) {
        ++i;
      } else {
        conns_.erase(conns_.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
    Publish();
  }
  std::lock_guard lock(mu_);
  acked_ = generation_;
  acked_cv_.notify_all();
}

}  // namespace akadzed::test
