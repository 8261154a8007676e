#include "store/lookup_plans.h"

#include <string>
#include <utility>

#include "pg/transaction.h"
#include "store/job_sql.h"

namespace akadzed {

pg::Result ExecAsIndexLookups(pg::Connection& conn, std::string_view more_settings, std::string_view sql,
                              const pg::Params& params) {
  const std::string settings = std::string("SELECT ") + kIndexLookupPlansSql + std::string(more_settings);
  pg::Transaction tx(conn, "BEGIN", pg::Transaction::Begin::kWithFirstStatement);
  const pg::PipelinedStatement statements[] = {{settings}, {sql, &params, true}};
  return std::move(tx.end_after(statements, true).back());
}

pg::Result ExecWithoutJit(pg::Connection& conn, std::string_view sql, const pg::Params& params) {
  const pg::Params none;
  const pg::PipelinedStatement statements[] = {{"SELECT set_config('jit', 'off', true)", &none}, {sql, &params, true}};
  return std::move(conn.pipeline(statements).back());
}

}  // namespace akadzed
