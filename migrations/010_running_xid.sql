-- akadzed 010_running_xid: which transaction last made a job running.
--
-- A claim counts each limit key's running jobs (running(K), SPEC §3). It
-- read them through jobs_running_limit_key_idx (limit_key), whose entries of
-- a key are every job of the key that ever ran: while another session holds
-- the MVCC horizon back none can be removed, so each count stepped over all
-- of them (docs/claim.md, "Floors"). The claim therefore counts a key as the
-- running jobs its last count found, looked up by id, and the rows made
-- running since that count's snapshot: those whose running_xid the snapshot
-- does not see, read through a range of the index below.
--
-- The column is akadzed's own, as queued_xid (009): the claim's UPDATE
-- writes it; the triggers keep it true whatever else writes a running row
-- (akadze's workers, a hand-written UPDATE or INSERT), and leave alone a
-- writer that already put the right value (the claim: no trigger call per
-- claimed job). Rows running before this migration keep NULL: the first
-- count of a key reads all its running rows, NULL ones included.
ALTER TABLE akadze.jobs ADD COLUMN running_xid xid8;

CREATE FUNCTION akadze.jobs_set_running_xid() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.running_xid := pg_catalog.pg_current_xact_id();
    RETURN NEW;
END $$;

CREATE TRIGGER jobs_running_xid_insert BEFORE INSERT ON akadze.jobs FOR EACH ROW
    WHEN (NEW.state = 'running' AND NEW.running_xid IS DISTINCT FROM pg_catalog.pg_current_xact_id())
    EXECUTE FUNCTION akadze.jobs_set_running_xid();
CREATE TRIGGER jobs_running_xid_update BEFORE UPDATE ON akadze.jobs FOR EACH ROW
    WHEN (NEW.state = 'running' AND NEW.running_xid IS DISTINCT FROM pg_catalog.pg_current_xact_id())
    EXECUTE FUNCTION akadze.jobs_set_running_xid();

-- running(K) by range: (limit_key, running_xid), running rows with a key.
-- The predicate is spelled `(state = 'running') IS TRUE` (the same rows), as
-- the counts say it, so that no plan of theirs can read
-- jobs_running_worker_idx (every running job of the cluster) whole instead,
-- which a generic plan did under a held horizon (the statistics count only
-- live rows). It replaces jobs_running_limit_key_idx: a count of a key's
-- running rows without a range (a key's first count, `akadzed limits`)
-- reads its first column, spelled the same way (store/job_sql.h).
DROP INDEX akadze.jobs_running_limit_key_idx;
CREATE INDEX jobs_running_key_xid_idx ON akadze.jobs (limit_key, running_xid)
    WHERE (state = 'running') IS TRUE AND limit_key IS NOT NULL;
