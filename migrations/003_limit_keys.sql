-- akadzed 003_limit_keys: per-key concurrency and start-rate limits.
--
-- A job with limit_key NULL is unlimited. Otherwise the key's own row in
-- akadze.limits applies, else the '*' row (counted per key), else none: the
-- key is held. A NULL cap means "no cap of that kind".
ALTER TABLE akadze.jobs ADD COLUMN limit_key text;

CREATE TABLE akadze.limits (
    key text PRIMARY KEY,
    max_running integer,
    max_starts integer,
    starts_window interval,
    CONSTRAINT limits_max_running_check CHECK (max_running >= 1),
    CONSTRAINT limits_max_starts_check CHECK (max_starts >= 1),
    CONSTRAINT limits_starts_window_check CHECK (starts_window > interval '0'),
    CONSTRAINT limits_starts_pair_check CHECK ((max_starts IS NULL) = (starts_window IS NULL)));

-- running(K): counted through this partial index, which holds running jobs
-- only, never the history of finished ones.
CREATE INDEX jobs_running_limit_key_idx ON akadze.jobs (limit_key)
    WHERE state = 'running' AND limit_key IS NOT NULL;

-- starts(K, w): one mark per claimed job of a key whose limits row caps
-- starts. The claim counts marks younger than the window and deletes older
-- ones of the keys it looks at; pruning deletes the rest.
CREATE TABLE akadze.limit_starts (
    key text NOT NULL,
    started_at timestamptz NOT NULL);
CREATE INDEX limit_starts_key_started_at_idx ON akadze.limit_starts (key, started_at);
ALTER TABLE akadze.limit_starts SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000);
