// The config key table (config/config_keys.h) against the parser: every
// mapping the parser reads accepts exactly the table's keys of its section,
// and every restart key is found changed when, and only when, it changed.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "config/config.h"
#include "config/config_keys.h"

namespace akadzed {
namespace {

const std::string kQueues = "queues:\n  - {name: default, slots: 1}\n";
const std::string kHandlers = "handlers:\n  echo:\n    shell: {command: [echo, hi]}\n";
const std::string kBase = kQueues + kHandlers;

// For each mapping the parser reads with known keys (as the table names its
// section), a config with an unknown key `zz` in it.
const std::map<std::string, std::string> kUnknownKeyIn = {
    {"", kBase + "zz: 1\n"},
    {"database", kBase + "database: {zz: 1}\n"},
    {"worker", kBase + "worker: {zz: 1}\n"},
    {"queues[]", "queues:\n  - {name: default, slots: 1, zz: 1}\n" + kHandlers},
    {"handlers.*", kQueues + "handlers:\n  echo: {zz: 1}\n"},
    {"handlers.*.shell", kQueues + "handlers:\n  echo: {shell: {command: [echo], zz: 1}}\n"},
    {"handlers.*.plugin", kQueues + "handlers:\n  p: {plugin: {path: libx.so, zz: 1}}\n"},
    {"periodic.*", kBase + "periodic:\n  tick: {every: 1m, zz: 1}\n"},
    {"hooks[]", kBase + "hooks:\n  - {name: h, sql: SELECT 1, zz: 1}\n"},
    {"hooks[].plugin", kBase + "hooks:\n  - {name: h, plugin: {path: libx.so, zz: 1}}\n"},
    {"pruning", kBase + "pruning: {zz: 1}\n"},
    {"logging", kBase + "logging: {zz: 1}\n"},
    {"metrics", kBase + "metrics: {zz: 1}\n"},
    {"web", kBase + "web: {zz: 1}\n"},
};

// The "known: a, b" list of an unknown-key error, or the whole message.
std::vector<std::string> KnownKeysInError(const std::string& text) {
  std::string message = "loaded";
  try {
    ParseConfig(text, "/nonexistent/config.yaml");
  } catch (const std::exception& e) {
    message = e.what();
  }
  const std::string marker = "unknown key (known: ";
  const std::size_t at = message.find(marker);
  if (at == std::string::npos || message.back() != ')') return {message};
  std::vector<std::string> keys;
  std::string list = message.substr(at + marker.size());
  list.pop_back();
  for (std::size_t start = 0;;) {
    const std::size_t comma = list.find(", ", start);
    keys.push_back(list.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 2;
  }
  return keys;
}

TEST_CASE("the key table lists exactly the keys the parser accepts", "[config]") {
  std::set<std::string> sections;
  for (const ConfigKey& key : ConfigKeys()) sections.insert(std::string(key.section));
  std::set<std::string> probed;
  for (const auto& [section, text] : kUnknownKeyIn) probed.insert(section);
  // A section added to the table needs its probe here, and the other way round.
  CHECK(sections == probed);
  for (const auto& [section, text] : kUnknownKeyIn) {
    INFO("section '" << section << "'");
    std::vector<std::string> table;
    for (std::string_view name : KeysOf(section)) table.emplace_back(name);
    CHECK(KnownKeysInError(text) == table);
  }
  CHECK_THROWS_AS(KeysOf("no.such.section"), std::logic_error);
}

// Two configs differing in one key: the first is kBase plus `a`, the second
// kBase plus `b` (or a whole text when it starts with "queues:").
struct Change {
  std::string a, b;
};

DaemonConfig Load(const std::string& text) {
  return ParseConfig(text.rfind("queues:", 0) == 0 ? text : kBase + text, "/nonexistent/config.yaml");
}

TEST_CASE("a reload finds each changed restart key, and only that one", "[config]") {
  // web.admin_token_file must name a readable token file, closed to others.
  const std::string token_file = (std::filesystem::temp_directory_path() /
                                  ("akadzed-config-keys-token-" + std::to_string(getpid())))
                                     .string();
  {
    std::ofstream(token_file) << "0123456789abcdef0123\n";
    std::filesystem::permissions(token_file, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  }
  struct RemoveFile {
    std::string path;
    ~RemoveFile() { std::filesystem::remove(path); }
  } remove_token{token_file};
  const std::string two_queues = "queues:\n  - {name: default, slots: 1}\n  - {name: b, slots: 1}\n" + kHandlers;
  const std::map<std::string, Change> changes = {
      {"queues", {"", two_queues}},
      {"periodic", {"periodic: {a: {every: 1m, task: t}}\n", "periodic: {b: {every: 1m, task: t}}\n"}},
      {"hooks", {"", "hooks: [{name: h, sql: SELECT 1}]\n"}},
      {"database.url", {"", "database: {url: 'host=elsewhere'}\n"}},
      {"database.stall_timeout", {"database: {stall_timeout: 1s}\n", "database: {stall_timeout: 2s}\n"}},
      {"database.horizon_warn_after", {"", "database: {horizon_warn_after: off}\n"}},
      {"worker.heartbeat_interval", {"", "worker: {heartbeat_interval: 4s}\n"}},
      {"worker.heartbeat_ttl", {"", "worker: {heartbeat_ttl: 40s}\n"}},
      {"worker.poll_interval", {"", "worker: {poll_interval: 2s}\n"}},
      {"worker.shutdown_timeout", {"", "worker: {shutdown_timeout: 1s}\n"}},
      {"worker.listen_notify", {"", "worker: {listen_notify: true}\n"}},
      {"worker.finish_batch_delay", {"", "worker: {finish_batch_delay: 20ms}\n"}},
      {"queues[].name", {kBase, "queues:\n  - {name: other, slots: 1}\n" + kHandlers}},
      {"queues[].slots", {kBase, "queues:\n  - {name: default, slots: 2}\n" + kHandlers}},
      {"queues[].prefetch", {kBase, "queues:\n  - {name: default, slots: 1, prefetch: 2}\n" + kHandlers}},
      {"queues[].mode", {kBase, "queues:\n  - {name: default, slots: 1, mode: fair}\n" + kHandlers}},
      {"queues[].aging", {kBase, "queues:\n  - {name: default, slots: 1, aging: 1m}\n" + kHandlers}},
      {"queues[].keep_succeeded", {kBase, "queues:\n  - {name: default, slots: 1, keep_succeeded: false}\n" + kHandlers}},
      {"hooks[].name", {"hooks: [{name: h, sql: SELECT 1}]\n", "hooks: [{name: g, sql: SELECT 1}]\n"}},
      {"metrics.enabled", {"", "metrics: {enabled: false}\n"}},
      {"metrics.listen", {"", "metrics: {listen: '127.0.0.1:9465'}\n"}},
      {"web.enabled", {"", "web: {enabled: false}\n"}},
      {"web.admin_token_file", {"", "web: {admin_token_file: '" + token_file + "'}\n"}},
      {"periodic.*.cron", {"periodic: {a: {cron: '0 * * * *'}}\n", "periodic: {a: {cron: '5 * * * *'}}\n"}},
      {"periodic.*.every", {"periodic: {a: {every: 1m}}\n", "periodic: {a: {every: 2m}}\n"}},
      {"periodic.*.task", {"periodic: {a: {every: 1m}}\n", "periodic: {a: {every: 1m, task: t}}\n"}},
      {"periodic.*.queue", {"periodic: {a: {every: 1m}}\n", "periodic: {a: {every: 1m, queue: q}}\n"}},
      {"periodic.*.args", {"periodic: {a: {every: 1m}}\n", "periodic: {a: {every: 1m, args: {x: 1}}}\n"}},
      {"periodic.*.priority", {"periodic: {a: {every: 1m}}\n", "periodic: {a: {every: 1m, priority: 5}}\n"}},
      {"periodic.*.max_attempts", {"periodic: {a: {every: 1m}}\n", "periodic: {a: {every: 1m, max_attempts: 5}}\n"}},
      {"periodic.*.overlap", {"periodic: {a: {every: 1m}}\n", "periodic: {a: {every: 1m, overlap: false}}\n"}},
      {"periodic.*.timezone", {"periodic: {a: {cron: '0 8 * * *'}}\n", "periodic: {a: {cron: '0 8 * * *', timezone: Europe/Berlin}}\n"}},
      {"periodic.*.grace", {"periodic: {a: {every: 1m}}\n", "periodic: {a: {every: 1m, grace: 2m}}\n"}},
      {"hooks[].from", {"hooks: [{name: h, sql: SELECT 1}]\n", "hooks: [{name: h, sql: SELECT 1, from: queued}]\n"}},
      {"hooks[].to", {"hooks: [{name: h, sql: SELECT 1}]\n", "hooks: [{name: h, sql: SELECT 1, to: running}]\n"}},
      {"hooks[].sql", {"hooks: [{name: h, sql: SELECT 1}]\n", "hooks: [{name: h, sql: SELECT 2}]\n"}},
      {"hooks[].plugin.path", {"hooks: [{name: h, plugin: {path: libx.so}}]\n", "hooks: [{name: h, plugin: {path: liby.so}}]\n"}},
      {"hooks[].plugin.config", {"hooks: [{name: h, plugin: {path: libx.so}}]\n", "hooks: [{name: h, plugin: {path: libx.so, config: {a: 1}}}]\n"}},
      {"hooks[].plugin.timeout", {"hooks: [{name: h, plugin: {path: libx.so}}]\n", "hooks: [{name: h, plugin: {path: libx.so, timeout: 5s}}]\n"}},
      {"pruning.enabled", {"", "pruning: {enabled: false}\n"}},
      {"pruning.retention", {"", "pruning: {retention: 1d}\n"}},
      {"pruning.interval", {"", "pruning: {interval: 2m}\n"}},
      {"pruning.batch_size", {"", "pruning: {batch_size: 10}\n"}},
  };
  for (const ConfigKey& key : ConfigKeys()) {
    INFO(key.Path());
    // A restart key the reload does not compare would be a change it keeps
    // quiet about; the other kinds have nothing to compare.
    CHECK((key.on_reload == OnReload::kRestart) == (key.differs != nullptr));
    if (key.on_reload != OnReload::kRestart) continue;
    const auto change = changes.find(key.Path());
    REQUIRE(change != changes.end());  // every restart key has a case here
    const DaemonConfig a = Load(change->second.a);
    const DaemonConfig b = Load(change->second.b);
    CHECK(RestartKeysChanged(a, a).empty());
    CHECK(RestartKeysChanged(a, b) == std::vector<std::string>{key.Path()});
  }
  for (const auto& [path, change] : changes) {
    INFO(path);
    bool compared = false;
    for (const ConfigKey& key : ConfigKeys()) compared |= key.Path() == path && key.differs;
    CHECK(compared);
  }
}

TEST_CASE("handler and logging changes reload without a restart", "[config]") {
  const DaemonConfig running = Load("");
  const DaemonConfig fresh = Load(
      kQueues + "logging: {level: debug, format: json}\n"
      "handlers:\n  echo:\n    shell: {command: [echo, bye], timeout: 5s, kill_grace: 1s}\n"
      "  p:\n    plugin: {path: libx.so, config: {a: 1}}\n");
  CHECK(RestartKeysChanged(running, fresh).empty());
}

// docs/configuration.md's "Reloading" table: each `key` of a row, with the
// row's last cell ("applied" or "restart").
std::map<std::string, std::string> ReloadingTableOfTheDocs() {
  const std::filesystem::path doc = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path() /
                                    "docs/configuration.md";
  std::ifstream in(doc);
  REQUIRE(in);
  std::map<std::string, std::string> said;
  bool in_section = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) in_section = line == "## Reloading";
    if (!in_section || line.rfind("| `", 0) != 0) continue;
    const std::size_t last = line.rfind('|', line.size() - 2);
    std::string word = line.substr(last + 1);
    word.erase(0, word.find_first_not_of(' '));
    word.erase(word.find_last_not_of(" |") + 1);
    for (std::size_t open = line.find('`'); open < last; open = line.find('`', open + 1)) {
      const std::size_t close = line.find('`', open + 1);
      said[line.substr(open + 1, close - open - 1)] = word;
      open = close;
    }
  }
  return said;
}

TEST_CASE("docs/configuration.md says for each key what the table says", "[config]") {
  const std::map<std::string, std::string> said = ReloadingTableOfTheDocs();
  std::set<std::string> keys;
  for (const ConfigKey& key : ConfigKeys()) {
    if (key.on_reload == OnReload::kPerKey) continue;
    INFO(key.Path());
    keys.insert(key.Path());
    const auto doc = said.find(key.Path());
    REQUIRE(doc != said.end());
    CHECK(doc->second == (key.on_reload == OnReload::kApplied ? "applied" : "restart"));
  }
  for (const auto& [path, word] : said) {
    INFO(path);
    CHECK(keys.count(path) == 1);  // no row for a key the table lacks
  }
}

}  // namespace
}  // namespace akadzed
