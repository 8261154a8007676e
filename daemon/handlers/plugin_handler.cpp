#include "handlers/plugin_handler.h"

#include <akadzed/plugin.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>

#include "core/duration.h"
#include "core/redact.h"
#include "core/thread_annotations.h"
#include "handlers/outcome_report.h"
#include "plugin_loader/loaded_plugin.h"
#include "runtime/service_loop.h"
#include "runtime/log_line.h"

namespace akadzed {

namespace {

// The real clock: a plugin's timeout bounds a real call of its handle() on
// an executor's thread, which only real time moves.
using Clock = std::chrono::steady_clock;

constexpr std::size_t kMaxLogBytes = 4096;
constexpr std::size_t kMaxErrorBytes = 200;
constexpr std::size_t kMaxMessageBytes = 4096;  // the finisher cuts to 500 after redaction

// One handle() call: what the plugin's callbacks see through `host`.
class RunState {
 public:
  RunState(const ClaimedJob& job, JobStop& stop, JobProgress* progress, std::int64_t timeout_us)
      : job_(job), stop_(stop), progress_(progress), started_(Clock::now()), timeout_us_(timeout_us) {}

  // report_progress: 0, or -1 when refused (logged once per run).
  int ReportProgress(double progress, const char* meta_json, std::size_t meta_len) {
    nlohmann::json meta;
    if (meta_json != nullptr) {
      const std::string_view text(meta_json, meta_len);
      if (JsonNestingDepth(text) > kMaxOutcomeReportDepth) {
        return Refuse("meta is nested deeper than " + std::to_string(kMaxOutcomeReportDepth) + " levels");
      }
      meta = nlohmann::json::parse(text, nullptr, false);
      if (meta.is_discarded()) return Refuse("meta is not valid JSON");
    }
    ProgressReport report;
    std::string why = CheckProgress(progress < 0 ? nlohmann::json() : nlohmann::json(progress), meta, &report);
    if (why.empty() && progress_ != nullptr) why = progress_->Report(report);
    return why.empty() ? 0 : Refuse(why);
  }

  bool TimedOut() const {
    return timeout_us_ > 0 && Clock::now() - started_ >= std::chrono::microseconds(timeout_us_);
  }
  bool StopRequested() const { return stop_.requested() || TimedOut(); }
  Clock::time_point started() const { return started_; }

  void SetResult(const char* json, std::size_t len) {
    MutexLock lock(mutex_);
    if (json == nullptr) result_.reset();
    else result_.emplace(json, len);
  }
  void SetError(const char* error, const char* message) {
    MutexLock lock(mutex_);
    error_ = error ? OneLine(TruncateUtf8(error, kMaxErrorBytes)) : "";
    message_ = message ? TruncateUtf8(message, kMaxMessageBytes) : "";
  }
  void SetDelayMs(std::int64_t delay_ms) {
    MutexLock lock(mutex_);
    delay_ms_ = delay_ms;
  }
  void Log(int level, const char* message) const {
    level = std::clamp(level, static_cast<int>(AKADZED_LOG_TRACE),
                       static_cast<int>(AKADZED_LOG_CRITICAL));
    auto spd_level = static_cast<spdlog::level::level_enum>(level);
    spdlog::log(spd_level, "plugin job={} task={} | {}", job_.id, LogValue(job_.task),
                OneLine(TruncateUtf8(message, kMaxLogBytes)));
  }

  // The outcome for handle()'s return `code` from what the plugin reported.
  JobOutcome Outcome(int code, const LoadedPlugin& plugin) const {
    MutexLock lock(mutex_);
    auto bad = [&](std::string what) {
      return RetryOutcome("BadOutcome", fmt::format("plugin {} {}", plugin.label(), what));
    };
    JobOutcome outcome;
    outcome.error = error_;
    outcome.message = message_;
    std::optional<std::int64_t> delay_us;  // only RETRY and SNOOZE use one
    if (delay_ms_ && (code == AKADZED_RETRY || code == AKADZED_SNOOZE)) {
      constexpr std::int64_t kMaxDelayMs = std::numeric_limits<std::int64_t>::max() / 1000;
      if (*delay_ms_ < 0 || *delay_ms_ > kMaxDelayMs) {
        return bad(fmt::format("reported a delay of {} ms", *delay_ms_));
      }
      delay_us = *delay_ms_ * 1000;
    }
    switch (code) {
      case AKADZED_SUCCESS:
        outcome.kind = OutcomeKind::kSuccess;
        outcome.error.clear();
        outcome.message.clear();
        if (result_ && !nlohmann::json::accept(*result_)) {
          return bad("returned a result that is not valid JSON");
        }
        outcome.result_json = result_;
        return outcome;
      case AKADZED_RETRY:
        outcome.kind = OutcomeKind::kRetry;
        outcome.delay_us = delay_us;
        if (outcome.error.empty()) outcome.error = "PluginError";
        return outcome;
      case AKADZED_SNOOZE:
        if (!delay_us) return bad("snoozed without a delay (set_delay_ms)");
        outcome.kind = OutcomeKind::kSnooze;
        outcome.delay_us = delay_us;
        outcome.error.clear();
        outcome.message.clear();
        return outcome;
      case AKADZED_FAIL:
        outcome.kind = OutcomeKind::kFail;
        if (outcome.error.empty()) outcome.error = "PluginError";
        return outcome;
      case AKADZED_CANCEL:
        outcome.kind = OutcomeKind::kCancel;
        if (outcome.error.empty()) outcome.error = "Cancelled";
        return outcome;
      default:
        return bad(fmt::format("returned unknown outcome code {}", code));
    }
  }

