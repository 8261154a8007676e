#include "handlers/shell_handler.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <libpq-fe.h>
#include <spdlog/spdlog.h>

#include "core/duration.h"
#include "core/redact.h"
#include "handlers/outcome_report.h"
#include "runtime/log_line.h"

extern char** environ;

namespace akadzed {

namespace {

// The real clock: timeout and kill_grace bound a real process group,
// supervised in poll(2) on its pipes, which only real time moves.
using Clock = std::chrono::steady_clock;

constexpr int kOutcomeFd = 3;
constexpr std::size_t kReadChunk = 64 * 1024;
constexpr std::size_t kMaxStderrInMessage = 400;
// After the leader exits (and its group is killed), how long pipes may take
// to reach EOF; a process that left the group could hold them open forever.
constexpr auto kDrainBound = std::chrono::seconds(1);
// Exit polling interval when the kernel has no pidfd_open (Linux < 5.3).
constexpr auto kExitPollTick = std::chrono::milliseconds(20);

// The daemon's own systemd plumbing, never inherited by a job.
constexpr std::array<std::string_view, 6> kSystemdVariables = {
    "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"};

// libpq's environment variables (its documentation's "Environment
// Variables"; PQconndefaults adds those of newer versions): the daemon's
// database settings and credentials, never inherited by a job.
constexpr std::array<std::string_view, 40> kLibpqVariables = {
    "PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGPASSWORD", "PGPASSFILE",
    "PGREQUIREAUTH", "PGCHANNELBINDING", "PGSERVICE", "PGSERVICEFILE", "PGOPTIONS", "PGAPPNAME",
    "PGSSLMODE", "PGREQUIRESSL", "PGSSLNEGOTIATION", "PGSSLCOMPRESSION", "PGSSLCERT", "PGSSLKEY",
    "PGSSLCERTMODE", "PGSSLROOTCERT", "PGSSLCRL", "PGSSLCRLDIR", "PGSSLSNI", "PGREQUIREPEER",
    "PGSSLMINPROTOCOLVERSION", "PGSSLMAXPROTOCOLVERSION", "PGGSSENCMODE", "PGKRBSRVNAME",
    "PGGSSLIB", "PGGSSDELEGATION", "PGCONNECT_TIMEOUT", "PGCLIENTENCODING",
    "PGTARGETSESSIONATTRS", "PGLOADBALANCEHOSTS", "PGDATESTYLE", "PGTZ", "PGGEQO", "PGSYSCONFDIR",
    "PGLOCALEDIR"};

// Whether the daemon's variable `name` stays out of a job's environment
// (docs/handlers.md, "Environment"): systemd's, libpq's, and every AKADZE_*
// (AKADZE_DATABASE_URL; the job's own are set afresh).
bool Withheld(std::string_view name) {
  static const std::set<std::string, std::less<>> kNames = [] {
    std::set<std::string, std::less<>> names(kSystemdVariables.begin(), kSystemdVariables.end());
    names.insert(kLibpqVariables.begin(), kLibpqVariables.end());
    if (PQconninfoOption* options = PQconndefaults()) {
      for (const PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
        if (o->envvar != nullptr) names.emplace(o->envvar);
      }
      PQconninfoFree(options);
    }
    return names;
  }();
  // The daemon's own trace context is not the job's (TRACEPARENT is set
  // from the job's meta, or not at all).
  return name.starts_with("AKADZE_") || kNames.count(name) != 0 || name == "TRACEPARENT" ||
         name == "TRACESTATE";
}

[[noreturn]] void ThrowErrno(int error, const char* what) {
  throw std::system_error(error, std::generic_category(), what);
}

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  ~UniqueFd() { Reset(); }

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  void Reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// A pipe between the daemon and the child; both ends close-on-exec. The
// child's end is moved above fd 3, so that the spawn's dup2 onto 0..3 never
// overwrites another source fd (or finds source == target, which would leave
// close-on-exec set).
struct Pipe {
  UniqueFd ours;
  UniqueFd childs;
};

Pipe MakePipe(bool child_reads) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) ThrowErrno(errno, "pipe2");
  UniqueFd read_end(fds[0]);
  UniqueFd write_end(fds[1]);
  Pipe result = child_reads ? Pipe{std::move(write_end), std::move(read_end)}
                            : Pipe{std::move(read_end), std::move(write_end)};
  if (result.childs.get() <= kOutcomeFd) {
    int moved = fcntl(result.childs.get(), F_DUPFD_CLOEXEC, kOutcomeFd + 1);
    if (moved < 0) ThrowErrno(errno, "fcntl");
    result.childs = UniqueFd(moved);
  }
  return result;
}

