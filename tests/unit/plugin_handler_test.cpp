// Plugin handlers: the loader's refusals, the example plugin's outcomes, log
// lines, cooperative stop and timeout, concurrency and shared loading.
#include <akadzed/plugin.h>
#include <dlfcn.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>

#include <catch2/catch.hpp>

#include <cstddef>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "handlers/plugin_handler.h"
#include "hooks/plugin_hook.h"
#include "support/log_capture.h"

namespace akadzed {
namespace {

using namespace std::chrono_literals;
using test::LogCapture;
using Clock = std::chrono::steady_clock;

const std::string kTestDir = AKADZED_TEST_PLUGIN_DIR;
const std::string kExample = std::string(AKADZED_EXAMPLE_PLUGIN_DIR) + "/libakadzed_example.so";

std::string TestPlugin(const std::string& name) { return kTestDir + "/lib" + name + ".so"; }

PluginHandlerConfig Config(std::string path, std::string config_json = "{}",
                           std::int64_t timeout_us = 0) {
  PluginHandlerConfig config;
  config.path = std::move(path);
  config.config_json = std::move(config_json);
  config.timeout_us = timeout_us;
  return config;
}

ClaimedJob Job(std::string args, std::int32_t run_count = 1) {
  ClaimedJob job;
  job.id = 42;
  job.task = "checksum";
  job.queue = "default";
  job.attempt = 1;
  job.max_attempts = 3;
  job.run_count = run_count;
  job.args_json = std::move(args);
  return job;
}

JobOutcome RunOnce(PluginHandler& handler, const std::string& args, std::int32_t run_count = 1) {
  JobStop stop;
  return handler.Run(Job(args, run_count), stop);
}

// What constructing a handler (or verifying, if `verify`) throws; "" if not.
std::string Refusal(const PluginHandlerConfig& config, bool verify = false) {
  try {
    if (verify) VerifyPlugin(config);
    else PluginHandler("t", config);
  } catch (const PluginError& e) {
    return e.what();
  }
  return "";
}

std::uint64_t Fnv1a(const std::string& text) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) hash = (hash ^ c) * 0x100000001b3ULL;
  return hash;
}

std::string Hex16(std::uint64_t value) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(value));
  return buf;
}

