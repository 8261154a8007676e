// The rooms of daemon/ in layers (docs/architecture.md, "Rooms and layers"):
// every room has a floor, and a file may include a header of another room
// only when that room is on a lower floor. So no two rooms include each
// other, directly or through others, and a new room must be given a floor
// in daemon/rooms.txt before it compiles into the daemon unnoticed. The check reads the
// sources' `#include "room/file.h"` lines, as logging_test.cpp reads log
// calls; it is a unit test, so it runs in every CI step that runs
// unit_tests. A second check reads the sources' string literals: SQL on
// akadze.* is written in the job store (store/), the claim (claim/), the
// migrations runner (schema/) and the sample rows (sample_rows/) only. A
// third reads their code for the service kit's rules: every mutex is the annotated Mutex of
// core/thread_annotations.h (clang checks what it guards), and no thread
// sleeps where it could wait on a condition.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace akadzed {
namespace {

namespace fs = std::filesystem;

// daemon/ of this source tree.
fs::path DaemonDir() { return fs::path(__FILE__).parent_path().parent_path().parent_path() / "daemon"; }

// The floors, from daemon/rooms.txt ("<floor> <room> <what it holds>" a
// line, '#' comments): the file scripts/room-table draws
// docs/architecture.md's room table from.
const std::map<std::string, int>& Floors() {
  static const std::map<std::string, int> floors = [] {
    std::map<std::string, int> read;
    std::ifstream in(DaemonDir() / "rooms.txt");
    std::string line;
    while (std::getline(in, line)) {
      const std::size_t first = line.find_first_not_of(" \t");
      if (first == std::string::npos || line[first] == '#') continue;
      std::istringstream words(line);
      int floor = 0;
      std::string room;
      if (words >> floor >> room) read[room] = floor;
    }
    return read;
  }();
  return floors;
}

struct Violation {
  std::string file;
  std::string include;
  std::string why;
};

// The room of a path relative to daemon/: its first component.
std::string RoomOf(const fs::path& relative) { return relative.begin()->string(); }

// Every C and C++ source under `daemon`, relative to it.
std::vector<fs::path> Sources(const fs::path& daemon) {
  std::vector<fs::path> sources;
  for (const auto& entry : fs::recursive_directory_iterator(daemon)) {
    if (!entry.is_regular_file()) continue;
    const std::string ext = entry.path().extension().string();
    if (ext == ".h" || ext == ".cpp" || ext == ".c") {
      sources.push_back(entry.path().lexically_relative(daemon));
    }
  }
  return sources;
}

// The violations a checker found in the real daemon/, each as a line of
// the failure's report: none expected.
void CheckNone(const std::vector<Violation>& violations) {
  for (const Violation& v : violations) {
    UNSCOPED_INFO("daemon/" << v.file << ": " << v.include << ": " << v.why);
  }
  CHECK(violations.empty());
}

// Every `#include "room/..."` of every source under `daemon` that breaks the
// layers, plus every room missing from Floors().
std::vector<Violation> LayerViolations(const fs::path& daemon) {
  static const std::regex include_line(R"re(^\s*#\s*include\s*"([a-z_]+)/[^"]+")re");
  std::vector<Violation> violations;
  for (const fs::path& relative : Sources(daemon)) {
    const std::string room = RoomOf(relative);
    const auto floor = Floors().find(room);
    if (floor == Floors().end()) {
      violations.push_back({relative.string(), "", "room " + room + " has no floor"});
      continue;
    }
    std::ifstream in(daemon / relative);
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
  const fs::path daemon = DaemonDir();
  REQUIRE(fs::is_directory(daemon / "claim"));
  // daemon/rooms.txt was read: the bottom and the top of the house.
  REQUIRE(Floors().count("core") == 1);
  CHECK(Floors().at("core") == 0);
  CHECK(Floors().at("main.cpp") == 8);
  CheckNone(LayerViolations(daemon));
}

// The rooms whose files may hold SQL on akadze.*: the job store, the claim,
// the migrations runner and the demos' and the lesson's sample rows
// (docs/architecture.md, "Rooms and layers").
const std::set<std::string>& SqlRooms() {
  static const std::set<std::string> rooms = {"store", "claim", "schema", "sample_rows"};
  return rooms;
}

// The string literals of C++ source `text`, adjacent ones ("a" "b", across
// lines) joined as the compiler joins them; comments and character literals
// skipped, raw strings read whole.
std::vector<std::string> StringLiterals(const std::string& text) {
  std::vector<std::string> out;
  bool joining = false;  // the last token was a literal: a next one joins it
  std::size_t i = 0;
  const std::size_t n = text.size();
  while (i < n) {
    const char c = text[i];
    if (text.compare(i, 2, "//") == 0) {
      i = text.find('\n', i);
      if (i == std::string::npos) break;
      continue;
    }
    if (text.compare(i, 2, "/*") == 0) {
      i = text.find("*/", i + 2);
      if (i == std::string::npos) break;
      i += 2;
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    std::string literal;
    bool is_literal = false;
    if (c == 'R' && i + 1 < n && text[i + 1] == '"' &&
        (i == 0 || !(std::isalnum(static_cast<unsigned char>(text[i - 1])) || text[i - 1] == '_'))) {
      const std::size_t open = text.find('(', i + 2);
      if (open == std::string::npos) break;
      const std::string close = ")" + text.substr(i + 2, open - i - 2) + "\"";
      const std::size_t end = text.find(close, open + 1);
      if (end == std::string::npos) break;
      literal = text.substr(open + 1, end - open - 1);
      i = end + close.size();
      is_literal = true;
    } else if (c == '"') {
      for (++i; i < n && text[i] != '"'; ++i) {
        if (text[i] == '\\' && i + 1 < n) ++i;
        literal += text[i];
      }
      ++i;
      is_literal = true;
    } else if (c == '\'' && !(i > 0 && std::isxdigit(static_cast<unsigned char>(text[i - 1])))) {
      // A character literal (not a digit separator as in 1'000).
      for (++i; i < n && text[i] != '\''; ++i) {
        if (text[i] == '\\') ++i;
      }
      ++i;
    } else {
      ++i;
    }
    if (is_literal) {
      if (joining) {
        out.back() += literal;
      } else {
        out.push_back(literal);
      }
    }
    joining = is_literal;
  }
  return out;
}

// True when `text` is SQL on akadze.*: it names akadze.<something> and has
// an SQL keyword (upper case, as every statement of the daemon writes them;
// prose such as a metric's HELP naming a table has none).
bool IsSqlOnAkadze(const std::string& text) {
  static const std::regex names_table(R"(\bakadze\.[a-z_])");
  static const std::set<std::string> keywords = {"SELECT", "INSERT", "UPDATE", "DELETE", "FROM",
                                                 "JOIN",   "INTO",   "WHERE",  "TABLE",  "RETURNING",
                                                 "TRUNCATE", "LOCK", "VALUES", "SET"};
  if (!std::regex_search(text, names_table)) return false;
  std::string word;
  for (char c : text + " ") {
    if (std::isupper(static_cast<unsigned char>(c))) {
      word += c;
      continue;
    }
    if (keywords.count(word) == 1 && !std::isalnum(static_cast<unsigned char>(c)) && c != '_') return true;
    word.clear();
  }
  return false;
}

// Every (joined) string literal holding SQL on akadze.* in a source under
// `daemon` outside SqlRooms().
std::vector<Violation> SqlOutsideStore(const fs::path& daemon) {
  std::vector<Violation> violations;
  for (const fs::path& relative : Sources(daemon)) {
    if (SqlRooms().count(RoomOf(relative)) == 1) continue;
    std::ifstream in(daemon / relative);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (const std::string& literal : StringLiterals(text)) {
      if (!IsSqlOnAkadze(literal)) continue;
      violations.push_back({relative.string(), literal,
                            RoomOf(relative) + " holds SQL on akadze.*: it belongs in store/"});
    }
  }
  return violations;
}

TEST_CASE("the SQL checker finds SQL on akadze.* outside the store, the claim and the schema",
          "[layers]") {
  ScratchTree tree;
  tree.Write("store/a.cpp", "auto q = \"SELECT 1 FROM akadze.jobs\";\n");
  tree.Write("claim/b.cpp", "auto q = \"UPDATE akadze.jobs SET state = 'running'\";\n");
  tree.Write("schema/c.cpp", "auto q = \"CREATE TABLE akadze.jobs ()\";\n");
  tree.Write("worker/d.cpp",
             "// SELECT id FROM akadze.jobs (a comment)\n/* DELETE FROM akadze.workers\n */\n"
             "char q = '\"'; int n = 1'000; auto help = \"Jobs in akadze.jobs by state\";\n");
  REQUIRE(SqlOutsideStore(tree.root()).empty());

  tree.Write("worker/e.cpp", "conn.exec(\"DELETE FROM \"\n  \"akadze.jobs WHERE id = $1\");\n");
  tree.Write("cli/f.cpp", "auto q = R\"sql(SELECT \"x\" FROM akadze.limits)sql\";\n");
  std::set<std::string> found;
  for (const Violation& v : SqlOutsideStore(tree.root())) found.insert(v.file + ": " + v.include);
  CHECK(found == std::set<std::string>{
                     "worker/e.cpp: DELETE FROM akadze.jobs WHERE id = $1",
                     "cli/f.cpp: SELECT \"x\" FROM akadze.limits",
                 });
}

TEST_CASE("no SQL on akadze.* outside the store, the claim and the migrations runner", "[layers]") {
  const fs::path daemon = DaemonDir();
  REQUIRE(fs::is_directory(daemon / "store"));
  CheckNone(SqlOutsideStore(daemon));
}

TEST_CASE("the claim planner stays pure: no libpq, clock or config", "[layers]") {
  const fs::path claim = DaemonDir() / "claim";
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

// Every use, outside comments, of a lock clang's analysis cannot see (the
// standard library's mutexes, locks and conditions, which only
// core/thread_annotations.h wraps) or of a polling sleep (the kit's
// ServiceLoop::Sleep and Wait end on the stop; the example plugin, whose job
// sleeps on purpose, is not under daemon/) in the sources under `daemon`.
std::vector<Violation> KitRuleViolations(const fs::path& daemon) {
  static const std::regex unannotated(
      R"re(\bstd::(mutex|recursive_mutex|timed_mutex|shared_mutex|shared_timed_mutex|lock_guard|)re"
      R"re(unique_lock|scoped_lock|shared_lock|condition_variable(_any)?)\b|\bpthread_mutex_t\b)re");
  static const std::regex sleep(R"re(\b(sleep_for|sleep_until|usleep|nanosleep)\s*\()re");
  std::vector<Violation> violations;
  for (const fs::path& relative : Sources(daemon)) {
    const bool wrapper = relative == fs::path("core/thread_annotations.h");
    std::ifstream in(daemon / relative);
    std::string line;
    while (std::getline(in, line)) {
      const std::string code = line.substr(0, line.find("//"));
      std::smatch m;
      if (!wrapper && std::regex_search(code, m, unannotated)) {
        violations.push_back({relative.string(), m[0].str(),
                              "use Mutex, MutexLock or CondVar (core/thread_annotations.h)"});
      }
      if (std::regex_search(code, m, sleep)) {
        violations.push_back({relative.string(), m[0].str(),
                              "wait on a condition (ServiceLoop's Wait or Sleep) instead"});
      }
    }
  }
  return violations;
}

TEST_CASE("the kit rules checker finds unannotated locks and sleeps, not comments or the wrapper",
          "[layers]") {
  ScratchTree tree;
  tree.Write("core/thread_annotations.h", "  std::mutex mu_;\n  std::condition_variable cv_;\n");
  tree.Write("worker/a.cpp", "// std::mutex in a comment; sleep_for(1ms) too\nMutex mu_;\n");
  REQUIRE(KitRuleViolations(tree.root()).empty());

  tree.Write("runtime/b.cpp", "  std::mutex mu;\n  std::lock_guard lock(mu);\n");
  tree.Write("metrics/c.cpp", "    std::this_thread::sleep_for(std::chrono::milliseconds(1));\n");
  tree.Write("handlers/p.c", "nanosleep(&ts, NULL);\n");
  std::set<std::string> found;
  for (const Violation& v : KitRuleViolations(tree.root())) found.insert(v.file + ": " + v.include);
  CHECK(found == std::set<std::string>{
                     "runtime/b.cpp: std::mutex",
                     "runtime/b.cpp: std::lock_guard",
                     "metrics/c.cpp: sleep_for(",
                     "handlers/p.c: nanosleep(",
                 });
}

TEST_CASE("every mutex of daemon/ is annotated, and nothing in it sleeps to poll", "[layers]") {
  const fs::path daemon = DaemonDir();
  REQUIRE(fs::is_regular_file(daemon / "core/thread_annotations.h"));
  CheckNone(KitRuleViolations(daemon));
}

}  // namespace
}  // namespace akadzed
