// akadzed_database_errors_total: the database errors this process raised, by
// kind (connection, in_doubt, transient, sql). The pg layer reports every
// typed error once, where it is raised (pg::ErrorObserver), so an error is
// counted once however many catch sites it passes. Installed through a
// shared_ptr: a thread raising an error while the daemon ends keeps the
// counter alive until its report is done.
//
// Thread-safety: any thread (relaxed atomics).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string_view>

#include "metrics/exposition_writer.h"
#include "pg/pg_error.h"

namespace akadzed {

class DatabaseErrorCounter : public pg::ErrorObserver {
 public:
  static constexpr std::array<std::string_view, 4> kKinds = {"connection", "in_doubt",
                                                             "transient", "sql"};

  void OnError(const pg::PgError& error) noexcept override;
  // The family, with every kind (0 until it happens).
  void Write(ExpositionWriter& out) const;
  std::uint64_t count(std::string_view kind) const;

  // The kind label of `error`, one of kKinds.
  static std::string_view Kind(const pg::PgError& error);

 private:
  std::array<std::atomic<std::uint64_t>, kKinds.size()> counts_{};
};

}  // namespace akadzed
