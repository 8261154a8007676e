#include "support/streaming_standby.h"

#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "pg/connection.h"
#include "pg/pg_error.h"
#include "support/run_command.h"

namespace akadzed::test {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

bool RunningAsRoot() { return geteuid() == 0; }

// A TCP port on 127.0.0.1 nobody listens on right now (the server binds it
// a moment later; a clash makes its start fail loudly).
int FreePort(int avoid) {
  std::random_device rd;
  for (int tries = 0; tries < 100; ++tries) {
    int port = 20000 + static_cast<int>(rd() % 30000);
    if (port == avoid) continue;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) break;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool free = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    close(fd);
    if (free) return port;
  }
  throw std::runtime_error("StreamingStandby: no free TCP port found");
}

fs::path MakeServerDirectory(const std::string& prefix) {
  std::string pattern = (fs::temp_directory_path() / (prefix + "XXXXXX")).string();
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) {
    throw std::runtime_error("cannot create " + pattern + ": " + std::strerror(errno));
  }
  fs::path dir = buf.data();
  if (RunningAsRoot()) {
    struct passwd* pw = getpwnam("postgres");
    if (pw == nullptr || chown(dir.c_str(), pw->pw_uid, pw->pw_gid) != 0) {
      throw std::runtime_error("cannot give " + dir.string() + " to the postgres user");
    }
  }
  return dir;
}

// The postmaster's pid from <data>/postmaster.pid; 0 when the file is gone.
pid_t PostmasterPid(const fs::path& data) {
  std::ifstream in(data / "postmaster.pid");
  long pid = 0;
  if (!(in >> pid)) return 0;
  return static_cast<pid_t>(pid);
}

std::string Tail(const fs::path& file, int lines) {
  std::ifstream in(file);
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
  std::string out;
  for (std::size_t i = all.size() > static_cast<std::size_t>(lines) ? all.size() - lines : 0;
       i < all.size(); ++i) {
    out += " | " + all[i];
  }
  return out;
}

// Polls `condition` every 10 ms until true; throws `what` after `timeout`.
template <typename Condition>
void Await(Condition condition, std::chrono::milliseconds timeout, const std::string& what) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    try {
      if (condition()) return;
    } catch (const pg::PgError&) {
      // A server starting, stopping or promoting: ask again.
    }
    if (std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error("StreamingStandby: timed out waiting until " + what);
    }
    std::this_thread::sleep_for(10ms);
  }
}

}  // namespace

std::unique_ptr<StreamingStandby> StreamingStandby::Start(const StreamingStandbyOptions& options) {
  std::unique_ptr<StreamingStandby> pair(new StreamingStandby());
  // The primary: ThrowawayPostgres's defaults, durable commits, replication.
  pair->settings_ = {"synchronous_commit=on", "wal_level=replica", "max_wal_senders=5",
                     "hot_standby=on", "wal_keep_size=256MB", "shared_buffers=64MB",
                     "wal_sender_timeout=60s", "wal_receiver_status_interval=1s"};
  pair->settings_.insert(pair->settings_.end(), options.settings.begin(), options.settings.end());
  ThrowawayPostgresOptions primary_options;
  primary_options.listen_tcp = true;
  primary_options.settings = pair->settings_;
  pair->primary_ = ThrowawayPostgres::Start(primary_options);

  // The standby: a base backup with primary_conninfo and standby.signal (-R).
  pair->standby_dir_ = MakeServerDirectory("akadzed-standby-");
  pair->standby_port_ = FreePort(pair->primary_->port());
  const fs::path data = pair->standby_dir_ / "data";
  pair->RunAsServerUser({pair->primary_->bindir() + "/pg_basebackup", "-D", data.string(), "-R",
                         "-X", "stream", "-c", "fast", "--no-sync", "-h", "127.0.0.1", "-p",
                         std::to_string(pair->primary_->port()), "-U", "postgres"},
                        "pg_basebackup");
  pair->RunAsServerUser(
      {pair->primary_->bindir() + "/pg_ctl", "-D", data.string(), "-l",
       (pair->standby_dir_ / "server.log").string(), "-w", "-t", "60", "-o",
       pair->ServerOptions(pair->standby_port_, pair->standby_dir_, true), "start"},
      "pg_ctl start (standby)");
  pair->standby_running_ = true;
  pg::Connection primary = pg::Connection::Open(pair->primary_conninfo(), "streaming standby");
  Await(
      [&] {
        return primary
                   .exec("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")
                   .int64(0, 0) == 1;
      },
      60s, "the standby streams" + Tail(pair->standby_dir_ / "server.log", 5));
  return pair;
}

