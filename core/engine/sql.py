"""Every SQL statement Taskboard runs, named after the transition it performs.

All user data travels as bind parameters; nothing here is ever formatted with user input.
Every deadline comparison uses the database's `now()`, never the worker's clock.
"""

from __future__ import annotations

from typing import Final, LiteralString

# --- enqueue -----------------------------------------------------------------------------

ENQUEUE_MANY: Final[LiteralString] = """
WITH ins AS (
    INSERT INTO taskboard_jobs (kind, payload, queue, priority, run_at, max_attempts)
    SELECT k, p, q, pr, coalesce(ra, now()), ma
      FROM unnest(%(kinds)s::text[], %(payloads)s::jsonb[], %(queues)s::text[],
                  %(priorities)s::int[], %(run_ats)s::timestamptz[], %(max_attempts)s::int[])
           WITH ORDINALITY AS t(k, p, q, pr, ra, ma, n)
     ORDER BY n
    RETURNING id, queue
), notified AS (
    -- One NOTIFY per queue. Referenced below: PostgreSQL skips unreferenced SELECT CTEs.
    SELECT count(pg_notify('taskboard_jobs', queue)) AS n
      FROM (SELECT DISTINCT queue FROM ins) q
)
SELECT ins.id FROM ins, notified ORDER BY ins.id
"""

NOTIFY_CONTROL: Final[LiteralString] = "SELECT pg_notify('taskboard_control', %(worker)s)"

# --- the lease protocol ------------------------------------------------------------------

# Claim: fresh jobs and expired leases in one statement. NO KEY UPDATE, not UPDATE: a
# stalled worker whose open transaction wrote a row referencing the job (billing's record)
# holds a KEY SHARE lock on it, and FOR UPDATE would skip that job for ever. The claim
# never changes the key, so the weaker lock is enough and the job stays reclaimable.
# The reclaim half reports the previous token and worker (read in the locking subquery,
# before the UPDATE overwrites them) and closes the previous attempt as lease_lost.
# Expired leases that used their last attempt are not claimed but buried (dead with the
# reason) in the same statement, so a job whose worker dies every time cannot loop forever.
_CLAIM_CTES: Final[LiteralString] = """
fresh AS (
    SELECT id, NULL::uuid AS prev_token, NULL::text AS prev_worker, 1 AS rank
      FROM taskboard_jobs
     WHERE lease_token IS NULL AND completed_at IS NULL AND failed_at IS NULL
       AND cancelled_at IS NULL AND queue = ANY(%(queues)s) AND run_at <= now()
     ORDER BY queue, priority DESC, run_at, id
     LIMIT %(limit)s
     FOR NO KEY UPDATE SKIP LOCKED
), expired AS (
    SELECT id, lease_token AS prev_token, claimed_by AS prev_worker,
           attempts >= max_attempts AS exhausted
      FROM taskboard_jobs
     WHERE lease_token IS NOT NULL AND lease_expires_at <= now()
       AND queue = ANY(%(queues)s) AND id <> ALL(%(completing)s::bigint[])
     ORDER BY lease_expires_at
     LIMIT %(limit)s
     FOR NO KEY UPDATE SKIP LOCKED
), picked AS (
    SELECT id, prev_token, prev_worker FROM (
        SELECT id, prev_token, prev_worker, 0 AS rank FROM expired WHERE NOT exhausted
        UNION ALL
        SELECT id, prev_token, prev_worker, rank FROM fresh
    ) c
    ORDER BY rank
    LIMIT %(limit)s
), claimed AS (
    -- Rows by an id array, not a join with `picked`: the plan is cached and generic, and
    -- with LIMIT a parameter the planner guesses `picked` at a tenth of the table; after an
    -- ANALYZE its join became a sequential scan of every job (5.5 ms per claim instead of
    -- 0.5, measured). An id array always takes the primary key.
    UPDATE taskboard_jobs j
       SET lease_token = gen_random_uuid(),
           lease_expires_at = now() + make_interval(secs => %(lease)s),
           claimed_by = %(worker)s,
           claimed_at = now(),
           attempts = j.attempts + 1
     WHERE j.id = ANY (ARRAY(SELECT id FROM picked))
    -- The payload as text: the worker decodes it per job, so one row too deep or too
    -- large to decode becomes one dead job instead of a claim that always fails.
    RETURNING j.id, j.kind, j.payload::text AS payload, j.queue, j.attempts, j.max_attempts,
              j.lease_token, j.lease_expires_at
), buried AS (
    UPDATE taskboard_jobs j
       SET failed_at = now(), lease_token = NULL, lease_expires_at = NULL,
           last_error = format('lease expired on attempt %%s of %%s: worker %%s stopped renewing',
                               j.attempts, j.max_attempts, coalesce(j.claimed_by, '?'))
     WHERE j.id = ANY (ARRAY(SELECT id FROM expired WHERE exhausted))
    RETURNING j.id
), superseded AS (
    -- Every picked row is claimed and every exhausted one buried (both are locked above).
    SELECT id, prev_token FROM picked WHERE prev_token IS NOT NULL
    UNION ALL
    SELECT id, prev_token FROM expired WHERE exhausted
), closed AS (
    -- Both arrays, for the same reason as above; tokens are unique, so pairing any id with
    -- any token of this list matches only the attempt it came from.
    UPDATE taskboard_attempts a
       SET outcome = 'lease_lost', ended_at = now()
     WHERE a.job_id = ANY (ARRAY(SELECT id FROM superseded))
       AND a.lease_token = ANY (ARRAY(SELECT prev_token FROM superseded))
       AND a.outcome IS NULL
), history AS (
    INSERT INTO taskboard_attempts (job_id, attempt, lease_token, worker_id, claimed_at)
    SELECT id, attempts, lease_token, %(worker)s, now() FROM claimed
)
"""