// Sets an environment variable for its lifetime.
class EnvGuard {
 public:
  EnvGuard(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~EnvGuard() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

bool IsLoaded(const std::string& path) {
  void* handle = dlopen(std::filesystem::canonical(path).c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (handle) dlclose(handle);
  return handle != nullptr;
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

TEST_CASE("the plugin search path: $AKADZED_PLUGIN_PATH, then next to the binary", "[plugin]") {
  EnvGuard env("AKADZED_PLUGIN_PATH", "/nonexistent::/other/");
  const std::string exe_dir = std::filesystem::read_symlink("/proc/self/exe").parent_path();
  const std::vector<std::string> expected = {
      "/nonexistent", "/other/", exe_dir + "/plugins",
      std::filesystem::path(exe_dir).parent_path().string() + "/lib/akadzed/plugins"};
  CHECK(PluginSearchPath() == expected);
}

TEST_CASE("a bare plugin file name is searched on the plugin path", "[plugin]") {
  LogCapture quiet;
  EnvGuard env("AKADZED_PLUGIN_PATH", std::string("/nonexistent:") + AKADZED_EXAMPLE_PLUGIN_DIR);
  CHECK_NOTHROW(VerifyPlugin(Config("libakadzed_example.so")));
  PluginHandler handler("checksum", Config("libakadzed_example.so"));
  CHECK(RunOnce(handler, "{}").kind == OutcomeKind::kSuccess);

  std::string error = Refusal(Config("libnope.so"));
  CHECK(error.starts_with("plugin libnope.so: not found in /nonexistent, "
                          AKADZED_EXAMPLE_PLUGIN_DIR ", "));
  CHECK(error.find("/lib/akadzed/plugins") != std::string::npos);
}

TEST_CASE("unusable plugins are refused with one line naming the file and the fault",
          "[plugin]") {
  auto check = [](const std::string& error, const std::string& file, const std::string& what) {
    INFO(error);
    CHECK(error.starts_with("plugin " + file + ": "));
    CHECK(error.find(what) != std::string::npos);
    CHECK(error.find('\n') == std::string::npos);
  };
  const std::string missing = kTestDir + "/libmissing.so";
  check(Refusal(Config(missing)), missing, "No such file or directory");
  check(Refusal(Config(kTestDir)), kTestDir, "not a regular file");

  const std::string not_elf = kTestDir + "/not_elf.so";
  std::ofstream(not_elf) << "this is a text file, not a shared object; it is long enough for an "
                            "ELF header to be read and found invalid.\n";
  check(Refusal(Config(not_elf)), not_elf, "cannot load: ");
  std::filesystem::remove(not_elf);

  check(Refusal(Config(TestPlugin("no_entry_plugin"))), TestPlugin("no_entry_plugin"),
        "no akadzed_plugin_entry symbol");
  check(Refusal(Config(TestPlugin("null_entry_plugin"))), TestPlugin("null_entry_plugin"),
        "akadzed_plugin_entry() returned NULL");
  check(Refusal(Config(TestPlugin("wrong_abi_plugin"))), TestPlugin("wrong_abi_plugin"),
        "plugin ABI version 999, but this akadzed supports version 1");
  check(Refusal(Config(TestPlugin("short_struct_plugin"))), TestPlugin("short_struct_plugin"),
        "struct akadzed_plugin is 16 bytes, but ABI version 1 needs at least " +
            std::to_string(offsetof(akadzed_plugin, shutdown) + sizeof(akadzed_plugin::shutdown)));
  check(Refusal(Config(TestPlugin("no_handle_plugin"))), TestPlugin("no_handle_plugin"),
        "struct akadzed_plugin has no handle, shutdown");
  check(Refusal(Config(TestPlugin("failing_init_plugin"), R"({"a":1})")),
        TestPlugin("failing_init_plugin"),
        R"(init failed for task t (code 7): cannot use config {"a":1}: missing key 'endpoint')");
  check(Refusal(Config(kExample, R"({"algorithm": "md5"})")), kExample,
        R"(unknown algorithm "md5" (supported: fnv1a))");
  check(Refusal(Config(kExample, R"({"algorithm": 5})")), kExample, "algorithm must be a string");
}

TEST_CASE("VerifyPlugin checks the ABI without calling init", "[plugin]") {
  CHECK(Refusal(Config(TestPlugin("failing_init_plugin")), true).empty());
  CHECK(Refusal(Config(kExample, R"({"algorithm": "md5"})"), true).empty());
  CHECK(Refusal(Config(TestPlugin("wrong_abi_plugin")), true).find("999") != std::string::npos);
  CHECK(Refusal(Config(TestPlugin("no_entry_plugin")), true).find("no akadzed_plugin_entry") !=
        std::string::npos);
}

TEST_CASE("the example plugin reports a checksum result and logs a line", "[plugin]") {
  LogCapture log;
  PluginHandler handler("checksum", Config(kExample, R"({"algorithm": "fnv1a"})"));
  CHECK(std::string(handler.kind()) == "plugin");
  const std::string args = R"({"customer": 7, "items": ["a", "b"]})";
  JobOutcome outcome = RunOnce(handler, args);
  REQUIRE(outcome.kind == OutcomeKind::kSuccess);
  REQUIRE(outcome.result_json);
  auto result = nlohmann::json::parse(*outcome.result_json);
  CHECK(result["checksum"] == Hex16(Fnv1a(args)));
  CHECK(result["bytes"] == args.size());
  CHECK(outcome.error.empty());
  CHECK_FALSE(outcome.delay_us);
  CHECK(log.text().find("info plugin job=42 task=checksum | fnv1a of " +
                        std::to_string(args.size()) + " bytes: " + Hex16(Fnv1a(args)) + "\n") !=
        std::string::npos);
}

TEST_CASE("the example plugin retries on \"fail\": true and snoozes once", "[plugin]") {
  LogCapture quiet;
  PluginHandler handler("checksum", Config(kExample));
  JobOutcome retry = RunOnce(handler, R"({"fail": true})");
  CHECK(retry.kind == OutcomeKind::kRetry);
  CHECK(retry.error == "ExampleFailure");
  CHECK_FALSE(retry.delay_us);
  CHECK_FALSE(retry.result_json);
  // Only a top-level literal true counts.
  CHECK(RunOnce(handler, R"({"fail": false})").kind == OutcomeKind::kSuccess);
  CHECK(RunOnce(handler, R"({"x": {"fail": true}, "y": "\"fail\": true"})").kind ==
        OutcomeKind::kSuccess);

  JobOutcome snooze = RunOnce(handler, R"({"snooze_ms": 250})", 1);
  CHECK(snooze.kind == OutcomeKind::kSnooze);
  CHECK(snooze.delay_us == 250'000);
  CHECK(RunOnce(handler, R"({"snooze_ms": 250})", 2).kind == OutcomeKind::kSuccess);
}

TEST_CASE("a stop request from another thread ends a sleeping plugin job", "[plugin]") {
  LogCapture quiet;
  PluginHandler handler("checksum", Config(kExample));
  JobStop stop;
  auto start = Clock::now();
  std::thread stopper([&] {
    std::this_thread::sleep_for(50ms);
    stop.Request(StopReason::kCancelRequested);
  });
  JobOutcome outcome = handler.Run(Job(R"({"sleep_ms": 60000})"), stop);
  stopper.join();
  CHECK(SecondsSince(start) < 2.0);
  CHECK(outcome.kind == OutcomeKind::kRetry);
  CHECK(outcome.error == "Stopped");

  JobStop already;
  already.Request(StopReason::kShutdown);
  start = Clock::now();
  CHECK(handler.Run(Job(R"({"sleep_ms": 60000})"), already).error == "Stopped");
  CHECK(SecondsSince(start) < 1.0);
}

TEST_CASE("a plugin job that outlives its timeout is retried as Timeout", "[plugin]") {
  LogCapture quiet;
  PluginHandler handler("checksum", Config(kExample, "{}", 100'000));
  auto start = Clock::now();
  JobOutcome outcome = RunOnce(handler, R"({"sleep_ms": 60000})");
  CHECK(SecondsSince(start) >= 0.1);
  CHECK(SecondsSince(start) < 2.0);
  CHECK(outcome.kind == OutcomeKind::kRetry);
  CHECK(outcome.error == "Timeout");
  CHECK(outcome.message == "plugin checksum 1.0.0 ran past its timeout of 100ms");
  CHECK(RunOnce(handler, R"({"sleep_ms": 20})").kind == OutcomeKind::kSuccess);

  // A plugin that ignores stop_requested is judged when it returns.
  PluginHandler slow("t", Config(TestPlugin("misbehaving_plugin"), "{}", 50'000));
  start = Clock::now();
  outcome = RunOnce(slow, R"("slow")");
  CHECK(SecondsSince(start) >= 0.3);
  CHECK(outcome.kind == OutcomeKind::kRetry);
  CHECK(outcome.error == "Timeout");
}

TEST_CASE("bad plugin reports become BadOutcome retries", "[plugin]") {
  LogCapture quiet;
  PluginHandler handler("t", Config(TestPlugin("misbehaving_plugin")));
  auto check_bad = [&](const std::string& args, const std::string& what) {
    JobOutcome outcome = RunOnce(handler, args);
    INFO(args << ": " << outcome.message);
    CHECK(outcome.kind == OutcomeKind::kRetry);
    CHECK(outcome.error == "BadOutcome");
    CHECK(outcome.message == "plugin misbehaving 0 " + what);
    CHECK_FALSE(outcome.result_json);
  };
  check_bad(R"("bad_json")", "returned a result that is not valid JSON");
  check_bad(R"("snooze")", "snoozed without a delay (set_delay_ms)");
  check_bad(R"("negative_delay")", "reported a delay of -5 ms");
  check_bad(R"("code")", "returned unknown outcome code 42");

  JobOutcome fail = RunOnce(handler, R"("fail")");
  CHECK(fail.kind == OutcomeKind::kFail);
  CHECK(fail.error == "PluginError");
  JobOutcome cancel = RunOnce(handler, R"("cancel")");
  CHECK(cancel.kind == OutcomeKind::kCancel);
  CHECK(cancel.error == "Cancelled");
  JobOutcome retry = RunOnce(handler, R"("retry_after")");
  CHECK(retry.kind == OutcomeKind::kRetry);
  CHECK(retry.error == "Busy");
  CHECK(retry.message == "try again later");
  CHECK(retry.delay_us == 1'500'000);
  JobOutcome plain = RunOnce(handler, R"("other")");
  CHECK(plain.kind == OutcomeKind::kSuccess);
  CHECK_FALSE(plain.result_json);
}

TEST_CASE("the job's fields reach the plugin as struct akadzed_job", "[plugin]") {
  LogCapture quiet;
  PluginHandler handler("t", Config(TestPlugin("misbehaving_plugin")));
  ClaimedJob job = Job(R"("echo")", 4);
  job.id = 9'000'000'001;
  job.task = "mail";
  job.queue = "outbox";
  job.attempt = 2;  // two failed runs: this is attempt 3
  job.max_attempts = 5;
  JobStop stop;
  JobOutcome outcome = handler.Run(job, stop);
  REQUIRE(outcome.result_json);
  CHECK(nlohmann::json::parse(*outcome.result_json) ==
        nlohmann::json{{"job_size", sizeof(akadzed_job)}, {"report_size", sizeof(akadzed_report)},
                       {"id", 9'000'000'001}, {"task", "mail"}, {"queue", "outbox"},
                       {"limit_key", nullptr}, {"attempt", 3}, {"max_attempts", 5},
                       {"run_count", 4}, {"args", "echo"}, {"args_len", 6}, {"stop", 0}});
  job.limit_key = "tenant-3";
  outcome = handler.Run(job, stop);
  REQUIRE(outcome.result_json);
  CHECK(nlohmann::json::parse(*outcome.result_json)["limit_key"] == "tenant-3");
}

TEST_CASE("plugin log lines go to the daemon's log at their level, on one line", "[plugin]") {
  PluginHandler handler("t", Config(TestPlugin("misbehaving_plugin")));
  LogCapture log;
  ClaimedJob job = Job(R"("levels")");
  job.id = 7;
  job.task = "report";
  JobStop stop;
  CHECK(handler.Run(job, stop).kind == OutcomeKind::kSuccess);
  CHECK(log.text() ==
        "trace plugin job=7 task=report | at a level\n"
        "debug plugin job=7 task=report | at a level\n"
        "info plugin job=7 task=report | at a level\n"
        "warning plugin job=7 task=report | at a level\n"
        "error plugin job=7 task=report | at a level\n"
        "critical plugin job=7 task=report | at a level\n"
        "warning plugin job=7 task=report | two lines\n");
}

TEST_CASE("one plugin instance serves concurrent runs", "[plugin]") {
  LogCapture quiet;
  PluginHandler handler("checksum", Config(kExample));
  constexpr int kThreads = 8;
  constexpr int kRuns = 50;
  std::vector<int> good(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRuns; ++i) {
        std::string args = R"({"thread": )" + std::to_string(t) + R"(, "run": )" +
                           std::to_string(i) + (i % 10 == 0 ? R"(, "sleep_ms": 5})" : "}");
        JobOutcome outcome = RunOnce(handler, args);
        if (outcome.kind == OutcomeKind::kSuccess && outcome.result_json &&
            nlohmann::json::parse(*outcome.result_json)["checksum"] == Hex16(Fnv1a(args))) {
          ++good[t];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) CHECK(good[t] == kRuns);
}

TEST_CASE("handlers share one load of a plugin file, closed with the last", "[plugin]") {
  LogCapture quiet;
  REQUIRE_FALSE(IsLoaded(kExample));
  auto first = std::make_unique<PluginHandler>("checksum", Config(kExample));
  // The same file by another path (bare name on the search path) is the same load.
  EnvGuard env("AKADZED_PLUGIN_PATH", AKADZED_EXAMPLE_PLUGIN_DIR);
  auto second = std::make_unique<PluginHandler>("other", Config("libakadzed_example.so"));
  CHECK(IsLoaded(kExample));
  first.reset();
  CHECK(IsLoaded(kExample));
  CHECK(RunOnce(*second, "{}").kind == OutcomeKind::kSuccess);
  second.reset();
  CHECK_FALSE(IsLoaded(kExample));
}

}  // namespace
TEST_CASE("a hook-only plugin is a hook, not a handler; a handler-only one is not a hook",
          "[plugin][hooks]") {
  const std::string hook_only = TestPlugin("hook_plugin");
  CHECK(Refusal(Config(hook_only)).find("has no handle function, so it cannot run jobs of task t") !=
        std::string::npos);
  CHECK(Refusal(Config(hook_only), true).find("has no handle function") != std::string::npos);
  CHECK_NOTHROW(VerifyPlugin(Config(hook_only), PluginUse::kHook));
  PluginHook hook("audit", Config(hook_only, R"({"refuse_task":"x"})"));
  akadzed_transition t{};
  t.struct_size = sizeof t;
  t.task = "x";
  CHECK(hook.OnTransition(t) == "task x is refused by this plugin's config");

  const std::string& handler_only = kExample;
  try {
    VerifyPlugin(Config(handler_only), PluginUse::kHook);
    FAIL("a plugin without on_transition verified as a hook");
  } catch (const PluginError& e) {
    CHECK(std::string(e.what()).find("has no on_transition function, so it cannot be a hook") !=
          std::string::npos);
  }
  CHECK_THROWS_AS(PluginHook("h", Config(handler_only)), PluginError);
}

TEST_CASE("a plugin's report_progress merges into the job's pending progress; bad reports are refused",
          "[plugin][progress]") {
  PluginHandler handler("t", Config(TestPlugin("misbehaving_plugin")));
  LogCapture log;
  ClaimedJob job = Job(R"("progress")");
  job.id = 11;
  JobStop stop;
  JobProgress progress;
  JobOutcome outcome = handler.Run(job, stop, &progress);
  CHECK(outcome.kind == OutcomeKind::kSuccess);
  REQUIRE(outcome.result_json);
  CHECK(nlohmann::json::parse(*outcome.result_json) == nlohmann::json{0, 0, -1, -1, -1, -1});
  std::optional<std::string> pending = progress.TakeForFinish();
  REQUIRE(pending);
  CHECK(nlohmann::json::parse(*pending) == nlohmann::json{{"progress", 0.5}, {"rows", 10}});
  // The first refusal is logged, once per run.
  CHECK(log.text() ==
        "warning progress_refused job=11 task=checksum | plugin report_progress: progress must be a "
        "number from 0 to 1; the run goes on\n");
  // Without a sink the reports are dropped and still answered.
  outcome = handler.Run(job, stop);
  REQUIRE(outcome.result_json);
  CHECK(nlohmann::json::parse(*outcome.result_json) == nlohmann::json{0, 0, -1, -1, -1, -1});
}

TEST_CASE("a job's traceparent reaches the plugin as akadzed_job.traceparent", "[plugin][trace]") {
  LogCapture quiet;
  PluginHandler handler("t", Config(TestPlugin("misbehaving_plugin")));
  ClaimedJob job = Job(R"("trace")");
  JobStop stop;
  JobOutcome outcome = handler.Run(job, stop);
  REQUIRE(outcome.result_json);
  CHECK(nlohmann::json::parse(*outcome.result_json) == nlohmann::json{{"traceparent", nullptr}});
  job.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  job.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  outcome = handler.Run(job, stop);
  REQUIRE(outcome.result_json);
  CHECK(nlohmann::json::parse(*outcome.result_json) ==
        nlohmann::json{{"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}});
}

}  // namespace akadzed
