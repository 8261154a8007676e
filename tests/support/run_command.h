// Runs a program as a child process for the CLI tests: captures its exit code,
// stdout and stderr (both pipes drained with poll(), so a chatty child cannot
// deadlock against us), with a deadline after which the child is killed.
//
// Thread-safety: RunCommand may be called from any thread; the environment
// for the child is built before fork() and never touches ours.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace akadzed::test {

struct CommandResult {
  // The exit status; 128 + signal number when the child was killed by a
  // signal; -1 when it could not be started.
  int exit_code = -1;
  std::string out;
  std::string err;
  bool timed_out = false;
};

// Changes to the child's environment relative to ours: a value sets the
// variable, std::nullopt removes it.
using EnvChanges = std::map<std::string, std::optional<std::string>>;

// Runs argv[0] (looked up in PATH when it has no '/') with arguments argv[1..],
// stdin from /dev/null. Kills the child (SIGKILL) once `timeout` has passed.
CommandResult RunCommand(const std::vector<std::string>& argv, const EnvChanges& env = {},
                         std::chrono::milliseconds timeout = std::chrono::seconds(60));

// Runs the akadzed binary under test (AkadzedBinary()) with `args`.
CommandResult RunAkadzed(const std::vector<std::string>& args, const EnvChanges& env = {});

// "NAME=value" entries of our environment with `changes` applied.
std::vector<std::string> ChildEnvironment(const EnvChanges& changes);

// argv/envp for exec: pointers into `strings`, null-terminated.
std::vector<char*> ExecPointers(std::vector<std::string>& strings);

// `text` split at '\n'; a trailing newline does not make an empty last line.
std::vector<std::string> Lines(const std::string& text);

}  // namespace akadzed::test
