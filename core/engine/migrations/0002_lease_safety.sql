-- 2: lease safety under faults (issue 10)

-- A finished row holds no lease. Rows written by hand (or by an older release whose cancel
-- raced a claim) that break this are cleared first, so the constraint can be added.
UPDATE taskboard_jobs
   SET lease_token = NULL, lease_expires_at = NULL
 WHERE lease_token IS NOT NULL
   AND (completed_at IS NOT NULL OR failed_at IS NOT NULL OR cancelled_at IS NOT NULL);
ALTER TABLE taskboard_jobs
    ADD CONSTRAINT taskboard_jobs_finished_unleased
    CHECK (lease_token IS NULL
           OR (completed_at IS NULL AND failed_at IS NULL AND cancelled_at IS NULL));

-- `attempts` is the retry budget (reset by retry, given back when a drain releases a job
-- whose handler never started); `claim_count` counts every claim ever made, so the attempts
-- history numbers its rows 1, 2, 3... even across retries.
ALTER TABLE taskboard_jobs ADD COLUMN claim_count integer NOT NULL DEFAULT 0;
UPDATE taskboard_jobs j
   SET claim_count = (SELECT count(*) FROM taskboard_attempts a WHERE a.job_id = j.id);

-- When another worker's claim took the lease over. `ended_at` is when the attempt's own
-- worker last reported (a rejected completion is stamped when the stale worker came back,
-- not when it was reclaimed).
ALTER TABLE taskboard_attempts ADD COLUMN superseded_at timestamptz;
ALTER TABLE taskboard_attempts DROP CONSTRAINT taskboard_attempts_outcome_check;
ALTER TABLE taskboard_attempts ADD CONSTRAINT taskboard_attempts_outcome_check
    CHECK (outcome IN ('completed', 'completion_rejected', 'lease_lost', 'failed', 'released',
                       'cancelled'));

-- Workers say which kinds they run (a claim only takes those, so a fleet of mixed versions
-- loses nothing) and why they are unhealthy.
ALTER TABLE taskboard_workers
    ADD COLUMN kinds text[] NOT NULL DEFAULT '{}',
    ADD COLUMN last_error text,
    ADD COLUMN last_error_at timestamptz;

-- One random id per installation, part of every Stripe Idempotency-Key, so two databases
-- (or a restored copy) sharing a Stripe account never replay each other's charges. Jobs
-- charged before this migration and run again after it get a new key: finish them first.
CREATE TABLE taskboard_installation (
    id         uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    created_at timestamptz NOT NULL DEFAULT now(),
    singleton  boolean     NOT NULL DEFAULT true UNIQUE CHECK (singleton)
);
INSERT INTO taskboard_installation DEFAULT VALUES;

-- The embedded default's stand-ins (SMTP sink, Stripe endpoint): the first process on a
-- host registers its address and the others send there, so duplicates and replays are
-- judged across processes as a real server would.
CREATE TABLE taskboard_standins (
    name          text        NOT NULL,
    host          text        NOT NULL,
    address       text        NOT NULL,
    pid           integer     NOT NULL,
    registered_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, host)
);
