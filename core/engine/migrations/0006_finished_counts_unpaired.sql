-- 6: the finished counts' update trigger without pairing old and new rows (issue 12)

-- Migration 3 paired each row's old and new version (a join on id) to count the rows whose
-- state changed. PL/pgSQL plans that join at the function's first call in a session, most
-- often a worker's first claim on an empty queue: planned for empty transition tables it
-- stays a nested loop, ~1.3 ms for every later 100-row claim, completion or renewal, a
-- quarter of the database's time per job with two workers (bench/results-triggers.md,
-- bench/count_triggers.py). Rows need no pairing: what the statement leaves finished minus
-- what was finished before it, by queue and state; a row that stays in its state and queue
-- adds 1 and takes 1 away. This also counts a finished row moved to another queue, which
-- the pairing missed (its state did not change, so neither queue's count did).
CREATE OR REPLACE FUNCTION taskboard_count_finished() RETURNS trigger LANGUAGE plpgsql
    SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        INSERT INTO taskboard_finished_counts AS c (queue, state, shard, n)
        SELECT queue, state, pg_backend_pid() % 16, sum(delta)
          FROM (SELECT queue,
                       taskboard_finished_state(completed_at, failed_at, cancelled_at)
                           AS state, 1 AS delta
                  FROM new_rows
                UNION ALL
                SELECT queue,
                       taskboard_finished_state(completed_at, failed_at, cancelled_at), -1
                  FROM old_rows) d
         WHERE state IS NOT NULL
         GROUP BY queue, state
        HAVING sum(delta) <> 0
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

-- The counts the pairing left wrong (finished rows moved between queues): recounted from
-- the rows, under the lock that keeps writers out until this commits, as migration 5 did.
LOCK TABLE taskboard_jobs IN SHARE ROW EXCLUSIVE MODE;
DELETE FROM taskboard_finished_counts;
INSERT INTO taskboard_finished_counts (queue, state, shard, n)
SELECT queue, taskboard_finished_state(completed_at, failed_at, cancelled_at), 0, count(*)
  FROM taskboard_jobs
 WHERE completed_at IS NOT NULL OR failed_at IS NOT NULL OR cancelled_at IS NOT NULL
 GROUP BY 1, 2;
