-- akadzed 006_enqueue: the producers' API, and the indexes the daemons'
-- sweep of dead queued jobs reads.
--
-- akadze.enqueue(...) and akadze.enqueue_many(...) insert jobs for an
-- application that has EXECUTE on them and no INSERT or UPDATE on
-- akadze.jobs (docs/security.md gives the grants): SECURITY DEFINER with a
-- fixed search_path, every name below schema-qualified. They check what an
-- application can get wrong (docs/enqueue.md lists each message), write no
-- column a producer must not set (state, worker_id, run_count, attempt, ...),
-- and send NOTIFY akadze_jobs with the queue's name when a job is ready now
-- (PostgreSQL sends one notification per queue per transaction). A plain
-- INSERT still works, as akadze's own library does it.
--
-- Only functions and two partial indexes are added: akadze's schema, its
-- readers and its writers are unchanged.

-- The sweep (store/queued_sweep.h) ends queued jobs whose cancel was
-- requested and queued jobs past expires_at, as akadze's workers do. Both
-- indexes hold only such rows (or rows that will be such), so the sweep
-- reads no other queued job and a claim or finish writes no entry to them.
CREATE INDEX jobs_queued_cancel_idx ON akadze.jobs (id)
    WHERE state = 'queued' AND cancel_requested_at IS NOT NULL;
CREATE INDEX jobs_queued_expires_idx ON akadze.jobs (expires_at, id)
    WHERE state = 'queued' AND expires_at IS NOT NULL;

-- One job as the producer described it (a JSON object), checked and typed.
-- `what` prefixes each message: 'akadze.enqueue: ' or
-- 'akadze.enqueue_many: jobs[3].'. Raises SQLSTATE 22023
-- (invalid_parameter_value) naming the field; never writes.
CREATE FUNCTION akadze.enqueue_checked(job jsonb, what text,
    OUT task text, OUT args jsonb, OUT queue text, OUT priority smallint,
    OUT run_at timestamptz, OUT limit_key text, OUT unique_key text,
    OUT max_attempts integer, OUT expires_at timestamptz, OUT meta jsonb)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    field text;
    value jsonb;
    n numeric;
    delay interval;
    stage text;
