// A statement under construction: bind() appends a parameter and returns its
// placeholder ($n), so SQL built piece by piece and its parameters cannot
// drift apart.
//
// A set the statement tests membership in (`= ANY`, `<> ALL`) goes through
// bind_set(): PostgreSQL hashes such a set, rather than comparing each row
// with every element, only when it is a constant of at least 9 elements at
// planning time, which a prepared statement's generic plan never has. So a
// statement with such a set is planned for its values (prepare() false: run
// it with Connection::exec_replanned, or PipelinedStatement::prepare).
//
// Thread-safety: a value; one thread at a time.
#pragma once

#include <cstddef>
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
  template <typename T>
  std::string bind_set(const T& values) {
    if (values.size() >= kHashedSetSize) replan_ = true;
    return bind_array(values);
  }
  std::string sql;
  const Params& params() const { return params_; }
  // False when a set bound here is large enough to be hashed (see above).
  bool prepare() const { return !replan_; }

  // PostgreSQL's MIN_ARRAY_SIZE_FOR_HASHED_SAOP.
  static constexpr std::size_t kHashedSetSize = 9;

 private:
  Params params_;
  bool replan_ = false;
};

}  // namespace akadzed::pg
