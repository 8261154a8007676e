// `akadzed run` as a child process for the daemon tests: started in the
// background with its output in a file, signalled, awaited. Also the
// condition-waiting helper those tests use instead of sleeps.
//
// Thread-safety: one DaemonProcess per test thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "support/run_command.h"

namespace akadzed::test {

// Polls `condition` every 20 ms until it is true or `timeout` passed; returns
// its last value.
bool WaitUntil(const std::function<bool()>& condition,
               std::chrono::milliseconds timeout = std::chrono::seconds(30));

// A fresh temporary directory, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  // Writes `text` to path()/name (mode 0755 when `executable`); returns its path.
  std::string Write(const std::string& name, const std::string& text, bool executable = false) const;

 private:
  std::string path_;
};

class DaemonProcess {
 public:
  // Starts the akadzed binary with `args`; stdout and stderr go to `log_path`.
  // With `cgroup_procs` (a cgroup's cgroup.procs file), the child joins that
  // cgroup before it execs: every thread the daemon makes counts there.
  DaemonProcess(const std::vector<std::string>& args, const EnvChanges& env,
                std::string log_path, const std::string& cgroup_procs = "");
  // Kills (SIGKILL) and reaps the process if it still runs.
  ~DaemonProcess();
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  pid_t pid() const { return pid_; }
  void Signal(int sig) const;
  // Waits for the exit; returns the exit code (128 + signal when killed) or
  // -1 when `timeout` passed first.
  int Wait(std::chrono::milliseconds timeout = std::chrono::seconds(60));
  bool running();
  // Everything the process printed so far.
  std::string Log() const;
  // Waits until the log contains `needle`.
  bool WaitForLog(const std::string& needle,
                  std::chrono::milliseconds timeout = std::chrono::seconds(30)) const;

 private:
  pid_t pid_ = -1;
  int exit_code_ = -1;
  std::string log_path_;
};

}  // namespace akadzed::test
