-- Least privilege for Taskboard workers.
--
-- Run once per database as the owner of the database and of Taskboard's tables (or as a
-- superuser), after the schema exists (`taskboard migrate` as the owner: workers never
-- change the schema), and again after every upgrade that adds a migration:
--
--     psql "$OWNER_URL" -v ON_ERROR_STOP=1 -f docs/least-privilege.sql
--     psql "$OWNER_URL" -c "CREATE ROLE worker_app LOGIN PASSWORD '...' IN ROLE taskboard_worker"
--
-- and run `taskboard worker` with TASKBOARD_DATABASE_URL naming `worker_app`. The same role
-- serves `taskboard status`, `enqueue`, `retry`, `cancel`, `history` and the dashboard
-- (pause, drain). Grant the login role nothing else: no other role membership, no
-- CREATEDB/CREATEROLE, no grants of its own. A CONNECTION LIMIT on it (pool size times the
-- number of workers, plus a few) keeps one leaked credential from taking every connection.
-- The script is safe to run again: it first takes back everything taskboard_worker was
-- ever granted on these tables, so a role made by an older, wider version of this file ends
-- up exactly as below. Its last block checks the result and fails if the role can still do
-- more than this file says.
--
-- What each statement of `core/sql/` needs, and so what is granted:
--
--   table                      SELECT  INSERT (columns)          UPDATE (columns only)
--   taskboard_jobs             all     kind, payload, queue,     lease_token, lease_expires_at,
--                                      priority, run_at,         claimed_by, claimed_at,
--                                      max_attempts              attempts, claim_count, run_at,
--                                                                completed_at, failed_at,
--                                                                cancelled_at, last_error
--   taskboard_attempts         all     job_id, attempt,          outcome, ended_at, error,
--                                      lease_token, worker_id,   renewal_failed_at,
--                                      claimed_at,               superseded_at,
--                                      pickup_seconds            handler_seconds,
--                                                                min_margin_seconds
--   taskboard_workers          all     id, host, pid, queues,    every column but id
--                                      kinds, lease_seconds,
--                                      capacity, pool_max
--   taskboard_billing_charges  all     job_id, payment_intent_id, status
--                                      amount, currency,
--                                      customer, attempt,
--                                      worker_id, status
--   taskboard_email_sends      all     job_id, attempt,          -
--                                      message_id, recipient,
--                                      worker_id
--   taskboard_steps            all     job_id, name, outcome,    -
--                                      result, attempt, worker_id
--   taskboard_job_parents      all     child_id, parent_id       -
--   (taskboard_jobs also UPDATE result, waiting_on, wait_run_at, has_children)
--   taskboard_job_actions      all     job_id, action, detail    -
--   taskboard_schema           all     -                         -
--   taskboard_installation     all     -                         -
--   taskboard_finished_counts  all     -                         -
--   taskboard_waiting_counts   all     -                         -
--   taskboard_queues           all     name, paused_at, reason   paused_at, reason
--   taskboard_schedules        all     name, cron, kind,         cron, kind, payload, queue,
--                                      payload, queue, priority, priority, max_attempts,
--                                      max_attempts,             timeout_seconds, last_slot,
--                                      timeout_seconds, tz       tz, revision, disabled_at,
--                                                                disabled_error
--   taskboard_kind_limits      all     kind, max_running,        max_running, rate_per_second,
--                                      rate_per_second           recent, updated_at
--   taskboard_standins         -       -                         -
--   taskboard_fences           -       -                         -
--   (taskboard_jobs also INSERT timeout_seconds and unique_key; taskboard_jobs and
--   taskboard_schedules also INSERT and UPDATE traceparent and tracestate: the trace context
--   an enqueue, a schedule add or a retry stores)
--   functions: EXECUTE on taskboard_prune_finished and taskboard_prune_workers
--
--   taskboard_jobs: ENQUEUE_MANY inserts; CLAIM/CLAIM_ONLY (lease columns, attempts,
--     claim_count; burying: failed_at, last_error), RENEW (lease_expires_at), COMPLETE and
--     COMPLETE_MANY (completed_at, lease), FAIL (lease, last_error, failed_at, run_at),
--     RELEASE (lease, run_at, attempts), QUARANTINE (failed_at, lease, last_error),
--     RETRY_JOB (failed_at, cancelled_at, attempts, run_at, last_error), CANCEL_JOB
--     (cancelled_at, lease, last_error). The `FOR NO KEY UPDATE` row locks of CLAIM, RENEW
--     and COMPLETE_MANY need UPDATE on at least one column, which these grants give.
--     id, kind, payload, queue, priority, max_attempts and created_at are never updated.
--   taskboard_attempts: an attempt's row is written as it ends (migration 15): COMPLETE*,
--     FAIL, RELEASE, SNOOZE, QUARANTINE, CANCEL_JOB and RECORD_LOST insert it with its
--     outcome, CLAIM/CLAIM_ONLY that of the superseded holder, RECORD_RENEWAL_FAILED that of
--     a running attempt whose renewal failed; each updates a row that exists already
--     (INSERT ... ON CONFLICT DO UPDATE), as RECORD_REJECTED does.
--   taskboard_workers: REGISTER_WORKER (INSERT ... ON CONFLICT DO UPDATE resets every
--     column but id), HEARTBEAT, WORKER_STOPPED, REQUEST_PAUSE, REQUEST_DRAIN.
--   taskboard_billing_charges: RECORD_CHARGE, on its own as soon as Stripe answers (a
--     later attempt's replay updates the status: INSERT ... ON CONFLICT DO UPDATE).
--   taskboard_email_sends: RECORD_SENDS, on its own as soon as the relay accepts a message.
--   taskboard_steps: RECORD_STEPS, a durable step's fenced checkpoint (recorded or rejected).
--   taskboard_job_parents: ATTACH_PARENTS at an enqueue with `after`, which also marks the
--     parents (has_children) and parks the child (waiting_on, wait_run_at, run_at); a
--     trigger running as the owner releases or cancels the children when a parent ends.
--   taskboard_jobs.result: STORE_RESULT, fenced, just before the completion.
--   taskboard_job_actions: RETRY_BATCH, CANCEL_BATCH and NOTE_RETRIED (`taskboard retry` and
--     `cancel` by filter, the dashboard's `A`) write a line per job; `history` reads them.
--   taskboard_schema: SCHEMA_VERSION at every start (`migrate` on an up-to-date schema only
--     reads). A pending migration fails under this role (no CREATE anywhere): run
--     `taskboard migrate` as the owner first.
--   taskboard_installation: INSTALLATION_ID, part of every Stripe Idempotency-Key.
--   taskboard_finished_counts: JOB_COUNTS reads it; a trigger running as the owner keeps
--     it (the role writes nothing there).
--   taskboard_waiting_counts: JOB_COUNTS, JOB_COUNTS_BY_QUEUE, ORPHAN_KINDS and the paused
--     queues' counts read it; a trigger of migration 5 running as the owner keeps it, like
--     the finished ones (the role writes nothing there).
--   taskboard_queues: every claim reads it (a paused queue gives nothing); `taskboard
--     queue pause/resume` writes it (PAUSE_QUEUE, RESUME_QUEUE).
--   taskboard_schedules: the workers' scheduler reads it, moves last_slot forward
--     (ENQUEUE_SLOT) and disables a schedule that fails (DISABLE_SCHEDULE); `taskboard
--     schedule add` writes it (and moves its revision, enabling it again). REMOVE_SCHEDULE needs DELETE and
--     is refused: remove a schedule as the owner.
--   Retention: workers prune finished jobs and long-gone worker rows through two SECURITY
--     DEFINER functions of migration 3, which delete only finished rows (jobs holding no
--     lease) older than the ages given, and worker rows gone longer than the age given;
--     the role itself has no DELETE anywhere.
--   taskboard_kind_limits: SET_KIND_LIMITS at registration (a worker declares its kinds'
--     limits; a removed limit is cleared, not deleted), LOCK_LIMITS (a row lock per
--     limited kind, which the UPDATE grant allows), CLAIM_LIMITED reads it and
--     CHARGE_LIMITS writes the claim times (recent). The role can so change any kind's
--     limits (like the rest of item 7, a fake registration can).
--   taskboard_fences: nothing. It is the applications' (`taskboard_fence`, called in
--     their own transactions as their own roles; grant them SELECT, INSERT and UPDATE on
--     it); workers never call it.
--   taskboard_standins: nothing. It is the registry of the embedded default's stand-ins
--     (local SMTP sink and Stripe endpoint, shared by the processes of one host). A
--     production worker is configured with TASKBOARD_SMTP_URL and STRIPE_API_KEY and never
--     starts a stand-in; one that is not starts stand-ins of its own without the registry.
--     Write access would let the credential point every embedded process at an address of
--     its choosing, so it gets none.
--
-- INSERT is granted on the columns the statements insert, not on the table: the role
-- cannot write an id of its own (with `OVERRIDING SYSTEM VALUE` it could take the ids the
-- identity sequence hands out next, and every later enqueue would fail on a duplicate key)
-- nor a created_at. (The other columns it cannot insert it may still UPDATE afterwards.)
-- UPDATE is granted on columns, not on the table: it keeps kind, payload and ids fixed,
-- and, with INSERT on columns too, it takes away LOCK TABLE in every mode but ACCESS SHARE
-- (the lock any SELECT takes). PostgreSQL allows an explicit LOCK TABLE only with a
-- table-level privilege: UPDATE, DELETE, TRUNCATE or MAINTAIN for any mode, INSERT for ROW
-- EXCLUSIVE and below, SELECT for ACCESS SHARE. So the role cannot take SHARE or stronger,
-- the locks that would stop the fleet's claims and completions.
-- No DELETE, no TRUNCATE, no REFERENCES, no TRIGGER, no MAINTAIN: Taskboard deletes rows
-- only through the two retention functions. No sequence privileges: identity columns draw their ids with INSERT alone, and USAGE
-- would let the role burn ids with nextval().
-- LISTEN/NOTIFY, pg_notify(), gen_random_uuid() and advisory locks need no grant.
--
-- Database-wide changes (they apply to EVERY role of this database, not only to Taskboard):
--
--   REVOKE CREATE ON SCHEMA public FROM PUBLIC
--       PostgreSQL 14 and older, and clusters upgraded from them, let every role create
--       tables, functions, types and views in `public`. After this, only roles granted it
--       can. Give it back to a role that needs it with
--           GRANT CREATE ON SCHEMA public TO some_role;
--       (PostgreSQL 15 and newer created with these defaults already do not grant it; then
--       this statement changes nothing.) In PostgreSQL 14 and older `public` belongs to the
--       bootstrap superuser, so run the script as a superuser there, or the revoke only
--       warns and the check below fails.
--   REVOKE TEMPORARY ON DATABASE <this database> FROM PUBLIC
--       Every PostgreSQL grants every role TEMP on every database by default: temporary
--       tables, and temporary functions in pg_temp. After this, only the database owner,
--       superusers and roles granted it can create temporary objects in this database.
--       Give it back to a role that needs it with
--           GRANT TEMPORARY ON DATABASE <this database> TO some_role;
--       Other databases of the cluster are not changed.
--
-- With no CREATE on any schema and no TEMP, the role cannot create tables, views, types,
-- functions or procedures anywhere (a function in pg_temp needs TEMP), so it cannot plant a
-- function or table that another role's search_path would pick up. The check at the end
-- fails if any schema of this database still gives it CREATE (another application's schema
-- with CREATE for PUBLIC, for instance): fix that grant, or revoke it, and run again.
--
-- What the role can still do. This is the trust the credential carries; each item is
-- proven by tests/faults/test_least_privilege.py.
--   1. Read every row of every table above but taskboard_standins: job payloads (email
--      addresses, customers, amounts), billing records, worker hosts and pids.
--   2. Enqueue any job with any kind, payload, queue, priority, run_at and max_attempts,
--      bypassing the validation of `taskboard enqueue` (a kind no worker knows waits and
--      status names it; a payload that breaks a claim is buried as dead). Enqueued billing
--      jobs are charged by the fleet with its Stripe key, and email jobs are sent.
--   3. Rewrite the lease of any unfinished job (lease_token, lease_expires_at, claimed_by,
--      claimed_at): the lease protocol needs it. It can take a job away from the worker
--      running it (that worker's completion is then rejected, after its side effects),
--      or keep a job leased so nobody runs it.
--   4. Finish any job without running it (completed_at, failed_at, cancelled_at,
--      last_error), and make any finished job run again by clearing those (`retry` does it
--      for dead and cancelled jobs; clearing completed_at runs a completed one again, with
--      its side effects); change run_at, attempts and claim_count of any job. It cannot
--      change a job's id, kind, payload, queue, priority, max_attempts or created_at.
--   5. Rewrite the outcome, end, error and renewal/supersession times of any attempt in
--      the history, and insert attempt rows for any job.
--   6. Insert a billing record for any job that has none (a forged audit entry); it
--      cannot change or delete one.
--   7. Register fake workers and rewrite every column but the id of any worker's row:
--      pause or drain any worker (the dashboard's controls), and change what status shows
--      about it (its queues and kinds: a fake live worker hides the "no worker runs this
--      kind" warning).
--   8. Hold locks in an open transaction. Row locks (SELECT ... FOR UPDATE on
--      taskboard_jobs, _attempts, _workers; its own updates): the jobs it locks are
--      skipped by claims, renewals and completions (SKIP LOCKED) until it lets go. The
--      table locks its statements take (ACCESS SHARE to read, ROW SHARE and ROW EXCLUSIVE
--      to lock rows and write, and LOCK TABLE ... IN ACCESS SHARE MODE) and advisory locks,
--      the migration's included, make `taskboard migrate` wait; while a migration waits
--      for its ACCESS EXCLUSIVE lock, every later query of the fleet on that table waits
--      behind it. An open transaction also holds back VACUUM of the whole database.
--   9. LISTEN to and NOTIFY any channel: wake every worker (taskboard_jobs), make a worker
--      re-read its row (taskboard_control), fill the notification queue.
--  10. Delete finished jobs (and their attempts) of any age, and worker rows of any age that
--      stopped or went quiet, through the retention functions (the ages are its to give).
--      Unfinished jobs, billing records and anything else it cannot delete.
--  11. Pause or resume any queue, and add or change schedules (which enqueue jobs on their
--      own, like item 2); it cannot remove a schedule.
--  12. Use the server's resources: long or expensive queries (pg_sleep, cross joins, its own
--      work_mem and statement_timeout: it can SET its session settings), anonymous DO
--      blocks (plpgsql is trusted; they run with its own privileges), large objects
--      (lo_from_bytea needs no grant and fills disk), as many connections as its
--      CONNECTION LIMIT allows, and pg_terminate_backend() of other sessions of the same
--      login role.

DO $$
DECLARE
    db text := current_database();
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'taskboard_worker') THEN
        CREATE ROLE taskboard_worker NOLOGIN;
    END IF;
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO taskboard_worker', db);
    EXECUTE format('REVOKE CREATE, TEMPORARY ON DATABASE %I FROM taskboard_worker', db);
    EXECUTE format('REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC', db);
END
$$;

REVOKE CREATE ON SCHEMA public FROM PUBLIC;
REVOKE CREATE ON SCHEMA public FROM taskboard_worker;
GRANT USAGE ON SCHEMA public TO taskboard_worker;

-- Start from nothing (REVOKE on a table also revokes its column grants).
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM taskboard_worker;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM taskboard_worker;

GRANT SELECT ON taskboard_jobs TO taskboard_worker;
GRANT INSERT (kind, payload, queue, priority, run_at, max_attempts)
    ON taskboard_jobs TO taskboard_worker;
GRANT UPDATE (lease_token, lease_expires_at, claimed_by, claimed_at, attempts, claim_count,
              run_at, completed_at, failed_at, cancelled_at, last_error, snoozes,
              traceparent, tracestate)
    ON taskboard_jobs TO taskboard_worker;

GRANT SELECT ON taskboard_attempts TO taskboard_worker;
GRANT INSERT (job_id, attempt, lease_token, worker_id, claimed_at, pickup_seconds, outcome,
              ended_at, error, renewal_failed_at, superseded_at, handler_seconds,
              min_margin_seconds)
    ON taskboard_attempts TO taskboard_worker;
GRANT UPDATE (outcome, ended_at, error, renewal_failed_at, superseded_at, handler_seconds,
              min_margin_seconds)
    ON taskboard_attempts TO taskboard_worker;

GRANT SELECT ON taskboard_workers TO taskboard_worker;
GRANT INSERT (id, host, pid, queues, kinds, lease_seconds, capacity, pool_max)
    ON taskboard_workers TO taskboard_worker;
GRANT UPDATE (host, pid, started_at, heartbeat_at, stopped_at, state, pause_requested,
              drain_requested, queues, kinds, lease_seconds, capacity, in_flight,
              renewals_ok, renewals_failed, pool_max, pool_in_use, pool_idle, pool_waiting,
              last_error, last_error_at)
    ON taskboard_workers TO taskboard_worker;

GRANT SELECT ON taskboard_billing_charges TO taskboard_worker;
GRANT INSERT (job_id, payment_intent_id, amount, currency, customer, attempt, worker_id,
              status)
    ON taskboard_billing_charges TO taskboard_worker;
GRANT UPDATE (status) ON taskboard_billing_charges TO taskboard_worker;

GRANT SELECT ON taskboard_email_sends TO taskboard_worker;
GRANT INSERT (job_id, attempt, message_id, recipient, worker_id)
    ON taskboard_email_sends TO taskboard_worker;

GRANT SELECT ON taskboard_steps TO taskboard_worker;
GRANT INSERT (job_id, name, outcome, result, attempt, worker_id)
    ON taskboard_steps TO taskboard_worker;
GRANT SELECT ON taskboard_job_parents TO taskboard_worker;
GRANT INSERT (child_id, parent_id) ON taskboard_job_parents TO taskboard_worker;
GRANT UPDATE (result, waiting_on, wait_run_at, has_children) ON taskboard_jobs
    TO taskboard_worker;
GRANT SELECT ON taskboard_job_actions TO taskboard_worker;
GRANT INSERT (job_id, action, detail) ON taskboard_job_actions TO taskboard_worker;

GRANT SELECT ON taskboard_schema TO taskboard_worker;
GRANT SELECT ON taskboard_installation TO taskboard_worker;
GRANT SELECT ON taskboard_finished_counts TO taskboard_worker;
GRANT SELECT ON taskboard_waiting_counts TO taskboard_worker;
GRANT INSERT (timeout_seconds, unique_key, traceparent, tracestate)
    ON taskboard_jobs TO taskboard_worker;

GRANT SELECT ON taskboard_queues TO taskboard_worker;
GRANT INSERT (name, paused_at, reason) ON taskboard_queues TO taskboard_worker;
GRANT UPDATE (paused_at, reason) ON taskboard_queues TO taskboard_worker;

GRANT SELECT ON taskboard_schedules TO taskboard_worker;
GRANT INSERT (name, cron, kind, payload, queue, priority, max_attempts, timeout_seconds, tz,
              traceparent, tracestate)
    ON taskboard_schedules TO taskboard_worker;
GRANT UPDATE (cron, kind, payload, queue, priority, max_attempts, timeout_seconds, last_slot,
              tz, revision, disabled_at, disabled_error, traceparent, tracestate)
    ON taskboard_schedules TO taskboard_worker;

GRANT SELECT ON taskboard_kind_limits TO taskboard_worker;
GRANT INSERT (kind, max_running, rate_per_second) ON taskboard_kind_limits TO taskboard_worker;
GRANT UPDATE (max_running, rate_per_second, recent, updated_at)
    ON taskboard_kind_limits TO taskboard_worker;

GRANT EXECUTE ON FUNCTION taskboard_prune_finished(interval, interval, interval, integer)
    TO taskboard_worker;
GRANT EXECUTE ON FUNCTION taskboard_prune_workers(interval) TO taskboard_worker;

-- The check: fail (and, under psql -v ON_ERROR_STOP=1, stop) if the role can do more.
DO $$
DECLARE
    db text := current_database();
    table_privileges text := 'INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER'
        || CASE WHEN current_setting('server_version_num')::int >= 170000
                THEN ', MAINTAIN' ELSE '' END;
    bad text;
BEGIN
    IF has_database_privilege('taskboard_worker', db, 'CREATE')
       OR has_database_privilege('taskboard_worker', db, 'TEMPORARY') THEN
        RAISE EXCEPTION 'taskboard_worker can still create schemas or temporary objects in %', db;
    END IF;
    SELECT string_agg(nspname, ', ') INTO bad
      FROM pg_namespace WHERE has_schema_privilege('taskboard_worker', oid, 'CREATE');
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'taskboard_worker can still create objects in schema(s) %', bad
            USING HINT = 'revoke CREATE on them from PUBLIC (or from the role that grants it)';
    END IF;
    SELECT string_agg(oid::regclass::text, ', ') INTO bad
      FROM pg_class
     WHERE relnamespace = 'public'::regnamespace AND relname LIKE 'taskboard\_%'
       AND relkind IN ('r', 'p')
       AND has_table_privilege('taskboard_worker', oid, table_privileges);
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'taskboard_worker still has table-wide privileges among % on %',
            table_privileges, bad;
    END IF;
    SELECT string_agg(roleid::regrole::text, ', ') INTO bad
      FROM pg_auth_members WHERE member = 'taskboard_worker'::regrole;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'taskboard_worker is a member of %: it gets their privileges too', bad;
    END IF;
END
$$;
