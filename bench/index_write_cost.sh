#!/bin/sh
# index_write_cost.sh: what jobs_claim_key_idx (migration 004) costs writers.
#
#   bench/index_write_cost.sh PSQL_CONNINFO [SECONDS]
#
# Creates a scratch database `akadzed_index_cost` on the server PSQL_CONNINFO
# points at (dropped at the end), applies migrations/*.sql, and times each
# write of a job's life with and without jobs_claim_key_idx, on 100,000
# queued jobs over 1,000 keys:
#   enqueue, one job per transaction: pgbench, 4 clients, SECONDS (default 15)
#   enqueue, 100,000 jobs in one INSERT ... SELECT
#   claim: 100,000 queued -> running in one UPDATE (no entry: running rows
#     are not in the index)
#   retry: 100,000 running -> queued in one UPDATE (one entry each)
#   finish: 100,000 running -> succeeded in one UPDATE (no entry)
# Each bulk step runs 3 times (median shown), on a freshly vacuumed table.
set -eu

conn=${1:?usage: index_write_cost.sh PSQL_CONNINFO [SECONDS]}
seconds=${2:-15}
here=$(cd "$(dirname "$0")/.." && pwd)
db=akadzed_index_cost
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

admin() { psql "$conn" -X -q -v ON_ERROR_STOP=1 "$@"; }
scratch() { psql "$conn dbname=$db" -X -q -v ON_ERROR_STOP=1 "$@"; }

admin -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
scratch -c "CREATE SCHEMA akadze"
for f in "$here"/migrations/*.sql; do scratch -f "$f"; done

# Milliseconds of one statement, run in its own transaction.
time_sql() {
  scratch -c '\timing on' -c "$1" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | tail -1
}
median3() { sort -n | sed -n 2p; }

fill() {
  scratch -c "TRUNCATE akadze.jobs" \
    -c "INSERT INTO akadze.jobs (task, queue, limit_key, run_at) SELECT 't', 'q', 'k' || i % 1000,
        now() - random() * interval '1 hour' FROM generate_series(1, 100000) i" \
    -c "VACUUM ANALYZE akadze.jobs"
}

cat >"$work/enqueue.sql" <<'EOF'
INSERT INTO akadze.jobs (task, queue, limit_key) VALUES ('t', 'q', 'k' || (random() * 999)::int);
EOF

echo "| write | without jobs_claim_key_idx | with it | cost |"
echo "|---|---:|---:|---:|"
for step in enqueue1 enqueue_bulk claim retry finish; do
  for variant in without with; do
    if [ $variant = without ]; then
      scratch -c "DROP INDEX IF EXISTS akadze.jobs_claim_key_idx"
    else
      scratch -c "CREATE INDEX IF NOT EXISTS jobs_claim_key_idx ON akadze.jobs
                  (queue, limit_key, priority DESC, run_at, id) WHERE state = 'queued'"
    fi
    if [ $step = enqueue1 ]; then
      fill
      value=$(pgbench "$conn dbname=$db" -n -c 4 -j 2 -T "$seconds" -f "$work/enqueue.sql" 2>/dev/null |
        sed -n 's/^tps = \([0-9.]*\).*/\1/p')
    else
      value=$(for run in 1 2 3; do
        fill
        case $step in
          enqueue_bulk) time_sql "INSERT INTO akadze.jobs (task, queue, limit_key) SELECT 't', 'q', 'k' || i % 1000 FROM generate_series(1, 100000) i" ;;
          claim) time_sql "UPDATE akadze.jobs SET state = 'running', run_count = run_count + 1, started_at = now() WHERE state = 'queued'" ;;
          retry) scratch -c "UPDATE akadze.jobs SET state = 'running'" -c "VACUUM akadze.jobs"
                 time_sql "UPDATE akadze.jobs SET state = 'queued', attempt = attempt + 1 WHERE state = 'running'" ;;
          finish) scratch -c "UPDATE akadze.jobs SET state = 'running'" -c "VACUUM akadze.jobs"
                  time_sql "UPDATE akadze.jobs SET state = 'succeeded', finished_at = now() WHERE state = 'running'" ;;
        esac
      done | median3)
    fi
    eval "v_$variant=\$value"
  done
  case $step in
    enqueue1) echo "| enqueue, 1 job per transaction (4 clients, tps) | $v_without | $v_with | $(echo "$v_without $v_with" | awk '{printf "%+.1f%%", ($1 / $2 - 1) * 100}') |" ;;
    *) echo "| $step, 100,000 jobs in one statement (ms) | $v_without | $v_with | $(echo "$v_without $v_with" | awk '{printf "%+.1f%%", ($2 / $1 - 1) * 100}') |" ;;
  esac
done
admin -c "DROP DATABASE $db"
