// What a statement read from an index, as the server's cumulative
// statistics count it: for tests that a statement under a held horizon
// steps over none of an index's dead entries. A backend reports its counts
// when it goes idle, at most once a second, so a test reads the counts
// before, runs the statement, and awaits a count only that statement
// changes (`arrived`) before it reads them again.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "pg/connection.h"

namespace akadzed::test {

// Index tuples read from `index` (a regclass name) so far.
std::int64_t IndexTuplesRead(pg::Connection& stats, const std::string& index);

// Scans of `relation` so far: sequential ones of a table, index scans of
// an index.
std::int64_t Scans(pg::Connection& stats, const std::string& relation);

// Rows that sequential scans of `table` read so far.
std::int64_t TableRowsSeqRead(pg::Connection& stats, const std::string& table);

// Table rows deleted from `table` so far.
std::int64_t TableRowsDeleted(pg::Connection& stats, const std::string& table);

// Table rows updated in `table` so far.
std::int64_t TableRowsUpdated(pg::Connection& stats, const std::string& table);

// Until `arrived()`, sends `reporter` (the connection whose counts are
// awaited) an empty statement, so that it goes idle and reports; throws
// after 30 s.
void AwaitStatistics(pg::Connection& reporter, const std::function<bool()>& arrived);

}  // namespace akadzed::test
