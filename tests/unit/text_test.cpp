// Durations, secret redaction and one-line formatting.
#include <catch2/catch.hpp>

#include <random>
#include <regex>
#include <vector>

#include "core/duration.h"
#include "core/redact.h"

namespace akadzed {
namespace {

TEST_CASE("durations parse with units and compose", "[duration]") {
  CHECK(ParseDuration("250ms") == 250'000);
  CHECK(ParseDuration("30s") == 30'000'000);
  CHECK(ParseDuration("5m") == 300'000'000);
  CHECK(ParseDuration("1h30m") == 5'400'000'000);
  CHECK(ParseDuration("2d") == 172'800'000'000);
  CHECK(ParseDuration("7us") == 7);
  CHECK(ParseDuration("0s") == 0);
}

TEST_CASE("bad durations are rejected with a reason", "[duration]") {
  std::string error;
  CHECK_FALSE(ParseDuration("", &error));
  CHECK(error == "empty duration");
  CHECK_FALSE(ParseDuration("30", &error));
  CHECK(error.find("missing unit") != std::string::npos);
  CHECK_FALSE(ParseDuration("5x", &error));
  CHECK(error.find("unknown unit 'x'") != std::string::npos);
  CHECK_FALSE(ParseDuration("-5s", &error));
  CHECK_FALSE(ParseDuration("5 s", &error));
  CHECK_FALSE(ParseDuration("99999999999999999999s", &error));
  CHECK(error.find("too large") != std::string::npos);
  CHECK_FALSE(ParseDuration("9999999999999d", &error));
  // The text is quoted with control bytes escaped: the reason stays one line.
  CHECK_FALSE(ParseDuration("5\nm", &error));
  CHECK(error.find("'5\\x0am'") != std::string::npos);
  CHECK(error.find('\n') == std::string::npos);
}

TEST_CASE("durations format back to parseable text", "[duration]") {
  for (std::int64_t us : {std::int64_t{1}, std::int64_t{1500}, std::int64_t{60'000'000},
                          std::int64_t{5'400'000'000}, std::int64_t{90'061'000'001}}) {
    CHECK(ParseDuration(FormatDuration(us)) == us);
  }
  CHECK(FormatDuration(5'400'000'000) == "1h30m");
  CHECK(FormatDuration(0) == "0s");
}

TEST_CASE("passwords are redacted from URLs and conninfo strings", "[redact]") {
  CHECK(RedactSecrets("postgresql://bob:hunter2@db.example:5432/app") ==
        "postgresql://bob:***@db.example:5432/app");
  CHECK(RedactSecrets("could not connect: postgres://a:b@c/d and more") ==
        "could not connect: postgres://a:***@c/d and more");
  CHECK(RedactSecrets("host=x password=hunter2 user=bob") == "host=x password=*** user=bob");
  CHECK(RedactSecrets("host=x password='hun ter2' user=bob") == "host=x password=*** user=bob");
  CHECK(RedactSecrets("PASSWORD = s3cret") == "PASSWORD = ***");
  CHECK(RedactSecrets("postgresql://bob@host/db") == "postgresql://bob@host/db");
  CHECK(RedactSecrets("no secrets here") == "no secrets here");
}

// The regexes RedactSecrets once used: a reference for the scanners on short
// random text (std::regex recurses per character, so not on long text).
std::string RegexRedact(const std::string& text) {
  static const std::regex kUrl(R"(([A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*):[^@\s]*@)");
  static const std::regex kKeyword(R"((password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s]+))",
                                   std::regex::icase);
  return std::regex_replace(std::regex_replace(text, kUrl, "$1:***@"), kKeyword, "$1***");
}

TEST_CASE("redaction matches the reference regexes on random text", "[redact]") {
  static const std::vector<std::string> kPieces = {
      "a", "Z", "9", ":", "/", "@", " ", "\t", "'", "\\", "=", "+", ".", "-", "://", "x://",
      "pg://u:p@", "password", "PassWord", "password=", "password = '", "postgresql://"};
  std::mt19937 rng(42);
  for (int n = 0; n < 20000; ++n) {
    std::string text;
    int parts = static_cast<int>(rng() % 12);
    for (int i = 0; i < parts; ++i) text += kPieces[rng() % kPieces.size()];
    INFO(text);
    REQUIRE(RedactSecrets(text) == RegexRedact(text));
  }
}

TEST_CASE("redaction handles long lines in linear time without deep recursion", "[redact]") {
  std::string line = "@" + std::string(1 << 20, 'a') + " postgres://u:" + std::string(100000, 'p') +
                     "@h password='" + std::string(100000, 'q');
  std::string out = RedactSecrets(line);
  CHECK(out.find("postgres://u:***@h") != std::string::npos);
  CHECK(out.find("password=***") != std::string::npos);
  CHECK(out.find("pppp") == std::string::npos);
  CHECK(out.find("qqqq") == std::string::npos);
}

TEST_CASE("passwords of a conninfo are redacted even when quoted alone", "[redact]") {
  CHECK(RedactSecrets("invalid percent-encoded token: \"secret%zz\"",
                      "postgresql://bob:secret%zz@/db") ==
        "invalid percent-encoded token: \"***\"");
  CHECK(RedactSecrets("bad value p@ss w0rd", "host=x password='p@ss w0rd'") == "bad value ***");
  CHECK(RedactSecrets("decoded a:b here", "postgres://u:a%3Ab@h/d") == "decoded *** here");
  CHECK(RedactSecrets("nothing to hide", "host=/tmp dbname=x") == "nothing to hide");
}

TEST_CASE("text is cut without splitting UTF-8 and kept on one line", "[redact]") {
  CHECK(TruncateUtf8("hello", 10) == "hello");
  CHECK(TruncateUtf8("hello world", 8) == "hello...");
  // "é" is two bytes: a cut inside it steps back.
  CHECK(TruncateUtf8("abc\xc3\xa9\xc3\xa9", 6) == "abc...");
  CHECK(OneLine("a\nb\r\nc\n\n") == "a b  c");
}

}  // namespace
}  // namespace akadzed
