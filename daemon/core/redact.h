// Removal of secrets from text that may reach a log line or a terminal.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

namespace akadzed {

// Returns `text` with every password replaced by "***": the `pass` of
// `scheme://user:pass@host` URLs and the value of `password=...` conninfo
// keywords. Everything else is left as is.
std::string RedactSecrets(std::string_view text);

// Like RedactSecrets(text), and also replaces every occurrence in `text` of
// the password(s) that `conninfo` (a libpq URL or keyword string) carries,
// raw and percent-decoded: libpq sometimes quotes a bad password alone.
std::string RedactSecrets(std::string_view text, std::string_view conninfo);

// Returns `text` cut to at most `max_bytes` bytes without splitting a UTF-8
// sequence; "..." marks a cut.
std::string TruncateUtf8(std::string_view text, std::size_t max_bytes);

// Returns `text` with its trailing whitespace and newlines removed and inner
// newlines replaced by spaces, so that it fits on one log line.
std::string OneLine(std::string_view text);

}  // namespace akadzed