CLAIM: Final[LiteralString] = (
    "WITH"
    + _CLAIM_CTES
    + """SELECT c.id, c.kind, c.payload, c.queue, c.attempts, c.max_attempts, c.lease_token,
       c.lease_expires_at, p.prev_token, p.prev_worker, now() AS db_now
  FROM claimed c JOIN picked p ON p.id = c.id
 ORDER BY c.id"""
)


# Renew every in-flight lease of one worker in one statement. Requires the current token
# AND an unexpired lease: a lease that expired is lost even if nobody reclaimed it yet,
# because another worker may claim it at any moment.
# `j.id = ANY(ids)` beside the join lets the generic plan take the primary key instead of
# walking every held lease of the fleet when the statistics say many are held.
RENEW: Final[LiteralString] = """
UPDATE taskboard_jobs j
   SET lease_expires_at = now() + make_interval(secs => %(lease)s)
  FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS r(id, token)
 WHERE j.id = ANY (%(ids)s::bigint[]) AND j.id = r.id AND j.lease_token = r.token
   AND j.lease_expires_at > now()
RETURNING j.id, j.lease_token, j.lease_expires_at, now() AS db_now
"""

RECORD_RENEWAL_FAILED: Final[LiteralString] = """
UPDATE taskboard_attempts a
   SET renewal_failed_at = now(),
       outcome = coalesce(a.outcome, 'lease_lost'),
       ended_at = coalesce(a.ended_at, now())
  FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS r(id, token)
 WHERE a.job_id = r.id AND a.lease_token = r.token
"""

# Fenced completion. Zero rows means this worker no longer owns the job: it must not
# report success. Runs inside the handler's transaction when the handler wrote to the
# database, so those writes commit or roll back with it.
COMPLETE: Final[LiteralString] = """
WITH done AS (
    UPDATE taskboard_jobs
       SET completed_at = now(), lease_token = NULL, lease_expires_at = NULL
     WHERE id = %(id)s AND lease_token = %(token)s
    RETURNING id
), history AS (
    UPDATE taskboard_attempts SET outcome = 'completed', ended_at = now()
     WHERE job_id = %(id)s AND lease_token = %(token)s AND EXISTS (SELECT 1 FROM done)
)
SELECT count(*) FROM done
"""

# Fenced completion of many jobs whose handlers wrote nothing: one statement, and each row
# still gets its own outcome (a stale token in the group is rejected alone).
COMPLETE_MANY: Final[LiteralString] = """
WITH done AS (
    UPDATE taskboard_jobs j
       SET completed_at = now(), lease_token = NULL, lease_expires_at = NULL
      FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS r(id, token)
     WHERE j.id = r.id AND j.lease_token = r.token
    RETURNING j.id, r.token
), history AS (
    UPDATE taskboard_attempts a SET outcome = 'completed', ended_at = now()
      FROM done d WHERE a.job_id = d.id AND a.lease_token = d.token
)
SELECT id, token FROM done
"""

# After a rejected completion (and the rollback of the handler's writes) the stale attempt
# is marked in the history, so audits show the worker came back and was fenced.
RECORD_REJECTED: Final[LiteralString] = """
UPDATE taskboard_attempts
   SET outcome = 'completion_rejected', ended_at = coalesce(ended_at, now())
 WHERE job_id = %(id)s AND lease_token = %(token)s
"""

RECORD_REJECTED_MANY: Final[LiteralString] = """
UPDATE taskboard_attempts a
   SET outcome = 'completion_rejected', ended_at = coalesce(a.ended_at, now())
  FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS r(id, token)
 WHERE a.job_id = r.id AND a.lease_token = r.token
"""

