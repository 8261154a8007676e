-- akadzed 008_queue_caps: a cap on a queue's running jobs across every
-- daemon (`akadzed queues limit NAME --max-running N`, docs/scaling.md).
--
-- A row here caps its queue: a claim of the queue (under the queue's claim
-- lock, so claims of one queue take turns) counts the queue's running jobs
-- after it holds the lock and takes at most max_running minus that many.
-- No row: no cap (each daemon's `slots` still caps what it runs). Zero is
-- not a cap: pausing the queue (akadze.queue_pauses) stops its claims.
CREATE TABLE akadze.queue_caps (
    queue text PRIMARY KEY,
    max_running integer NOT NULL CHECK (max_running >= 1),
    set_at timestamptz NOT NULL DEFAULT now());
