// What a call under test threw, described by the most derived pg error
// class, for tests that assert the error taxonomy of daemon/pg/pg_error.h.
//
// Thread-safety: plain functions and values.
#pragma once

#include <exception>
#include <string>
#include <utility>

#include "pg/pg_error.h"

namespace akadzed::test {

// What a call threw, described by the most derived pg error class.
struct Caught {
  std::string kind = "none";  // none, InDoubtError, ConnectionError, TransientError,
                              // SqlError, PgError, other
  std::string sqlstate;
  std::string message;
  bool transient = false;
  bool poisons = false;
};

inline Caught Describe(std::string kind, const pg::PgError& e) {
  return Caught{std::move(kind), e.sqlstate(), e.what(), e.transient(), e.poisons_connection()};
}

template <typename F>
Caught Capture(F&& body) {
  try {
    body();
  } catch (const pg::InDoubtError& e) {
    return Describe("InDoubtError", e);
  } catch (const pg::ConnectionError& e) {
    return Describe("ConnectionError", e);
  } catch (const pg::TransientError& e) {
    return Describe("TransientError", e);
  } catch (const pg::SqlError& e) {
    return Describe("SqlError", e);
  } catch (const pg::PgError& e) {
    return Describe("PgError", e);
  } catch (const std::exception& e) {
    return Caught{"other", "", e.what(), false, false};
  }
  return Caught{};
}

}  // namespace akadzed::test