# Fenced failure: retry after a backoff computed by the caller, or dead when attempts are
# used up or the error is permanent.
FAIL: Final[LiteralString] = """
WITH f AS (
    UPDATE taskboard_jobs
       SET lease_token = NULL, lease_expires_at = NULL, last_error = %(error)s,
           failed_at = CASE WHEN %(permanent)s OR attempts >= max_attempts THEN now() END,
           run_at = CASE WHEN %(permanent)s OR attempts >= max_attempts THEN run_at
                         ELSE now() + make_interval(secs => %(backoff)s) END
     WHERE id = %(id)s AND lease_token = %(token)s
    RETURNING failed_at IS NOT NULL AS dead, run_at
), history AS (
    UPDATE taskboard_attempts SET outcome = 'failed', ended_at = now(), error = %(error)s
     WHERE job_id = %(id)s AND lease_token = %(token)s AND EXISTS (SELECT 1 FROM f)
)
SELECT dead, run_at FROM f
"""

# Fenced release (drain): the job is claimable at once and the attempt does not count.
RELEASE: Final[LiteralString] = """
WITH r AS (
    UPDATE taskboard_jobs j
       SET lease_token = NULL, lease_expires_at = NULL, run_at = now(),
           attempts = greatest(j.attempts - 1, 0)
      FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS x(id, token)
     WHERE j.id = x.id AND j.lease_token = x.token
    RETURNING j.id, x.token
), history AS (
    UPDATE taskboard_attempts a SET outcome = 'released', ended_at = now()
      FROM r WHERE a.job_id = r.id AND a.lease_token = r.token
), notified AS (
    SELECT count(pg_notify('taskboard_jobs', 'released')) AS n WHERE EXISTS (SELECT 1 FROM r)
)
SELECT r.id FROM r LEFT JOIN notified ON true
"""

# When nothing is claimable: how long until something could be (a scheduled job comes due
# or a lease expires), so an idle worker sleeps exactly that long instead of polling.
NEXT_WAKEUP: Final[LiteralString] = """
SELECT extract(epoch FROM least(
           (SELECT min(run_at) FROM taskboard_jobs
             WHERE lease_token IS NULL AND completed_at IS NULL AND failed_at IS NULL
               AND cancelled_at IS NULL AND queue = ANY(%(queues)s)),
           (SELECT min(lease_expires_at) FROM taskboard_jobs
             WHERE lease_token IS NOT NULL AND queue = ANY(%(queues)s))
       ) - now())
"""

# Session settings of a worker's engine connection (core/engine_conn.py), which runs only
# the statements in this file. Generic plans: the grouped completion was re-planned on every
# call (custom plans, ~0.2 ms each, more than it takes to run); its generic plan is the
# same index nested loop.
ENGINE_SESSION: Final[LiteralString] = "SET plan_cache_mode = force_generic_plan"
ENGINE_SESSION_RESET: Final[LiteralString] = "RESET plan_cache_mode"

# --- workers -----------------------------------------------------------------------------

REGISTER_WORKER: Final[LiteralString] = """
INSERT INTO taskboard_workers (id, host, pid, queues, lease_seconds, capacity, pool_max)
VALUES (%(id)s, %(host)s, %(pid)s, %(queues)s, %(lease)s, %(capacity)s, %(pool_max)s)
ON CONFLICT (id) DO UPDATE
   SET host = excluded.host, pid = excluded.pid, queues = excluded.queues,
       lease_seconds = excluded.lease_seconds, capacity = excluded.capacity,
       pool_max = excluded.pool_max, started_at = now(), heartbeat_at = now(),
       stopped_at = NULL, state = 'running', pause_requested = false,
       drain_requested = false, in_flight = 0, renewals_ok = 0, renewals_failed = 0
"""

HEARTBEAT: Final[LiteralString] = """
UPDATE taskboard_workers
   SET heartbeat_at = now(), state = %(state)s, in_flight = %(in_flight)s,
       renewals_ok = %(renewals_ok)s, renewals_failed = %(renewals_failed)s,
       pool_max = %(pool_max)s, pool_in_use = %(pool_in_use)s, pool_idle = %(pool_idle)s,
       pool_waiting = %(pool_waiting)s
 WHERE id = %(id)s
RETURNING pause_requested, drain_requested
"""

WORKER_STOPPED: Final[LiteralString] = """
UPDATE taskboard_workers
   SET state = 'stopped', stopped_at = now(), heartbeat_at = now(), in_flight = 0,
       pool_in_use = 0, pool_idle = 0, pool_waiting = 0
 WHERE id = %(id)s
"""

REQUEST_PAUSE: Final[LiteralString] = """
UPDATE taskboard_workers SET pause_requested = %(pause)s
 WHERE id = %(id)s AND stopped_at IS NULL
RETURNING state
"""