// A pollable fd that turns readable when `pid` exits; -1 where the kernel
// (before 5.3) or the headers lack pidfd_open.
int PidfdOpen(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

// write() that reports a pipe without reader as EPIPE without raising
// SIGPIPE in the daemon (which need not ignore it): SIGPIPE is blocked in
// this thread for the call and a SIGPIPE the write raised is consumed.
ssize_t WriteNoSigpipe(int fd, const char* data, std::size_t size) {
  sigset_t pipe_set;
  sigset_t old_mask;
  sigset_t pending;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  sigpending(&pending);
  const bool was_pending = sigismember(&pending, SIGPIPE) == 1;
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old_mask);
  ssize_t n = write(fd, data, size);
  const int saved = errno;
  if (n < 0 && saved == EPIPE && !was_pending) {
    const timespec zero{};
    while (sigtimedwait(&pipe_set, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  errno = saved;
  return n;
}

std::string SignalName(int sig) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 32)
  if (const char* abbrev = sigabbrev_np(sig)) return std::string("SIG") + abbrev;
#endif
  const char* text = strsignal(sig);
  return text != nullptr ? text : "signal " + std::to_string(sig);
}

const char* StopReasonText(StopReason reason) {
  switch (reason) {
    case StopReason::kNone: break;
    case StopReason::kCancelRequested: return "cancel requested";
    case StopReason::kShutdown: return "shutdown";
    case StopReason::kLeaseLost: return "lease lost";
  }
  return "stop requested";
}

// ---------------------------------------------------------------------------
// Output: stdout/stderr split into lines, each logged once, with per-line and
// per-run caps.

class OutputLog {
 public:
  enum Stream { kStdout = 0, kStderr = 1 };

  OutputLog(std::int64_t job_id, const std::string& task, const ShellHandlerConfig& config)
      : job_id_(job_id), task_(task), max_line_(config.max_line_bytes),
        max_total_(config.max_output_bytes) {}

  // Feeds bytes read from `stream`; complete lines are logged.
  void Add(Stream stream, std::string_view data) {
    Buffer& buffer = buffers_[stream];
    while (!data.empty()) {
      const std::size_t newline = data.find('\n');
      if (buffer.skipping) {  // the rest of an overlong line
        if (newline == std::string_view::npos) return;
        buffer.skipping = false;
      } else if (newline == std::string_view::npos) {
        buffer.pending.append(data);
        if (buffer.pending.size() > max_line_) {  // log the cut line now, skip its rest
          Line(stream, buffer.pending);
          buffer.pending.clear();
          buffer.skipping = true;
        }
        return;
      } else if (buffer.pending.empty()) {
        Line(stream, data.substr(0, newline));
      } else {
        buffer.pending.append(data.substr(0, newline));
        Line(stream, buffer.pending);
        buffer.pending.clear();
      }
      data.remove_prefix(newline + 1);
    }
  }

  // End of `stream`: a partial last line is logged.
  void Finish(Stream stream) {
    Buffer& buffer = buffers_[stream];
    if (!buffer.pending.empty() && !buffer.skipping) Line(stream, buffer.pending);
    buffer.pending.clear();
    buffer.skipping = false;
  }

  // The last non-blank stderr line, redacted and cut to max_line_bytes.
  const std::string& last_stderr_line() const { return last_stderr_; }

 private:
  // Cheap pre-check for RedactSecrets (a regex): URLs with credentials and
  // password= keywords are all it removes.
  static bool MayHoldSecret(std::string_view line) {
    if (line.find('@') != std::string_view::npos) return true;
    for (std::size_t at = line.find_first_of("pP"); at != std::string_view::npos;
         at = line.find_first_of("pP", at + 1)) {
      std::string_view word = line.substr(at, 8);
      if (word.size() == 8 && std::equal(word.begin(), word.end(), "password", [](char a, char b) {
            return std::tolower(static_cast<unsigned char>(a)) == b;
          })) {
        return true;
      }
    }
    return false;
  }

  struct Buffer {
    std::string pending;
    bool skipping = false;
  };

  void Line(Stream stream, std::string_view line) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::string cut = TruncateUtf8(MayHoldSecret(line) ? RedactSecrets(line) : line, max_line_);
    if (stream == kStderr && cut.find_first_not_of(" \t") != std::string::npos) last_stderr_ = cut;
    if (truncated_) return;
    if (max_total_ == 0 || logged_ + cut.size() > max_total_) {
      truncated_ = true;
      spdlog::warn("output job={} task={} | truncated after {} bytes", job_id_, LogValue(task_),
                   logged_);
      return;
    }
    logged_ += cut.size();
    spdlog::info("output job={} task={} stream={} | {}", job_id_, LogValue(task_),
                 stream == kStdout ? "stdout" : "stderr", cut);
  }

  const std::int64_t job_id_;
  const std::string& task_;
  const std::size_t max_line_;
  const std::size_t max_total_;
  std::array<Buffer, 2> buffers_;
  std::size_t logged_ = 0;
  bool truncated_ = false;
  std::string last_stderr_;
};

