-- 13: durable steps and results (issue 28). A step's record and a job's result are written
-- only by the current lease holder, in a statement that checks its token (DESIGN invariant
-- 18), so a reclaimed attempt trusts every record it finds.

-- What the handler returned (JSON), written fenced just before the completion; NULL for a
-- handler that returned nothing. Read only once completed_at is set.
ALTER TABLE taskboard_jobs ADD COLUMN result jsonb;

-- One row per checkpoint a worker tried to write. `recorded`: the holder's, trusted and
-- replayed by later attempts (at most one per job and name). `rejected`: the fence refused
-- it (the worker had lost its lease), kept because the effect it describes did happen.
-- Deleted with the job (prune).
CREATE TABLE taskboard_steps (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id      bigint      NOT NULL REFERENCES taskboard_jobs (id) ON DELETE CASCADE,
    name        text        NOT NULL,
    outcome     text        NOT NULL CHECK (outcome IN ('recorded', 'rejected')),
    result      jsonb,
    attempt     integer     NOT NULL,
    worker_id   text        NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX taskboard_steps_recorded ON taskboard_steps (job_id, name)
    WHERE outcome = 'recorded';
CREATE INDEX taskboard_steps_job ON taskboard_steps (job_id);

-- `jobs.result(...)` waits on this channel instead of polling. One notification per
-- statement that may have ended jobs (completed, dead, cancelled), empty, so PostgreSQL folds
-- the repeats of a transaction into one: a waiter reads its own job again when it hears it.
-- Per statement, not per row: a grouped completion of a thousand jobs that nobody waits on
-- costs one trigger call, not a thousand notifications (jobs without results pay ~nothing).
CREATE FUNCTION taskboard_notify_finished() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM pg_notify('taskboard_finished', '');
    RETURN NULL;
END
$$;
CREATE TRIGGER taskboard_jobs_finished
    AFTER UPDATE OF completed_at, failed_at, cancelled_at ON taskboard_jobs
    FOR EACH STATEMENT
    EXECUTE FUNCTION taskboard_notify_finished();

-- Dependencies: a child waits until every parent completed. A waiting child keeps its wanted
-- run_at in `wait_run_at` and is parked at run_at 9999-01-01 (the latest run_at Taskboard
-- accepts; 'infinity' no client datetime can read), so the claim's `run_at <= now()` never
-- reaches it and the claim statement stays as it was. `waiting_on` counts its
-- parents not yet completed; `has_children` lets the trigger below skip every job that is
-- nobody's parent in its WHEN clause (no function call). `cancelled_by` names the parent
-- whose end cancelled the child, so retrying that parent makes the child wait again.
ALTER TABLE taskboard_jobs
    ADD COLUMN waiting_on integer NOT NULL DEFAULT 0,
    ADD COLUMN wait_run_at timestamptz,
    ADD COLUMN has_children boolean NOT NULL DEFAULT false,
    ADD COLUMN cancelled_by bigint;

CREATE TABLE taskboard_job_parents (
    child_id  bigint NOT NULL REFERENCES taskboard_jobs (id) ON DELETE CASCADE,
    parent_id bigint NOT NULL REFERENCES taskboard_jobs (id) ON DELETE CASCADE,
    PRIMARY KEY (child_id, parent_id)
);
CREATE INDEX taskboard_job_parents_parent ON taskboard_job_parents (parent_id);

-- A parent's end, in the statement that ended it: completed releases the children whose
-- last parent it was (and wakes the workers of their queues); dead or cancelled cancels the
-- waiting children with a reason naming it (their own ends cascade the same way); a retry
-- makes the children it cancelled wait again.
-- Runs as the owner (the least-privilege role writes none of the children's bookkeeping).
CREATE FUNCTION taskboard_parent_ended() RETURNS trigger LANGUAGE plpgsql
    SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF NEW.completed_at IS NOT NULL THEN
        PERFORM pg_notify('taskboard_jobs', r.queue)
           FROM (SELECT DISTINCT c.queue FROM taskboard_jobs c
                  WHERE c.id IN (SELECT child_id FROM taskboard_job_parents WHERE parent_id = NEW.id)
                    AND c.waiting_on = 1) r;
        UPDATE taskboard_jobs c
           SET waiting_on = c.waiting_on - 1,
               run_at = CASE WHEN c.waiting_on = 1 THEN greatest(c.wait_run_at, now())
                             ELSE c.run_at END
          FROM taskboard_job_parents p
         WHERE p.parent_id = NEW.id AND c.id = p.child_id AND c.waiting_on > 0
           AND c.completed_at IS NULL AND c.failed_at IS NULL AND c.cancelled_at IS NULL;
    ELSIF NEW.failed_at IS NOT NULL OR NEW.cancelled_at IS NOT NULL THEN
        UPDATE taskboard_jobs c
           SET cancelled_at = now(), cancelled_by = NEW.id,
               last_error = format('cancelled: parent job %s is %s', NEW.id,
                                   CASE WHEN NEW.failed_at IS NOT NULL THEN 'dead'
                                        ELSE 'cancelled' END)
          FROM taskboard_job_parents p
         WHERE p.parent_id = NEW.id AND c.id = p.child_id AND c.waiting_on > 0
           AND c.completed_at IS NULL AND c.failed_at IS NULL AND c.cancelled_at IS NULL;
    ELSE  -- retried: its children wait again
        UPDATE taskboard_jobs c
           SET cancelled_at = NULL, cancelled_by = NULL, last_error = NULL, run_at = '9999-01-01 00:00:00+00',
               waiting_on = (SELECT count(*) FROM taskboard_job_parents q
                               JOIN taskboard_jobs pj ON pj.id = q.parent_id
                              WHERE q.child_id = c.id AND pj.completed_at IS NULL)
         WHERE c.cancelled_by = NEW.id AND c.cancelled_at IS NOT NULL;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER taskboard_jobs_parent_ended
    AFTER UPDATE OF completed_at, failed_at, cancelled_at ON taskboard_jobs
    FOR EACH ROW
    WHEN (NEW.has_children
          AND ((OLD.completed_at IS NULL AND NEW.completed_at IS NOT NULL)
               OR (OLD.failed_at IS NULL AND NEW.failed_at IS NOT NULL)
               OR (OLD.cancelled_at IS NULL AND NEW.cancelled_at IS NOT NULL)
               OR ((OLD.failed_at IS NOT NULL OR OLD.cancelled_at IS NOT NULL)
                   AND NEW.failed_at IS NULL AND NEW.cancelled_at IS NULL)))
    EXECUTE FUNCTION taskboard_parent_ended();
