// The rooms of daemon/ in layers (docs/architecture.md, "Rooms and layers"):
// every room has a floor, and a file may include a header of another room
// only when that room is on a lower floor. So no two rooms include each
// other, directly or through others, and a new room must be given a floor
// here before it compiles into the daemon unnoticed. The check reads the
// sources' `#include "room/file.h"` lines, as logging_test.cpp reads log
// calls; it is a unit test, so it runs in every CI step that runs
// unit_tests.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace akadzed {
namespace {

namespace fs = std::filesystem;

// The floors, bottom up. The same table is drawn in docs/architecture.md.
const std::map<std::string, int>& Floors() {
  static const std::map<std::string, int> floors = {
      // Values and rules that need nothing: durations, redaction, job states,
      // the claimed job, configuration errors; the plugin ABI header.
      {"core", 0},
      {"include", 0},
      {"plugins", 0},  // the example plugin: the ABI only
      // libpq: connections, typed errors, transactions, parameters.
      {"pg", 1},
      // Runtime support for every loop: logging, database sessions, outage
      // log, backoff, loop health, systemd notify. The schema, the embedded
      // throwaway PostgreSQL, the claim (planner and transaction).
      {"runtime", 2},
      {"schema", 2},
      {"embedded", 2},
      {"claim", 2},
      // The plugin loader and file trust; admin queries; the priority
      // lesson; periodic schedules and their scheduler.
      {"plugin", 3},
      {"admin", 3},
      {"lesson", 3},
      {"periodic", 3},
      // Handlers, transition hooks, metrics.
      {"handlers", 4},
      {"hooks", 4},
      {"metrics", 4},
      // The YAML file, parsed into the options structs of the rooms below.
      {"config", 5},
      // The daemon's threads and its lifecycle: the one place besides the
      // CLI that wires rooms together.
      {"worker", 6},
      {"cli", 7},
      {"main.cpp", 8},
  };
  return floors;
}

struct Violation {
  std::string file;
  std::string include;
  std::string why;
};

// The room of a path relative to daemon/: its first component.
std::string RoomOf(const fs::path& relative) { return relative.begin()->string(); }

// Every `#include "room/..."` of every source under `daemon` that breaks the
// layers, plus every room missing from Floors().
std::vector<Violation> LayerViolations(const fs::path& daemon) {
  static const std::regex include_line(R"re(^\s*#\s*include\s*"([a-z_]+)/[^"]+")re");
  std::vector<Violation> violations;
  for (const auto& entry : fs::recursive_directory_iterator(daemon)) {
    if (!entry.is_regular_file()) continue;
    const std::string ext = entry.path().extension().string();
    if (ext != ".h" && ext != ".cpp" && ext != ".c") continue;
    const fs::path relative = entry.path().lexically_relative(daemon);
    const std::string room = RoomOf(relative);
    const auto floor = Floors().find(room);
    if (floor == Floors().end()) {
      violations.push_back({relative.string(), "", "room " + room + " has no floor"});
      continue;
    }
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      std::smatch m;
      if (!std::regex_search(line, m, include_line)) continue;
      const std::string target = m[1].str();
      if (target == room) continue;
      const auto target_floor = Floors().find(target);
      if (target_floor == Floors().end()) continue;  // not a room (e.g. <akadzed/...> is angled)
      if (target_floor->second >= floor->second) {
        violations.push_back({relative.string(), m[0].str(),
                              room + " (floor " + std::to_string(floor->second) + ") includes " +
                                  target + " (floor " + std::to_string(target_floor->second) + ")"});
      }
    }
  }
  return violations;
}

// A scratch daemon/ tree.
class ScratchTree {
 public:
  ScratchTree() : root_(fs::temp_directory_path() / ("layers_test_" + std::to_string(::getpid()))) {
    fs::remove_all(root_);
  }
  ~ScratchTree() { fs::remove_all(root_); }
  void Write(const std::string& relative, const std::string& text) {
    fs::create_directories((root_ / relative).parent_path());
    std::ofstream(root_ / relative) << text;
  }
  const fs::path& root() const { return root_; }

 private:
  fs::path root_;
};

TEST_CASE("the checker finds an include of a room above, of a room on the same floor and a "
          "room without a floor", "[layers]") {
  ScratchTree tree;
  tree.Write("pg/connection.h", "#include \"core/duration.h\"\n#include <akadzed/plugin.h>\n");
  tree.Write("core/duration.h", "#include <string>\n");
  REQUIRE(LayerViolations(tree.root()).empty());

  tree.Write("core/redact.cpp", "#include \"core/redact.h\"\n  #include \"pg/connection.h\"\n");
  tree.Write("handlers/x.cpp", "#include \"hooks/y.h\"\n");
  tree.Write("attic/z.cpp", "#include \"core/duration.h\"\n");
  const std::vector<Violation> found = LayerViolations(tree.root());
  std::set<std::string> whys;
  for (const Violation& v : found) whys.insert(v.file + ": " + v.why);
  CHECK(whys == std::set<std::string>{
                    "core/redact.cpp: core (floor 0) includes pg (floor 1)",
                    "handlers/x.cpp: handlers (floor 4) includes hooks (floor 4)",
                    "attic/z.cpp: room attic has no floor",
                });
}

TEST_CASE("no room of daemon/ includes a room on its own floor or above", "[layers]") {
  const fs::path daemon =
      fs::path(__FILE__).parent_path().parent_path().parent_path() / "daemon";
  REQUIRE(fs::is_directory(daemon / "claim"));
  const std::vector<Violation> violations = LayerViolations(daemon);
  for (const Violation& v : violations) {
    UNSCOPED_INFO("daemon/" << v.file << ": " << v.include << ": " << v.why);
  }
  CHECK(violations.empty());
}

TEST_CASE("the claim planner stays pure: no libpq, clock or config", "[layers]") {
  const fs::path claim =
      fs::path(__FILE__).parent_path().parent_path().parent_path() / "daemon" / "claim";
  static const std::regex include_line(R"re(^\s*#\s*include\s*[<"]([^">]+)[">])re");
  const std::set<std::string> allowed_rooms = {"core", "claim"};
  for (const char* name : {"claim_planner.h", "claim_planner.cpp"}) {
    std::ifstream in(claim / name);
    REQUIRE(in);
    std::string line;
    while (std::getline(in, line)) {
      std::smatch m;
      if (!std::regex_search(line, m, include_line)) continue;
      const std::string header = m[1].str();
      INFO(name << " includes " << header);
      CHECK(header.find("libpq") == std::string::npos);
      CHECK(header != "chrono");
      CHECK(header != "ctime");
      if (header.find('/') != std::string::npos) {
        const std::string room = header.substr(0, header.find('/'));
        CHECK(allowed_rooms.count(room) == 1);
      }
    }
  }
}

}  // namespace
}  // namespace akadzed