BEGIN
    IF job IS NULL OR jsonb_typeof(job) <> 'object' THEN
        RAISE EXCEPTION '% must be a JSON object with at least a task, not %', rtrim(what, '.: '),
            COALESCE(jsonb_typeof(job), 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR field IN SELECT k FROM jsonb_object_keys(job) AS k LOOP
        IF field NOT IN ('task', 'args', 'queue', 'priority', 'limit_key', 'run_at', 'delay',
                         'max_attempts', 'unique_key', 'expires_at', 'meta') THEN
            RAISE EXCEPTION '%: % is not a field a producer sets (fields: task, args, queue, priority, limit_key, run_at, delay, max_attempts, unique_key, expires_at, meta)',
                rtrim(what, '.: '), translate(quote_ident(field), E'\r\n', '  ') USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END LOOP;

    value := job -> 'task';
    IF value IS NULL OR jsonb_typeof(value) <> 'string' OR value #>> '{}' = '' THEN
        RAISE EXCEPTION '%task must be a non-empty string', what USING ERRCODE = 'invalid_parameter_value';
    END IF;
    task := value #>> '{}';

    value := job -> 'args';
    IF value IS NULL OR value = 'null' THEN
        args := '{}';
    ELSIF jsonb_typeof(value) <> 'object' THEN
        RAISE EXCEPTION '%args must be a JSON object, not %', what, jsonb_typeof(value)
            USING ERRCODE = 'invalid_parameter_value';
    ELSE
        args := value;
    END IF;

    value := job -> 'meta';
    IF value IS NULL OR value = 'null' THEN
        meta := '{}';
    ELSIF jsonb_typeof(value) <> 'object' THEN
        RAISE EXCEPTION '%meta must be a JSON object, not %', what, jsonb_typeof(value)
            USING ERRCODE = 'invalid_parameter_value';
    ELSE
        meta := value;
    END IF;

    value := job -> 'queue';
    IF value IS NULL OR value = 'null' THEN
        queue := 'default';
    ELSIF jsonb_typeof(value) <> 'string' OR value #>> '{}' = '' THEN
        RAISE EXCEPTION '%queue must be a non-empty string', what USING ERRCODE = 'invalid_parameter_value';
    ELSE
        queue := value #>> '{}';
    END IF;

    FOREACH field IN ARRAY ARRAY['limit_key', 'unique_key'] LOOP
        value := job -> field;
        IF value IS NOT NULL AND value <> 'null' AND
           (jsonb_typeof(value) <> 'string' OR value #>> '{}' = '') THEN
            RAISE EXCEPTION '% must be a non-empty string or null', what || field
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END LOOP;
    limit_key := job ->> 'limit_key';
    unique_key := job ->> 'unique_key';

    value := job -> 'priority';
    IF value IS NULL OR value = 'null' THEN
        priority := 0;
    ELSE
        n := CASE WHEN jsonb_typeof(value) = 'number' THEN (value #>> '{}')::numeric END;
        IF n IS NULL OR n <> trunc(n) OR n < -32768 OR n > 32767 THEN
            RAISE EXCEPTION '%priority must be an integer from -32768 to 32767, not %', what, value
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        priority := n;
    END IF;

    value := job -> 'max_attempts';
    IF value IS NULL OR value = 'null' THEN
        max_attempts := 3;
    ELSE
        n := CASE WHEN jsonb_typeof(value) = 'number' THEN (value #>> '{}')::numeric END;
        IF n IS NULL OR n <> trunc(n) OR n < 1 OR n > 2147483647 THEN
            RAISE EXCEPTION '%max_attempts must be an integer from 1 to 2147483647, not %', what, value
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        max_attempts := n;
    END IF;

    FOREACH field IN ARRAY ARRAY['run_at', 'expires_at', 'delay'] LOOP
        value := job -> field;
        IF value IS NOT NULL AND value <> 'null' AND jsonb_typeof(value) <> 'string' AND
           NOT (field = 'delay' AND jsonb_typeof(value) = 'number') THEN
            RAISE EXCEPTION '% must be %, not %', what || field,
                CASE field WHEN 'delay' THEN 'an interval (''5 minutes'') or a number of seconds'
                           ELSE 'a timestamp (ISO-8601, e.g. 2026-12-01T09:00:00Z)' END,
                jsonb_typeof(value) USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END LOOP;
    IF job -> 'run_at' IS NOT NULL AND job -> 'run_at' <> 'null' AND
       job -> 'delay' IS NOT NULL AND job -> 'delay' <> 'null' THEN
        RAISE EXCEPTION '%run_at and delay exclude each other: give one or neither', what
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- Text a timestamp or interval cannot hold is a producer's mistake too:
    -- the casts fail inside this block and say which field.
    IF job ?| ARRAY['run_at', 'expires_at', 'delay'] THEN
        BEGIN
            stage := 'run_at';
            run_at := (job ->> 'run_at')::timestamptz;
            stage := 'expires_at';
            expires_at := (job ->> 'expires_at')::timestamptz;
            stage := 'delay';
            IF jsonb_typeof(job -> 'delay') = 'number' THEN
                delay := (job ->> 'delay')::numeric * interval '1 second';
            ELSE
                delay := (job ->> 'delay')::interval;
            END IF;
            IF delay IS NOT NULL THEN
                IF delay < interval '0' THEN
                    RAISE EXCEPTION '%delay must not be negative, not %', what, job -> 'delay'
                        USING ERRCODE = 'invalid_parameter_value';
                END IF;
                run_at := now() + delay;
            END IF;
        EXCEPTION
            -- Any data error of the casts (22007 format, 22008 overflow, 22009
            -- a time zone out of range, 22015 an interval out of range, ...);
            -- our own refusal above (22023 with our prefix) passes through.
            WHEN data_exception THEN
                IF SQLSTATE = '22023' AND left(SQLERRM, length(what)) = what THEN
                    RAISE;
                END IF;
                RAISE EXCEPTION '% is not %: %', what || stage,
                    CASE stage WHEN 'delay' THEN 'a non-negative interval within range'
                               ELSE 'a timestamp (ISO-8601, e.g. 2026-12-01T09:00:00Z)' END,
                    job -> stage USING ERRCODE = 'invalid_parameter_value';
        END;
        IF run_at IS NOT NULL AND NOT isfinite(run_at) THEN
            RAISE EXCEPTION '%run_at must be a finite timestamp, not %', what, job -> 'run_at'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF expires_at IS NOT NULL AND NOT isfinite(expires_at) THEN
            RAISE EXCEPTION '%expires_at must be a finite timestamp or null, not %', what, job -> 'expires_at'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF expires_at IS NOT NULL AND expires_at <= COALESCE(run_at, now()) THEN
            RAISE EXCEPTION '%expires_at must be after the time the job may run (%), not %', what,
                CASE WHEN run_at IS NULL THEN 'now' ELSE 'run_at' END, job -> 'expires_at'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    run_at := COALESCE(run_at, now());
END $$;

-- NOTIFY akadze_jobs once per queue of `ready_queues` (duplicates and NULL
-- are fine; a name of 8000 bytes or more, longer than a notification's
-- payload may be, is left to the daemons' polling); returns `ids`, for
-- enqueue_jobs' two ways out.
CREATE FUNCTION akadze.enqueue_notify(ids bigint[], ready_queues text[])
RETURNS bigint[]
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF ready_queues IS NOT NULL THEN
        PERFORM pg_notify('akadze_jobs', q)
        FROM (SELECT DISTINCT unnest(ready_queues) AS q) AS queues
        WHERE q IS NOT NULL AND octet_length(q) < 8000;
    END IF;
    RETURN ids;
END $$;

-- The jobs of one call, in input order; ids in that order. Shared by
-- enqueue and enqueue_many (what: each message's prefix, '' for many).
CREATE FUNCTION akadze.enqueue_jobs(jobs jsonb, on_conflict text, caller text)
RETURNS bigint[]
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    n integer;
    ids bigint[];
    plain_ords bigint[];
    plain_ids bigint[];
    ready_queues text[];
    r record;
    holder_id bigint;
    holder_state text;
    holder_task text;
    holder_queue text;
    holder_dead boolean;
    inserted_id bigint;
    ready boolean;
    tries integer;
    first_ord bigint;
    second_ord bigint;
    dup_key text;
BEGIN
    IF on_conflict IS NULL OR on_conflict NOT IN ('skip', 'replace', 'raise') THEN
        RAISE EXCEPTION '%: on_conflict must be skip, replace or raise, not %', caller,
            COALESCE(quote_literal(on_conflict), 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF jobs IS NULL OR jsonb_typeof(jobs) <> 'array' THEN
        RAISE EXCEPTION '%: jobs must be a JSON array of job objects, not %', caller,
            COALESCE(jsonb_typeof(jobs), 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    n := jsonb_array_length(jobs);
    IF n = 0 THEN
        RETURN '{}';
    END IF;
    ids := array_fill(NULL::bigint, ARRAY[n]);

    -- Jobs without a unique_key: one INSERT. Their ids come from the
    -- identity in insertion order, which is input order (the sort runs
    -- before the volatile default is evaluated). A job of only the common
    -- fields whose values are plainly right (`plain`) is converted by set
    -- expressions; any other (a time field, or a value to refuse) goes
    -- through enqueue_checked, which types it or raises its message. Each
    -- test of `plain` is a CASE, so no cast runs on a value of another type.
    WITH elems AS (
        SELECT e.ord, e.job
        FROM jsonb_array_elements(jobs) WITH ORDINALITY AS e(job, ord)
        WHERE jsonb_typeof(e.job) <> 'object' OR e.job -> 'unique_key' IS NULL
           OR e.job -> 'unique_key' = 'null'),
    classified AS (
        SELECT x.ord, x.job,
            CASE WHEN jsonb_typeof(x.job) <> 'object' THEN false
                 WHEN x.job - ARRAY['task', 'args', 'queue', 'priority', 'limit_key', 'max_attempts',
                                    'unique_key', 'meta'] <> '{}'::jsonb THEN false
                 WHEN COALESCE(jsonb_typeof(x.job -> 'task'), '') <> 'string'
                      OR x.job ->> 'task' = '' THEN false
                 WHEN COALESCE(jsonb_typeof(x.job -> 'args'), 'null') NOT IN ('object', 'null') THEN false
                 WHEN COALESCE(jsonb_typeof(x.job -> 'meta'), 'null') NOT IN ('object', 'null') THEN false
                 WHEN COALESCE(jsonb_typeof(x.job -> 'queue'), 'null') NOT IN ('string', 'null')
                      OR x.job ->> 'queue' = '' THEN false
                 WHEN COALESCE(jsonb_typeof(x.job -> 'limit_key'), 'null') NOT IN ('string', 'null')
                      OR x.job ->> 'limit_key' = '' THEN false
                 WHEN COALESCE(jsonb_typeof(x.job -> 'priority'), 'null') NOT IN ('number', 'null')
                      OR COALESCE(jsonb_typeof(x.job -> 'max_attempts'), 'null') NOT IN ('number', 'null')
                      THEN false
                 WHEN jsonb_typeof(x.job -> 'priority') = 'number'
                      AND NOT ((x.job -> 'priority')::numeric BETWEEN -32768 AND 32767
                               AND (x.job -> 'priority')::numeric = trunc((x.job -> 'priority')::numeric))
                      THEN false
                 WHEN jsonb_typeof(x.job -> 'max_attempts') = 'number'
                      AND NOT ((x.job -> 'max_attempts')::numeric BETWEEN 1 AND 2147483647
                               AND (x.job -> 'max_attempts')::numeric
                                   = trunc((x.job -> 'max_attempts')::numeric))
                      THEN false
                 ELSE true END AS plain
        FROM elems AS x),
    input AS (
        SELECT c.ord, c.job ->> 'task' AS task,
               CASE WHEN jsonb_typeof(c.job -> 'args') = 'object' THEN c.job -> 'args'
                    ELSE '{}'::jsonb END AS args,
               COALESCE(c.job ->> 'queue', 'default') AS queue,
               CASE WHEN jsonb_typeof(c.job -> 'priority') = 'number'
                    THEN (c.job -> 'priority')::numeric::smallint ELSE 0::smallint END AS priority,
               now() AS run_at, c.job ->> 'limit_key' AS limit_key,
               CASE WHEN jsonb_typeof(c.job -> 'max_attempts') = 'number'
                    THEN (c.job -> 'max_attempts')::numeric::integer ELSE 3 END AS max_attempts,
               NULL::timestamptz AS expires_at,
               CASE WHEN jsonb_typeof(c.job -> 'meta') = 'object' THEN c.job -> 'meta'
                    ELSE '{}'::jsonb END AS meta
        FROM classified AS c WHERE c.plain
        UNION ALL
        SELECT c.ord, k.task, k.args, k.queue, k.priority, k.run_at, k.limit_key, k.max_attempts,
               k.expires_at, k.meta
        FROM classified AS c,
             LATERAL akadze.enqueue_checked(c.job,
                 CASE WHEN caller = 'akadze.enqueue' THEN 'akadze.enqueue: '
                      ELSE caller || ': jobs[' || (c.ord - 1) || '].' END) AS k
        WHERE NOT c.plain),
    inserted AS (
        INSERT INTO akadze.jobs (task, args, queue, priority, run_at, limit_key, max_attempts,
                                 expires_at, meta)
        SELECT i.task, i.args, i.queue, i.priority, i.run_at, i.limit_key, i.max_attempts,
               i.expires_at, i.meta
        FROM input AS i ORDER BY i.ord
        RETURNING akadze.jobs.id, akadze.jobs.queue, akadze.jobs.run_at <= now() AS ready)
    SELECT array_agg(i.id ORDER BY i.id), array_agg(DISTINCT i.queue) FILTER (WHERE i.ready)
        INTO plain_ids, ready_queues FROM inserted AS i;
    IF array_length(plain_ids, 1) = n THEN
        -- No job has a unique_key: the ids are in input order already.
        RETURN akadze.enqueue_notify(plain_ids, ready_queues);
    END IF;
    IF plain_ids IS NOT NULL THEN
        SELECT array_agg(e.ord ORDER BY e.ord) INTO plain_ords
        FROM jsonb_array_elements(jobs) WITH ORDINALITY AS e(job, ord)
        WHERE e.job -> 'unique_key' IS NULL OR e.job -> 'unique_key' = 'null';
        FOR i IN 1 .. array_length(plain_ids, 1) LOOP
            ids[plain_ords[i]] := plain_ids[i];
        END LOOP;
    END IF;

    -- Jobs with a unique_key, one at a time: an active job (queued or
    -- running) holding the key decides by on_conflict.
    -- One call replaces a job once: the first key named twice (one pass).
    IF on_conflict = 'replace' THEN
        SELECT d.first_ord, d.second_ord, d.k INTO first_ord, second_ord, dup_key
        FROM (SELECT e.job ->> 'unique_key' AS k, min(e.ord) AS first_ord,
                     (array_agg(e.ord ORDER BY e.ord))[2] AS second_ord
              FROM jsonb_array_elements(jobs) WITH ORDINALITY AS e(job, ord)
              WHERE jsonb_typeof(e.job) = 'object' AND jsonb_typeof(e.job -> 'unique_key') = 'string'
              GROUP BY 1 HAVING count(*) > 1) AS d
        ORDER BY d.second_ord LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION '%: jobs[%] and jobs[%] have the same unique_key %: one call can replace a job once',
                caller, first_ord - 1, second_ord - 1, translate(quote_literal(dup_key), E'\r\n', '  ')
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;

    FOR r IN
        SELECT e.ord, c.*
        FROM jsonb_array_elements(jobs) WITH ORDINALITY AS e(job, ord),
             LATERAL akadze.enqueue_checked(e.job,
                 CASE WHEN caller = 'akadze.enqueue' THEN 'akadze.enqueue: '
                      ELSE caller || ': jobs[' || (e.ord - 1) || '].' END) AS c
        WHERE e.job -> 'unique_key' IS NOT NULL AND e.job -> 'unique_key' <> 'null'
        ORDER BY e.ord
    LOOP
        tries := 0;
        LOOP
            tries := tries + 1;
            INSERT INTO akadze.jobs (task, args, queue, priority, run_at, limit_key, unique_key,
                                     max_attempts, expires_at, meta)
            VALUES (r.task, r.args, r.queue, r.priority, r.run_at, r.limit_key, r.unique_key,
                    r.max_attempts, r.expires_at, r.meta)
            ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state IN ('queued', 'running')
            DO NOTHING
            RETURNING akadze.jobs.id, akadze.jobs.run_at <= now() INTO inserted_id, ready;
            IF inserted_id IS NOT NULL THEN
                ids[r.ord] := inserted_id;
                IF ready THEN ready_queues := array_append(ready_queues, r.queue); END IF;
                EXIT;
            END IF;
            -- No row lock: skip and raise only read the holder (a lock held
            -- to the producer's commit would hide a queued holder from the
            -- claims and hold up a running one's finish); replace locks it
            -- in its UPDATE, which checks the state again.
            SELECT j.id, j.state, j.task,
                   j.state = 'queued' AND (j.cancel_requested_at IS NOT NULL OR j.expires_at <= now())
                INTO holder_id, holder_state, holder_task, holder_dead
            FROM akadze.jobs AS j
            WHERE j.unique_key = r.unique_key AND j.state IN ('queued', 'running');
            IF holder_id IS NOT NULL AND holder_dead THEN
                -- A queued holder that can never run (its cancel requested, or
                -- past expires_at) frees its key: it ends cancelled as the
                -- daemons' sweep would end it (store/queued_sweep.cpp, the same
                -- Expired entry), and the insert is tried again.
                UPDATE akadze.jobs AS j SET state = 'cancelled', finished_at = now(),
                    errors = CASE WHEN j.cancel_requested_at IS NOT NULL THEN j.errors ELSE
                        (SELECT COALESCE(jsonb_agg(x.entry ORDER BY x.pos), '[]'::jsonb) FROM
                            (SELECT y.entry, y.pos FROM jsonb_array_elements(j.errors || jsonb_build_array(
                                jsonb_build_object('error', 'Expired', 'message',
                                    'expires_at ' || CASE WHEN isfinite(j.expires_at)
                                        THEN to_char(j.expires_at AT TIME ZONE 'UTC',
                                                     'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
                                        ELSE j.expires_at::text END
                                    || ' passed before the job ran')))
                                WITH ORDINALITY AS y(entry, pos) ORDER BY y.pos DESC LIMIT 10) AS x) END
                WHERE j.id = holder_id AND j.state = 'queued'
                  AND (j.cancel_requested_at IS NOT NULL OR j.expires_at <= now());
            ELSIF holder_id IS NOT NULL THEN
                IF on_conflict = 'skip' THEN
                    ids[r.ord] := holder_id;
                    EXIT;
                ELSIF on_conflict = 'raise' THEN
                    RAISE EXCEPTION '%: unique_key % is already held by job % (%); no job enqueued',
                        caller, translate(quote_literal(r.unique_key), E'\r\n', '  '), holder_id, holder_state
                        USING ERRCODE = 'unique_violation';
                ELSIF holder_state <> 'queued' THEN
                    RAISE EXCEPTION '%: unique_key % is held by job %, which is %: only a queued job can be replaced; no job enqueued',
                        caller, translate(quote_literal(r.unique_key), E'\r\n', '  '), holder_id, holder_state
                        USING ERRCODE = 'unique_violation';
                ELSIF holder_task <> r.task THEN
                    RAISE EXCEPTION '%: unique_key % is held by job % of task %: replace keeps the holder''s task (only args and run_at change); no job enqueued',
                        caller, translate(quote_literal(r.unique_key), E'\r\n', '  '), holder_id,
                        translate(quote_literal(holder_task), E'\r\n', '  ')
                        USING ERRCODE = 'unique_violation';
                END IF;
                UPDATE akadze.jobs AS j SET args = r.args, run_at = r.run_at
                WHERE j.id = holder_id AND j.state = 'queued'
                RETURNING j.run_at <= now(), j.queue INTO ready, holder_queue;
                IF FOUND THEN
                    ids[r.ord] := holder_id;
                    -- The holder's queue is the one to wake.
                    IF ready THEN ready_queues := array_append(ready_queues, holder_queue); END IF;
                    EXIT;
                END IF;
                -- Claimed meanwhile: the next try finds it running.
            END IF;
            -- Insert again: the holder ended between the two statements, was
            -- ended above (it could never run), or was claimed before replace
            -- could change it. A snapshot that cannot see the holder
            -- (REPEATABLE READ) would loop for ever: give up after a few tries.
            IF tries >= 5 THEN
                RAISE EXCEPTION '%: unique_key % is held by a job this transaction cannot see; retry in a new transaction',
                    caller, translate(quote_literal(r.unique_key), E'\r\n', '  ')
                    USING ERRCODE = 'serialization_failure';
            END IF;
        END LOOP;
    END LOOP;

    RETURN akadze.enqueue_notify(ids, ready_queues);
END $$;

CREATE FUNCTION akadze.enqueue(
    task text,
    args jsonb DEFAULT '{}',
    queue text DEFAULT 'default',
    priority bigint DEFAULT 0,
    limit_key text DEFAULT NULL,
    run_at timestamptz DEFAULT NULL,
    delay interval DEFAULT NULL,
    max_attempts bigint DEFAULT 3,
    unique_key text DEFAULT NULL,
    on_conflict text DEFAULT 'skip',
    expires_at timestamptz DEFAULT NULL,
    meta jsonb DEFAULT '{}')
RETURNS bigint
-- plpgsql rather than sql: a SECURITY DEFINER function is never inlined, and
-- a sql one would be planned again on every call (4x a plain INSERT's
-- server time per job, bench/enqueue_bench); plpgsql keeps its plans for
-- the session.
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    new_id bigint;
BEGIN
    -- The common job (no unique_key, no time, values plainly right) is one
    -- INSERT; anything else takes the general path, whose checks name what
    -- is wrong (enqueue_checked), or resolve the unique_key.
    IF unique_key IS NULL AND run_at IS NULL AND delay IS NULL AND expires_at IS NULL
       AND task <> '' AND queue <> '' AND (limit_key IS NULL OR limit_key <> '')
       AND jsonb_typeof(args) = 'object' AND jsonb_typeof(meta) = 'object'
       AND priority BETWEEN -32768 AND 32767 AND max_attempts BETWEEN 1 AND 2147483647
       AND on_conflict IN ('skip', 'replace', 'raise') THEN
        INSERT INTO akadze.jobs AS j (task, args, queue, priority, limit_key, max_attempts, meta)
        VALUES (task, args, queue, priority, limit_key, max_attempts, meta)
        RETURNING j.id INTO new_id;
        IF octet_length(queue) < 8000 THEN  -- as enqueue_notify
            PERFORM pg_notify('akadze_jobs', queue);
        END IF;
        RETURN new_id;
    END IF;
    -- Only the scalar parameters lose their NULLs (absent: the default; a
    -- missing task is still named by the check); args and meta go as they
    -- are, nulls inside them kept.
    RETURN (akadze.enqueue_jobs(jsonb_build_array(
        jsonb_strip_nulls(jsonb_build_object(
            'task', to_jsonb(task), 'queue', to_jsonb(queue),
            'priority', to_jsonb(priority), 'limit_key', to_jsonb(limit_key),
            'run_at', to_jsonb(run_at), 'delay', to_jsonb(delay::text),
            'max_attempts', to_jsonb(max_attempts), 'unique_key', to_jsonb(unique_key),
            'expires_at', to_jsonb(expires_at)))
        || jsonb_build_object('args', args, 'meta', meta)),
        on_conflict, 'akadze.enqueue'))[1];
END $$;

CREATE FUNCTION akadze.enqueue_many(jobs jsonb, on_conflict text DEFAULT 'skip')
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN akadze.enqueue_jobs(jobs, on_conflict, 'akadze.enqueue_many');
END $$;

-- Functions are executable by PUBLIC unless revoked: only roles granted
-- EXECUTE (docs/security.md) may enqueue; the three helpers are called by
-- the two SECURITY DEFINER functions as their owner.
REVOKE ALL ON FUNCTION akadze.enqueue_checked(jsonb, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION akadze.enqueue_jobs(jsonb, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION akadze.enqueue_notify(bigint[], text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION akadze.enqueue(text, jsonb, text, bigint, text, timestamptz, interval, bigint,
                                      text, text, timestamptz, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION akadze.enqueue_many(jsonb, text) FROM PUBLIC;
