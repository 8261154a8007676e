#include "embedded/throwaway_postgres.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

#include "pg/connection.h"

namespace akadzed {

namespace fs = std::filesystem;

namespace {

std::string FindBindir(const std::string& requested) {
  if (!requested.empty()) return requested;
  if (const char* env = std::getenv("AKADZED_PG_BINDIR"); env != nullptr && *env != '\0') {
    return env;
  }
  std::vector<std::pair<int, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/usr/lib/postgresql", ec)) {
    fs::path bin = entry.path() / "bin";
    if (fs::exists(bin / "initdb") && fs::exists(bin / "pg_ctl")) {
      found.emplace_back(std::atoi(entry.path().filename().c_str()), bin.string());
    }
  }
  if (found.empty()) {
    throw std::runtime_error(
        "no PostgreSQL server binaries found under /usr/lib/postgresql/*/bin "
        "(install postgresql-15 or set AKADZED_PG_BINDIR)");
  }
  std::sort(found.begin(), found.end());
  return found.back().second;
}

// Runs argv, with stdout/stderr appended to `log`, and returns its exit status
// (or -1 if it could not start).
int RunAndWait(const std::vector<std::string>& argv, const fs::path& log) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
    }
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    execvp(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

bool RunningAsRoot() { return geteuid() == 0; }

}  // namespace

std::unique_ptr<ThrowawayPostgres> ThrowawayPostgres::Start(const ThrowawayPostgresOptions& options) {
  std::unique_ptr<ThrowawayPostgres> pg(new ThrowawayPostgres());
  pg->bindir_ = FindBindir(options.bindir);

  std::string pattern = (fs::temp_directory_path() / "akadzed-pg-XXXXXX").string();
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) {
    throw std::runtime_error("cannot create a temporary directory for PostgreSQL: " +
                             std::string(std::strerror(errno)));
  }
  pg->dir_ = buf.data();
  if (RunningAsRoot()) {
    struct passwd* pw = getpwnam("postgres");
    if (pw == nullptr) {
      throw std::runtime_error("running as root needs a 'postgres' user to run the server");
    }
    if (chown(pg->dir_.c_str(), pw->pw_uid, pw->pw_gid) != 0) {
      throw std::runtime_error("cannot chown " + pg->dir_.string() + ": " + std::strerror(errno));
    }
  }
  std::random_device rd;
  pg->port_ = 20000 + static_cast<int>(rd() % 30000);

  const std::string data = (pg->dir_ / "data").string();
  pg->run_as_server_user({pg->bindir_ + "/initdb", "-D", data, "-U", "postgres", "-A", "trust",
                          "-E", "UTF8", "--locale=C", "--no-sync"},
                         "initdb");

  std::ostringstream opts;
  opts << "-p " << pg->port_ << " -k " << pg->dir_.string()
       << " -c listen_addresses=" << (options.listen_tcp ? "127.0.0.1" : "''")
       << " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
       << " -c max_connections=300 -c shared_buffers=256MB -c log_min_messages=warning"
       << " -c log_min_error_statement=panic -c max_locks_per_transaction=256";
  for (const auto& setting : options.settings) opts << " -c " << setting;
  pg->server_options_ = opts.str();
  pg->start();
  return pg;
}

void ThrowawayPostgres::start() {
  if (running_) return;
  pg_ctl({"-w", "-t", "60", "-o", server_options_, "start"});
  running_ = true;
}

ThrowawayPostgres::~ThrowawayPostgres() {
  try {
    stop();
  } catch (...) {
  }
  std::error_code ec;
  if (!dir_.empty() && std::getenv("AKADZED_KEEP_PG") == nullptr) fs::remove_all(dir_, ec);
}

void ThrowawayPostgres::stop() {
  if (!running_) return;
  running_ = false;
  pg_ctl({"stop", "-m", "immediate", "-w"});
}

void ThrowawayPostgres::pg_ctl(const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {bindir_ + "/pg_ctl", "-D", (dir_ / "data").string(), "-l",
                                   (dir_ / "server.log").string()};
  argv.insert(argv.end(), args.begin(), args.end());
  run_as_server_user(argv, "pg_ctl " + (args.empty() ? std::string() : args.front()));
}

std::string ThrowawayPostgres::conninfo(const std::string& dbname) const {
  return "host=" + dir_.string() + " port=" + std::to_string(port_) +
         " user=postgres dbname=" + dbname;
}

void ThrowawayPostgres::create_database(const std::string& name,
                                        const std::string& template_name) const {
  pg::Connection conn = pg::Connection::Open(conninfo("postgres"));
  std::string sql = "CREATE DATABASE \"" + name + "\"";
  if (!template_name.empty()) sql += " TEMPLATE \"" + template_name + "\" STRATEGY FILE_COPY";
  conn.exec(sql);
}

void ThrowawayPostgres::run_as_server_user(const std::vector<std::string>& argv,
                                           const std::string& what) const {
  std::vector<std::string> full;
  if (RunningAsRoot()) full = {"runuser", "-u", "postgres", "--"};
  full.insert(full.end(), argv.begin(), argv.end());
  fs::path log = dir_ / "commands.log";
  int rc = RunAndWait(full, log);
  if (rc != 0) {
    throw std::runtime_error(what + " failed (exit " + std::to_string(rc) + "): " + log_tail());
  }
}

std::string ThrowawayPostgres::log_tail() const {
  std::string tail;
  for (const char* name : {"commands.log", "server.log"}) {
    std::ifstream in(dir_ / name);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    std::size_t from = lines.size() > 5 ? lines.size() - 5 : 0;
    for (std::size_t i = from; i < lines.size(); ++i) tail += " | " + lines[i];
  }
  return tail;
}

}  // namespace akadzed
