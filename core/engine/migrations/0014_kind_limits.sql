-- 14: fleet-wide limits per kind (issue 24), and a fence an application can call with the
-- attempt number.

-- A kind's limits, declared by the workers that run it (its `JobKind` fields, written at
-- registration) and enforced by every claim of the kind: at most `max_running` of its jobs
-- hold an unexpired lease at once, and at most `rate_per_second` claims in any second (one
-- in any 1/rate seconds below one a second). `recent` holds the claim times still inside
-- the rate window (at most the window's allowance of them). A claim of a limited kind
-- locks its row first, so claims of one limited kind take turns; nothing else does. A
-- limit removed from the code leaves its row with both limits NULL (workers cannot delete).
CREATE TABLE taskboard_kind_limits (
    kind text PRIMARY KEY,
    max_running integer CHECK (max_running > 0),
    rate_per_second float8 CHECK (rate_per_second > 0),
    recent timestamptz[] NOT NULL DEFAULT '{}',
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- The held jobs of one kind: what `max_running` counts and the rate charge finds.
CREATE INDEX taskboard_jobs_held_by_kind ON taskboard_jobs (kind, lease_expires_at)
    WHERE lease_token IS NOT NULL;

-- The highest attempt number (a job's `claim_count`, sent as X-Taskboard-Attempt and in
-- Stripe's metadata) each resource has accepted a write from. See `taskboard_fence`.
CREATE TABLE taskboard_fences (
    resource text PRIMARY KEY,
    job_id bigint NOT NULL,
    attempt bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Called by an application inside the transaction of its own write: raises (SQLSTATE
-- TB409) when `attempt` is older than the newest attempt that wrote `resource`, so that
-- write rolls back with it; else records `attempt` and returns it. The row lock it takes
-- orders two attempts writing at once: the older waits, then is refused. A random lease
-- token cannot be ordered; the attempt number only grows (release and snooze never give it
-- back), so a receiver can tell the newer writer.
CREATE FUNCTION taskboard_fence(p_resource text, p_job_id bigint, p_attempt bigint)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    newest bigint;
BEGIN
    INSERT INTO taskboard_fences AS f (resource, job_id, attempt)
    VALUES (p_resource, p_job_id, p_attempt)
    ON CONFLICT (resource) DO UPDATE
       SET job_id = excluded.job_id, attempt = excluded.attempt, updated_at = now()
     WHERE f.job_id <> excluded.job_id OR f.attempt <= excluded.attempt
    RETURNING attempt INTO newest;
    IF newest IS NULL THEN
        SELECT attempt INTO newest FROM taskboard_fences WHERE resource = p_resource;
        RAISE EXCEPTION 'taskboard_fence: attempt % of job % is older than attempt %, '
                        'which already wrote %', p_attempt, p_job_id, newest, p_resource
              USING ERRCODE = 'TB409';
    END IF;
    RETURN newest;
END
$$;
