// Positional statement parameters ($1, $2, ...) in libpq's text format.
//
// Values are kept as strings owned by the Params object; arrays are encoded as
// PostgreSQL array literals, so a vector of strings binds to `$n::text[]`.
//
// Thread-safety: a value type; not shared between threads while mutated.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace akadzed::pg {

class Params {
 public:
  Params() = default;

  Params& add(std::string_view value);
  Params& add(const char* value) { return add(std::string_view(value)); }
  Params& add(const std::string& value) { return add(std::string_view(value)); }
  Params& add(std::int64_t value);
  Params& add(int value) { return add(static_cast<std::int64_t>(value)); }
  Params& add(bool value);
  Params& add(const std::optional<std::string>& value);
  Params& add(const std::optional<std::int64_t>& value);
  Params& add_null();
  // text[] literal; std::nullopt elements become NULL.
  Params& add_array(const std::vector<std::optional<std::string>>& values);
  Params& add_array(const std::vector<std::string>& values);
  // int8[] literal; std::nullopt elements become NULL.
  Params& add_array(const std::vector<std::int64_t>& values);
  Params& add_array(const std::vector<std::optional<std::int64_t>>& values);

  // Declares the parameters' types by OID (e.g. 20 for int8), for
  // statements that do not say them, such as operator-written SQL that may
  // leave some parameters unused. Without it the server infers every type.
  // Call after the last add(), with one OID per value (0: inferred).
  Params& types(std::vector<unsigned int> oids);

  int size() const { return static_cast<int>(values_.size()); }
  // Pointers for PQexecParams; valid until the next add().
  std::vector<const char*> pointers() const;
  // The declared types (size() of them), or nullptr when none were declared.
  const unsigned int* type_oids() const { return oids_.empty() ? nullptr : oids_.data(); }
  int type_count() const { return static_cast<int>(oids_.size()); }

 private:
  std::vector<std::optional<std::string>> values_;
  std::vector<unsigned int> oids_;
};

}  // namespace akadzed::pg
