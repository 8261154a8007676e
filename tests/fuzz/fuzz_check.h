// FUZZ_CHECK: a property a fuzz target asserts. A failure prints the
// condition and a message to stderr and aborts, which libFuzzer reports as a
// crash and saves the input as an artifact (scripts/fuzz).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace akadzed::fuzz {

[[noreturn]] inline void CheckFailed(const char* file, int line, const char* condition,
                                     const std::string& message) {
  std::fprintf(stderr, "%s:%d: property violated: %s\n  %s\n", file, line, condition,
               message.c_str());
  std::abort();
}

// True if `text` holds no line break (messages promised to be one line).
inline bool IsOneLine(std::string_view text) {
  return text.find_first_of("\n\r") == std::string_view::npos;
}

}  // namespace akadzed::fuzz

#define FUZZ_CHECK(condition, message)                                                  \
  do {                                                                                  \
    if (!(condition)) ::akadzed::fuzz::CheckFailed(__FILE__, __LINE__, #condition, (message)); \
  } while (false)
