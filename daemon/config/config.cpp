#include "config/config.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <limits>
#include <optional>
#include <regex>
#include <sstream>
#include <string_view>
#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include "config/config_keys.h"
#include "web/admin_token.h"
#include "core/duration.h"
#include "core/redact.h"

namespace akadzed {

namespace {

namespace fs = std::filesystem;

constexpr std::size_t kMaxFileBytes = 1 << 20;
constexpr int kMaxJsonDepth = 64;
// Values a plugin's `config:` may expand to: aliases can fan out
// exponentially ("billion laughs") in a file of a few hundred bytes.
constexpr std::size_t kMaxJsonValues = 100000;

std::string Prefix(const std::string& file, int line) {
  return line > 0 ? file + ":" + std::to_string(line) + ": " : file + ": ";
}

// A value being read: its YAML node, its key path for messages (e.g.
// "queues[1].slots") and its 1-based line (0 when unknown).
struct Item {
  YAML::Node node;
  std::string where;
  int line = 0;
};

using Fields = std::vector<std::pair<std::string, Item>>;

const Item* Find(const Fields& fields, std::string_view key) {
  for (const auto& [name, item] : fields) {
    if (name == key) return &item;
  }
  return nullptr;
}

int LineOf(const YAML::Node& node) { return node.Mark().is_null() ? 0 : node.Mark().line + 1; }

std::string ErrnoText(int error) { return std::generic_category().message(error); }

std::string JoinNames(const std::vector<std::string_view>& names) {
  std::string list;
  for (std::string_view name : names) list += (list.empty() ? "" : ", ") + std::string(name);
  return list;
}

// How a value shows in a message: its kind, or a scalar quoted, redacted and
// cut short.
std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Sequence: return "a sequence";
    case YAML::NodeType::Scalar:
      return nlohmann::json(TruncateUtf8(RedactSecrets(node.Scalar()), 80))
          .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    default: return "nothing";
  }
}

// [A-Za-z_][A-Za-z0-9_]*, checked by hand: libstdc++'s std::regex recurses
// per character, and a name of ~100,000 characters (the file may have 1 MiB)
// overflowed the stack (found while writing tests/fuzz/fuzz_config.cpp).
bool IsEnvName(std::string_view name) {
  const auto letter = [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
  };
  if (name.empty() || !letter(name.front())) return false;
  return std::all_of(name.begin(), name.end(),
                     [&](char c) { return letter(c) || (c >= '0' && c <= '9'); });
}

// YAML 1.2 core schema booleans.
std::optional<bool> ParseBool(std::string_view text) {
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  return std::nullopt;
}

template <typename T>
std::optional<T> ParseNumber(std::string_view text) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  T value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// A plain YAML scalar as JSON, typed like YAML 1.2's core schema: null,
// booleans, integers and finite floats; anything else is a string.
nlohmann::json PlainScalarJson(const std::string& text) {
  static const std::regex kInteger(R"([-+]?[0-9]+)");
  static const std::regex kFloat(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)");
  if (text == "~" || text == "null" || text == "Null" || text == "NULL") return nullptr;
  if (auto b = ParseBool(text)) return *b;
  // std::regex recurses per character; no number we keep is this long.
  if (text.size() > 64) return text;
  if (std::regex_match(text, kInteger)) {
    if (auto i = ParseNumber<std::int64_t>(text)) return *i;
  }
  if (std::regex_match(text, kFloat)) {
    if (auto d = ParseNumber<double>(text)) return *d;
  }
  return text;
}

