#include "pg/result.h"

#include <algorithm>
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

std::vector<std::int64_t> Result::int64_array(int row, int column) const {
  const std::string name = PQfname(result_.get(), column);
  if (is_null(row, column)) throw std::runtime_error("unexpected NULL in column " + name);
  std::string_view cell = text(row, column);
  if (cell.size() < 2 || cell.front() != '{' || cell.back() != '}') {
    throw std::runtime_error("column " + name + " is not an integer array");
  }
  cell = cell.substr(1, cell.size() - 2);
  std::vector<std::int64_t> out;
  while (!cell.empty()) {
    std::int64_t value = 0;
    auto [end, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), value);
    const std::size_t used = static_cast<std::size_t>(end - cell.data());
    if (ec != std::errc() || (used < cell.size() && cell[used] != ',') || used + 1 == cell.size()) {
      throw std::runtime_error("column " + name + " is not an integer array");
    }
    out.push_back(value);
    cell.remove_prefix(std::min(used + 1, cell.size()));
  }
  return out;
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
