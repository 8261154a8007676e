// A primary with a streaming standby on this machine, for failover tests
// (tests/faults/failover_test.cpp): a throwaway primary listening on
// 127.0.0.1 (embedded/throwaway_postgres.h) and a hot standby made from it
// with `pg_basebackup -R`, on its own port and directory, streaming.
//
// Both servers run with the ThrowawayPostgres defaults (fsync off: a server
// crash without an OS crash loses nothing written) except
// synchronous_commit, which is on: with it off, PostgreSQL itself forgets
// commits it acknowledged when it is stopped -m immediate, and a failover
// test could not tell that loss from the replication's. Replication starts
// asynchronous (synchronous_standby_names empty); SetSynchronous(true) makes
// every commit wait until the standby has it.
//
// Lag on demand: PauseWalSender() stops (SIGSTOP) the primary's walsender,
// so commits an asynchronous primary acknowledges from then on are not on
// the standby; StopPrimaryImmediate() then kills the primary without letting
// the walsender send them, and Promote() makes the standby a primary that
// lacks them: the acknowledged commits are lost, as in a real failover with
// lag. StartOldPrimaryIsolated() brings the old primary's data back up
// where no URL points, to count what was lost.
//
// Roles, databases and schemas are replicated: create them on the primary
// (CreateDatabase(), or any connection on primary_conninfo()); WaitCaughtUp()
// waits until the standby has replayed them.
//
// Running as root (as CI does), every server command runs as the `postgres`
// user through runuser(1), as ThrowawayPostgres does.
//
// Thread-safety: one thread. Conninfo accessors may be called from any
// thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "embedded/throwaway_postgres.h"

namespace akadzed::test {

struct StreamingStandbyOptions {
  // Extra `-c name=value` settings for both servers, after the defaults.
  std::vector<std::string> settings;
};

class StreamingStandby {
 public:
  // Starts the primary, takes a base backup of it with pg_basebackup -R,
  // starts the standby and waits until the primary reports it `streaming`.
  // Throws std::runtime_error (with the failing command's output or the log
  // tail) when a step fails.
  static std::unique_ptr<StreamingStandby> Start(const StreamingStandbyOptions& options = {});
  // Resumes a paused walsender, stops every server still running (old
  // primary, isolated old primary, standby) and removes their directories.
  ~StreamingStandby();
  StreamingStandby(const StreamingStandby&) = delete;
  StreamingStandby& operator=(const StreamingStandby&) = delete;

  int primary_port() const { return primary_->port(); }
  int standby_port() const { return standby_port_; }
  // TCP keyword conninfos (host=127.0.0.1, user postgres, trust) for `db`
  // on one server, with target_session_attrs=any (reads on a standby).
  std::string primary_conninfo(const std::string& db = "postgres") const;
  std::string standby_conninfo(const std::string& db = "postgres") const;
  // "host=127.0.0.1,127.0.0.1 port=<primary>,<standby> user=postgres
  // dbname=<db> target_session_attrs=read-write": libpq connects to
  // whichever host accepts writes, before and after a promote.
  std::string multi_host_conninfo(const std::string& db) const;
  // The two hosts in the order asked, with `target_session_attrs=<attrs>`
  // appended unless `attrs` is empty (then libpq's default, any host that
  // accepts a connection, applies).
  std::string multi_host_conninfo(const std::string& db, bool standby_first,
                                  const std::string& attrs) const;

  // CREATE DATABASE on the primary (replicated like any other change).
  void CreateDatabase(const std::string& name) const;
  // Waits until the standby has replayed the WAL the primary had written
  // when called (pg_current_wal_lsn). Throws on timeout.
  void WaitCaughtUp(std::chrono::milliseconds timeout = std::chrono::seconds(30)) const;
  // synchronous_standby_names = '*' (true) or '' (false) on the primary,
  // reloaded; returns once pg_stat_replication shows the standby `sync`
  // (resp. `async`). Throws on timeout.
  void SetSynchronous(bool synchronous) const;

  // SIGSTOPs the primary's walsender (its pid from pg_stat_replication);
  // returns the pid. Commits keep being acknowledged by an asynchronous
  // primary, and reach the standby only once resumed.
  pid_t PauseWalSender();
  // SIGCONTs a paused walsender (no-op when none is paused).
  void ResumeWalSender();
  bool walsender_paused() const { return paused_walsender_ > 0; }

  // Stops the primary as `pg_ctl stop -m immediate` does (SIGQUIT to the
  // postmaster), SIGKILLs a paused walsender so that it sends nothing more,
  // and returns once the postmaster is gone (postmaster.pid removed).
  void StopPrimaryImmediate();
  // Promotes the standby (pg_promote(), as `pg_ctl promote`); returns once a
  // read-write session
  // (target_session_attrs=read-write) opens on it, i.e. it accepts writes.
  void Promote();
  bool promoted() const { return promoted_; }

  // After StopPrimaryImmediate(): starts the old primary's data directory
  // again, crash recovery included, on a Unix socket only and a port no URL
  // above names, so that no daemon can reach it; returns a conninfo for
  // `db` on it. For reading what it had committed that the standby lacks.
  // Stopped by the destructor.
  std::string StartOldPrimaryIsolated(const std::string& db);

  ThrowawayPostgres& primary() { return *primary_; }
  const std::filesystem::path& standby_directory() const { return standby_dir_; }

 private:
  StreamingStandby() = default;
  // Runs argv as the server user; throws with `what` and the output on failure.
  void RunAsServerUser(const std::vector<std::string>& argv, const std::string& what) const;
  std::string ServerOptions(int port, const std::filesystem::path& socket_dir, bool tcp) const;
  void StopDataDirectory(const std::filesystem::path& data) const;

  std::unique_ptr<ThrowawayPostgres> primary_;
  std::vector<std::string> settings_;
  std::filesystem::path standby_dir_;
  int standby_port_ = 0;
  bool standby_running_ = false;
  bool primary_stopped_ = false;
  bool promoted_ = false;
  bool old_primary_isolated_ = false;
  int isolated_port_ = 0;
  pid_t paused_walsender_ = 0;
};

}  // namespace akadzed::test
