-- 1: jobs, attempts history, workers, billing records
CREATE TABLE taskboard_jobs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind             text        NOT NULL,
    payload          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    queue            text        NOT NULL DEFAULT 'default',
    priority         integer     NOT NULL DEFAULT 0,
    run_at           timestamptz NOT NULL DEFAULT now(),
    attempts         integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
    lease_token      uuid,
    lease_expires_at timestamptz,
    claimed_by       text,
    claimed_at       timestamptz,
    completed_at     timestamptz,
    failed_at        timestamptz,
    cancelled_at     timestamptz,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT taskboard_jobs_lease_pair
        CHECK ((lease_token IS NULL) = (lease_expires_at IS NULL))
);
-- Claim scan: only unleased, unfinished jobs are in this index, in claim order.
CREATE INDEX taskboard_jobs_ready ON taskboard_jobs (queue, priority DESC, run_at, id)
    WHERE lease_token IS NULL AND completed_at IS NULL AND failed_at IS NULL
      AND cancelled_at IS NULL;
-- Reclaim scan and the wake-up timer: only held leases, by deadline.
CREATE INDEX taskboard_jobs_leased ON taskboard_jobs (lease_expires_at)
    WHERE lease_token IS NOT NULL;
CREATE INDEX taskboard_jobs_dead ON taskboard_jobs (failed_at DESC) WHERE failed_at IS NOT NULL;

CREATE TABLE taskboard_attempts (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id            bigint      NOT NULL REFERENCES taskboard_jobs (id) ON DELETE CASCADE,
    attempt           integer     NOT NULL,
    lease_token       uuid        NOT NULL,
    worker_id         text        NOT NULL,
    claimed_at        timestamptz NOT NULL,
    ended_at          timestamptz,
    renewal_failed_at timestamptz,
    outcome           text CHECK (outcome IN
        ('completed', 'completion_rejected', 'lease_lost', 'failed', 'released')),
    error             text,
    UNIQUE (job_id, lease_token)
);
CREATE INDEX taskboard_attempts_trouble ON taskboard_attempts (ended_at DESC)
    WHERE outcome IN ('completion_rejected', 'lease_lost') OR renewal_failed_at IS NOT NULL;

CREATE TABLE taskboard_workers (
    id              text PRIMARY KEY,
    host            text        NOT NULL,
    pid             integer     NOT NULL,
    started_at      timestamptz NOT NULL DEFAULT now(),
    heartbeat_at    timestamptz NOT NULL DEFAULT now(),
    stopped_at      timestamptz,
    state           text        NOT NULL DEFAULT 'running',
    pause_requested boolean     NOT NULL DEFAULT false,
    drain_requested boolean     NOT NULL DEFAULT false,
    queues          text[]      NOT NULL DEFAULT '{default}',
    lease_seconds   double precision NOT NULL,
    capacity        integer     NOT NULL,
    in_flight       integer     NOT NULL DEFAULT 0,
    renewals_ok     bigint      NOT NULL DEFAULT 0,
    renewals_failed bigint      NOT NULL DEFAULT 0,
    pool_max        integer     NOT NULL DEFAULT 0,
    pool_in_use     integer     NOT NULL DEFAULT 0,
    pool_idle       integer     NOT NULL DEFAULT 0,
    pool_waiting    integer     NOT NULL DEFAULT 0
);

CREATE TABLE taskboard_billing_charges (
    job_id            bigint PRIMARY KEY REFERENCES taskboard_jobs (id) ON DELETE CASCADE,
    payment_intent_id text        NOT NULL,
    amount            bigint      NOT NULL,
    currency          text        NOT NULL,
    customer          text        NOT NULL,
    recorded_at       timestamptz NOT NULL DEFAULT now()
);
