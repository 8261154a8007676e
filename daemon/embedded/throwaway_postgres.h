// A throwaway PostgreSQL cluster: initdb into a fresh temporary directory,
// started on a private Unix socket, stopped and deleted on destruction.
//
// Used by the test suites, the benchmarks and the quick-start `demo` command.
// When the process runs as root, the server runs as the `postgres` user
// (initdb refuses root) through runuser(1). Durability is off (fsync,
// synchronous_commit, full_page_writes): the data is thrown away anyway.
//
// Thread-safety: start/stop from one thread; conninfo() and create_database()
// may be called from any thread once started.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace akadzed {

struct ThrowawayPostgresOptions {
  // Directory holding initdb/pg_ctl/postgres. Empty: $AKADZED_PG_BINDIR, else
  // the newest /usr/lib/postgresql/<version>/bin.
  std::string bindir;
  // Extra `-c name=value` server settings, appended after the defaults.
  std::vector<std::string> settings;
  // Also listen on 127.0.0.1:<port> (off: Unix socket only).
  bool listen_tcp = false;
};

class ThrowawayPostgres {
 public:
  // Creates and starts the cluster. Throws std::runtime_error with the last
  // lines of the server log when a step fails.
  static std::unique_ptr<ThrowawayPostgres> Start(const ThrowawayPostgresOptions& options = {});
  ~ThrowawayPostgres();
  ThrowawayPostgres(const ThrowawayPostgres&) = delete;
  ThrowawayPostgres& operator=(const ThrowawayPostgres&) = delete;

  // Keyword conninfo for database `dbname` as superuser `postgres`.
  std::string conninfo(const std::string& dbname = "postgres") const;
  // Creates database `name` (optionally from `template_name`).
  void create_database(const std::string& name, const std::string& template_name = "") const;

  const std::filesystem::path& directory() const { return dir_; }
  const std::filesystem::path& socket_directory() const { return dir_; }
  const std::string& bindir() const { return bindir_; }
  int port() const { return port_; }
  // Runs pg_ctl with `args` against this cluster (e.g. {"restart", "-m", "fast"}).
  void pg_ctl(const std::vector<std::string>& args) const;
  // Stops the server now (idempotent); the directory is removed on destruction.
  void stop();
  // Starts it again after stop(), with the options it was created with
  // (idempotent); waits until it accepts connections.
  void start();

 private:
  ThrowawayPostgres() = default;
  // Runs argv as the server's user; throws with `what` and the log tail on failure.
  void run_as_server_user(const std::vector<std::string>& argv, const std::string& what) const;
  std::string log_tail() const;

  std::filesystem::path dir_;
  std::string bindir_;
  std::string server_options_;  // pg_ctl -o, for start()
  int port_ = 0;
  bool running_ = false;
};

}  // namespace akadzed
