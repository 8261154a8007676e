#include "support/index_stats.h"

#include <chrono>
#include <stdexcept>

#include "pg/params.h"

namespace akadzed::test {

std::int64_t IndexTuplesRead(pg::Connection& stats, const std::string& index) {
  return stats.exec("SELECT pg_stat_clear_snapshot(), pg_stat_get_tuples_returned($1::regclass)",
                    pg::Params().add(index))
      .int64(0, 1);
}

std::int64_t Scans(pg::Connection& stats, const std::string& relation) {
  return stats.exec("SELECT pg_stat_clear_snapshot(), pg_stat_get_numscans($1::regclass)", pg::Params().add(relation))
      .int64(0, 1);
}

std::int64_t TableRowsSeqRead(pg::Connection& stats, const std::string& table) {
  // A table's tuples "returned" are those its sequential scans read.
  return IndexTuplesRead(stats, table);
}

std::int64_t TableRowsDeleted(pg::Connection& stats, const std::string& table) {
  return stats.exec("SELECT pg_stat_clear_snapshot(), pg_stat_get_tuples_deleted($1::regclass)", pg::Params().add(table))
      .int64(0, 1);
}

std::int64_t TableRowsUpdated(pg::Connection& stats, const std::string& table) {
  return stats.exec("SELECT pg_stat_clear_snapshot(), pg_stat_get_tuples_updated($1::regclass)",
                    pg::Params().add(table))
      .int64(0, 1);
}

void AwaitStatistics(pg::Connection& reporter, const std::function<bool()>& arrived) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!arrived()) {
    if (std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error("the statistics awaited never arrived (30 s)");
    }
    reporter.exec("SELECT 1");
  }
}

}  // namespace akadzed::test
