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
#include "handlers/file_trust.h"
#include "worker/log_line.h"

namespace akadzed {

// An open plugin file whose ABI has been checked. Closed (dlclose) when its
// last handler lets go of it.
class LoadedPlugin {
 public:
  LoadedPlugin(std::string path, void* handle, const akadzed_plugin* api)
      : path_(std::move(path)), handle_(handle), api_(api) {}
  ~LoadedPlugin() { dlclose(handle_); }
  LoadedPlugin(const LoadedPlugin&) = delete;
  LoadedPlugin& operator=(const LoadedPlugin&) = delete;

  const std::string& path() const { return path_; }
  const akadzed_plugin& api() const { return *api_; }
  // "<name> <version>" for logs and messages.
  std::string label() const {
    return api_->version ? fmt::format("{} {}", api_->name, api_->version) : api_->name;
  }

 private:
  std::string path_;  // canonical
  void* handle_;
  const akadzed_plugin* api_;  // lives in the library
};

namespace {

using Clock = std::chrono::steady_clock;

// struct akadzed_plugin up to its last version-1 member.
constexpr std::size_t kPluginV1Size =
    offsetof(akadzed_plugin, shutdown) + sizeof(akadzed_plugin::shutdown);
constexpr std::size_t kMaxLogBytes = 4096;
constexpr std::size_t kMaxErrorBytes = 200;
constexpr std::size_t kMaxMessageBytes = 4096;  // the finisher cuts to 500 after redaction

// Open plugins by canonical path. Expired entries are swept on each open.
std::mutex& RegistryMutex() {
  static std::mutex mutex;
  return mutex;
}
std::map<std::string, std::weak_ptr<LoadedPlugin>>& Registry() {  // RegistryMutex guards
  static std::map<std::string, std::weak_ptr<LoadedPlugin>> registry;
  return registry;
}

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& part : parts) out += (out.empty() ? "" : ", ") + part;
  return out;
}

bool IsRegularFile(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The file config.path names, per PluginHandlerConfig's rules.
std::string ResolvePluginPath(const std::string& path) {
  if (path.empty()) throw PluginError("plugin: empty path");
  if (path.find('/') != std::string::npos) {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) {
      throw PluginError(fmt::format("plugin {}: {}", path, std::strerror(errno)));
    }
    if (!S_ISREG(st.st_mode)) throw PluginError(fmt::format("plugin {}: not a regular file", path));
    return path;
  }
  const std::vector<std::string> dirs = PluginSearchPath();
  for (const std::string& dir : dirs) {
    std::string candidate = dir + "/" + path;
    if (IsRegularFile(candidate)) return candidate;
  }
  throw PluginError(fmt::format("plugin {}: not found in {}", path,
                                dirs.empty() ? "(no plugin directories)" : Join(dirs)));
}

// The ABI problems of `api` as a message, or "" when it is usable.
std::string CheckAbi(const akadzed_plugin* api) {
  if (api == nullptr) return AKADZED_PLUGIN_ENTRY_SYMBOL "() returned NULL";
  if (api->struct_size >= offsetof(akadzed_plugin, name) &&
      api->abi_version != AKADZED_PLUGIN_ABI_VERSION) {
    return fmt::format("plugin ABI version {}, but this akadzed supports version {}; rebuild it "
                       "against this akadzed's akadzed/plugin.h",
                       api->abi_version, AKADZED_PLUGIN_ABI_VERSION);
  }
  if (api->struct_size < kPluginV1Size) {
    return fmt::format("struct akadzed_plugin is {} bytes, but ABI version {} needs at least {}",
                       api->struct_size, AKADZED_PLUGIN_ABI_VERSION, kPluginV1Size);
  }
  std::vector<std::string> missing;
  if (api->name == nullptr) missing.emplace_back("name");
  if (api->init == nullptr) missing.emplace_back("init");
  const bool hooks = AKADZED_HAS_MEMBER(api, akadzed_plugin, on_transition) && api->on_transition;
  if (api->handle == nullptr && !hooks) missing.emplace_back("handle");
  if (api->shutdown == nullptr) missing.emplace_back("shutdown");
  if (!missing.empty()) return "struct akadzed_plugin has no " + Join(missing);
  return "";
}

