#include "pg/params.h"

namespace akadzed::pg {

namespace {

// Quotes one element of an array literal: "..." with \ and " escaped.
void AppendArrayElement(std::string& out, std::string_view value) {
  out.push_back('"');
  for (char c : value) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('"');
}

}  // namespace

Params& Params::types(std::vector<unsigned int> oids) {
  oids_ = std::move(oids);
  return *this;
}

Params& Params::add(std::string_view value) {
  values_.emplace_back(std::string(value));
  return *this;
}

Params& Params::add(std::int64_t value) {
  values_.emplace_back(std::to_string(value));
  return *this;
}

Params& Params::add(bool value) {
  values_.emplace_back(value ? "true" : "false");
  return *this;
}

Params& Params::add(const std::optional<std::string>& value) {
  values_.push_back(value);
  return *this;
}

Params& Params::add(const std::optional<std::int64_t>& value) {
  if (value) return add(*value);
  return add_null();
}

Params& Params::add_null() {
  values_.emplace_back(std::nullopt);
  return *this;
}

Params& Params::add_array(const std::vector<std::optional<std::string>>& values) {
  std::string literal = "{";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) literal.push_back(',');
    if (values[i]) {
      AppendArrayElement(literal, *values[i]);
    } else {
      literal += "NULL";
    }
  }
  literal.push_back('}');
  values_.emplace_back(std::move(literal));
  return *this;
}

Params& Params::add_array(const std::vector<std::string>& values) {
  std::string literal = "{";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) literal.push_back(',');
    AppendArrayElement(literal, values[i]);
  }
  literal.push_back('}');
  values_.emplace_back(std::move(literal));
  return *this;
}

Params& Params::add_array(const std::vector<std::int64_t>& values) {
  std::string literal = "{";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) literal.push_back(',');
    literal += std::to_string(values[i]);
  }
  literal.push_back('}');
  values_.emplace_back(std::move(literal));
  return *this;
}

Params& Params::add_array(const std::vector<std::optional<std::int64_t>>& values) {
  std::string literal = "{";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) literal.push_back(',');
    literal += values[i] ? std::to_string(*values[i]) : "NULL";
  }
  literal.push_back('}');
  values_.emplace_back(std::move(literal));
  return *this;
}

std::vector<const char*> Params::pointers() const {
  std::vector<const char*> out;
  out.reserve(values_.size());
  for (const auto& value : values_) out.push_back(value ? value->c_str() : nullptr);
  return out;
}

}  // namespace akadzed::pg