StreamingStandby::~StreamingStandby() {
  try {
    ResumeWalSender();
  } catch (...) {
  }
  if (old_primary_isolated_) StopDataDirectory(primary_->directory() / "data");
  if (standby_running_) StopDataDirectory(standby_dir_ / "data");
  // The primary: ThrowawayPostgres stops it (a pg_ctl that finds it already
  // stopped fails, which its destructor ignores) and removes its directory.
  primary_.reset();
  std::error_code ec;
  if (!standby_dir_.empty() && std::getenv("AKADZED_KEEP_PG") == nullptr) {
    fs::remove_all(standby_dir_, ec);
  }
}

std::string StreamingStandby::ServerOptions(int port, const fs::path& socket_dir, bool tcp) const {
  // ThrowawayPostgres's defaults (throwaway_postgres.cpp), then ours.
  std::ostringstream opts;
  opts << "-p " << port << " -k " << socket_dir.string()
       << " -c listen_addresses=" << (tcp ? "127.0.0.1" : "''")
       << " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
       << " -c max_connections=300 -c shared_buffers=256MB -c log_min_messages=warning"
       << " -c log_min_error_statement=panic -c max_locks_per_transaction=256";
  for (const auto& s : settings_) opts << " -c " << s;
  return opts.str();
}

void StreamingStandby::RunAsServerUser(const std::vector<std::string>& argv,
                                       const std::string& what) const {
  std::vector<std::string> full;
  if (RunningAsRoot()) full = {"runuser", "-u", "postgres", "--"};
  full.insert(full.end(), argv.begin(), argv.end());
  CommandResult r = RunCommand(full, {}, 120s);
  if (r.exit_code != 0) {
    throw std::runtime_error(what + " failed (exit " + std::to_string(r.exit_code) +
                             "): " + r.out + r.err);
  }
}

void StreamingStandby::StopDataDirectory(const fs::path& data) const {
  try {
    RunAsServerUser({primary_->bindir() + "/pg_ctl", "-D", data.string(), "stop", "-m",
                     "immediate", "-w", "-t", "60"},
                    "pg_ctl stop");
  } catch (...) {
  }
}

// One server, whatever it accepts: target_session_attrs=any, so that a
// pg::Connection (which asks for read-write unless told) reaches a standby.
std::string StreamingStandby::primary_conninfo(const std::string& db) const {
  return "host=127.0.0.1 port=" + std::to_string(primary_->port()) + " user=postgres dbname=" +
         db + " target_session_attrs=any";
}

std::string StreamingStandby::standby_conninfo(const std::string& db) const {
  return "host=127.0.0.1 port=" + std::to_string(standby_port_) + " user=postgres dbname=" + db +
         " target_session_attrs=any";
}

std::string StreamingStandby::multi_host_conninfo(const std::string& db) const {
  return multi_host_conninfo(db, false, "read-write");
}

std::string StreamingStandby::multi_host_conninfo(const std::string& db, bool standby_first,
                                                  const std::string& attrs) const {
  const std::string p = std::to_string(primary_->port()), s = std::to_string(standby_port_);
  std::string c = "host=127.0.0.1,127.0.0.1 port=" + (standby_first ? s + "," + p : p + "," + s) +
                  " user=postgres dbname=" + db;
  if (!attrs.empty()) c += " target_session_attrs=" + attrs;
  return c;
}

void StreamingStandby::CreateDatabase(const std::string& name) const {
  pg::Connection conn = pg::Connection::Open(primary_conninfo(), "streaming standby");
  conn.exec("CREATE DATABASE \"" + name + "\"");
}

void StreamingStandby::WaitCaughtUp(std::chrono::milliseconds timeout) const {
  pg::Connection primary = pg::Connection::Open(primary_conninfo(), "streaming standby");
  const std::string lsn(primary.exec("SELECT pg_current_wal_lsn()::text").text(0, 0));
  pg::Connection standby = pg::Connection::Open(standby_conninfo(), "streaming standby");
  Await(
      [&] {
        return standby.exec("SELECT pg_last_wal_replay_lsn() >= '" + lsn + "'::pg_lsn")
            .boolean(0, 0);
      },
      timeout, "the standby replayed up to " + lsn);
}

