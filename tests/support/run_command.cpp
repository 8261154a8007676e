// Child processes for the CLI tests: fork/exec with both output pipes drained
// through poll() until EOF, then waitpid().
#include "support/run_command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "support/test_cluster.h"

extern char** environ;

namespace akadzed::test {

std::vector<std::string> ChildEnvironment(const EnvChanges& changes) {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry(*e);
    std::string name = entry.substr(0, entry.find('='));
    if (!changes.contains(name)) out.push_back(std::move(entry));
  }
  for (const auto& [name, value] : changes) {
    if (value) out.push_back(name + "=" + *value);
  }
  return out;
}

std::vector<char*> ExecPointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

namespace {

void CloseFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

}  // namespace

CommandResult RunCommand(const std::vector<std::string>& argv, const EnvChanges& env,
                         std::chrono::milliseconds timeout) {
  CommandResult result;
  if (argv.empty()) return result;
  // Everything the child needs is prepared before fork(): after it, only
  // async-signal-safe calls.
  std::vector<std::string> args = argv;
  std::vector<std::string> env_strings = ChildEnvironment(env);
  std::vector<char*> arg_ptrs = ExecPointers(args);
  std::vector<char*> env_ptrs = ExecPointers(env_strings);
  std::string path = argv.front();
  if (path.find('/') == std::string::npos) {
    // execvpe is a GNU extension; search PATH ourselves.
    const char* search = std::getenv("PATH");
    std::string dirs = search != nullptr ? search : "/usr/bin:/bin";
    std::size_t start = 0;
    while (start <= dirs.size()) {
      std::size_t end = dirs.find(':', start);
      if (end == std::string::npos) end = dirs.size();
      std::string candidate = dirs.substr(start, end - start) + "/" + argv.front();
      if (access(candidate.c_str(), X_OK) == 0) {
        path = candidate;
        break;
      }
      start = end + 1;
    }
  }

  int out_pipe[2] = {-1, -1};
  int err_pipe[2] = {-1, -1};
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return result;
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    CloseFd(out_pipe[0]);
    CloseFd(out_pipe[1]);
    return result;
  }
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);

  pid_t pid = fork();
  if (pid == 0) {
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    execve(path.c_str(), arg_ptrs.data(), env_ptrs.data());
    static const char kMessage[] = "RunCommand: exec failed\n";
    ssize_t ignored = write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
    (void)ignored;
    _exit(127);
  }
  CloseFd(devnull);
  CloseFd(out_pipe[1]);
  CloseFd(err_pipe[1]);
  if (pid < 0) {
    CloseFd(out_pipe[0]);
    CloseFd(err_pipe[0]);
    return result;
  }

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int fds[2] = {out_pipe[0], err_pipe[0]};
  std::string* sinks[2] = {&result.out, &result.err};
  while (fds[0] >= 0 || fds[1] >= 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      result.timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    pollfd polled[2];
    nfds_t n = 0;
    int which[2];
    for (int i = 0; i < 2; ++i) {
      if (fds[i] < 0) continue;
      polled[n] = pollfd{fds[i], POLLIN, 0};
      which[n++] = i;
    }
    int ready = poll(polled, n, static_cast<int>(left.count()));
    if (ready < 0) {
      if (errno == EINTR) continue;
      kill(pid, SIGKILL);
      break;
    }
    for (nfds_t k = 0; k < n; ++k) {
      if ((polled[k].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      int i = which[k];
      char buffer[4096];
      ssize_t got = read(fds[i], buffer, sizeof buffer);
      if (got > 0) {
        sinks[i]->append(buffer, static_cast<std::size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        CloseFd(fds[i]);
      }
    }
  }
  CloseFd(fds[0]);
  CloseFd(fds[1]);

  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return result;
  }
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.exit_code = 128 + WTERMSIG(status);
  }
  return result;
}

CommandResult RunAkadzed(const std::vector<std::string>& args, const EnvChanges& env) {
  std::vector<std::string> argv = {AkadzedBinary()};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, env);
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

}  // namespace akadzed::test