 private:
  const ClaimedJob& job_;
  // A refused progress report: logged once per run; -1 for the plugin.
  int Refuse(const std::string& why) {
    if (!progress_refusal_logged_.exchange(true)) {
      spdlog::warn("progress_refused job={} task={} | plugin report_progress: {}; the run goes on",
                   job_.id, LogValue(job_.task), why);
    }
    return -1;
  }

  JobStop& stop_;
  JobProgress* progress_;  // may be null
  std::atomic<bool> progress_refusal_logged_{false};
  const Clock::time_point started_;
  const std::int64_t timeout_us_;
  mutable Mutex mutex_;
  std::optional<std::string> result_ GUARDED_BY(mutex_);
  std::string error_ GUARDED_BY(mutex_);
  std::string message_ GUARDED_BY(mutex_);
  std::optional<std::int64_t> delay_ms_ GUARDED_BY(mutex_);
};

}  // namespace

// Logs, once per call, a plugin call that is still running when its timeout
// passes: the daemon cannot interrupt it, but the operator should see it
// while it holds its slot rather than only when (if ever) it returns. One
// thread per handler with a timeout, started with the first call, sleeping
// until the earliest deadline.
//
// Thread-safety: Add and Remove may be called from any thread.
class OverrunWatch {
 public:
  OverrunWatch(std::string task, std::int64_t timeout_us)
      : task_(std::move(task)), timeout_us_(timeout_us) {}
  ~OverrunWatch() { loop_.Stop(); }
  OverrunWatch(const OverrunWatch&) = delete;
  OverrunWatch& operator=(const OverrunWatch&) = delete;

  // Watches the call of job `job_id` that started at `started`; returns the
  // token to Remove it with when it returns.
  std::uint64_t Add(std::int64_t job_id, Clock::time_point started) {
    std::uint64_t token;
    {
      MutexLock lock(loop_.mu());
      token = ++next_token_;
      calls_.emplace(token, Call{job_id, started + std::chrono::microseconds(timeout_us_)});
    }
    std::call_once(started_, [this] { loop_.Start("plugin timeouts", [this] { Loop(); }); });
    loop_.Notify();
    return token;
  }
  void Remove(std::uint64_t token) {
    MutexLock lock(loop_.mu());
    calls_.erase(token);
  }

 private:
  struct Call {
    std::int64_t job_id;
    Clock::time_point deadline;
  };

  void Loop() {
    MutexLock lock(loop_.mu());
    while (!loop_.stop_requested_locked()) {
      std::optional<Clock::time_point> next;
      const Clock::time_point now = Clock::now();
      for (auto it = calls_.begin(); it != calls_.end();) {
        if (it->second.deadline <= now) {
          spdlog::warn("plugin job={} task={} | still running after its timeout of {}: handle() "
                       "has not returned and the daemon cannot interrupt it (does it poll "
                       "stop_requested?); the run is a Timeout retry when it returns",
                       it->second.job_id, LogValue(task_), FormatDuration(timeout_us_));
          it = calls_.erase(it);  // reported: no longer watched
        } else {
          next = next ? std::min(*next, it->second.deadline) : it->second.deadline;
          ++it;
        }
      }
      // Woken early by an Add (a nearer deadline) or the stop.
      const std::uint64_t seen = next_token_;
      auto added = [&]() REQUIRES(loop_.mu()) { return next_token_ != seen; };
      if (next) {
        loop_.WaitUntil(lock, *next, added);
      } else {
        loop_.Wait(lock, added);
      }
    }
  }

  const std::string task_;
  const std::int64_t timeout_us_;
  // The watch thread (started by the first Add), its stop, and the mutex
  // (loop_.mu()) guarding:
  ServiceLoop loop_;
  std::once_flag started_;
  std::map<std::uint64_t, Call> calls_ GUARDED_BY(loop_.mu());
  std::uint64_t next_token_ GUARDED_BY(loop_.mu()) = 0;
};

}  // namespace akadzed

