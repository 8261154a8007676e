#include "support/throwaway_pgbouncer.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>
#include <vector>

#include "pg/connection.h"
#include "pg/pg_error.h"
#include "support/daemon_process.h"

namespace akadzed::test {

namespace fs = std::filesystem;

namespace {

std::string PgBouncerBinary() {
  if (const char* bin = std::getenv("AKADZED_PGBOUNCER_BIN"); bin != nullptr && *bin != '\0') {
    return bin;
  }
  return "/usr/sbin/pgbouncer";
}

void WriteFile(const fs::path& path, const std::string& text, uid_t uid, gid_t gid) {
  {
    std::ofstream out(path, std::ios::trunc);
    out << text;
    if (!out) throw std::runtime_error("cannot write " + path.string());
  }
  if (geteuid() == 0 && chown(path.c_str(), uid, gid) != 0) {
    throw std::runtime_error("cannot chown " + path.string() + ": " + std::strerror(errno));
  }
}

}  // namespace

std::unique_ptr<ThrowawayPgBouncer> ThrowawayPgBouncer::Start(const ThrowawayPostgres& cluster) {
  const std::string binary = PgBouncerBinary();
  if (access(binary.c_str(), X_OK) != 0) {
    throw std::runtime_error(binary + " not found (apt install pgbouncer, or set AKADZED_PGBOUNCER_BIN)");
  }
  std::unique_ptr<ThrowawayPgBouncer> bouncer(new ThrowawayPgBouncer());
  std::string pattern = (fs::temp_directory_path() / "akadzed-pgbouncer-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error("cannot create a temporary directory for PgBouncer: " +
                             std::string(std::strerror(errno)));
  }
  bouncer->dir_ = pattern;

  // The cluster's user: whoever owns its directory (postgres when we are root).
  struct stat owner{};
  if (stat(cluster.directory().c_str(), &owner) != 0) {
    throw std::runtime_error("cannot stat " + cluster.directory().string());
  }
  const bool switch_user = geteuid() == 0;
  if (switch_user && owner.st_uid == 0) {
    throw std::runtime_error("the cluster runs as root; pgbouncer refuses to");
  }
  if (switch_user && chown(bouncer->dir_.c_str(), owner.st_uid, owner.st_gid) != 0) {
    throw std::runtime_error("cannot chown " + bouncer->dir_.string() + ": " + std::strerror(errno));
  }
  // Its socket goes next to the cluster's, so whatever may reach the cluster
  // (a test that opens that directory to another user) reaches it too.
  bouncer->socket_dir_ = cluster.socket_directory();
  std::random_device rd;
  do {
    bouncer->port_ = 20000 + static_cast<int>(rd() % 30000);
  } while (bouncer->port_ == cluster.port());

  const fs::path ini = bouncer->dir_ / "pgbouncer.ini";
  const fs::path users = bouncer->dir_ / "users.txt";
  // The cluster trusts every local connection, so does its pooler. `trust`
  // still needs each user known: postgres from auth_file, any other role
  // (tests create some) through auth_query as auth_user postgres.
  // server_login_retry 1 s (default 15 s): a role a test locked out and let
  // back in logs in again within a second. query_wait_timeout 5 s (default
  // 120 s): a client waiting for a server connection that cannot log in gets
  // an error as soon as the daemon's own timings expect one (operations.md
  // advises keeping it below heartbeat_ttl). server_idle_timeout 10 s
  // (default 600 s): every test has a database, so a pool, of its own; the
  // idle server connections of finished tests go soon, far from the
  // cluster's max_connections.
  // No ignore_startup_parameters: libpq sends only user, database and
  // application_name (which PgBouncer tracks); an `options=` a test passed
  // must fail loudly rather than be dropped.
  WriteFile(ini,
            "[databases]\n"
            "* = host=" + cluster.socket_directory().string() + " port=" +
                std::to_string(cluster.port()) + "\n"
            "\n"
            "[pgbouncer]\n"
            "listen_port = " + std::to_string(bouncer->port_) + "\n"
            "unix_socket_dir = " + bouncer->socket_dir_.string() + "\n"
            "pool_mode = transaction\n"
            "auth_type = trust\n"
            "auth_file = " + users.string() + "\n"
            "auth_user = postgres\n"
            "max_client_conn = 400\n"
            "default_pool_size = " + std::to_string(kPoolSize) + "\n"
            "server_login_retry = 1\n"
            "query_wait_timeout = 5\n"
            "server_idle_timeout = 10\n",
            owner.st_uid, owner.st_gid);
  WriteFile(users, "\"postgres\" \"\"\n", owner.st_uid, owner.st_gid);

  const fs::path log = bouncer->log_path();
  const pid_t parent = getpid();
  bouncer->pid_ = fork();
  if (bouncer->pid_ < 0) throw std::runtime_error("fork failed: " + std::string(std::strerror(errno)));
  if (bouncer->pid_ == 0) {
    // pgbouncer logs to stderr: that is the log file.
    int out = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    int null = open("/dev/null", O_RDONLY);
    if (out < 0 || null < 0) _exit(126);
    dup2(null, STDIN_FILENO);
    dup2(out, STDOUT_FILENO);
    dup2(out, STDERR_FILENO);
    if (switch_user && (setgroups(0, nullptr) != 0 || setgid(owner.st_gid) != 0 ||
                        setuid(owner.st_uid) != 0)) {
      _exit(126);
    }
    // After the user switch, which clears it: die with the test program.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(0);
    execl(binary.c_str(), binary.c_str(), ini.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }

  // Ready once a query through it reaches the cluster.
  const std::string probe = bouncer->conninfo("postgres");
  std::string last_error = "no attempt";
  int status = 0;
  bool exited = false;
  const bool ready = WaitUntil([&] {
    if (waitpid(bouncer->pid_, &status, WNOHANG) == bouncer->pid_) {
      exited = true;
      return true;
    }
    try {
      pg::Connection::Open(probe, "akadzed test setup").exec("SELECT 1");
      return true;
    } catch (const pg::PgError& e) {
      last_error = e.what();
      return false;
    }
  }, std::chrono::seconds(30));
  if (exited) {
    bouncer->pid_ = -1;
    throw std::runtime_error("pgbouncer exited (status " + std::to_string(status) +
                             "): " + bouncer->LogTail());
  }
  if (!ready) {
    throw std::runtime_error("pgbouncer did not answer within 30 s (" + last_error +
                             "): " + bouncer->LogTail());
  }
  return bouncer;
}

ThrowawayPgBouncer::~ThrowawayPgBouncer() {
  Stop();
  std::error_code ec;
  if (!dir_.empty() && std::getenv("AKADZED_KEEP_PG") == nullptr) fs::remove_all(dir_, ec);
}

void ThrowawayPgBouncer::Stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);  // immediate shutdown
  while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

std::string ThrowawayPgBouncer::conninfo(const std::string& dbname) const {
  return "host=" + socket_dir_.string() + " port=" + std::to_string(port_) +
         " user=postgres dbname=" + dbname;
}

std::string ThrowawayPgBouncer::LogTail() const {
  std::ifstream in(log_path());
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::string tail;
  for (std::size_t i = lines.size() > 5 ? lines.size() - 5 : 0; i < lines.size(); ++i) {
    tail += " | " + lines[i];
  }
  return tail;
}

}  // namespace akadzed::test