REQUEST_DRAIN: Final[LiteralString] = """
UPDATE taskboard_workers SET drain_requested = true
 WHERE id = %(id)s AND stopped_at IS NULL
RETURNING state
"""

# --- operator commands -------------------------------------------------------------------

RETRY_JOB: Final[LiteralString] = """
WITH r AS (
    UPDATE taskboard_jobs
       SET failed_at = NULL, cancelled_at = NULL, attempts = 0, run_at = now(),
           last_error = NULL
     WHERE id = %(id)s AND (failed_at IS NOT NULL OR cancelled_at IS NOT NULL)
    RETURNING id, queue
)
SELECT id, pg_notify('taskboard_jobs', queue) FROM r
"""

CANCEL_JOB: Final[LiteralString] = """
UPDATE taskboard_jobs
   SET cancelled_at = now(), lease_token = NULL, lease_expires_at = NULL,
       last_error = coalesce(last_error, 'cancelled by operator')
 WHERE id = %(id)s AND completed_at IS NULL AND failed_at IS NULL AND cancelled_at IS NULL
RETURNING id
"""

JOB_EXISTS: Final[LiteralString] = "SELECT 1 FROM taskboard_jobs WHERE id = %(id)s"

# --- status and the dashboard ------------------------------------------------------------

JOB_COUNTS: Final[LiteralString] = """
SELECT count(*) FILTER (WHERE lease_token IS NULL AND completed_at IS NULL
                          AND failed_at IS NULL AND cancelled_at IS NULL AND run_at <= now()),
       count(*) FILTER (WHERE lease_token IS NULL AND completed_at IS NULL
                          AND failed_at IS NULL AND cancelled_at IS NULL AND run_at > now()),
       count(*) FILTER (WHERE lease_token IS NOT NULL AND lease_expires_at > now()),
       count(*) FILTER (WHERE lease_token IS NOT NULL AND lease_expires_at <= now()),
       count(*) FILTER (WHERE completed_at IS NOT NULL),
       count(*) FILTER (WHERE failed_at IS NOT NULL),
       count(*) FILTER (WHERE cancelled_at IS NOT NULL),
       now()
  FROM taskboard_jobs
"""

LIST_WORKERS: Final[LiteralString] = """
SELECT id, host, pid, started_at, heartbeat_at, stopped_at, state, pause_requested,
       drain_requested, in_flight, capacity, lease_seconds, renewals_ok, renewals_failed,
       pool_max, pool_in_use, pool_idle, pool_waiting,
       extract(epoch FROM now() - heartbeat_at) AS heartbeat_age
  FROM taskboard_workers
 WHERE stopped_at IS NULL OR stopped_at > now() - make_interval(secs => %(keep_stopped)s)
 ORDER BY started_at, id
"""

LIST_CLAIMS: Final[LiteralString] = """
SELECT j.id, j.kind, j.queue, j.claimed_by, j.lease_token, j.attempts, j.max_attempts,
       j.claimed_at, j.lease_expires_at,
       coalesce(w.lease_seconds, extract(epoch FROM j.lease_expires_at - j.claimed_at))
  FROM taskboard_jobs j
  LEFT JOIN taskboard_workers w ON w.id = j.claimed_by
 WHERE j.lease_token IS NOT NULL
 ORDER BY j.lease_expires_at, j.id
 LIMIT %(limit)s
"""

COUNT_CLAIMS: Final[LiteralString] = (
    "SELECT count(*) FROM taskboard_jobs WHERE lease_token IS NOT NULL"
)

LIST_TROUBLE: Final[LiteralString] = """
SELECT coalesce(ended_at, renewal_failed_at, claimed_at) AS at, job_id, worker_id,
       lease_token, CASE WHEN outcome IS NULL THEN 'renewal_failed' ELSE outcome END,
       coalesce(error, '')
  FROM taskboard_attempts
 WHERE outcome IN ('completion_rejected', 'lease_lost') OR renewal_failed_at IS NOT NULL
 ORDER BY coalesce(ended_at, renewal_failed_at, claimed_at) DESC, id DESC
 LIMIT %(limit)s
"""

LIST_DEAD: Final[LiteralString] = """
SELECT id, kind, attempts, coalesce(last_error, ''), failed_at
  FROM taskboard_jobs
 WHERE failed_at IS NOT NULL
 ORDER BY failed_at DESC, id DESC
 LIMIT %(limit)s
"""

JOB_ATTEMPTS: Final[LiteralString] = """
SELECT attempt, lease_token, worker_id, claimed_at, ended_at, outcome, error,
       renewal_failed_at
  FROM taskboard_attempts
 WHERE job_id = %(id)s
 ORDER BY attempt, id
"""

DB_NOW: Final[LiteralString] = "SELECT now()"
