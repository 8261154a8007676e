-- akadzed 011_worker_running_xid: a worker's running jobs in the order of
-- the transactions that made them running.
--
-- Each heartbeat round, the lease keeper reads the jobs the database says
-- its worker runs (reconcile: lost leases, cancel requests, orphans). It
-- read them through jobs_running_worker_idx (worker_id), whose entries of a
-- worker are every job it ran while another session holds the MVCC horizon
-- back: none can be removed, so each round stepped over all of them (57 ms
-- a round after 20 minutes at 1,000 jobs/s). With running_xid (010) as the
-- index's second column, a round reads the jobs its last round found, by
-- id, and the worker's entries made running since that round's snapshot, a
-- range of this index (core/running_floor.h; docs/claim.md, "Running
-- floors"). The same entries, one more column: no new index to write.
-- The rescue reads ranges of worker ids, which the first column still
-- serves. The name stays akadze's (001), which reads it by worker id alone.
DROP INDEX akadze.jobs_running_worker_idx;
CREATE INDEX jobs_running_worker_idx ON akadze.jobs (worker_id, running_xid) WHERE state = 'running';
