-- 3: operations (issue 11): retention, counts without scans, timeouts, unique and periodic
-- jobs, queue pause, cancel and snooze outcomes

-- The audit of what was charged outlives the job it came from: pruning a finished billing
-- job must not delete its charge record.
ALTER TABLE taskboard_billing_charges DROP CONSTRAINT taskboard_billing_charges_job_id_fkey;

-- A job may carry its own timeout (seconds; else its kind's) and a unique key, unique among
-- the unfinished jobs of its kind: enqueueing it again returns the existing job.
ALTER TABLE taskboard_jobs
    ADD COLUMN timeout_seconds double precision CHECK (timeout_seconds > 0),
    ADD COLUMN unique_key text CHECK (length(unique_key) BETWEEN 1 AND 300);
CREATE UNIQUE INDEX taskboard_jobs_unique_key ON taskboard_jobs (kind, unique_key)
    WHERE unique_key IS NOT NULL AND completed_at IS NULL AND failed_at IS NULL
      AND cancelled_at IS NULL;

-- Retention walks finished rows oldest first.
CREATE INDEX taskboard_jobs_completed_at ON taskboard_jobs (completed_at)
    WHERE completed_at IS NOT NULL;
CREATE INDEX taskboard_jobs_cancelled_at ON taskboard_jobs (cancelled_at)
    WHERE cancelled_at IS NOT NULL;

ALTER TABLE taskboard_attempts DROP CONSTRAINT taskboard_attempts_outcome_check;
ALTER TABLE taskboard_attempts ADD CONSTRAINT taskboard_attempts_outcome_check
    CHECK (outcome IN ('completed', 'completion_rejected', 'lease_lost', 'failed', 'released',
                       'cancelled', 'snoozed'));

-- Finished jobs counted as they finish, so `status` and the dashboard never scan a table of
-- millions of finished rows (unfinished ones are counted from their partial indexes).
-- Sharded by backend, so two workers finishing jobs at once never wait on one counter row.
CREATE TABLE taskboard_finished_counts (
    queue text     NOT NULL,
    state text     NOT NULL CHECK (state IN ('completed', 'dead', 'cancelled')),
    shard smallint NOT NULL,
    n     bigint   NOT NULL,
    PRIMARY KEY (queue, state, shard)
);
INSERT INTO taskboard_finished_counts (queue, state, shard, n)
SELECT queue, state, 0, count(*)
  FROM (SELECT queue, CASE WHEN completed_at IS NOT NULL THEN 'completed'
                           WHEN failed_at IS NOT NULL THEN 'dead'
                           ELSE 'cancelled' END AS state
          FROM taskboard_jobs
         WHERE completed_at IS NOT NULL OR failed_at IS NOT NULL
            OR cancelled_at IS NOT NULL) f
 GROUP BY queue, state;

CREATE FUNCTION taskboard_finished_state(completed timestamptz, failed timestamptz,
                                         cancelled timestamptz) RETURNS text
    LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN completed IS NOT NULL THEN 'completed'
                WHEN failed IS NOT NULL THEN 'dead'
                WHEN cancelled IS NOT NULL THEN 'cancelled' END
$$;

-- One statement-level trigger per kind of change: it adds what the statement finished and
-- takes away what it un-finished (retry) or deleted (retention), in one upsert. It runs as
-- the schema's owner, so workers need no privilege on the counters.
CREATE FUNCTION taskboard_count_finished() RETURNS trigger LANGUAGE plpgsql
    SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        INSERT INTO taskboard_finished_counts AS c (queue, state, shard, n)
        SELECT queue, state, pg_backend_pid() % 16, sum(delta)
          FROM (SELECT n.queue,
                       taskboard_finished_state(n.completed_at, n.failed_at, n.cancelled_at)
                           AS state, 1 AS delta
                  FROM new_rows n JOIN old_rows o ON o.id = n.id
                 WHERE taskboard_finished_state(n.completed_at, n.failed_at, n.cancelled_at)
                       IS DISTINCT FROM
                       taskboard_finished_state(o.completed_at, o.failed_at, o.cancelled_at)
                UNION ALL
                SELECT o.queue,
                       taskboard_finished_state(o.completed_at, o.failed_at, o.cancelled_at),
                       -1
                  FROM new_rows n JOIN old_rows o ON o.id = n.id
                 WHERE taskboard_finished_state(n.completed_at, n.failed_at, n.cancelled_at)
                       IS DISTINCT FROM
                       taskboard_finished_state(o.completed_at, o.failed_at, o.cancelled_at)
               ) d
         WHERE state IS NOT NULL
         GROUP BY queue, state
        ON CONFLICT (queue, state, shard) DO UPDATE SET n = c.n + excluded.n;
    ELSIF TG_OP = 'INSERT' THEN
        -- Rows that arrive finished (an import, a copy): rare, but counted all the same.
        INSERT INTO taskboard_finished_counts AS c (queue, state, shard, n)
        SELECT queue, taskboard_finished_state(completed_at, failed_at, cancelled_at),
               pg_backend_pid() % 16, count(*)
          FROM new_rows
         WHERE taskboard_finished_state(completed_at, failed_at, cancelled_at) IS NOT NULL
         GROUP BY 1, 2
        ON CONFLICT (queue, state, shard) DO UPDATE SET n = c.n + excluded.n;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO taskboard_finished_counts AS c (queue, state, shard, n)
        SELECT queue, taskboard_finished_state(completed_at, failed_at, cancelled_at),
               pg_backend_pid() % 16, -count(*)
          FROM old_rows
         WHERE taskboard_finished_state(completed_at, failed_at, cancelled_at) IS NOT NULL
         GROUP BY 1, 2
        ON CONFLICT (queue, state, shard) DO UPDATE SET n = c.n + excluded.n;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER taskboard_count_finished_update AFTER UPDATE ON taskboard_jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION taskboard_count_finished();
CREATE TRIGGER taskboard_count_finished_insert AFTER INSERT ON taskboard_jobs
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION taskboard_count_finished();
CREATE TRIGGER taskboard_count_finished_delete AFTER DELETE ON taskboard_jobs
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION taskboard_count_finished();

-- Paused queues: no claim takes a job from them until they are resumed.
CREATE TABLE taskboard_queues (
    name      text PRIMARY KEY,
    paused_at timestamptz,
    reason    text
);

-- Periodic jobs: each schedule's slots are enqueued once, by whichever worker moves
-- `last_slot` forward first.
CREATE TABLE taskboard_schedules (
    name            text PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 100),
    cron            text        NOT NULL,
    kind            text        NOT NULL,
    payload         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    queue           text        NOT NULL DEFAULT 'default',
    priority        integer     NOT NULL DEFAULT 0,
    max_attempts    integer     NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
    timeout_seconds double precision CHECK (timeout_seconds > 0),
    created_at      timestamptz NOT NULL DEFAULT now(),
    last_slot       timestamptz
);