// The first node of one YAML document: where it is, and whether the
// document is nothing but a null.
class FirstNode final : public YAML::EventHandler {
 public:
  bool seen() const { return nodes_ > 0; }
  bool lone_null() const { return nodes_ == 1 && null_; }
  const YAML::Mark& mark() const { return mark_; }

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { Node(mark, true); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { Node(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                const std::string&) override {
    Node(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    Node(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    Node(mark);
  }
  void OnMapEnd() override {}

 private:
  void Node(const YAML::Mark& mark, bool null = false) {
    if (nodes_++ == 0) {
      mark_ = mark;
      null_ = null;
    }
  }

  int nodes_ = 0;
  bool null_ = false;
  YAML::Mark mark_ = YAML::Mark::null_mark();
};

struct DocumentsProbe {
  std::optional<YAML::Mark> second;  // where a second document starts
  std::optional<YAML::Mark> stuck;   // where the parser stopped making progress
};

// Looks at the first documents of `text` without building them. yaml-cpp
// 0.7's parser makes no progress on a stray top-level ',' (or a ',' after a
// block sequence): it reports one null document after another at the same
// place, and YAML::LoadAll collected them until memory ran out (found by
// tests/fuzz/fuzz_config.cpp; a SIGHUP reload of such a file took the
// daemon down). Two consecutive null documents at one position are that
// loop; three documents are enough to see it. Throws YAML::Exception.
DocumentsProbe ProbeDocuments(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentsProbe probe;
  std::optional<FirstNode> previous;
  for (int i = 0; i < 3; ++i) {
    FirstNode document;
    if (!parser.HandleNextDocument(document)) break;
    if (previous && previous->lone_null() && document.lone_null() &&
        previous->mark().pos == document.mark().pos) {
      probe.stuck = document.mark();
      return probe;
    }
    if (i == 1) {
      probe.second = document.seen() ? document.mark() : YAML::Mark::null_mark();
      if (!document.lone_null()) return probe;  // a real second document
    }
    previous = document;
  }
  return probe;
}

// Reads one document into a DaemonConfig; every check fails through Fail().
class Reader {
 public:
  Reader(std::string file, fs::path dir) : file_(std::move(file)), dir_(std::move(dir)) {}

  DaemonConfig Read(const Item& root) const {
    if (!root.node.IsMap()) {
      Fail(root, "expected a mapping of database, worker, queues, handlers, periodic, hooks, "
                 "pruning, logging, metrics and web, got " + Describe(root.node));
    }
    DaemonConfig config;
    config.path = file_;
    const Fields top =
        Mapping(root, KeysOf(""));
    std::optional<Item> stall_item;  // where database.stall_timeout was set
    if (const Item* db = Find(top, "database")) {
      const Fields fields = Mapping(*db, KeysOf("database"));
      if (const Item* url = Find(fields, "url")) config.database.url = String(*url);
      if (const Item* stall = Find(fields, "stall_timeout")) {
        stall_item = *stall;
        config.database.stall_timeout_us = Duration(*stall, true);
        if (config.database.stall_timeout_us < 100'000) {
          Fail(*stall, "must be at least 100ms, got " + FormatDuration(config.database.stall_timeout_us));
        }
      }
      if (const Item* warn = Find(fields, "horizon_warn_after")) {
        const std::optional<std::int64_t> micros =
            warn->node.IsScalar() ? ParseDuration(warn->node.Scalar()) : std::nullopt;
        const bool off = warn->node.IsScalar() && warn->node.Scalar() == "off";
        if (!micros && !off) {
          Fail(*warn, "expected a duration such as 5m or 1h, or off, got " + Describe(warn->node));
        }
        config.database.horizon_warn_after_us = off ? 0 : *micros;
      }
    }
    const Item* worker = Find(top, "worker");
    if (worker) config.worker = Worker(*worker);
    if (!stall_item) {
      config.database.stall_timeout_us =
          std::min(config.database.stall_timeout_us, config.worker.heartbeat_ttl_us / 2);
    }
    const Item queues = Required(root, top, "queues");
    for (const Item& queue : Sequence(queues)) config.queues.push_back(Queue(queue, config.queues));
    if (config.queues.empty()) Fail(queues, "at least one queue is required");
    const Item handlers = Required(root, top, "handlers");
    for (const auto& [task, handler] : Mapping(handlers)) {
      if (task.empty()) Fail({{}, handlers.where, handler.line}, "task names must not be empty");
      config.handlers[task] = Handler(task, handler);
    }
    if (config.handlers.empty()) Fail(handlers, "at least one handler is required");
    if (std::string problem = LeaseSpanProblem(config.worker, MaxKillGraceUs(config)); !problem.empty()) {
      Fail(worker ? *worker : root, problem);
    }
    if (config.database.stall_timeout_us >= config.worker.heartbeat_ttl_us) {
      // Only a stall_timeout set in the file can reach heartbeat_ttl: the
      // default is at most half of it.
      Fail(Item{stall_item->node, "", stall_item->line},
           "database.stall_timeout (" + FormatDuration(config.database.stall_timeout_us) +
               ") must be shorter than worker.heartbeat_ttl (" +
               FormatDuration(config.worker.heartbeat_ttl_us) + ")");
    }
    if (const Item* pruning = Find(top, "pruning")) config.pruning = Pruning(*pruning);
    if (const Item* logging = Find(top, "logging")) config.logging = Logging(*logging);
    if (const Item* metrics = Find(top, "metrics")) config.metrics = Metrics(*metrics);
    if (const Item* web = Find(top, "web")) config.web = Web(*web);
    if (const Item* periodic = Find(top, "periodic")) {
      for (const auto& [name, entry] : Mapping(*periodic)) {
        if (name.empty()) Fail({{}, periodic->where, entry.line}, "entry names must not be empty");
        config.periodic.push_back(Periodic(name, entry));
      }
    }
    if (const Item* hooks = Find(top, "hooks")) {
      for (const Item& hook : Sequence(*hooks)) config.hooks.push_back(Hook(hook, config.hooks));
    }
    return config;
  }

 private:
  [[noreturn]] void Fail(const Item& at, const std::string& message) const {
    // OneLine: key paths quote the file's keys as they are, and a quoted
    // YAML key may hold a line break (found by tests/fuzz/fuzz_config.cpp).
    throw ConfigError(
        OneLine(Prefix(file_, at.line) +
                RedactSecrets(at.where.empty() ? message : at.where + ": " + message)));
  }

  // The value of `key` in `parent`, reported at the key's line: a block
  // value starts on the next line, and a null value's mark points past it.
  static Item Child(const Item& parent, const std::string& key, const YAML::Node& node, int line) {
    return {node, parent.where.empty() ? key : parent.where + "." + key, line};
  }

  // The entries of a mapping (nothing counts as empty), in file order. Keys
  // must be unique strings, and in `known` unless it is empty.
  Fields Mapping(const Item& item, const std::vector<std::string_view>& known = {}) const {
    if (item.node.IsNull()) return {};
    if (!item.node.IsMap()) Fail(item, "expected a mapping, got " + Describe(item.node));
    Fields fields;
    for (const auto& entry : item.node) {
      const int key_line = LineOf(entry.first);
      if (!entry.first.IsScalar()) {
        Fail({{}, item.where, key_line}, "keys must be strings, got " + Describe(entry.first));
      }
      const std::string key = entry.first.Scalar();
      Item value = Child(item, key, entry.second, key_line);
      if (!known.empty() && std::find(known.begin(), known.end(), key) == known.end()) {
        Fail(value, "unknown key (known: " + JoinNames(known) + ")");
      }
      if (const Item* first = Find(fields, key)) {
        Fail(value, "duplicate key (first on line " + std::to_string(first->line) + ")");
      }
      fields.emplace_back(key, std::move(value));
    }
    return fields;
  }

  Item Required(const Item& map, const Fields& fields, const std::string& key) const {
    if (const Item* item = Find(fields, key)) return *item;
    Fail(Child(map, key, {}, map.line), "missing required key");
  }

  // The elements of a sequence (nothing counts as empty).
  std::vector<Item> Sequence(const Item& item) const {
    if (item.node.IsNull()) return {};
    if (!item.node.IsSequence()) Fail(item, "expected a sequence, got " + Describe(item.node));
    std::vector<Item> items;
    for (const YAML::Node& node : item.node) {
      const int line = LineOf(node) > 0 && !node.IsNull() ? LineOf(node) : item.line;
      items.push_back({node, item.where + "[" + std::to_string(items.size()) + "]", line});
    }
    return items;
  }

  std::string String(const Item& item, bool non_empty = false) const {
    if (!item.node.IsScalar()) Fail(item, "expected a string, got " + Describe(item.node));
    const std::string& text = item.node.Scalar();
    if (non_empty && text.empty()) Fail(item, "must not be empty");
    if (text.find('\0') != std::string::npos) Fail(item, "must not contain a NUL byte");
    return text;
  }

  std::int64_t Integer(const Item& item, std::int64_t min, std::int64_t max) const {
    std::optional<std::int64_t> value;
    if (item.node.IsScalar()) value = ParseNumber<std::int64_t>(item.node.Scalar());
    if (!value || *value < min || *value > max) {
      Fail(item, "expected an integer from " + std::to_string(min) + " to " + std::to_string(max) +
                     ", got " + Describe(item.node));
    }
    return *value;
  }

  std::int64_t Duration(const Item& item, bool positive) const {
    if (!item.node.IsScalar()) {
      Fail(item, "expected a duration such as 500ms, 30s or 5m, got " + Describe(item.node));
    }
    std::string error;
    const std::optional<std::int64_t> micros = ParseDuration(item.node.Scalar(), &error);
    if (!micros) Fail(item, error);
    if (positive && *micros <= 0) Fail(item, "must be greater than 0");
    return *micros;
  }

  bool Bool(const Item& item) const {
    std::optional<bool> value;
    if (item.node.IsScalar()) value = ParseBool(item.node.Scalar());
    if (!value) Fail(item, "expected true or false, got " + Describe(item.node));
    return *value;
  }

  std::string OneOf(const Item& item, const std::vector<std::string_view>& allowed) const {
    const std::string text = item.node.IsScalar() ? item.node.Scalar() : "";
    if (!item.node.IsScalar() || std::find(allowed.begin(), allowed.end(), text) == allowed.end()) {
      Fail(item, "expected one of " + JoinNames(allowed) + ", got " + Describe(item.node));
    }
    return text;
  }

  // `path` made absolute against the config file's directory.
  std::string Resolve(const std::string& path) const {
    const fs::path p(path);
    return (p.is_absolute() ? p : dir_ / p).lexically_normal().string();
  }

  // Fails unless `path` is a regular file (a directory with `directory`)
  // that access(mode) allows.
  void CheckPath(const Item& at, const std::string& path, const char* verb, int mode,
                 bool directory = false) const {
    struct stat st {};
    std::string problem;
    if (::stat(path.c_str(), &st) != 0) {
      problem = ErrnoText(errno);
    } else if (directory ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
      problem = directory ? "not a directory" : "not a regular file";
    } else if (::access(path.c_str(), mode) != 0) {
      problem = ErrnoText(errno);
    }
    if (!problem.empty()) Fail(at, std::string("cannot ") + verb + " " + path + ": " + problem);
  }

  WorkerConfig Worker(const Item& item) const {
    WorkerConfig w;
    const Fields fields = Mapping(item, KeysOf("worker"));
    const Item* interval = Find(fields, "heartbeat_interval");
    const Item* ttl = Find(fields, "heartbeat_ttl");
    if (interval) w.heartbeat_interval_us = Duration(*interval, true);
    if (ttl) w.heartbeat_ttl_us = Duration(*ttl, true);
    if (const Item* poll = Find(fields, "poll_interval")) {
      w.poll_interval_us = Duration(*poll, true);
    }
    if (const Item* t = Find(fields, "shutdown_timeout")) {
      w.shutdown_timeout_us = Duration(*t, false);
    }
    if (const Item* listen = Find(fields, "listen_notify")) w.listen_notify = Bool(*listen);
    if (const Item* delay = Find(fields, "finish_batch_delay")) {
      w.finish_batch_delay_us = Duration(*delay, false);
      if (w.finish_batch_delay_us > 1'000'000) {
        Fail(*delay, "must be at most 1s, got " + FormatDuration(w.finish_batch_delay_us));
      }
    }
    if (w.heartbeat_ttl_us <= w.heartbeat_interval_us) {
      const Item& at = ttl ? *ttl : interval ? *interval : item;
      Fail({at.node, item.where, at.line},
           "heartbeat_ttl (" + FormatDuration(w.heartbeat_ttl_us) +
               ") must be greater than heartbeat_interval (" +
               FormatDuration(w.heartbeat_interval_us) + "); at least twice it is recommended");
    }
    return w;
  }

  PruningConfig Pruning(const Item& item) const {
    PruningConfig p;
    const Fields fields = Mapping(item, KeysOf("pruning"));
    if (const Item* enabled = Find(fields, "enabled")) p.enabled = Bool(*enabled);
    if (const Item* retention = Find(fields, "retention")) p.retention_us = Duration(*retention, true);
    if (const Item* interval = Find(fields, "interval")) p.interval_us = Duration(*interval, true);
    if (const Item* batch = Find(fields, "batch_size")) {
      p.batch_size = static_cast<int>(Integer(*batch, 1, 100000));
    }
    return p;
  }

  QueueConfig Queue(const Item& item, const std::vector<QueueConfig>& earlier) const {
    if (!item.node.IsMap()) Fail(item, "expected a mapping, got " + Describe(item.node));
    QueueConfig q;
    q.line = item.line;
    const Fields fields = Mapping(item, KeysOf("queues[]"));
    const Item name = Required(item, fields, "name");
    q.name = String(name, true);
    for (const QueueConfig& other : earlier) {
      if (other.name == q.name) {
        Fail(name, "duplicate queue name (first defined on line " + std::to_string(other.line) +
                       ")");
      }
    }
    q.slots = static_cast<int>(Integer(Required(item, fields, "slots"), 1, 10000));
    if (const Item* prefetch = Find(fields, "prefetch")) q.prefetch = static_cast<int>(Integer(*prefetch, 0, 10000));
    if (const Item* mode = Find(fields, "mode")) {
      q.mode = OneOf(*mode, {"ordered", "fair"}) == "fair" ? ClaimMode::kFair : ClaimMode::kOrdered;
    }
    if (const Item* aging = Find(fields, "aging")) q.aging_us = Duration(*aging, true);
    if (const Item* keep = Find(fields, "keep_succeeded")) q.keep_succeeded = Bool(*keep);
    return q;
  }

  HandlerConfig Handler(const std::string& task, const Item& item) const {
    HandlerConfig h;
    h.task = task;
    h.line = item.line;
    const Fields fields = Mapping(item, KeysOf("handlers.*"));
    const Item* shell = Find(fields, "shell");
    const Item* plugin = Find(fields, "plugin");
    if (shell && plugin) Fail(item, "expected exactly one of shell or plugin, got both");
    if (!shell && !plugin) Fail(item, "expected one of shell or plugin");
    if (shell) {
      h.kind = Shell(*shell);
    } else {
      h.kind = Plugin(*plugin, "handlers.*.plugin");
    }
    return h;
  }

  ShellHandlerConfig Shell(const Item& item) const {
    ShellHandlerConfig s;
    const Fields fields = Mapping(item, KeysOf("handlers.*.shell"));
    const Item command = Required(item, fields, "command");
    if (command.node.IsScalar()) {
      Fail(command, "expected a sequence of arguments, e.g. [\"./job.sh\", \"--fast\"], got " +
                        Describe(command.node));
    }
    const std::vector<Item> args = Sequence(command);
    if (args.empty()) Fail(command, "must not be empty");
    for (const Item& arg : args) s.command.push_back(String(arg, s.command.empty()));
    if (s.command[0].find('/') != std::string::npos) {
      s.command[0] = Resolve(s.command[0]);
      CheckPath(args[0], s.command[0], "execute", X_OK);
      // Whether it may be trusted is judged where handlers are verified and
      // built (worker/handler_registry.cpp), with plugins.
    }
    if (const Item* env = Find(fields, "env")) {
      for (const auto& [name, value] : Mapping(*env)) {
        if (!IsEnvName(name)) {
          Fail(value, "not a valid environment variable name (letters, digits and _, not "
                      "starting with a digit)");
        }
        if (name.starts_with("AKADZE_")) {
          Fail(value, "the AKADZE_ prefix is reserved for variables the daemon sets");
        }
        s.env[name] = String(value);
      }
    }
    if (const Item* dir = Find(fields, "working_directory")) {
      s.working_directory = Resolve(String(*dir, true));
      CheckPath(*dir, s.working_directory, "enter", X_OK, true);
    }
    if (const Item* t = Find(fields, "timeout")) s.timeout_us = Duration(*t, false);
    if (const Item* g = Find(fields, "kill_grace")) s.kill_grace_us = Duration(*g, false);
    if (const Item* n = Find(fields, "max_line_bytes")) {
      s.max_line_bytes = static_cast<std::size_t>(Integer(*n, 1, 1 << 20));
    }
    if (const Item* n = Find(fields, "max_output_bytes")) {
      s.max_output_bytes = static_cast<std::size_t>(Integer(*n, 0, std::int64_t{1} << 30));
    }
    return s;
  }

  // `section`: where the plugin is, "handlers.*.plugin" or "hooks[].plugin".
  PluginHandlerConfig Plugin(const Item& item, std::string_view section) const {
    PluginHandlerConfig p;
    const Fields fields = Mapping(item, KeysOf(section));
    const Item path = Required(item, fields, "path");
    p.path = String(path, true);
    if (p.path.find('/') != std::string::npos) {
      p.path = Resolve(p.path);
      CheckPath(path, p.path, "load", R_OK);
    }
    if (const Item* config = Find(fields, "config")) {
      nlohmann::json json = nlohmann::json::object();
      for (const auto& [key, value] : Mapping(*config)) json[key] = Json(value, *config, 1);
      p.config_json = json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    if (const Item* t = Find(fields, "timeout")) p.timeout_us = Duration(*t, false);
    return p;
  }

  // Any YAML value as JSON (plugin configuration); `root` is the whole
  // configuration, blamed when it nests too deeply (e.g. an alias cycle).
  nlohmann::json Json(const Item& item, const Item& root, int depth) const {
    if (depth > kMaxJsonDepth) {
      Fail(root, "nested more than " + std::to_string(kMaxJsonDepth) + " levels deep");
    }
    if (++json_values_ > kMaxJsonValues) {
      Fail(root, "expands to more than " + std::to_string(kMaxJsonValues) +
                     " values (aliases fanning out?)");
    }
    if (item.node.IsMap()) {
      nlohmann::json object = nlohmann::json::object();
      for (const auto& [key, value] : Mapping(item)) object[key] = Json(value, root, depth + 1);
      return object;
    }
    if (item.node.IsSequence()) {
      nlohmann::json array = nlohmann::json::array();
      for (const Item& element : Sequence(item)) array.push_back(Json(element, root, depth + 1));
      return array;
    }
    if (!item.node.IsScalar()) return nullptr;
    // Quoted or explicitly tagged scalars stay strings.
    if (item.node.Tag() == "?") return PlainScalarJson(item.node.Scalar());
    return item.node.Scalar();
  }

  LoggingConfig Logging(const Item& item) const {
    LoggingConfig l;
    const Fields fields = Mapping(item, KeysOf("logging"));
    if (const Item* level = Find(fields, "level")) {
      l.level = OneOf(*level, {"trace", "debug", "info", "warn", "error", "critical", "off"});
    }
    if (const Item* format = Find(fields, "format")) {
      const std::string f = OneOf(*format, {"auto", "logfmt", "json", "journald"});
      l.format = f == "logfmt"     ? LogFormat::kLogfmt
                 : f == "json"     ? LogFormat::kJson
                 : f == "journald" ? LogFormat::kJournald
                                   : LogFormat::kAuto;
    }
    if (const Item* file = Find(fields, "file")) {
      l.file = String(*file, true);
      if (!fs::path(l.file).is_absolute()) {
        Fail(*file, "must be an absolute path (it is reopened on SIGHUP, whatever the cwd)");
      }
    }
    return l;
  }

  MetricsConfig Metrics(const Item& item) const {
    MetricsConfig m;
    const Fields fields = Mapping(item, KeysOf("metrics"));
    if (const Item* enabled = Find(fields, "enabled")) m.enabled = Bool(*enabled);
    if (const Item* listen = Find(fields, "listen")) {
      // host:port, [v6]:port
      const std::string text = String(*listen, true);
      const std::size_t colon = text.rfind(':');
      std::string host = colon == std::string::npos ? "" : text.substr(0, colon);
      const bool bracketed = host.size() >= 2 && host.front() == '[' && host.back() == ']';
      if (bracketed) host = host.substr(1, host.size() - 2);
      if (!bracketed && host.find(':') != std::string::npos) host.clear();  // v6 needs [ ]
      std::optional<int> port;
      if (colon != std::string::npos) port = ParseNumber<int>(std::string_view(text).substr(colon + 1));
      in6_addr v6{};
      in_addr v4{};
      const bool ip = inet_pton(AF_INET, host.c_str(), &v4) == 1 ||
                      inet_pton(AF_INET6, host.c_str(), &v6) == 1;
      if (!port || *port < 0 || *port > 65535 || !ip) {
        Fail(*listen, "expected an IP address and a port such as 127.0.0.1:9464 or [::1]:9464 "
                      "(port 0: any free port), got " + Describe(listen->node));
      }
      m.host = host;
      m.port = *port;
    }
    return m;
  }

  WebConfig Web(const Item& item) const {
    WebConfig w;
    const Fields fields = Mapping(item, KeysOf("web"));
    if (const Item* enabled = Find(fields, "enabled")) w.enabled = Bool(*enabled);
    if (const Item* file = Find(fields, "admin_token_file")) {
      w.admin_token_file = String(*file, true);
      if (!fs::path(w.admin_token_file).is_absolute()) {
        Fail(*file, "must be an absolute path (it is read for each action, whatever the cwd)");
      }
      try {
        ReadAdminToken(w.admin_token_file);
      } catch (const std::runtime_error& e) {
        Fail(*file, e.what());
      }
    }
    return w;
  }

  PeriodicConfig Periodic(const std::string& name, const Item& item) const {
    PeriodicConfig p;
    p.name = name;
    p.task = name;
    p.line = item.line;
    if (!item.node.IsMap()) Fail(item, "expected a mapping, got " + Describe(item.node));
    const Fields fields = Mapping(item, KeysOf("periodic.*"));
    const Item* cron = Find(fields, "cron");
    const Item* every = Find(fields, "every");
    if (cron && every) Fail(item, "expected exactly one of cron or every, got both");
    if (!cron && !every) Fail(item, "expected one of cron or every");
    try {
      p.schedule = cron ? Schedule::Cron(String(*cron, true)) : Schedule::Every(String(*every, true));
    } catch (const std::invalid_argument& e) {
      Fail(cron ? *cron : *every, e.what());
    }
    if (const Item* zone = Find(fields, "timezone")) {
      if (every) Fail(*zone, "applies to cron entries only (an every entry counts real time, in UTC)");
      try {
        p.schedule.zone = TimeZone::Locate(String(*zone, true));
      } catch (const std::invalid_argument& e) {
        Fail(*zone, e.what());
      }
    }
    if (const Item* task = Find(fields, "task")) p.task = String(*task, true);
    if (const Item* queue = Find(fields, "queue")) p.queue = String(*queue, true);
    if (const Item* args = Find(fields, "args")) {
      if (!args->node.IsMap()) Fail(*args, "expected a mapping (the job's args object), got " +
                                              Describe(args->node));
      p.args_json = Json(*args, *args, 1).dump(-1, ' ', false,
                                               nlohmann::json::error_handler_t::replace);
    }
    if (const Item* priority = Find(fields, "priority")) {
      p.priority = static_cast<int>(Integer(*priority, -32768, 32767));
    }
    if (const Item* attempts = Find(fields, "max_attempts")) {
      p.max_attempts = static_cast<int>(Integer(*attempts, 1, 1000000));
    }
    if (const Item* overlap = Find(fields, "overlap")) p.overlap = Bool(*overlap);
    if (const Item* grace = Find(fields, "grace")) p.grace_us = Duration(*grace, true);
    return p;
  }

  HookConfig Hook(const Item& item, const std::vector<HookConfig>& earlier) const {
    if (!item.node.IsMap()) Fail(item, "expected a mapping, got " + Describe(item.node));
    HookConfig h;
    h.line = item.line;
    const Fields fields = Mapping(item, KeysOf("hooks[]"));
    const Item name = Required(item, fields, "name");
    h.name = String(name, true);
    for (const HookConfig& other : earlier) {
      if (other.name == h.name) {
        Fail(name, "duplicate hook name (first defined on line " + std::to_string(other.line) + ")");
      }
    }
    std::vector<std::string_view> states;
    for (JobState state : kAllJobStates) states.push_back(JobStateName(state));
    for (const char* key : {"from", "to"}) {
      const Item* list = Find(fields, key);
      if (!list) continue;
      std::vector<JobState>& out = std::string_view(key) == "from" ? h.from : h.to;
      if (list->node.IsScalar()) {
        out.push_back(JobStateFromText(OneOf(*list, states)));
      } else {
        for (const Item& state : Sequence(*list)) out.push_back(JobStateFromText(OneOf(state, states)));
        if (out.empty()) Fail(*list, "must not be empty (leave it out to match any state)");
      }
    }
    const Item* sql = Find(fields, "sql");
    const Item* plugin = Find(fields, "plugin");
    if (sql && plugin) Fail(item, "expected exactly one of sql or plugin, got both");
    if (!sql && !plugin) Fail(item, "expected one of sql or plugin");
    if (sql) {
      h.sql = String(*sql, true);
    } else {
      h.plugin = Plugin(*plugin, "hooks[].plugin");
    }
    return h;
  }

  std::string file_;
  fs::path dir_;
  mutable std::size_t json_values_ = 0;  // Json() calls so far
};

}  // namespace

std::int64_t MaxKillGraceUs(const DaemonConfig& config) {
  std::int64_t grace = 0;
  for (const auto& [task, handler] : config.handlers) {
    if (const auto* shell = std::get_if<ShellHandlerConfig>(&handler.kind)) {
      grace = std::max(grace, shell->kill_grace_us);
    }
  }
  return grace;
}

std::int64_t LeaseSpanUs(const WorkerConfig& worker, std::int64_t max_kill_grace_us) {
  // Saturating: any durations the file holds, without overflow.
  std::int64_t span = 0;
  if (__builtin_sub_overflow(worker.heartbeat_ttl_us, max_kill_grace_us, &span) ||
      __builtin_sub_overflow(span, kLeaseStopMarginUs, &span)) {
    return std::numeric_limits<std::int64_t>::min();
  }
  return span;
}

std::string LeaseSpanProblem(const WorkerConfig& worker, std::int64_t max_kill_grace_us) {
  std::int64_t two_intervals = 0;
  if (__builtin_mul_overflow(worker.heartbeat_interval_us, 2, &two_intervals)) {
    two_intervals = std::numeric_limits<std::int64_t>::max();
  }
  if (LeaseSpanUs(worker, max_kill_grace_us) >= two_intervals) return "";
  return "worker.heartbeat_ttl (" + FormatDuration(worker.heartbeat_ttl_us) +
         ") must be at least 2 x worker.heartbeat_interval (" + FormatDuration(worker.heartbeat_interval_us) +
         ") + the largest handlers.*.shell.kill_grace (" + FormatDuration(max_kill_grace_us) + ") + " +
         FormatDuration(kLeaseStopMarginUs) +
         ": a daemon that loses its lease must have stopped its handlers before another may rescue their jobs";
}

DaemonConfig ParseConfig(const std::string& text, const std::string& path) {
  YAML::Node root;
  try {
    // Not YAML::LoadAll: it never returns on some malformed input, see
    // ProbeDocuments.
    const DocumentsProbe probe = ProbeDocuments(text);
    if (probe.stuck) {
      const std::size_t pos = static_cast<std::size_t>(std::max(probe.stuck->pos, 0));
      const std::string what = pos < text.size() ? Describe(YAML::Node(text.substr(pos, 1)))
                                                 : std::string("the end");
      throw ConfigError(Prefix(path, probe.stuck->line + 1) + "invalid YAML: unexpected " + what);
    }
    if (probe.second) {
      throw ConfigError(Prefix(path, probe.second->line + 1) +
                        "expected one YAML document, found more");
    }
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    const int line = e.mark.is_null() ? 0 : e.mark.line + 1;
    throw ConfigError(OneLine(Prefix(path, line) + "invalid YAML: " + e.msg));
  }
  if (root.IsNull()) {
    throw ConfigError(Prefix(path, 0) +
                      "the configuration is empty (queues and handlers are required)");
  }
  std::error_code ec;
  fs::path dir = fs::absolute(fs::path(path), ec).parent_path();
  return Reader(path, std::move(dir)).Read({root, "", LineOf(root)});
}

DaemonConfig LoadConfigFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw ConfigError(Prefix(path, 0) + "cannot read: " + ErrnoText(errno));
  std::string text;
  char buffer[8192];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || text.size() + static_cast<std::size_t>(n) > kMaxFileBytes) {
      const std::string reason = n < 0 ? ErrnoText(errno) : "larger than 1 MiB";
      ::close(fd);
      throw ConfigError(Prefix(path, 0) + "cannot read: " + reason);
    }
    if (n == 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return ParseConfig(text, path);
}

}  // namespace akadzed
