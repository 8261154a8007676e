// The daemon's log lines (runtime/log_line.h, runtime/logging.h): LogValue's
// quoting and escaping, the split of a message into event, fields and msg,
// every message shape the daemon's sources emit, logfmt / JSON / journald
// rendered by a real spdlog logger, and the log file: append, reopen after a
// move, a failed reopen, close-on-exec and mode.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "runtime/job_traces.h"
#include "runtime/log_line.h"
#include "runtime/logging.h"

namespace akadzed {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Fields = std::vector<std::pair<std::string, std::string>>;

// A logger with LogLineFormatter(`format`) writing into a string.
class FormattedLog {
 public:
  explicit FormattedLog(LogFormat format)
      : logger_("log_test", std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)) {
    logger_.set_formatter(std::make_unique<LogLineFormatter>(format));
    logger_.set_level(spdlog::level::debug);
  }
  spdlog::logger& logger() { return logger_; }
  std::string text() const { return out_.str(); }
  std::vector<std::string> lines() const {
    std::vector<std::string> result;
    std::istringstream in(out_.str());
    for (std::string line; std::getline(in, line);) result.push_back(line);
    return result;
  }

 private:
  std::ostringstream out_;
  spdlog::logger logger_;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Values that need every kind of quoting and escaping.
const std::vector<std::string>& NastyValues() {
  static const std::vector<std::string> values = {
      "",          "plain",        "with space",     "a=b",        "say \"hi\"",   "back\\slash",
      "two\nlines", "tab\tand\rcr", "bell\x07",      "del\x7f",    "bad\xff utf8", "\xc0\xaf",
      "\xe2\x82",  "\xed\xa0\x80", "caf\xc3\xa9",    " | pipe",    "|",            "\\x41",
      "end\\",     "k=v | t",      std::string("nul\0x", 5)};
  return values;
}

TEST_CASE("LogValue leaves tokens alone and quotes everything else", "[logging]") {
  CHECK(LogValue("default") == "default");
  CHECK(LogValue("1/3") == "1/3");
  CHECK(LogValue("/var/log/akadzed.log") == "/var/log/akadzed.log");
  CHECK(LogValue("caf\xc3\xa9") == "caf\xc3\xa9");  // valid UTF-8 stays as is
  CHECK(LogValue("") == "\"\"");
  CHECK(LogValue("send email") == "\"send email\"");
  CHECK(LogValue("a=b") == "\"a=b\"");
  CHECK(LogValue("say \"hi\"") == R"("say \"hi\"")");
  CHECK(LogValue("c:\\tmp") == R"("c:\\tmp")");
  CHECK(LogValue("a\nb\tc\rd") == R"("a\nb\tc\rd")");
  CHECK(LogValue("bell\x07" "del\x7f") == R"("bell\x07del\x7f")");
  CHECK(LogValue("bad\xff") == R"("bad\xff")");
  CHECK(LogValue("\xc0\xaf") == R"("\xc0\xaf")");          // overlong
  CHECK(LogValue("\xed\xa0\x80") == R"("\xed\xa0\x80")");  // surrogate
  CHECK(LogValue("cut\xe2\x82") == R"("cut\xe2\x82")");    // sequence cut short
  for (const std::string& v : NastyValues()) {
    INFO(v);
    const std::string encoded = LogValue(v);
    // One line, no raw control bytes.
    for (char c : encoded) CHECK((static_cast<unsigned char>(c) >= 0x20 && c != 0x7f));
  }
}

TEST_CASE("ParseLogEvent splits event, fields and msg", "[logging]") {
  SECTION("event only") {
    LogEvent e = ParseLogEvent("stopped");
    CHECK(e.event == "stopped");
    CHECK(e.fields.empty());
    CHECK_FALSE(e.msg);
  }
  SECTION("fields and free text, which may contain anything") {
    LogEvent e = ParseLogEvent("finish job=7 outcome=retry | boom | k=v \"x\"");
    CHECK(e.event == "finish");
    CHECK(e.fields == Fields{{"job", "7"}, {"outcome", "retry"}});
    CHECK(e.msg == "boom | k=v \"x\"");
  }
  SECTION("free text right after the event; empty free text") {
    CHECK(ParseLogEvent("prune_failed | timeout").msg == "timeout");
    LogEvent e = ParseLogEvent("output job=1 stream=stdout | ");
    CHECK(e.fields.size() == 2);
    CHECK(e.msg == "");
    CHECK(ParseLogEvent("output job=1 |").msg == "");
  }
  SECTION("a bare value may hold '=' and '|'") {
    LogEvent e = ParseLogEvent("started queues=default(slots=4,fair) a=x|y");
    CHECK(e.fields == Fields{{"queues", "default(slots=4,fair)"}, {"a", "x|y"}});
  }
  SECTION("every LogValue round-trips, in any position") {
    for (const std::string& v : NastyValues()) {
      INFO(LogValue(v));
      LogEvent e = ParseLogEvent("ev a=" + LogValue(v) + " b=" + LogValue(v) + " | tail");
      CHECK(e.event == "ev");
      CHECK(e.fields == Fields{{"a", v}, {"b", v}});
      CHECK(e.msg == "tail");
    }
  }
  SECTION("a malformed message loses nothing: the rest becomes msg") {
    LogEvent words = ParseLogEvent("plugin task=x loaded lib from /p");
    CHECK(words.fields == Fields{{"task", "x"}});
    CHECK(words.msg == "loaded lib from /p");
    LogEvent open_quote = ParseLogEvent("e k=\"never closed");
    CHECK(open_quote.fields.empty());
    CHECK(open_quote.msg == "k=\"never closed");
    LogEvent glued = ParseLogEvent("e k=\"a\"b c=d");
    CHECK(glued.fields.empty());
    CHECK(glued.msg == "k=\"a\"b c=d");
  }
}

// The shapes the daemon's call sites emit, built like the call sites build
// them (free-form values through LogValue), with values that would break a
// naive split.
TEST_CASE("every message shape the daemon emits round-trips into its fields", "[logging]") {
  const std::string task = "send \"mail\" now";
  const std::string queue = "low prio=1";
  const std::string host = "host name";
  const std::string path = "/etc/ak adzed/a=b.yaml";
  const std::string text = "line | with \"quotes\"\tand\xff";
  struct Shape {
    std::string message;
    std::string event;
    Fields fields;
    std::optional<std::string> msg;
  };
  const std::string t = LogValue(task), q = LogValue(queue);
  const std::vector<Shape> shapes = {
      {fmt::format("registered worker={} host={} pid={}", "4b1d", LogValue(host), 12),
       "registered", {{"worker", "4b1d"}, {"host", host}, {"pid", "12"}}, std::nullopt},
      {fmt::format("started worker={} queues={} handlers={} pid={}", "4b1d",
                   LogValue(queue + "(slots=4,fair),b(slots=1,ordered,aging=5m)"), 2, 12),
       "started",
       {{"worker", "4b1d"},
        {"queues", queue + "(slots=4,fair),b(slots=1,ordered,aging=5m)"},
        {"handlers", "2"},
        {"pid", "12"}},
       std::nullopt},
      {fmt::format("claim queue={} jobs={} free_slots={} ms={:.1f}", q, 3, 1, 2.25), "claim",
       {{"queue", queue}, {"jobs", "3"}, {"free_slots", "1"}, {"ms", "2.2"}}, std::nullopt},
      {fmt::format("claim_failed queue={} | {}", q, text), "claim_failed", {{"queue", queue}}, text},
      {fmt::format("start job={} task={} queue={} attempt={}/{} run={} handler={}", 42, t, q, 1, 3,
                   1, "shell"),
       "start",
       {{"job", "42"}, {"task", task}, {"queue", queue}, {"attempt", "1/3"}, {"run", "1"},
        {"handler", "shell"}},
       std::nullopt},
      {fmt::format("output job={} task={} stream={} | {}", 42, t, "stdout", text), "output",
       {{"job", "42"}, {"task", task}, {"stream", "stdout"}}, text},
      {fmt::format("output job={} task={} | truncated after {} bytes", 42, t, 100), "output",
       {{"job", "42"}, {"task", task}}, "truncated after 100 bytes"},
      {fmt::format("plugin job={} task={} | {}", 42, t, text), "plugin",
       {{"job", "42"}, {"task", task}}, text},
      {fmt::format("plugin task={} | loaded {} from {}", t, "example 1.0", path), "plugin",
       {{"task", task}}, "loaded example 1.0 from " + path},
      {fmt::format("shell job={} task={} | timed out after {}: SIGTERM to process group {}", 42, t,
                   "1s", 99),
       "shell", {{"job", "42"}, {"task", task}}, "timed out after 1s: SIGTERM to process group 99"},
      {fmt::format("finish job={} task={} queue={} outcome={} state={} failed_runs={} "
                   "duration_ms={:.0f}{}{}",
                   42, t, q, "retry", "queued", 1, 12.6, fmt::format(" run_in={:.1f}s", 1.0),
                   fmt::format(" error={} | {}", LogValue("My Error"), text)),
       "finish",
       {{"job", "42"}, {"task", task}, {"queue", queue}, {"outcome", "retry"}, {"state", "queued"},
        {"failed_runs", "1"}, {"duration_ms", "13"}, {"run_in", "1.0s"}, {"error", "My Error"}},
       text},
      {fmt::format("stale_finish job={} run={} task={} queue={} outcome={} | discarded", 42, 2, t, q,
                   "success"),
       "stale_finish",
       {{"job", "42"}, {"run", "2"}, {"task", task}, {"queue", queue}, {"outcome", "success"}},
       "discarded"},
      {fmt::format("rescue job={} lost_worker={} state={}", 42, LogValue("none"), "queued"),
       "rescue", {{"job", "42"}, {"lost_worker", "none"}, {"state", "queued"}}, std::nullopt},
      {fmt::format("reload config={} handlers={}", LogValue(path), 2), "reload",
       {{"config", path}, {"handlers", "2"}}, std::nullopt},
      {fmt::format("signal name={} | stopping: no new claims, draining for up to {}", "TERM", "1h"),
       "signal", {{"name", "TERM"}}, "stopping: no new claims, draining for up to 1h"},
      {fmt::format("log_open_failed file={} | {}; still logging to {}", LogValue(path),
                   "Permission denied", "stderr"),
       "log_open_failed", {{"file", path}}, "Permission denied; still logging to stderr"},
      {"lease_regained worker=4b1d", "lease_regained", {{"worker", "4b1d"}}, std::nullopt},
  };
  for (const Shape& s : shapes) {
    INFO(s.message);
    LogEvent e = ParseLogEvent(s.message);
    CHECK(e.event == s.event);
    CHECK(e.fields == s.fields);
    CHECK(e.msg == s.msg);
  }
}

// The string literals of a call's format argument starting at `at` (adjacent
// literals concatenated); `at` moves past them.
std::string FormatLiteral(const std::string& src, std::size_t& at) {
  std::string text;
  for (;;) {
    while (at < src.size() && std::isspace(static_cast<unsigned char>(src[at]))) ++at;
    if (at >= src.size() || src[at] != '"') return text;
    for (++at; at < src.size() && src[at] != '"'; ++at) {
      if (src[at] == '\\') ++at;
      text += src[at];
    }
    ++at;
  }
}

// The call's remaining arguments (after the format) up to its ')', split at
// top-level commas.
std::vector<std::string> Arguments(const std::string& src, std::size_t at) {
  std::vector<std::string> args;
  std::string current;
  int depth = 0;
  for (; at < src.size(); ++at) {
    const char c = src[at];
    if (c == '"' || c == '\'') {
      const std::size_t start = at;
      for (++at; at < src.size() && src[at] != c; ++at) {
        if (src[at] == '\\') ++at;
      }
      current += src.substr(start, at - start + 1);
      continue;
    }
    if (c == '(' || c == '[' || c == '{') ++depth;
    if ((c == ')' || c == ']' || c == '}') && depth-- == 0) break;
    if (c == ',' && depth == 0) {
      if (!current.empty()) args.push_back(current);
      current.clear();
      continue;
    }
    if (!std::isspace(static_cast<unsigned char>(c))) current += c;
  }
  if (!current.empty()) args.push_back(current);
  return args;
}

// Keys whose values are free-form text (names, paths, error classes): their
// arguments must go through LogValue.
bool TextKey(const std::string& key) {
  static const std::vector<std::string> keys = {
      "task", "queue", "queues", "host", "config", "path",      "file",
      "error", "name", "use",    "hook", "plugin", "limit_key", "lost_worker",
      // the horizon's holders (metrics/horizon_watch.cpp)
      "application_name", "backend_type", "database", "slot", "slot_type", "gid", "owner"};
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

TEST_CASE("every log call in the daemon's sources follows the message grammar", "[logging]") {
  // tests/unit/logging_test.cpp -> the repository root.
  const fs::path root = fs::path(__FILE__).parent_path().parent_path().parent_path();
  REQUIRE(fs::is_directory(root / "daemon"));
  static const std::regex kCall(R"(spdlog::(trace|debug|info|warn|error|critical|log)\()");
  static const std::regex kPlaceholder(R"(\{[^{}]*\})");
  static const std::regex kWord(R"([a-z_]+)");
  static const std::regex kDutyEvent("\x01_[a-z_]+");
  static const std::regex kField(R"(([a-z_]+)=(\S+))");
  int calls = 0;
  for (const auto& entry : fs::recursive_directory_iterator(root / "daemon")) {
    const std::string ext = entry.path().extension().string();
    if (ext != ".cpp" && ext != ".h") continue;
    const std::string src = ReadFile(entry.path().string());
    for (auto it = std::sregex_iterator(src.begin(), src.end(), kCall); it != std::sregex_iterator();
         ++it) {
      std::size_t at = static_cast<std::size_t>(it->position() + it->length());
      if ((*it)[1] == "log") at = src.find(',', at) + 1;  // skip the level
      const std::string format = FormatLiteral(src, at);
      const std::vector<std::string> args = Arguments(src, at);
      const std::string where = entry.path().filename().string() + ": " + format;
      INFO(where);
      ++calls;
      REQUIRE_FALSE(format.empty());  // a literal format, never a variable
      // Placeholders become X; each one's argument is known by its ordinal.
      std::string shape;
      std::vector<std::string> placeholder_args;
      std::size_t last = 0;
      for (auto p = std::sregex_iterator(format.begin(), format.end(), kPlaceholder);
           p != std::sregex_iterator(); ++p) {
        shape += format.substr(last, p->position() - last) + "\x01";
        last = p->position() + p->length();
      }
      shape += format.substr(last);
      // Event, then key=value tokens up to " | ".
      const std::string head = shape.substr(0, shape.find(" |"));
      std::size_t ordinal = 0;  // placeholders before the current token
      bool first = true;
      for (std::size_t pos = 0; pos <= head.size();) {
        std::size_t end = std::min(head.find(' ', pos), head.size());
        const std::string token = head.substr(pos, end - pos);
        pos = end + 1;
        if (first) {
          first = false;
          // A PeriodicService's lines (runtime/periodic_service.cpp) take
          // their duty's name, a word its constructor checks, as the
          // event's prefix: "{}_failed" with duty_.name.
          if (std::regex_match(token, kDutyEvent) && !args.empty() && args[0] == "duty_.name") {
            ordinal = 1;
            continue;
          }
          CHECK(std::regex_match(token, kWord));
          continue;
        }
        std::smatch m;
        CHECK(std::regex_match(token, m, kField));
        if (!m.empty() && TextKey(m[1]) && m[2] == "\x01") {
          REQUIRE(ordinal < args.size());
          CHECK(args[ordinal].rfind("LogValue(", 0) == 0);
        }
        ordinal += static_cast<std::size_t>(std::count(token.begin(), token.end(), '\x01'));
      }
    }
  }
  CHECK(calls > 30);
}

TEST_CASE("logfmt lines: ts, level, event, fields, msg; one event per line", "[logging]") {
  FormattedLog log(LogFormat::kLogfmt);
  log.logger().info("start job={} task={} queue=default attempt=1/3", 42, LogValue("send mail"));
  log.logger().warn("output job=42 task=greet stream=stderr | two\nlines \"quoted\" \xff");
  log.logger().debug("stopped worker=abc");
  log.logger().error("prune_failed | boom");
  log.logger().critical("start_failed | no database");
  log.logger().trace("not shown at debug");
  const std::vector<std::string> lines = log.lines();
  REQUIRE(lines.size() == 5);
  static const std::regex kTs(R"(ts=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z )");
  for (const std::string& line : lines) {
    std::smatch m;
    CHECK(std::regex_search(line, m, kTs));
    CHECK(m.position() == 0);
  }
  CHECK(lines[0].substr(28) ==
        "level=info event=start job=42 task=\"send mail\" queue=default attempt=1/3");
  CHECK(lines[1].substr(28) ==
        R"(level=warn event=output job=42 task=greet stream=stderr msg="two\nlines \"quoted\" \xff")");
  CHECK(lines[2].substr(28) == "level=debug event=stopped worker=abc");
  CHECK(lines[3].substr(28) == "level=error event=prune_failed msg=boom");
  CHECK(lines[4].substr(28) == "level=critical event=start_failed msg=\"no database\"");
}

TEST_CASE("lines about a job with a trace id carry trace_id after job=, in every format", "[logging][trace]") {
  const std::string trace = "4bf92f3577b34da6a3ce929d0e0e4736";
  FormattedLog log(LogFormat::kLogfmt);
  FormattedLog json_log(LogFormat::kJson);
  {
    const JobTraceScope scope(42, trace);
    const JobTraceScope nested(42, trace);  // claimed here again while the first is ending
    log.logger().info("start job={} task=t", 42);
    json_log.logger().info("start job={} task=t", 42);
    log.logger().info("start job={} task=t", 43);           // another job
    log.logger().info("x job=42 trace_id=own | kept");      // says its own
    log.logger().info("cancel_requested job=042x | not a job id");
  }
  log.logger().info("finish job={} task=t", 42);  // no longer in hand
  const std::vector<std::string> lines = log.lines();
  REQUIRE(lines.size() == 5);
  CHECK(lines[0].substr(28) == "level=info event=start job=42 trace_id=" + trace + " task=t");
  CHECK(lines[1].substr(28) == "level=info event=start job=43 task=t");
  CHECK(lines[2].substr(28) == "level=info event=x job=42 trace_id=own msg=kept");
  CHECK(lines[3].substr(28) == "level=info event=cancel_requested job=042x msg=\"not a job id\"");
  CHECK(lines[4].substr(28) == "level=info event=finish job=42 task=t");
  CHECK(json::parse(json_log.lines().at(0))["trace_id"] == trace);
  CHECK_FALSE(JobTraceId(42));
}

TEST_CASE("W3C traceparent: the trace id of a valid one, nothing else", "[logging][trace]") {
  CHECK(ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01") ==
        "4bf92f3577b34da6a3ce929d0e0e4736");
  // A later version may append fields; what is passed on is version 00's.
  CHECK(ParseTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-extra") ==
        "4bf92f3577b34da6a3ce929d0e0e4736");
  CHECK(W3cTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-" + std::string(200000, 'x')) ==
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
  for (const char* bad : {
           "", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
           "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",   // upper case
           "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",   // not hex
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",   // zero trace id
           "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",   // zero parent id
           "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   // version ff
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", // version 00 is 55 bytes
           "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
           "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}) {
    INFO(bad);
    CHECK_FALSE(ParseTraceparent(bad));
  }
}

TEST_CASE("JSON lines: one valid UTF-8 object per line, all values strings", "[logging]") {
  FormattedLog log(LogFormat::kJson);
  log.logger().info("finish job={} task={} outcome=retry error={} | {}", 42, LogValue("a \"b\""),
                    LogValue("Bad\xff"), "tab\there\nnewline \xc0 end");
  log.logger().warn("lease_lost worker=abc");
  const std::vector<std::string> lines = log.lines();
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].rfind("{\"ts\":\"", 0) == 0);
  json first = json::parse(lines[0]);  // throws on invalid UTF-8
  CHECK(first["level"] == "info");
  CHECK(first["event"] == "finish");
  CHECK(first["job"] == "42");
  CHECK(first["task"] == "a \"b\"");
  CHECK(first["outcome"] == "retry");
  CHECK(first["error"] == "Bad\xEF\xBF\xBD");
  CHECK(first["msg"] == "tab\there\nnewline \xEF\xBF\xBD end");
  CHECK(std::regex_match(first["ts"].get<std::string>(),
                         std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")));
  // Keys in message order after ts, level, event.
  CHECK(lines[0].find("\"level\"") < lines[0].find("\"event\""));
  CHECK(lines[0].find("\"job\"") < lines[0].find("\"task\""));
  CHECK(lines[0].find("\"error\"") < lines[0].find("\"msg\""));
  json second = json::parse(lines[1]);
  CHECK(second == json{{"ts", second["ts"]}, {"level", "warn"}, {"event", "lease_lost"},
                       {"worker", "abc"}});
}

TEST_CASE("journald lines: priority prefix, no timestamp", "[logging]") {
  FormattedLog log(LogFormat::kJournald);
  log.logger().debug("claim queue=default jobs=1");
  log.logger().info("output job=1 stream=stdout | hi there");
  log.logger().warn("drop job=1");
  log.logger().error("claim_failed queue=default | down");
  log.logger().critical("start_failed | x");
  CHECK(log.lines() == std::vector<std::string>{
                           "<7>level=debug event=claim queue=default jobs=1",
                           "<6>level=info event=output job=1 stream=stdout msg=\"hi there\"",
                           "<4>level=warn event=drop job=1",
                           "<3>level=error event=claim_failed queue=default msg=down",
                           "<2>level=critical event=start_failed msg=x"});
}

// Unique temporary directory, removed on destruction.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "akadzed-log-XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

// The open descriptor of `path` in this process, or -1.
int OpenFdOf(const fs::path& path) {
  for (const auto& entry : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (fs::read_symlink(entry.path(), ec) == path) return std::stoi(entry.path().filename());
  }
  return -1;
}

TEST_CASE("the log file: appended, close-on-exec, reopened after a move, kept when the reopen "
          "fails", "[logging]") {
  TempDir dir;
  const fs::path file = dir.path / "akadzed.log";
  LoggingConfig config;
  config.format = LogFormat::kJson;
  config.file = file.string();
  ConfigureLogging(config);
  spdlog::info("first job={}", 1);

  const int fd = OpenFdOf(file);
  REQUIRE(fd >= 0);
  CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
  CHECK((fcntl(fd, F_GETFL) & O_APPEND) != 0);
  struct stat st {};
  REQUIRE(stat(file.c_str(), &st) == 0);
  const mode_t mask = umask(0);
  umask(mask);
  CHECK((st.st_mode & 0777) == (0640 & ~mask));

  // logrotate: move, then SIGHUP (ReopenLogFile).
  const fs::path rotated = dir.path / "akadzed.log.1";
  fs::rename(file, rotated);
  spdlog::info("second job={}", 2);  // still the moved file
  ReopenLogFile();
  spdlog::info("third job={}", 3);
  CHECK(OpenFdOf(rotated) == -1);  // closed
  std::vector<std::string> old_lines, new_lines;
  {
    std::istringstream a(ReadFile(rotated.string())), b(ReadFile(file.string()));
    for (std::string l; std::getline(a, l);) old_lines.push_back(json::parse(l)["event"]);
    for (std::string l; std::getline(b, l);) new_lines.push_back(json::parse(l)["event"]);
  }
  CHECK(old_lines == std::vector<std::string>{"first", "second"});
  CHECK(new_lines == std::vector<std::string>{"third"});

  // The directory vanished: the reopen fails, the old descriptor stays in use
  // and one error line says so.
  const fs::path moved_dir = dir.path.string() + "-gone";
  fs::rename(dir.path, moved_dir);
  ReopenLogFile();
  spdlog::info("fourth job={}", 4);
  fs::rename(moved_dir, dir.path);
  {
    std::istringstream in(ReadFile(file.string()));
    std::vector<json> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(json::parse(l));
    REQUIRE(lines.size() == 3);
    CHECK(lines[1]["event"] == "log_open_failed");
    CHECK(lines[1]["level"] == "error");
    CHECK(lines[1]["file"] == file.string());
    CHECK(lines[2]["event"] == "fourth");
  }

  // Many threads at once: every line whole.
  {
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([t] {
        for (int i = 0; i < 200; ++i) {
          spdlog::info("burst thread={} i={} | {}", t, i, std::string(100, 'x'));
          if (t == 0 && i % 50 == 0) ReopenLogFile();
        }
      });
    }
    for (auto& th : threads) th.join();
    std::istringstream in(ReadFile(file.string()));
    int bursts = 0;
    for (std::string l; std::getline(in, l);) bursts += json::parse(l)["event"] == "burst";
    CHECK(bursts == 1600);
  }

  // A reload naming a file that cannot be opened keeps the current one.
  {
    LoggingConfig elsewhere = config;
    elsewhere.file = (dir.path / "no-such-dir" / "x.log").string();
    ConfigureLogging(elsewhere);
    spdlog::info("after_bad_reload");
    const std::vector<std::string> lines = [&] {
      std::vector<std::string> all;
      std::istringstream in(ReadFile(file.string()));
      for (std::string l; std::getline(in, l);) all.push_back(l);
      return all;
    }();
    REQUIRE(lines.size() >= 2);
    json failed = json::parse(lines[lines.size() - 2]);
    CHECK(failed["event"] == "log_open_failed");
    CHECK(failed["file"] == elsewhere.file);
    CHECK(failed["msg"] == "No such file or directory; still logging to " + file.string());
    CHECK(json::parse(lines.back())["event"] == "after_bad_reload");
  }

  // Back to stderr: the file is closed.
  config.file.clear();
  config.format = LogFormat::kLogfmt;
  ConfigureLogging(config);
  CHECK(OpenFdOf(file) == -1);
}

}  // namespace
}  // namespace akadzed
