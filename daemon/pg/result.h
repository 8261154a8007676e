// An owned libpq result (PGresult) with typed access to its text-format cells.
//
// Thread-safety: a Result is a value; distinct Results may be used from
// different threads, one Result from one thread at a time.
#pragma once

#include <libpq-fe.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace akadzed::pg {

class Result {
 public:
  Result() = default;
  explicit Result(PGresult* result) : result_(result, &PQclear) {}

  int rows() const { return result_ ? PQntuples(result_.get()) : 0; }
  int columns() const { return result_ ? PQnfields(result_.get()) : 0; }
  bool empty() const { return rows() == 0; }

  bool is_null(int row, int column) const { return PQgetisnull(result_.get(), row, column) != 0; }
  // The cell as text; "" for NULL. The view lives as long as this Result.
  std::string_view text(int row, int column) const;
  std::optional<std::string> optional_text(int row, int column) const;
  // The cell parsed as an integer. Throws std::runtime_error for NULL or junk.
  std::int64_t int64(int row, int column) const;
  std::optional<std::int64_t> optional_int64(int row, int column) const;
  // The cell parsed as a one-dimensional int8[] without NULLs ("{1,-2}").
  // Throws std::runtime_error for NULL or anything else.
  std::vector<std::int64_t> int64_array(int row, int column) const;
  // The cell parsed as a PostgreSQL boolean ("t"/"f").
  bool boolean(int row, int column) const;
  double float64(int row, int column) const;

  // Rows touched by INSERT/UPDATE/DELETE (PQcmdTuples), 0 if none.
  std::int64_t affected() const;
  PGresult* raw() const { return result_.get(); }

 private:
  std::unique_ptr<PGresult, decltype(&PQclear)> result_{nullptr, &PQclear};
};

}  // namespace akadzed::pg