// How the leader process ended.
struct ExitStatus {
  enum class How { kExited, kSignaled, kUnknown } how = How::kUnknown;
  int code = 0;  // exit status or signal number
  bool core_dumped = false;

  bool success() const { return how == How::kExited && code == 0; }
  std::string Describe() const {
    switch (how) {
      case How::kExited: return "exited with status " + std::to_string(code);
      case How::kSignaled:
        return "killed by " + SignalName(code) + (core_dumped ? " (core dumped)" : "");
      case How::kUnknown: break;
    }
    return "exit status unavailable (is SIGCHLD ignored?)";
  }
};

// ---------------------------------------------------------------------------
// One run: spawn, supervise, decide. Lives on the stack of Run.

// What a polled fd is; the first three index ShellRun::readers_ (and the
// first two are OutputLog streams).
enum Watch { kWatchStdout, kWatchStderr, kWatchOutcome, kWatchStdin, kWatchExit, kWatchStop };

class ShellRun {
 public:
  ShellRun(const std::string& task, const ShellHandlerConfig& config, const ClaimedJob& job,
           JobStop& stop, JobProgress* progress)
      : task_(task), config_(config), job_(job), stop_(stop), progress_(progress),
        output_(job.id, task, config) {}

  ShellRun(const ShellRun&) = delete;
  ShellRun& operator=(const ShellRun&) = delete;

  ~ShellRun() { KillAndReap(); }

  // Never throws: an error of our own (no fds, no memory) is a kRetry
  // outcome, after the child (if any) has been killed and reaped.
  JobOutcome Execute() {
    try {
      if (stop_.requested()) {
        JobOutcome stopped = RetryOutcome("Stopped", std::string("stopped before start: ") +
                                                         StopReasonText(stop_.reason()));
        stopped.interrupted = true;
        return stopped;
      }
      if (std::optional<JobOutcome> failed = Spawn()) return *failed;
      Supervise();
      return Decide();
    } catch (const std::exception& e) {
      KillAndReap();
      spdlog::error("shell job={} task={} | handler error: {}", job_.id, LogValue(task_), e.what());
      return RetryOutcome(pid_ > 0 ? "HandlerError" : "SpawnFailed", e.what());
    }
  }

 private:
  // Builds everything the child needs, then posix_spawn (no allocation
  // happens between fork and exec). Returns an outcome when it cannot start.
  std::optional<JobOutcome> Spawn();
  void Supervise();
  JobOutcome Decide() const;

