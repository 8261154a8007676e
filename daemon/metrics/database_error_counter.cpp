#include "metrics/database_error_counter.h"

#include <string>

namespace akadzed {

std::string_view DatabaseErrorCounter::Kind(const pg::PgError& error) {
  switch (error.kind()) {
    case pg::ErrorKind::kInDoubt: return "in_doubt";
    case pg::ErrorKind::kConnection: return "connection";
    case pg::ErrorKind::kTransient: return "transient";
    default: return "sql";  // a row's fault too
  }
}

void DatabaseErrorCounter::OnError(const pg::PgError& error) noexcept {
  const std::string_view kind = Kind(error);
  for (std::size_t i = 0; i < kKinds.size(); ++i) {
    if (kKinds[i] == kind) counts_[i].fetch_add(1, std::memory_order_relaxed);
  }
}

std::uint64_t DatabaseErrorCounter::count(std::string_view kind) const {
  for (std::size_t i = 0; i < kKinds.size(); ++i) {
    if (kKinds[i] == kind) return counts_[i].load(std::memory_order_relaxed);
  }
  return 0;
}

void DatabaseErrorCounter::Write(ExpositionWriter& out) const {
  out.Family("akadzed_database_errors_total",
             "Database errors raised in this process, by kind: connection (lost or refused), "
             "in_doubt (lost during COMMIT), transient (serialization, deadlock, lock timeout), "
             "sql (any other failed statement, e.g. a statement_timeout)",
             "counter");
  for (std::size_t i = 0; i < kKinds.size(); ++i) {
    out.Sample("akadzed_database_errors_total", {{"kind", std::string(kKinds[i])}},
               static_cast<double>(counts_[i].load(std::memory_order_relaxed)));
  }
}

}  // namespace akadzed
