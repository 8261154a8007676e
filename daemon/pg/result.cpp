#include "pg/result.h"

#include <charconv>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace akadzed::pg {

std::string_view Result::text(int row, int column) const {
  const char* value = PQgetvalue(result_.get(), row, column);
  return std::string_view(value, static_cast<std::size_t>(PQgetlength(result_.get(), row, column)));
}

std::optional<std::string> Result::optional_text(int row, int column) const {
  if (is_null(row, column)) return std::nullopt;
  return std::string(text(row, column));
}

std::int64_t Result::int64(int row, int column) const {
  if (is_null(row, column)) {
    throw std::runtime_error("unexpected NULL in column " + std::string(PQfname(result_.get(), column)));
  }
  std::string_view cell = text(row, column);
  std::int64_t value = 0;
  auto [end, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), value);
  if (ec != std::errc() || end != cell.data() + cell.size()) {
    throw std::runtime_error("column " + std::string(PQfname(result_.get(), column)) +
                             " is not an integer");
  }
  return value;
}

std::optional<std::int64_t> Result::optional_int64(int row, int column) const {
  if (is_null(row, column)) return std::nullopt;
  return int64(row, column);
}

bool Result::boolean(int row, int column) const {
  std::string_view cell = text(row, column);
  return cell == "t" || cell == "true";
}

double Result::float64(int row, int column) const {
  std::string cell(text(row, column));
  return std::strtod(cell.c_str(), nullptr);
}

std::int64_t Result::affected() const {
  if (!result_) return 0;
  const char* tuples = PQcmdTuples(result_.get());
  if (tuples == nullptr || *tuples == '\0') return 0;
  return std::strtoll(tuples, nullptr, 10);
}

}  // namespace akadzed::pg
