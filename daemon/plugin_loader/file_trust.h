// The trust check for files whose code the daemon runs (plugin .so files,
// shell handler commands given as paths), in the spirit of sshd's
// StrictModes: a file that a user other than root and the daemon's own
// could change, directly or through a directory above it, is refused, since
// whoever can change it runs code as the daemon (docs/security.md).
//
// Thread-safety: a pure function of the file system; call from any thread.
#pragma once

#include <string>

namespace akadzed {

// Returns "" when `path` may be trusted, else one line saying why not, e.g.
// "writable by group and others (mode 0666)" or
// "directory /opt/p is owned by uid 1001 (bob), not root or the daemon's user (akadzed)".
//
// `path` is resolved (realpath) first; the file it ends at must be a regular
// file, and it and every directory above it must be owned by root or by the
// daemon's effective uid and not writable by group or others. A directory
// writable by others is accepted when its sticky bit is set (as /tmp): there
// nobody can rename or remove what another user owns. An unresolvable path
// returns the system error (e.g. "No such file or directory").
std::string FileTrustProblem(const std::string& path);

// What the daemon would run from a file: a plugin it loads, or a shell
// handler's command given as a path.
enum class TrustedUse { kPlugin, kShellCommand };

// The one place both uses are judged: "" when `path` may be trusted, else
// the whole one-line refusal, "plugin <path>: refused: <problem> (see
// docs/security.md)" or "refusing to execute <path>: <problem> (see
// docs/security.md)".
std::string TrustRefusal(const std::string& path, TrustedUse use);

}  // namespace akadzed
