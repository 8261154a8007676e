#include "store/job_sql.h"

#include <fmt/format.h>

namespace akadzed {

std::string AppendErrorSql(std::string_view errors, std::string_view error,
                           std::string_view message) {
  return fmt::format(
      "(SELECT COALESCE(jsonb_agg(e ORDER BY n), '[]'::jsonb) FROM"
      " (SELECT e, n FROM jsonb_array_elements({} || jsonb_build_array(jsonb_build_object("
      "'error', {}::text, 'message', {}::text))) WITH ORDINALITY AS x(e, n)"
      " ORDER BY n DESC LIMIT 10) AS last_errors)",
      errors, error, message);
}

std::string PastTimestampSql(std::string_view column) {
  return fmt::format("LEAST(GREATEST({}, '4714-11-24 00:00:00+00 BC'::timestamptz), now())", column);
}

std::string MicrosSince2000Sql(std::string_view column) {
  return fmt::format(
      "(CASE WHEN isfinite({0}) THEN (EXTRACT(EPOCH FROM {0} - '2000-01-01 00:00:00+00'::timestamptz) * 1000000)::int8"
      " WHEN {0} > now() THEN 9223372036854775807::int8 ELSE (-9223372036854775807 - 1)::int8 END)",
      column);
}

std::string TimestampFromMicrosSql(std::string_view param) {
  return fmt::format(
      "(CASE {0}::int8 WHEN 9223372036854775807 THEN 'infinity'::timestamptz"
      " WHEN -9223372036854775807 - 1 THEN '-infinity'::timestamptz"
      // Whole days and the microseconds left, on a timestamp without time
      // zone: exact (an interval times a number goes through a double), and
      // no time zone's daylight saving shifts a day.
      " ELSE ('2000-01-01 00:00:00'::timestamp + make_interval(days => ({0}::int8 / 86400000000)::int,"
      " secs => ({0}::int8 % 86400000000) / 1000000.0)) AT TIME ZONE 'UTC' END)",
      param);
}

std::string IsoTimestampSql(std::string_view column) {
  // 'infinity' and '-infinity' as themselves (to_char gives NULL for them).
  return fmt::format(
      "CASE WHEN isfinite({0}) THEN to_char({0} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
      " ELSE {0}::text END",
      column);
}

std::string AgeSecondsSql(std::string_view column) {
  return fmt::format("(CASE WHEN {0} IS NOT NULL THEN EXTRACT(EPOCH FROM now() - {1})::float8 END)", column,
                     PastTimestampSql(column));
}

}  // namespace akadzed
