-- 9: what the outside world saw outlives the job's fate (issue 22), and a job identity that
-- cannot come back (issue 30).

-- A random identity per job, the key of its external effects (Stripe's Idempotency-Key, the
-- email Message-ID). Ids come back after a restore or an asynchronous failover that lost
-- commits; an identity drawn at enqueue does not, so a new job never meets a lost job's
-- effects. Added without a default first, then given one: a volatile default in ADD COLUMN
-- would rewrite the table and give the jobs already in flight new keys. Rows enqueued before
-- this migration keep NULL, which means "keyed by the id, as before" (claim: `identity`), so
-- a charge or send in flight across the upgrade replays its own keys. A restored database
-- holds such rows only for jobs that existed at its restore point: the same jobs.
ALTER TABLE taskboard_jobs ADD COLUMN identity uuid;
ALTER TABLE taskboard_jobs ALTER COLUMN identity SET DEFAULT gen_random_uuid();

-- Charges are recorded on their own (autocommit, on the worker's engine connection) as soon
-- as Stripe answers, not in the handler's transaction: a cancelled, timed-out, rejected or
-- lost attempt keeps the record of the money it moved. One row per PaymentIntent (a replay
-- by a later attempt updates its status, and keeps who charged); a job may have several
-- (a retry after Stripe's 24 h key window makes a new one, and the audit must show both).
-- Rows from before keep attempt and worker unknown; they were written only on success.
ALTER TABLE taskboard_billing_charges
    DROP CONSTRAINT taskboard_billing_charges_pkey,
    ADD COLUMN attempt integer,
    ADD COLUMN worker_id text,
    ADD COLUMN status text NOT NULL DEFAULT 'succeeded',
    ADD CONSTRAINT taskboard_billing_charges_payment_intent UNIQUE (payment_intent_id);
CREATE INDEX taskboard_billing_charges_job ON taskboard_billing_charges (job_id);
CREATE INDEX taskboard_billing_charges_recorded_at
    ON taskboard_billing_charges (recorded_at DESC);

-- One row per copy an SMTP relay accepted: (message, recipient, attempt). Written on its own
-- like a charge, so a cancelled or rejected attempt keeps its sends, and duplicates show with
-- any relay (two attempts for one Message-ID), not only with the embedded sink. Kept as long
-- as the job's history: retention deletes them with the job (charges are never pruned).
-- No foreign key: a record written late (its worker stalled, or retried the write after a
-- restart) for a job that retention already deleted is still a send that happened; with a
-- key it would be refused for ever and lost. The prune below deletes a job's sends with it.
CREATE TABLE taskboard_email_sends (
    job_id     bigint      NOT NULL,
    attempt    integer     NOT NULL,
    message_id text        NOT NULL,
    recipient  text        NOT NULL,
    worker_id  text        NOT NULL,
    sent_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (message_id, recipient, attempt)
);
CREATE INDEX taskboard_email_sends_job ON taskboard_email_sends (job_id);
CREATE INDEX taskboard_email_sends_sent_at ON taskboard_email_sends (sent_at DESC);

-- Retention as migration 7 made it (each row re-checked in the DELETE), now also deleting the
-- send records of the jobs it deletes, in the same statement (they have no foreign key).
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
        RETURNING j.id
    ), sends AS (
        DELETE FROM public.taskboard_email_sends s USING gone WHERE s.job_id = gone.id
    )
    SELECT count(*)::integer FROM gone
$$;
REVOKE EXECUTE ON FUNCTION taskboard_prune_finished(interval, interval, interval, integer)
    FROM PUBLIC;