void StreamingStandby::SetSynchronous(bool synchronous) const {
  pg::Connection primary = pg::Connection::Open(primary_conninfo(), "streaming standby");
  primary.exec(std::string("ALTER SYSTEM SET synchronous_standby_names = '") +
               (synchronous ? "*" : "") + "'");
  primary.exec("SELECT pg_reload_conf()");
  const std::string want = synchronous ? "sync" : "async";
  Await(
      [&] {
        return primary
                   .exec("SELECT count(*) FROM pg_stat_replication WHERE sync_state = '" + want +
                         "'")
                   .int64(0, 0) == 1;
      },
      30s, "the standby is " + want);
}

pid_t StreamingStandby::PauseWalSender() {
  if (paused_walsender_ > 0) return paused_walsender_;
  pg::Connection primary = pg::Connection::Open(primary_conninfo(), "streaming standby");
  pg::Result r = primary.exec("SELECT pid FROM pg_stat_replication");
  if (r.rows() != 1) {
    throw std::runtime_error("PauseWalSender: " + std::to_string(r.rows()) + " walsenders");
  }
  const pid_t pid = static_cast<pid_t>(r.int64(0, 0));
  if (kill(pid, SIGSTOP) != 0) {
    throw std::runtime_error("PauseWalSender: kill(SIGSTOP): " + std::string(std::strerror(errno)));
  }
  paused_walsender_ = pid;
  return pid;
}

void StreamingStandby::ResumeWalSender() {
  if (paused_walsender_ <= 0) return;
  kill(paused_walsender_, SIGCONT);
  paused_walsender_ = 0;
}

void StreamingStandby::StopPrimaryImmediate() {
  if (primary_stopped_) return;
  const fs::path data = primary_->directory() / "data";
  const pid_t postmaster = PostmasterPid(data);
  if (postmaster <= 0) throw std::runtime_error("StopPrimaryImmediate: no postmaster.pid");
  // What `pg_ctl stop -m immediate` does: SIGQUIT to the postmaster, which
  // SIGQUITs its children. A stopped walsender would hold that signal until
  // resumed and the postmaster would wait for it (5 s, then SIGKILL); it is
  // killed outright instead, so it sends nothing more.
  if (kill(postmaster, SIGQUIT) != 0) {
    throw std::runtime_error("StopPrimaryImmediate: kill(SIGQUIT): " +
                             std::string(std::strerror(errno)));
  }
  if (paused_walsender_ > 0) {
    kill(paused_walsender_, SIGKILL);
    paused_walsender_ = 0;
  }
  primary_stopped_ = true;
  Await([&] { return !fs::exists(data / "postmaster.pid"); }, 60s, "the primary stopped");
}

void StreamingStandby::Promote() {
  // pg_promote() is `pg_ctl promote` without runuser's session setup, which
  // took most of a second on a loaded machine; we wait ourselves.
  pg::Connection standby = pg::Connection::Open(standby_conninfo(), "streaming standby");
  if (!standby.exec("SELECT pg_promote(wait => false)").boolean(0, 0)) {
    throw std::runtime_error("Promote: pg_promote() refused" +
                             Tail(standby_dir_ / "server.log", 5));
  }
  promoted_ = true;
  Await(
      [&] {
        pg::Connection::Open("host=127.0.0.1 port=" + std::to_string(standby_port_) +
                                 " user=postgres dbname=postgres target_session_attrs=read-write",
                             "streaming standby");
        return true;
      },
      60s, "the promoted standby accepts writes");
}

std::string StreamingStandby::StartOldPrimaryIsolated(const std::string& db) {
  if (!primary_stopped_) throw std::logic_error("StartOldPrimaryIsolated before StopPrimaryImmediate");
  const fs::path dir = primary_->directory();
  if (!old_primary_isolated_) {
    isolated_port_ = FreePort(standby_port_);
    // Socket only: no multi-host URL (127.0.0.1) can reach it.
    RunAsServerUser({primary_->bindir() + "/pg_ctl", "-D", (dir / "data").string(), "-l",
                     (dir / "isolated.log").string(), "-w", "-t", "60", "-o",
                     ServerOptions(isolated_port_, dir, false) +
                         " -c synchronous_standby_names=''",
                     "start"},
                    "pg_ctl start (old primary, isolated)");
    old_primary_isolated_ = true;
  }
  return "host=" + dir.string() + " port=" + std::to_string(isolated_port_) +
         " user=postgres dbname=" + db + " target_session_attrs=any";
}

}  // namespace akadzed::test