  std::vector<std::string> Environment() const;
  void SignalGroup(int sig) const {
    if (pid_ > 0 && !reaped_) kill(-pid_, sig);
  }
  void Terminate(Clock::time_point now);
  // What Terminate sends first: SIGKILL at once with kill_grace 0.
  const char* FirstSignalName() const { return config_.kill_grace_us > 0 ? "SIGTERM" : "SIGKILL"; }
  bool CheckExited();
  void ReadFrom(UniqueFd& fd, Watch which);
  // Takes the complete progress lines out of report_text_ (from
  // progress_scan_ on) and reports them.
  void TakeProgressLines();
  void WriteStdin();
  void Reap();
  void KillAndReap() {
    SignalGroup(SIGKILL);
    Reap();
  }

  const std::string& task_;
  const ShellHandlerConfig& config_;
  const ClaimedJob& job_;
  JobStop& stop_;
  JobProgress* progress_;  // may be null
  OutputLog output_;

  pid_t pid_ = -1;
  bool reaped_ = false;
  UniqueFd pidfd_;
  UniqueFd stdin_;            // ours: write end
  std::size_t stdin_written_ = 0;
  std::array<UniqueFd, 3> readers_;  // by Watch: stdout, stderr, outcome
  std::string buffer_;
  std::string report_text_;
  bool report_too_big_ = false;
  std::size_t progress_scan_ = 0;  // report_text_ before it holds no progress line
  bool progress_refusal_logged_ = false;

  bool exited_ = false;
  ExitStatus status_;
  bool timed_out_ = false;
  bool stopped_ = false;  // signalled because of a stop request while running
  bool term_sent_ = false;
  std::optional<Clock::time_point> kill_at_;
};

std::vector<std::string> ShellRun::Environment() const {
  std::map<std::string, std::string> ours = config_.env;
  ours["AKADZE_JOB_ID"] = std::to_string(job_.id);
  ours["AKADZE_TASK"] = job_.task;
  ours["AKADZE_QUEUE"] = job_.queue;
  // The attempt this run counts as: 1 on the first run (job.attempt counts
  // the failed runs before it), as for plugins.
  ours["AKADZE_ATTEMPT"] = std::to_string(job_.run_attempt());
  ours["AKADZE_MAX_ATTEMPTS"] = std::to_string(job_.max_attempts);
  ours["AKADZE_RUN_COUNT"] = std::to_string(job_.run_count);
  ours["AKADZE_LIMIT_KEY"] = job_.limit_key.value_or("");
  ours["AKADZE_OUTCOME_FD"] = std::to_string(kOutcomeFd);
  if (job_.traceparent) ours["TRACEPARENT"] = *job_.traceparent;

  std::vector<std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const std::string_view name = text.substr(0, text.find('='));
    if (Withheld(name) || ours.count(std::string(name)) != 0) continue;
    env.emplace_back(text);
  }
  for (const auto& [name, value] : ours) env.push_back(name + "=" + value);
  return env;
}

