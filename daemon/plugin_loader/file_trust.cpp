#include "plugin_loader/file_trust.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <fmt/format.h>

namespace akadzed {

namespace {

// "1001 (bob)", or just "1001" when the uid has no passwd entry.
std::string UserText(uid_t uid) {
  struct passwd entry {};
  struct passwd* found = nullptr;
  char buffer[1024];
  if (getpwuid_r(uid, &entry, buffer, sizeof buffer, &found) == 0 && found != nullptr) {
    return fmt::format("{} ({})", uid, found->pw_name);
  }
  return std::to_string(uid);
}

// The daemon's user for messages: "akadzed", or "uid 998".
std::string DaemonUserText() {
  const uid_t uid = geteuid();
  struct passwd entry {};
  struct passwd* found = nullptr;
  char buffer[1024];
  if (getpwuid_r(uid, &entry, buffer, sizeof buffer, &found) == 0 && found != nullptr) {
    return found->pw_name;
  }
  return fmt::format("uid {}", uid);
}

// What is wrong with the ownership and mode of `st`, or "".
std::string Problem(const struct stat& st, bool directory) {
  const uid_t self = geteuid();
  if (st.st_uid != 0 && st.st_uid != self) {
    return fmt::format("owned by uid {}, not root or the daemon's user ({})", UserText(st.st_uid),
                       DaemonUserText());
  }
  const bool group = (st.st_mode & S_IWGRP) != 0;
  const bool others = (st.st_mode & S_IWOTH) != 0;
  // Sticky (as /tmp): others may add entries, but only an entry's owner,
  // the directory's owner (checked above) and root may rename or remove it.
  if (directory && (st.st_mode & S_ISVTX) != 0) return "";
  if (group || others) {
    return fmt::format("writable by {} (mode {:04o})",
                       group && others ? "group and others" : group ? "group" : "others",
                       st.st_mode & 07777);
  }
  return "";
}

}  // namespace

std::string FileTrustProblem(const std::string& path) {
  std::unique_ptr<char, decltype(&std::free)> resolved(realpath(path.c_str(), nullptr), &std::free);
  if (!resolved) return std::strerror(errno);
  std::string at = resolved.get();

  struct stat st {};
  if (stat(at.c_str(), &st) != 0) return std::strerror(errno);
  if (!S_ISREG(st.st_mode)) return "not a regular file";
  if (std::string problem = Problem(st, false); !problem.empty()) return problem;

  // Each directory above it, up to and including "/".
  while (at != "/") {
    const std::size_t slash = at.rfind('/');
    at = slash == 0 ? std::string("/") : at.substr(0, slash);
    if (stat(at.c_str(), &st) != 0) return fmt::format("directory {}: {}", at, std::strerror(errno));
    if (std::string problem = Problem(st, true); !problem.empty()) {
      return fmt::format("directory {} is {}", at, problem);
    }
  }
  return "";
}

std::string TrustRefusal(const std::string& path, TrustedUse use) {
  const std::string problem = FileTrustProblem(path);
  if (problem.empty()) return "";
  return use == TrustedUse::kPlugin
             ? fmt::format("plugin {}: refused: {} (see docs/security.md)", path, problem)
             : fmt::format("refusing to execute {}: {} (see docs/security.md)", path, problem);
}

}  // namespace akadzed
