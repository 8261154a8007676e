#include "support/daemon_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "support/test_cluster.h"

namespace akadzed::test {

bool WaitUntil(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return condition();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "akadzed-test-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::string TempDir::Write(const std::string& name, const std::string& text, bool executable) const {
  std::string file = path_ + "/" + name;
  std::filesystem::create_directories(std::filesystem::path(file).parent_path());
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << text;
  }
  chmod(file.c_str(), executable ? 0755 : 0644);
  return file;
}

DaemonProcess::DaemonProcess(const std::vector<std::string>& args, const EnvChanges& env,
                             std::string log_path, const std::string& cgroup_procs)
    : log_path_(std::move(log_path)) {
  std::vector<std::string> argv{AkadzedBinary()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::string> env_strings = ChildEnvironment(env);
  std::vector<char*> arg_ptrs = ExecPointers(argv);
  std::vector<char*> env_ptrs = ExecPointers(env_strings);
  int log = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log < 0) throw std::runtime_error("cannot open " + log_path_);
  pid_ = fork();
  if (pid_ == 0) {
    if (!cgroup_procs.empty()) {
      // "0" moves the writing process (cgroup v1 and v2).
      const int procs = open(cgroup_procs.c_str(), O_WRONLY);
      if (procs < 0 || write(procs, "0", 1) != 1) _exit(126);
      close(procs);
    }
    int null = open("/dev/null", O_RDONLY);
    dup2(null, 0);
    dup2(log, 1);
    dup2(log, 2);
    execve(arg_ptrs[0], arg_ptrs.data(), env_ptrs.data());
    _exit(127);
  }
  close(log);
  if (pid_ < 0) throw std::runtime_error("fork failed");
}

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0 && exit_code_ < 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

void DaemonProcess::Signal(int sig) const {
  if (exit_code_ < 0) kill(pid_, sig);
}

int DaemonProcess::Wait(std::chrono::milliseconds timeout) {
  WaitUntil([&] { return !running(); }, timeout);
  return exit_code_;
}

bool DaemonProcess::running() {
  if (exit_code_ >= 0) return false;
  int status = 0;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == 0) return true;
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return false;
}

std::string DaemonProcess::Log() const {
  std::ifstream in(log_path_, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

bool DaemonProcess::WaitForLog(const std::string& needle, std::chrono::milliseconds timeout) const {
  return WaitUntil([&] { return Log().find(needle) != std::string::npos; }, timeout);
}

}  // namespace akadzed::test
