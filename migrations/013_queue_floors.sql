-- akadzed 013_queue_floors: each queue's claim floor, kept where every
-- process can start from it.
--
-- A claim reads each priority level of jobs_claim_idx past its queue's
-- floor: the place where the last claim knew every entry before it to be
-- dead or listed (claim/claim_floor.h; docs/claim.md, "Floors"). A daemon
-- keeps its floor in memory, so a process without one read from the heads
-- and stepped over every dead entry a held MVCC horizon keeps: a daemon's
-- first claim after a restart, `akadzed claim --dry-run` (60-72 ms after
-- four minutes of a hold at 1,000 jobs/s). A floor says what is true of
-- the database for its snapshot, not what one process knows, so any claim
-- on the same server may start from it. The daemons write their queue's
-- here, at most every 10 seconds each; a process without a floor of its own
-- reads it. A cache: a row missing, or unreadable, only costs reads; delete
-- the rows to start every claim from the heads.
CREATE TABLE akadze.queue_floors (
    queue text PRIMARY KEY,
    floor jsonb NOT NULL,
    set_at timestamptz NOT NULL DEFAULT now());