std::optional<JobOutcome> ShellRun::Spawn() {
  const std::string& program = config_.command.front();
  std::array<Pipe, 4> pipes = {MakePipe(true), MakePipe(false), MakePipe(false), MakePipe(false)};

  std::vector<char*> argv;
  for (const std::string& arg : config_.command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  const std::vector<std::string> env = Environment();
  std::vector<char*> envp;
  for (const std::string& entry : env) envp.push_back(const_cast<char*>(entry.c_str()));
  envp.push_back(nullptr);

  struct Setup {
    Setup() {
      if (int rc = posix_spawnattr_init(&attr); rc != 0) ThrowErrno(rc, "posix_spawnattr_init");
      if (int rc = posix_spawn_file_actions_init(&actions); rc != 0) {
        posix_spawnattr_destroy(&attr);
        ThrowErrno(rc, "posix_spawn_file_actions_init");
      }
    }
    ~Setup() {
      posix_spawn_file_actions_destroy(&actions);
      posix_spawnattr_destroy(&attr);
    }
    posix_spawnattr_t attr;
    posix_spawn_file_actions_t actions;
  } setup;
  auto check = [](int rc, const char* what) {
    if (rc != 0) ThrowErrno(rc, what);
  };
  // Own process group; a clean signal state whatever the daemon blocks or ignores.
  sigset_t none;
  sigset_t all;
  sigemptyset(&none);
  sigfillset(&all);
  check(posix_spawnattr_setpgroup(&setup.attr, 0), "posix_spawnattr_setpgroup");
  check(posix_spawnattr_setsigmask(&setup.attr, &none), "posix_spawnattr_setsigmask");
  check(posix_spawnattr_setsigdefault(&setup.attr, &all), "posix_spawnattr_setsigdefault");
  check(posix_spawnattr_setflags(&setup.attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                                  POSIX_SPAWN_SETSIGDEF),
        "posix_spawnattr_setflags");
  for (int target = 0; target <= kOutcomeFd; ++target) {
    check(posix_spawn_file_actions_adddup2(&setup.actions, pipes[target].childs.get(), target),
          "posix_spawn_file_actions_adddup2");
  }
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 34)
  // Everything is close-on-exec already; this also covers fds that other
  // code (libraries) opened without O_CLOEXEC.
  check(posix_spawn_file_actions_addclosefrom_np(&setup.actions, kOutcomeFd + 1),
        "posix_spawn_file_actions_addclosefrom_np");
#endif
  if (!config_.working_directory.empty()) {
    check(posix_spawn_file_actions_addchdir_np(&setup.actions, config_.working_directory.c_str()),
          "posix_spawn_file_actions_addchdir_np");
  }

  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, program.c_str(), &setup.actions, &setup.attr, argv.data(),
                              envp.data());
  if (rc != 0) {
    // The chdir runs before the exec: name the directory when it is the culprit.
    const std::string& dir = config_.working_directory;
    if (!dir.empty() && access(dir.c_str(), X_OK) != 0) {
      return RetryOutcome("SpawnFailed", "working_directory " + dir + ": " + std::strerror(errno));
    }
    return RetryOutcome("SpawnFailed", program + ": " + std::strerror(rc));
  }
  pid_ = pid;
  pidfd_ = UniqueFd(PidfdOpen(pid));  // -1 on old kernels: exit is polled instead

  stdin_ = std::move(pipes[0].ours);
  for (int i = 0; i < 3; ++i) readers_[i] = std::move(pipes[i + 1].ours);
  // pipes[*].childs close here: only the child holds them now.
  if (job_.args_json.empty()) {
    stdin_.Reset();
  } else if (fcntl(stdin_.get(), F_SETFL, O_NONBLOCK) != 0) {
    ThrowErrno(errno, "fcntl");
  }
  return std::nullopt;
}

void ShellRun::Terminate(Clock::time_point now) {
  if (term_sent_) return;
  term_sent_ = true;
  if (config_.kill_grace_us <= 0) {
    SignalGroup(SIGKILL);
    return;
  }
  SignalGroup(SIGTERM);
  kill_at_ = now + std::chrono::microseconds(config_.kill_grace_us);
}

// Looks (without reaping) whether the leader has exited; on exit, kills what
// is left of its group while the unreaped leader still pins the group id.
bool ShellRun::CheckExited() {
  siginfo_t info{};
  int rc;
  do {
    rc = waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT);
  } while (rc < 0 && errno == EINTR);
  if (rc < 0) {
    // ECHILD: someone else reaped it (SIGCHLD ignored?); its pid may already
    // be reused, so the group is not signalled again.
    status_ = ExitStatus{};
    reaped_ = true;
  } else if (info.si_pid == 0) {
    return false;
  } else if (info.si_code == CLD_EXITED) {
    status_ = {ExitStatus::How::kExited, info.si_status, false};
  } else {
    status_ = {ExitStatus::How::kSignaled, info.si_status, info.si_code == CLD_DUMPED};
  }
  exited_ = true;
  SignalGroup(SIGKILL);
  stdin_.Reset();
  kill_at_.reset();
  return true;
}