-- Retention runs with the privileges of the schema's owner, so workers can prune finished
-- rows without being allowed to delete anything else.
CREATE FUNCTION taskboard_prune_finished(completed_age interval, dead_age interval,
                                         cancelled_age interval, batch integer)
    RETURNS integer LANGUAGE sql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp AS $$
    WITH doomed AS (
        (SELECT id FROM public.taskboard_jobs
          WHERE completed_at < now() - completed_age ORDER BY completed_at LIMIT batch)
        UNION
        (SELECT id FROM public.taskboard_jobs
          WHERE failed_at < now() - dead_age ORDER BY failed_at LIMIT batch)
        UNION
        (SELECT id FROM public.taskboard_jobs
          WHERE cancelled_at < now() - cancelled_age ORDER BY cancelled_at LIMIT batch)
    ), gone AS (
        DELETE FROM public.taskboard_jobs j
         USING (SELECT id FROM doomed LIMIT batch) d
         WHERE j.id = d.id AND j.lease_token IS NULL
        RETURNING 1
    )
    SELECT count(*)::integer FROM gone
$$;

CREATE FUNCTION taskboard_prune_workers(age interval) RETURNS integer
    LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH gone AS (
        DELETE FROM public.taskboard_workers
         WHERE coalesce(stopped_at, heartbeat_at) < now() - age
        RETURNING 1
    )
    SELECT count(*)::integer FROM gone
$$;

-- Functions are callable by every role by default; these delete rows, so only roles granted
-- it may call them (docs/least-privilege.sql grants the worker role).
REVOKE EXECUTE ON FUNCTION taskboard_prune_finished(interval, interval, interval, integer)
    FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION taskboard_prune_workers(interval) FROM PUBLIC;
