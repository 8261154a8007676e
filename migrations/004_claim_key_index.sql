-- akadzed 004_claim_key_index: queued jobs by limit key, in claim order.
--
-- jobs_claim_idx holds queued jobs in claim order; a key's rows are spread
-- over it. When a claim skips a key (at its limit, or a fair group that can
-- no longer get a slot) and that key owns most of the rest of the queue,
-- reading on through jobs_claim_idx steps over every one of its rows. This
-- index keeps each key's (and the NULL group's) queued rows together, in
-- claim order, so the claim can read the other keys' rows directly: one
-- descent to jump over a key, one to find a key's next row (docs/claim.md,
-- "Reading around skipped keys"). It only adds an index: akadze's schema and
-- its readers and writers are unchanged. Only queued rows are in it, so a
-- claim (queued -> running) and a finish write no entry to it.
CREATE INDEX jobs_claim_key_idx ON akadze.jobs (queue, limit_key, priority DESC, run_at, id)
    WHERE state = 'queued';
