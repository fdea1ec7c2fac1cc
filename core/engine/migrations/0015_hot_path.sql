-- 15: the claim and the completion write less (issue 25).

-- An attempt's history row is written once, when the attempt ends, by the statement that
-- ends it (completion, failure, release, snooze, cancel, quarantine, or the claim that takes
-- over an expired lease): while it runs, its job row holds it (lease_token, claim_count as
-- its number, claimed_by, claimed_at). Readers that show running attempts read them from
-- the job row (core/sql/board.py). Rows of attempts running when this migration ran stay
-- as they are and are ended by an update (every ending statement inserts `ON CONFLICT`).
-- The worker role of docs/least-privilege.sql now inserts the ending columns too (it could
-- already update them, so it gains nothing it could not do): granted here where the role
-- exists, so a fleet that upgrades keeps working without re-running that script.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'taskboard_worker') THEN
        GRANT INSERT (outcome, ended_at, error, renewal_failed_at, superseded_at,
                      handler_seconds, min_margin_seconds)
            ON taskboard_attempts TO taskboard_worker;
    END IF;
END $$;

-- The attempts' foreign key to their job checked every inserted row with a query and a row
-- lock on the job (~7 us of the ~55 the server spends per no-op job, measured): every row
-- is now inserted by a statement that read its job row in the same statement, and the
-- ending ones hold that row locked. What the key did on delete, a statement trigger does:
-- the attempts of deleted jobs go with them (retention, an operator's delete by hand).
-- Runs as the owner, as the prune that deletes does.
ALTER TABLE taskboard_attempts DROP CONSTRAINT taskboard_attempts_job_id_fkey;

CREATE FUNCTION taskboard_delete_attempts() RETURNS trigger LANGUAGE plpgsql
    SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    DELETE FROM taskboard_attempts a USING old_rows o WHERE a.job_id = o.id;
    RETURN NULL;
END $$;
CREATE TRIGGER taskboard_jobs_delete_attempts AFTER DELETE ON taskboard_jobs
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION taskboard_delete_attempts();

