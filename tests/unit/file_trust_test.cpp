// FileTrustProblem (plugin_loader/file_trust.h): which files and directories the
// daemon refuses to load or execute, and how it says why.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "plugin_loader/file_trust.h"

namespace akadzed {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "akadzed-trust-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = fs::canonical(pattern);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::permissions(path_, fs::perms::owner_all, ignored);
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string Touch(const fs::path& path, mode_t mode) {
  std::ofstream(path) << "x";
  chmod(path.c_str(), mode);
  return path.string();
}

TEST_CASE("a file only root or the daemon's user can change is trusted", "[trust]") {
  TempDir dir;
  CHECK(FileTrustProblem(Touch(dir.path() / "a", 0644)) == "");
  CHECK(FileTrustProblem(Touch(dir.path() / "b", 0755)) == "");
  CHECK(FileTrustProblem(Touch(dir.path() / "c", 0400)) == "");
  CHECK(FileTrustProblem("/bin/sh") == "");
}

TEST_CASE("a file writable by group or others is refused with its mode", "[trust]") {
  TempDir dir;
  CHECK(FileTrustProblem(Touch(dir.path() / "a", 0666)) == "writable by group and others (mode 0666)");
  CHECK(FileTrustProblem(Touch(dir.path() / "b", 0664)) == "writable by group (mode 0664)");
  CHECK(FileTrustProblem(Touch(dir.path() / "c", 0646)) == "writable by others (mode 0646)");
  CHECK(FileTrustProblem(Touch(dir.path() / "d", 04777)) ==
        "writable by group and others (mode 4777)");
}

TEST_CASE("every directory above the file counts; a sticky one is fine", "[trust]") {
  TempDir dir;
  fs::create_directories(dir.path() / "x" / "y");
  const std::string file = Touch(dir.path() / "x" / "y" / "f", 0644);
  chmod((dir.path() / "x").c_str(), 0777);
  CHECK(FileTrustProblem(file) ==
        "directory " + (dir.path() / "x").string() + " is writable by group and others (mode 0777)");
  chmod((dir.path() / "x").c_str(), 0775);
  CHECK(FileTrustProblem(file) ==
        "directory " + (dir.path() / "x").string() + " is writable by group (mode 0775)");
  chmod((dir.path() / "x").c_str(), 01777);
  CHECK(FileTrustProblem(file) == "");
  chmod((dir.path() / "x").c_str(), 0755);
  CHECK(FileTrustProblem(file) == "");
}

TEST_CASE("links are followed: the target and its directories are judged", "[trust]") {
  TempDir dir;
  fs::create_directory(dir.path() / "open");
  const std::string target = Touch(dir.path() / "open" / "lib.so", 0644);
  fs::create_symlink(target, dir.path() / "link.so");
  chmod((dir.path() / "open").c_str(), 0777);
  CHECK(FileTrustProblem((dir.path() / "link.so").string()).find("directory " +
                                                                 (dir.path() / "open").string()) == 0);
  chmod((dir.path() / "open").c_str(), 0755);
  CHECK(FileTrustProblem((dir.path() / "link.so").string()) == "");
}

TEST_CASE("missing files and directories are named as such", "[trust]") {
  TempDir dir;
  CHECK(FileTrustProblem((dir.path() / "nope").string()) == "No such file or directory");
  fs::create_directory(dir.path() / "d");
  CHECK(FileTrustProblem((dir.path() / "d").string()) == "not a regular file");
}

TEST_CASE("files owned by another user are refused (as root)", "[trust]") {
  if (geteuid() != 0) {
    WARN("needs root to chown: skipped");
    return;
  }
  TempDir dir;
  const std::string file = Touch(dir.path() / "f", 0644);
  REQUIRE(chown(file.c_str(), 4242, 4242) == 0);
  CHECK(FileTrustProblem(file).rfind("owned by uid 4242", 0) == 0);
  CHECK(FileTrustProblem(file).find("not root or the daemon's user (root)") != std::string::npos);
  REQUIRE(chown(file.c_str(), 0, 0) == 0);
  REQUIRE(chown(dir.path().c_str(), 4242, 4242) == 0);
  CHECK(FileTrustProblem(file).rfind("directory " + dir.path().string() + " is owned by uid 4242", 0) == 0);
  REQUIRE(chown(dir.path().c_str(), 0, 0) == 0);
}

}  // namespace
}  // namespace akadzed
