-- akadze 002_queue_pauses, reproduced exactly: a row here pauses its queue.
CREATE TABLE akadze.queue_pauses (queue text PRIMARY KEY, paused_at timestamptz NOT NULL DEFAULT now());