// Opens the plugin `configured` names, or shares it when it is open already.
std::shared_ptr<LoadedPlugin> OpenPlugin(const std::string& configured) {
  const std::string file = ResolvePluginPath(configured);
  std::error_code ec;
  std::string path = std::filesystem::canonical(file, ec).string();
  if (ec) path = file;

  // Whoever can change the file runs code inside the daemon. Checked at
  // every load, a reload that shares the open file included: a loaded file
  // changed in place changes the running code.
  if (std::string problem = FileTrustProblem(path); !problem.empty()) {
    throw PluginError(fmt::format("plugin {}: refused: {} (see docs/security.md)", path, problem));
  }

  std::lock_guard lock(RegistryMutex());
  auto& registry = Registry();
  std::erase_if(registry, [](const auto& entry) { return entry.second.expired(); });
  if (auto it = registry.find(path); it != registry.end()) {
    if (auto open = it->second.lock()) return open;
  }

  dlerror();  // clear
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* text = dlerror();
    std::string_view reason = text ? text : "unknown error";
    if (reason.starts_with(path + ": ")) reason.remove_prefix(path.size() + 2);
    throw PluginError(fmt::format("plugin {}: cannot load: {}", path, OneLine(reason)));
  }
  auto refuse = [&](const std::string& what) {
    dlclose(handle);
    return PluginError(fmt::format("plugin {}: {}", path, what));
  };
  void* symbol = dlsym(handle, AKADZED_PLUGIN_ENTRY_SYMBOL);
  if (symbol == nullptr) {
    throw refuse("no " AKADZED_PLUGIN_ENTRY_SYMBOL " symbol (is it an akadzed plugin? is the "
                 "symbol exported with AKADZED_PLUGIN_EXPORT?)");
  }
  const akadzed_plugin* api = reinterpret_cast<akadzed_plugin_entry_fn>(symbol)();
  if (std::string problem = CheckAbi(api); !problem.empty()) throw refuse(problem);

  auto plugin = std::make_shared<LoadedPlugin>(path, handle, api);
  registry[path] = plugin;
  return plugin;
}

// One handle() call: what the plugin's callbacks see through `host`.
class RunState {
 public:
  RunState(const ClaimedJob& job, JobStop& stop, std::int64_t timeout_us)
      : job_(job), stop_(stop), started_(Clock::now()), timeout_us_(timeout_us) {}

  bool TimedOut() const {
    return timeout_us_ > 0 && Clock::now() - started_ >= std::chrono::microseconds(timeout_us_);
  }
  bool StopRequested() const { return stop_.requested() || TimedOut(); }
  Clock::time_point started() const { return started_; }

