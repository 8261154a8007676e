// The admin token of the status page's actions (web.admin_token_file): the
// file's text without surrounding whitespace. Read when the config is loaded
// (a bad file fails the load) and again for each action (a new token takes
// effect without a restart).
//
// Thread-safety: a pure function of the file.
#pragma once

#include <string>

namespace akadzed {

inline constexpr std::size_t kMinAdminTokenLength = 16;

// Throws std::runtime_error with one line naming the file when it cannot be
// read, is open to other users (any o+rwx bit), or holds fewer than
// kMinAdminTokenLength characters.
std::string ReadAdminToken(const std::string& path);

}  // namespace akadzed
