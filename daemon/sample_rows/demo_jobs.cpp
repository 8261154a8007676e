#include "sample_rows/demo_jobs.h"

#include "pg/params.h"

namespace akadzed {

void EnqueueDemoRound(pg::Connection& conn, int round) {
  conn.exec(
      "INSERT INTO akadze.jobs (task, queue, priority, limit_key, args)"
      " SELECT t.task, t.queue, t.priority, t.limit_key, t.args FROM (VALUES"
      "  ('greet', 'default', 0, 'tenant-a', jsonb_build_object('name', 'ada', 'round', $1::int)),"
      "  ('greet', 'default', 0, 'tenant-b', jsonb_build_object('name', 'bob', 'fail', $1::int % 5 = 0)),"
      "  ('checksum', 'default', 0, 'tenant-c', jsonb_build_object('text', repeat('x', $1::int))),"
      "  ('checksum', 'reports', ($1::int % 3)::smallint, NULL,"
      "     jsonb_build_object('snooze_ms', CASE WHEN $1::int % 4 = 0 THEN 1500 END))"
      " ) AS t(task, queue, priority, limit_key, args)",
      pg::Params().add(round));
}

void EnqueueSampleJobs(pg::Connection& conn, int count) {
  conn.exec(
      "INSERT INTO akadze.jobs (task, queue, priority, limit_key, args, run_at)"
      " SELECT (ARRAY['send_email','resize_image','sync_account'])[1 + i % 3], 'default',"
      "        (i % 7 = 0)::int * 2,"
      "        (ARRAY['tenant-a','tenant-b','tenant-c',NULL])[1 + i % 4],"
      "        jsonb_build_object('n', i), now() - (($1::int - i) * interval '1 millisecond')"
      " FROM generate_series(1, $1::int) AS i",
      pg::Params().add(count));
}

std::int64_t CountActiveJobs(pg::Connection& conn) {
  return conn.exec("SELECT count(*) FROM akadze.jobs WHERE state IN ('queued','running')").int64(0, 0);
}

}  // namespace akadzed
