// The SQLSTATE classes of pg_error.h: which failures a statement may retry
// row by row (the finisher, the rescue) and which it waits out.
#include <catch2/catch.hpp>

#include <exception>
#include <stdexcept>
#include <string>

#include "pg/pg_error.h"

namespace akadzed::pg {
namespace {

TEST_CASE("pg_error: a lost connection or a transient state is never a row fault", "[pg_error]") {
  // What the finisher relies on when it sorts a failed batch by SQLSTATE:
  // none of these may send it row by row.
  for (const std::string s : {"08000", "08003", "08006", "08P01", "57P01", "57P02", "57P03", "25006",
                              "40001", "40P01", "55P03", "53300", "57014", "58030", "XX000", ""}) {
    INFO(s);
    CHECK_FALSE(IsRowFaultSqlState(s));
  }
  for (const std::string s : {"08006", "57P01", "57P02", "57P03", "25006"}) {
    INFO(s);
    CHECK(IsConnectionSqlState(s));
    CHECK(IsTransientSqlState(s));
  }
  // A ConnectionError made on the client (no reply in time, a broken
  // socket) has no SQLSTATE.
  CHECK_FALSE(IsRowFaultSqlState(""));
}

TEST_CASE("pg_error: what one row can cause is a row fault", "[pg_error]") {
  for (const std::string s : {"22P02", "22012", "22003", "23505", "23514", "P0001", "42883", "54000"}) {
    INFO(s);
    CHECK(IsRowFaultSqlState(s));
    CHECK_FALSE(IsConnectionSqlState(s));
    CHECK_FALSE(IsTransientSqlState(s));
  }
}

TEST_CASE("pg_error: ErrorKindOf sorts every class, most derived first, and anything else", "[pg_error]") {
  CHECK(ErrorKindOf(std::make_exception_ptr(InDoubtError("x", ""))) == ErrorKind::kInDoubt);
  CHECK(ErrorKindOf(std::make_exception_ptr(ConnectionError("x", "08006"))) == ErrorKind::kConnection);
  CHECK(ErrorKindOf(std::make_exception_ptr(TransientError("x", "40P01"))) == ErrorKind::kTransient);
  CHECK(ErrorKindOf(std::make_exception_ptr(RowFaultError("x", "23514"))) == ErrorKind::kRowFault);
  CHECK(ErrorKindOf(std::make_exception_ptr(SqlError("x", "57014"))) == ErrorKind::kSql);
  CHECK(ErrorKindOf(std::make_exception_ptr(PgError("x", ""))) == ErrorKind::kSql);
  CHECK(ErrorKindOf(std::make_exception_ptr(std::runtime_error("x"))) == ErrorKind::kOther);
  CHECK(ErrorKindOf(std::make_exception_ptr(42)) == ErrorKind::kOther);
  CHECK(ErrorKindOf(nullptr) == ErrorKind::kOther);
  CHECK(std::string(ErrorKindName(ErrorKind::kRowFault)) == "row_fault");
}

TEST_CASE("pg_error: SqlStateOf reads a PgError's SQLSTATE through an exception_ptr, and \"\" for anything "
          "else", "[pg_error]") {
  CHECK(SqlStateOf(std::make_exception_ptr(TransientError("x", "55P03"))) == "55P03");
  CHECK(SqlStateOf(std::make_exception_ptr(InDoubtError("x", ""))).empty());
  CHECK(SqlStateOf(std::make_exception_ptr(RowFaultError("x", "23514"))) == "23514");
  CHECK(SqlStateOf(std::make_exception_ptr(std::runtime_error("55P03"))).empty());
  CHECK(SqlStateOf(nullptr).empty());
}

}  // namespace
}  // namespace akadzed::pg
