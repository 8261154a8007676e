// A statement under construction: bind() appends a parameter and returns its
// placeholder ($n), so SQL built piece by piece and its parameters cannot
// drift apart.
//
// Thread-safety: a value; one thread at a time.
#pragma once

#include <string>

#include "pg/params.h"

namespace akadzed::pg {

class Statement {
 public:
  template <typename T>
  std::string bind(const T& value) {
    params_.add(value);
    return "$" + std::to_string(params_.size());
  }
  template <typename T>
  std::string bind_array(const T& values) {
    params_.add_array(values);
    return "$" + std::to_string(params_.size());
  }
  std::string sql;
  const Params& params() const { return params_; }

 private:
  Params params_;
};

}  // namespace akadzed::pg