void ShellRun::ReadFrom(UniqueFd& fd, Watch which) {
  buffer_.resize(kReadChunk);
  const ssize_t n = read(fd.get(), buffer_.data(), buffer_.size());
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {  // EOF (or a read error, treated alike)
    if (which != kWatchOutcome) output_.Finish(static_cast<OutputLog::Stream>(which));
    fd.Reset();
    return;
  }
  const std::string_view data(buffer_.data(), static_cast<std::size_t>(n));
  if (which != kWatchOutcome) {
    output_.Add(static_cast<OutputLog::Stream>(which), data);
  } else if (!report_too_big_) {
    // Progress lines come out before the size is checked: they never count
    // towards the report's 1 MiB (a chunk past it is at most kReadChunk).
    report_text_.append(data);
    if (data.find('\n') != std::string_view::npos) TakeProgressLines();
    if (report_text_.size() > kMaxOutcomeReportBytes) {
      report_too_big_ = true;
      report_text_.clear();
      report_text_.shrink_to_fit();
      progress_scan_ = 0;
    }
  }
}

void ShellRun::TakeProgressLines() {
  std::size_t start = progress_scan_;
  for (std::size_t end; (end = report_text_.find('\n', start)) != std::string::npos;) {
    ProgressReport report;
    std::string invalid;
    const std::string_view line(report_text_.data() + start, end - start);
    if (!ParseProgressLine(line, &report, &invalid)) {
      start = end + 1;  // part of the outcome report
      continue;
    }
    if (invalid.empty() && progress_ != nullptr) invalid = progress_->Report(report);
    if (!invalid.empty() && !progress_refusal_logged_) {
      progress_refusal_logged_ = true;
      spdlog::warn("progress_refused job={} task={} | fd 3: {}; the run goes on", job_.id,
                   LogValue(task_), invalid);
    }
    report_text_.erase(start, end + 1 - start);
  }
  progress_scan_ = start;
}

void ShellRun::WriteStdin() {
  const std::string& args = job_.args_json;
  const std::size_t chunk = std::min(args.size() - stdin_written_, kReadChunk);
  const ssize_t n = WriteNoSigpipe(stdin_.get(), args.data() + stdin_written_, chunk);
  if (n < 0) {
    if (errno != EINTR && errno != EAGAIN) stdin_.Reset();  // EPIPE: it stopped reading
    return;
  }
  stdin_written_ += static_cast<std::size_t>(n);
  if (stdin_written_ == args.size()) stdin_.Reset();
}

void ShellRun::Reap() {
  if (pid_ <= 0 || reaped_) return;
  while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
}

