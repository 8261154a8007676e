// Durations, secret redaction and one-line formatting.
#include <catch2/catch.hpp>

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
