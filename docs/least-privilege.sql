-- Least privilege for Taskboard workers.
--
-- Run once per database as its owner (or a superuser), after the schema exists
-- (`taskboard migrate` as the owner; workers never need to change the schema):
--
--     psql "$OWNER_URL" -f docs/least-privilege.sql
--     psql "$OWNER_URL" -c "CREATE ROLE worker_app LOGIN PASSWORD '...' IN ROLE taskboard_worker"
--
-- and run `taskboard worker` with TASKBOARD_DATABASE_URL naming `worker_app`. The same role
-- serves `taskboard status`, `enqueue`, `retry`, `cancel`, `history` and the dashboard.
--
-- What the worker does with each table, and so what it is granted:
--   taskboard_jobs             claim, renew, complete, fail, release (UPDATE ... RETURNING:
--                              SELECT + UPDATE); enqueue (INSERT); never DELETE
--   taskboard_attempts         the history: INSERT on claim, UPDATE of the outcome, SELECT
--   taskboard_workers          register (INSERT ... ON CONFLICT DO UPDATE), heartbeat
--                              (UPDATE ... RETURNING), the fleet panel (SELECT)
--   taskboard_billing_charges  the billing handler's record, INSERTed in the completion
--                              transaction; SELECT for audits
--   taskboard_schema           read the schema version at start (SELECT)
-- LISTEN/NOTIFY, pg_notify(), gen_random_uuid() and advisory locks need no grant. The
-- identity columns of taskboard_jobs and taskboard_attempts draw their ids without a
-- sequence grant; USAGE on the sequences is granted anyway for tools that call nextval().
-- No DDL: the role owns nothing and gets no CREATE on the schema, so it cannot create,
-- alter, drop or truncate anything. No DELETE: Taskboard never deletes a row.

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'taskboard_worker') THEN
        CREATE ROLE taskboard_worker NOLOGIN;
    END IF;
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO taskboard_worker', current_database());
END
$$;

GRANT USAGE ON SCHEMA public TO taskboard_worker;

GRANT SELECT, INSERT, UPDATE ON taskboard_jobs TO taskboard_worker;
GRANT SELECT, INSERT, UPDATE ON taskboard_attempts TO taskboard_worker;
GRANT SELECT, INSERT, UPDATE ON taskboard_workers TO taskboard_worker;
GRANT SELECT, INSERT ON taskboard_billing_charges TO taskboard_worker;
GRANT SELECT ON taskboard_schema TO taskboard_worker;

GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO taskboard_worker;
