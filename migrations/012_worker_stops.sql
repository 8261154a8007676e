-- akadzed 012_worker_stops: worker ids that stopped with no running job,
-- so that the rescue need not read their entries.
--
-- The rescue reads jobs_running_worker_idx between the registered worker
-- ids (store/worker_lease.cpp, kLostSql). A worker that stopped while
-- another session held the MVCC horizon back leaves there an entry for
-- every job it ran since, dead and kept: every rescue round of every daemon
-- stepped over all of them (a daemon restarted 15 minutes into a hold at
-- 1,000 jobs/s: about 900,000). A row here says: when this worker stopped
-- (its daemon deregistered it, or a rescue removed its row as dead), a
-- statement with snapshot S saw no job running under it. So every job
-- running under it now was made running by a transaction S does not see,
-- and its running_xid (010) is at or past from_xid or one of points
-- (core/running_floor.h): the rescue reads that range of the index for the
-- id, not its entries whole. Rows are akadzed's own; one missing only costs
-- reads. Recording a stop deletes those older than a day.
CREATE TABLE akadze.worker_stops (
    id uuid PRIMARY KEY,
    from_xid xid8 NOT NULL,
    points xid8[] NOT NULL DEFAULT '{}',
    stopped_at timestamptz NOT NULL DEFAULT now());