  void SetResult(const char* json, std::size_t len) {
    std::lock_guard lock(mutex_);
    if (json == nullptr) result_.reset();
    else result_.emplace(json, len);
  }
  void SetError(const char* error, const char* message) {
    std::lock_guard lock(mutex_);
    error_ = error ? OneLine(TruncateUtf8(error, kMaxErrorBytes)) : "";
    message_ = message ? TruncateUtf8(message, kMaxMessageBytes) : "";
  }
  void SetDelayMs(std::int64_t delay_ms) {
    std::lock_guard lock(mutex_);
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
    std::lock_guard lock(mutex_);
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
  JobStop& stop_;
  const Clock::time_point started_;
  const std::int64_t timeout_us_;
  mutable std::mutex mutex_;
  std::optional<std::string> result_;      // mutex_ guards
  std::string error_;                      // mutex_ guards
  std::string message_;                    // mutex_ guards
  std::optional<std::int64_t> delay_ms_;   // mutex_ guards
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
  ~OverrunWatch() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  OverrunWatch(const OverrunWatch&) = delete;
  OverrunWatch& operator=(const OverrunWatch&) = delete;

  // Watches the call of job `job_id` that started at `started`; returns the
  // token to Remove it with when it returns.
  std::uint64_t Add(std::int64_t job_id, Clock::time_point started) {
    std::uint64_t token;
    {
      std::lock_guard lock(mu_);
      token = ++next_token_;
      calls_.emplace(token, Call{job_id, started + std::chrono::microseconds(timeout_us_)});
      if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
    }
    cv_.notify_all();
    return token;
  }
  void Remove(std::uint64_t token) {
    std::lock_guard lock(mu_);
    calls_.erase(token);
  }

 private:
  struct Call {
    std::int64_t job_id;
    Clock::time_point deadline;
  };

  void Loop() {
    std::unique_lock lock(mu_);
    while (!stopping_) {
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
      if (next) cv_.wait_until(lock, *next);
      else cv_.wait(lock);
    }
  }

  const std::string task_;
  const std::int64_t timeout_us_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::uint64_t, Call> calls_;  // mu_ guards
  std::uint64_t next_token_ = 0;         // mu_ guards
  bool stopping_ = false;                // mu_ guards
  std::thread thread_;                   // started by the first Add (under mu_)
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

}  // extern "C"

namespace akadzed {

namespace {

// A new instance of `plugin` made by its init(config_json); `what` names its
// use in the error ("task X", "hook Y"). Throws PluginError.
void* InitInstance(const LoadedPlugin& plugin, const std::string& config_json,
                   const std::string& what) {
  char error[1024] = {};
  void* instance = nullptr;
  int rc = plugin.api().init(config_json.c_str(), &instance, error, sizeof error);
  if (rc != 0) {
    error[sizeof error - 1] = '\0';
    std::string text = OneLine(error);
    if (text.empty()) text = "no error text";
    throw PluginError(fmt::format("plugin {}: init failed for {} (code {}): {}", plugin.path(),
                                  what, rc, text));
  }
  spdlog::debug("plugin use={} | loaded {} from {}", LogValue(what), plugin.label(), plugin.path());
  return instance;
}

}  // namespace

PluginHandler::PluginHandler(std::string task, const PluginHandlerConfig& config)
    : task_(std::move(task)), plugin_(OpenPlugin(config.path)), timeout_us_(config.timeout_us) {
  if (plugin_->api().handle == nullptr) {
    throw PluginError(fmt::format("plugin {}: has no handle function, so it cannot run jobs of "
                                  "task {} (a hook-only plugin belongs under hooks:)",
                                  plugin_->path(), task_));
  }
  instance_ = InitInstance(*plugin_, config.config_json, "task " + task_);
  if (timeout_us_ > 0) overrun_watch_ = std::make_unique<OverrunWatch>(task_, timeout_us_);
}

PluginHandler::~PluginHandler() {
  overrun_watch_.reset();
  plugin_->api().shutdown(instance_);
}

JobOutcome PluginHandler::Run(const ClaimedJob& job, JobStop& stop) {
  try {
    RunState state(job, stop, timeout_us_);
    akadzed_job c_job{};
    c_job.struct_size = sizeof c_job;
    c_job.id = job.id;
    c_job.task = job.task.c_str();
    c_job.queue = job.queue.c_str();
    c_job.limit_key = job.limit_key ? job.limit_key->c_str() : nullptr;
    c_job.attempt = job.attempt + 1;  // this run, counted from 1
    c_job.max_attempts = job.max_attempts;
    c_job.run_count = job.run_count;
    c_job.args_json = job.args_json.c_str();
    c_job.args_len = job.args_json.size();
    c_job.stop_requested = akadzed_host_stop_requested;
    c_job.host = &state;
    akadzed_report report{};
    report.struct_size = sizeof report;
    report.set_result = akadzed_host_set_result;
    report.set_error = akadzed_host_set_error;
    report.set_delay_ms = akadzed_host_set_delay_ms;
    report.log = akadzed_host_log;
    report.host = &state;

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

void VerifyPlugin(const PluginHandlerConfig& config, PluginUse use) {
  std::shared_ptr<LoadedPlugin> plugin = OpenPlugin(config.path);
  const akadzed_plugin& api = plugin->api();
  if (use == PluginUse::kHandler && api.handle == nullptr) {
    throw PluginError(fmt::format("plugin {}: has no handle function, so it cannot run jobs "
                                  "(a hook-only plugin belongs under hooks:)", plugin->path()));
  }
  if (use == PluginUse::kHook &&
      (!AKADZED_HAS_MEMBER(&api, akadzed_plugin, on_transition) || api.on_transition == nullptr)) {
    throw PluginError(fmt::format("plugin {}: has no on_transition function, so it cannot be a "
                                  "hook", plugin->path()));
  }
}

PluginHook::PluginHook(std::string name, const PluginHandlerConfig& config)
    : name_(std::move(name)), plugin_(OpenPlugin(config.path)) {
  const akadzed_plugin& api = plugin_->api();
  if (!AKADZED_HAS_MEMBER(&api, akadzed_plugin, on_transition) || api.on_transition == nullptr) {
    throw PluginError(fmt::format("plugin {}: has no on_transition function, so it cannot be a "
                                  "hook", plugin_->path()));
  }
  instance_ = InitInstance(*plugin_, config.config_json, "hook " + name_);
}

PluginHook::~PluginHook() { plugin_->api().shutdown(instance_); }

std::string PluginHook::OnTransition(const akadzed_transition& transition) const {
  char error[1024] = {};
  int rc = 0;
  try {
    rc = plugin_->api().on_transition(instance_, &transition, error, sizeof error);
  } catch (...) {  // the ABI forbids it; contain it anyway
    return "on_transition let a C++ exception escape";
  }
  if (rc == 0) return "";
  error[sizeof error - 1] = '\0';
  std::string text = OneLine(error);
  return text.empty() ? fmt::format("on_transition returned {}", rc) : text;
}

std::vector<std::string> PluginSearchPath() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("AKADZED_PLUGIN_PATH")) {
    std::string_view rest = env;
    while (!rest.empty()) {
      std::size_t colon = rest.find(':');
      std::string_view entry = rest.substr(0, colon);
      if (!entry.empty()) dirs.emplace_back(entry);
      rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
    }
  }
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    std::filesystem::path dir = exe.parent_path();
    dirs.push_back((dir / "plugins").lexically_normal().string());
    dirs.push_back((dir / ".." / "lib" / "akadzed" / "plugins").lexically_normal().string());
  }
  return dirs;
}

}  // namespace akadzed
