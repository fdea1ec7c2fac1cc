-- 10: durable steps and results (issue 28). A step's record and a job's result are written
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

-- `jobs.result(...)` waits on this channel instead of polling: one notification per job
-- that reaches an end (completed, dead, cancelled), sent when that transaction commits.
CREATE FUNCTION taskboard_notify_finished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('taskboard_finished', NEW.id::text);
    RETURN NULL;
END
$$;
CREATE TRIGGER taskboard_jobs_finished
    AFTER UPDATE OF completed_at, failed_at, cancelled_at ON taskboard_jobs
    FOR EACH ROW
    WHEN ((OLD.completed_at IS NULL AND NEW.completed_at IS NOT NULL)
          OR (OLD.failed_at IS NULL AND NEW.failed_at IS NOT NULL)
          OR (OLD.cancelled_at IS NULL AND NEW.cancelled_at IS NOT NULL))
    EXECUTE FUNCTION taskboard_notify_finished();