void ShellRun::Supervise() {
  const Clock::time_point started = Clock::now();
  std::optional<Clock::time_point> timeout_at;
  if (config_.timeout_us > 0) timeout_at = started + std::chrono::microseconds(config_.timeout_us);
  std::optional<Clock::time_point> drain_until;
  bool stop_seen = false;

  while (true) {
    const Clock::time_point now = Clock::now();
    if (!exited_) {
      if (!stop_seen && stop_.requested()) {
        stop_seen = true;
        stopped_ = true;
        if (!term_sent_) {
          spdlog::info("shell job={} task={} | stopping ({}): {} to process group {}", job_.id,
                       LogValue(task_), StopReasonText(stop_.reason()), FirstSignalName(), pid_);
        }
        Terminate(now);
      }
      if (timeout_at && now >= *timeout_at && !term_sent_) {
        timed_out_ = true;
        spdlog::warn("shell job={} task={} | timed out after {}: {} to process group {}", job_.id,
                     LogValue(task_), FormatDuration(config_.timeout_us), FirstSignalName(), pid_);
        Terminate(now);
      }
      if (kill_at_ && now >= *kill_at_) {
        spdlog::warn(
            "shell job={} task={} | still running {} after SIGTERM: SIGKILL to process group {}",
            job_.id, LogValue(task_), FormatDuration(config_.kill_grace_us), pid_);
        SignalGroup(SIGKILL);
        kill_at_.reset();
      }
      if (!pidfd_) CheckExited();
    }
    if (exited_ && !drain_until) drain_until = now + kDrainBound;
    const bool drained = std::none_of(readers_.begin(), readers_.end(),
                                      [](const UniqueFd& fd) { return bool(fd); });
    if (exited_ && drained) break;
    // Past the drain bound: one last look at what is already buffered.
    const bool last_pass = exited_ && now >= *drain_until;

    // What to wait for, and until when.
    std::array<pollfd, 6> fds{};
    std::array<Watch, 6> roles{};
    nfds_t count = 0;
    auto watch = [&](int fd, short events, Watch role) {
      fds[count] = pollfd{fd, events, 0};
      roles[count++] = role;
    };
    for (int i = 0; i < 3; ++i) {
      if (readers_[i]) watch(readers_[i].get(), POLLIN, static_cast<Watch>(i));
    }
    if (stdin_) watch(stdin_.get(), POLLOUT, kWatchStdin);
    if (!exited_ && pidfd_) watch(pidfd_.get(), POLLIN, kWatchExit);
    if (!exited_ && !stop_seen) watch(stop_.wake_fd(), POLLIN, kWatchStop);

    std::optional<Clock::time_point> wake;
    auto wake_by = [&wake](Clock::time_point at) { wake = wake ? std::min(*wake, at) : at; };
    if (last_pass) {
      wake_by(now);
    } else if (exited_) {
      wake_by(*drain_until);
    } else {
      if (timeout_at && !term_sent_) wake_by(*timeout_at);
      if (kill_at_) wake_by(*kill_at_);
      if (!pidfd_) wake_by(now + kExitPollTick);
    }
    int timeout_ms = -1;
    if (wake) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(*wake - now).count();
      timeout_ms = static_cast<int>(std::clamp<std::int64_t>(left, 0, 60'000));
    }

    const int ready = poll(fds.data(), count, timeout_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      ThrowErrno(errno, "poll");
    }
    for (nfds_t i = 0; i < count; ++i) {
      const short revents = fds[i].revents;
      if (revents == 0) continue;
      switch (roles[i]) {
        case kWatchStdout:
        case kWatchStderr:
        case kWatchOutcome: ReadFrom(readers_[roles[i]], roles[i]); break;
        case kWatchStdin:
          if ((revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) stdin_.Reset();
          else if (stdin_) WriteStdin();
          break;
        case kWatchExit: CheckExited(); break;
        case kWatchStop: break;  // the stop flag is read at the top of the loop
      }
    }
    if (last_pass) break;
  }
  // Readers still open here are held by a process that left the group.
  for (UniqueFd& fd : readers_) fd.Reset();
  Reap();
}

JobOutcome ShellRun::Decide() const {
  if (stopped_) {
    JobOutcome stopped = RetryOutcome("Stopped", std::string("stopped: ") + StopReasonText(stop_.reason()));
    stopped.interrupted = true;
    return stopped;
  }
  if (timed_out_) return RetryOutcome("Timeout", "timed out after " + FormatDuration(config_.timeout_us));

  const OutcomeReport report = ParseOutcomeReport(report_text_, report_too_big_);
  const bool signaled = status_.how == ExitStatus::How::kSignaled;
  if (!report.invalid.empty()) {
    // A crash while writing the report is the crash's story.
    return signaled ? RetryOutcome("Signal", status_.Describe()) : RetryOutcome("BadOutcome", report.invalid);
  }
  if (report.explicit_kind) {
    if (report.outcome.kind != OutcomeKind::kSuccess || status_.success()) return report.outcome;
    return RetryOutcome("BadOutcome", "outcome success contradicts: " + status_.Describe());
  }
  if (status_.success()) return report.outcome;  // kSuccess, result if reported
  if (signaled) return RetryOutcome("Signal", status_.Describe());
  std::string message = status_.Describe();
  const std::string& last = output_.last_stderr_line();
  if (status_.how == ExitStatus::How::kExited && !last.empty()) {
    message += ": " + TruncateUtf8(OneLine(last), kMaxStderrInMessage);
  }
  return RetryOutcome("ExitStatus", std::move(message));
}

}  // namespace

ShellHandler::ShellHandler(std::string task, ShellHandlerConfig config)
    : task_(std::move(task)), config_(std::move(config)) {
  if (config_.command.empty()) {
    throw std::invalid_argument("shell handler for task '" + task_ + "' has an empty command");
  }
}

JobOutcome ShellHandler::Run(const ClaimedJob& job, JobStop& stop, JobProgress* progress) {
  try {
    ShellRun run(task_, config_, job, stop, progress);
    return run.Execute();
  } catch (const std::exception& e) {  // constructing the run (allocation)
    return RetryOutcome("SpawnFailed", e.what());
  }
}

}  // namespace akadzed
