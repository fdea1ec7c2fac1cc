-- 11: what an operator did to a job, kept in its history (issue 26)

-- A retry or cancel by filter acts on many jobs at once; each job keeps a line saying what
-- was done to it, when, and under which filter, so `history` answers "why is this job
-- pending again?" long after the command's output scrolled away. Pruned with its job.
CREATE TABLE taskboard_job_actions (
    id     bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id bigint      NOT NULL REFERENCES taskboard_jobs (id) ON DELETE CASCADE,
    action text        NOT NULL CHECK (action IN ('retried', 'cancelled')),
    at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    detail text        NOT NULL
);
CREATE INDEX taskboard_job_actions_job ON taskboard_job_actions (job_id);