// The host side of struct akadzed_job and struct akadzed_report. No C++
// exception may leave these: they return into the plugin's C frames.
extern "C" {

static int akadzed_host_stop_requested(const akadzed_job* job) {
  return job && static_cast<const akadzed::RunState*>(job->host)->StopRequested() ? 1 : 0;
}

static void akadzed_host_set_result(akadzed_report* report, const char* json, size_t len) {
  try {
    if (report) static_cast<akadzed::RunState*>(report->host)->SetResult(json, len);
  } catch (...) {  // out of memory: the result is lost, the run still ends
  }
}

static void akadzed_host_set_error(akadzed_report* report, const char* error, const char* message) {
  try {
    if (report) static_cast<akadzed::RunState*>(report->host)->SetError(error, message);
  } catch (...) {
  }
}

static void akadzed_host_set_delay_ms(akadzed_report* report, int64_t delay_ms) {
  if (report) static_cast<akadzed::RunState*>(report->host)->SetDelayMs(delay_ms);
}

static void akadzed_host_log(akadzed_report* report, int level, const char* message) {
  try {
    if (report && message) static_cast<akadzed::RunState*>(report->host)->Log(level, message);
  } catch (...) {
  }
}

static int akadzed_host_report_progress(akadzed_report* report, double progress, const char* meta_json,
                                        size_t meta_len) {
  try {
    if (report == nullptr) return -1;
    return static_cast<akadzed::RunState*>(report->host)->ReportProgress(progress, meta_json, meta_len);
  } catch (...) {
    return -1;
  }
}

}  // extern "C"

namespace akadzed {

namespace {

}  // namespace

PluginHandler::PluginHandler(std::string task, const PluginHandlerConfig& config)
    : task_(std::move(task)), plugin_(OpenPlugin(config.path)), timeout_us_(config.timeout_us) {
  if (plugin_->api().handle == nullptr) {
    throw PluginError(fmt::format("plugin {}: has no handle function, so it cannot run jobs of "
                                  "task {} (a hook-only plugin belongs under hooks:)",
                                  plugin_->path(), task_));
  }
  instance_ = InitPluginInstance(*plugin_, config.config_json, "task " + task_);
  if (timeout_us_ > 0) overrun_watch_ = std::make_unique<OverrunWatch>(task_, timeout_us_);
}

PluginHandler::~PluginHandler() {
  overrun_watch_.reset();
  plugin_->api().shutdown(instance_);
}

JobOutcome PluginHandler::Run(const ClaimedJob& job, JobStop& stop, JobProgress* progress) {
  try {
    RunState state(job, stop, progress, timeout_us_);
    akadzed_job c_job{};
    c_job.struct_size = sizeof c_job;
    c_job.id = job.id;
    c_job.task = job.task.c_str();
    c_job.queue = job.queue.c_str();
    c_job.limit_key = job.limit_key ? job.limit_key->c_str() : nullptr;
    c_job.attempt = job.run_attempt();  // this run, counted from 1
    c_job.max_attempts = job.max_attempts;
    c_job.run_count = job.run_count;
    c_job.args_json = job.args_json.c_str();
    c_job.args_len = job.args_json.size();
    c_job.stop_requested = akadzed_host_stop_requested;
    c_job.host = &state;
    c_job.traceparent = job.traceparent ? job.traceparent->c_str() : nullptr;
    akadzed_report report{};
    report.struct_size = sizeof report;
    report.set_result = akadzed_host_set_result;
    report.set_error = akadzed_host_set_error;
    report.set_delay_ms = akadzed_host_set_delay_ms;
    report.log = akadzed_host_log;
    report.host = &state;
    report.report_progress = akadzed_host_report_progress;

    struct Unwatch {  // also when handle() lets an exception escape
      OverrunWatch* watch;
      std::uint64_t token;
      ~Unwatch() {
        if (watch != nullptr) watch->Remove(token);
      }
    } unwatch{overrun_watch_.get(),
              overrun_watch_ ? overrun_watch_->Add(job.id, state.started()) : 0};
    int code = plugin_->api().handle(instance_, &c_job, &report);
    if (state.TimedOut()) {
      return RetryOutcome("Timeout", fmt::format("plugin {} ran past its timeout of {}", plugin_->label(),
                                          FormatDuration(timeout_us_)));
    }
    JobOutcome outcome = state.Outcome(code, *plugin_);
    // A plugin that finished its work despite the stop keeps its success.
    outcome.interrupted = stop.requested() && outcome.kind != OutcomeKind::kSuccess;
    return outcome;
  } catch (const std::exception& e) {
    return RetryOutcome("PluginError", fmt::format("plugin {}: {}", plugin_->label(), e.what()));
  } catch (...) {
    return RetryOutcome("PluginError", fmt::format("plugin {}: unknown exception", plugin_->label()));
  }
}

}  // namespace akadzed
