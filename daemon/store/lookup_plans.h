// One statement of akadze.jobs run as index lookups (store/job_sql.h,
// kIndexLookupPlansSql) plus `more_settings`: the settings, the statement
// and COMMIT pipelined in a transaction of their own, one round trip. Used
// where a plan costed on live rows (what a held MVCC horizon leaves the
// statistics) would scan a partial index whole: the prepared finish and the
// queued sweep.
//
// Throws as pg::Transaction::end_after: a failed statement is rolled back
// with its transaction; a connection lost with the COMMIT in flight is
// pg::InDoubtError.
//
// Thread-safety: uses the connection it is given.
#pragma once

#include <string_view>

#include "pg/connection.h"
#include "pg/params.h"
#include "pg/result.h"

namespace akadzed {

// `more_settings`: further `, set_config(name, value, true)` expressions,
// or empty. The statement is prepared (named) like Connection::exec's.
pg::Result ExecAsIndexLookups(pg::Connection& conn, std::string_view more_settings, std::string_view sql,
                              const pg::Params& params);

// One statement (prepared, as Connection::exec's) with JIT off, the setting
// pipelined before it: local to the caller's transaction, or to the
// implicit one of the pipeline outside one. For statements whose plan over
// many workers or keys costs past jit_above_cost while reading a few rows
// (the rescue: 100 ms of compiling a round on a fresh table).
pg::Result ExecWithoutJit(pg::Connection& conn, std::string_view sql, const pg::Params& params);

}  // namespace akadzed
