-- 7: operator writes re-check what they act on (issue 22), bounded snoozes

-- Retention's DELETE re-checks, on the row it is about to delete, that the job is still
-- finished and past its age. The ids come from the statement's snapshot; a job retried
-- (pending again) or finished again since then passes `lease_token IS NULL` but must not
-- go: its retry returned success. Under READ COMMITTED a row changed after the snapshot is
-- re-read at its newest version and these conditions are evaluated on that version.
CREATE OR REPLACE FUNCTION taskboard_prune_finished(completed_age interval, dead_age interval,
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
           AND (j.completed_at < now() - completed_age
                OR j.failed_at < now() - dead_age
                OR j.cancelled_at < now() - cancelled_age)
        RETURNING 1
    )
    SELECT count(*)::integer FROM gone
$$;
-- CREATE OR REPLACE keeps the grants; said again so this file alone is the whole story.
REVOKE EXECUTE ON FUNCTION taskboard_prune_finished(interval, interval, interval, integer)
    FROM PUBLIC;

-- Snoozes give the attempt back, so without a count a job snoozing in a loop never ends
-- and writes an attempt row per snooze for ever. Counted here (reset by a retry), capped by
-- the worker's `max_snoozes`: the snooze past the cap makes the job dead with the reason.
ALTER TABLE taskboard_jobs ADD COLUMN snoozes integer NOT NULL DEFAULT 0;
