-- akadzed 007_status_page: what the status page (docs/status-page.md) reads
-- without scanning akadze.jobs.
--
-- akadze.queue_minutes: jobs akadzed daemons finished, per queue and
-- minute. The finisher counts in memory what it wrote; the heartbeat round
-- adds the counts to the current minute's rows (one statement per round,
-- queues in name order so that two daemons never wait on each other in a
-- cycle). The page reads the last hour's rows: at most 60 per queue, a range
-- of the primary key, whatever the size of akadze.jobs or the number of
-- daemons. Rows older than a day are deleted by the same rounds. Jobs
-- finished by others (akadze's own workers, `jobs cancel` of a queued job,
-- the sweep) are not counted.
CREATE TABLE akadze.queue_minutes (
    minute timestamptz NOT NULL,
    queue text NOT NULL,
    succeeded bigint NOT NULL DEFAULT 0,
    failed bigint NOT NULL DEFAULT 0,
    cancelled bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (minute, queue));

-- Recent failures, newest first: only failed jobs have entries, so the page
-- reads its 20 rows however many jobs succeeded since.
CREATE INDEX jobs_failed_finished_idx ON akadze.jobs (finished_at DESC, id DESC)
    WHERE state = 'failed';
