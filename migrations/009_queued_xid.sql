-- akadzed 009_queued_xid: which transaction last made a job queued.
--
-- A claim reads jobs_claim_idx from the head of its queue's priority level.
-- Every job a claim takes leaves a dead index entry there, and while another
-- session holds the MVCC horizon back (a long report, pg_dump, a replica's
-- hot_standby_feedback) none of them can be removed: each claim steps over
-- all of them (docs/claim.md, "Floors"). akadzed's claims therefore start
-- each level's read at a floor past the entries the last claim found dead,
-- and find the jobs that can land below a floor afterwards through this
-- column: every row version that is queued carries the id of the transaction
-- that wrote it, so the rows queued since a snapshot are the rows whose
-- queued_xid that snapshot does not see, read through a small index instead
-- of the dead prefix.
--
-- The column is akadzed's own: akadze's library and workers neither read nor
-- write it. Its default fills it on an INSERT (a plain INSERT as akadze's
-- library does it included); the triggers keep it true whatever a writer
-- puts there: on an INSERT that names another value, and on every UPDATE
-- that leaves a row queued (a retry, a snooze, a release, a rescue, a
-- requeue, by akadzed or by akadze's workers, or any hand-written UPDATE).
-- Rows queued before this migration keep NULL (last in the index, after
-- every transaction id): they were there before any floor was set, so no
-- claim needs to find them this way. Adding a column without a default and then setting the default
-- rewrites nothing; the index holds queued rows only. Names are qualified
-- with pg_catalog: the trigger runs with the writer's search_path.
ALTER TABLE akadze.jobs ADD COLUMN queued_xid xid8;
ALTER TABLE akadze.jobs ALTER COLUMN queued_xid SET DEFAULT pg_catalog.pg_current_xact_id();

CREATE FUNCTION akadze.jobs_set_queued_xid() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.queued_xid := pg_catalog.pg_current_xact_id();
    RETURN NEW;
END $$;

-- An INSERT calls the function only when it named a value of its own: the
-- default already wrote the right one.
CREATE TRIGGER jobs_queued_xid_insert BEFORE INSERT ON akadze.jobs FOR EACH ROW
    WHEN (NEW.state = 'queued' AND NEW.queued_xid IS DISTINCT FROM pg_catalog.pg_current_xact_id())
    EXECUTE FUNCTION akadze.jobs_set_queued_xid();
-- A claim (queued -> running) or a finish does not call it; a transition to
-- queued, or an UPDATE of a queued row, does.
CREATE TRIGGER jobs_queued_xid_update BEFORE UPDATE ON akadze.jobs FOR EACH ROW
    WHEN (NEW.state = 'queued')
    EXECUTE FUNCTION akadze.jobs_set_queued_xid();

-- The predicate is spelled `(state = 'queued') IS TRUE` (the same rows):
-- the statements that read by queued_xid say it that way, so no generic
-- plan of theirs can read another partial index of queued rows whole, and
-- the claim's reads in claim order (`state = 'queued'`) never use this one
-- (daemon/store/job_sql.h).
CREATE INDEX jobs_queued_xid_idx ON akadze.jobs (queue, queued_xid) WHERE (state = 'queued') IS TRUE;
