"""Enqueueing and the operator's commands on jobs (retry, cancel)."""

from __future__ import annotations

from typing import Final, LiteralString

# --- enqueue -----------------------------------------------------------------------------

ENQUEUE_MANY: Final[LiteralString] = """
WITH ins AS (
    INSERT INTO taskboard_jobs
           (kind, payload, queue, priority, run_at, max_attempts, timeout_seconds)
    SELECT k, p, q, pr, coalesce(ra, now()), ma, t
      FROM unnest(%(kinds)s::text[], %(payloads)s::jsonb[], %(queues)s::text[],
                  %(priorities)s::int[], %(run_ats)s::timestamptz[], %(max_attempts)s::int[],
                  %(timeouts)s::float8[])
           WITH ORDINALITY AS t(k, p, q, pr, ra, ma, t, n)
     ORDER BY n
    RETURNING id, queue
), notified AS (
    -- One NOTIFY per queue. Referenced below: PostgreSQL skips unreferenced SELECT CTEs.
    SELECT count(pg_notify('taskboard_jobs', queue)) AS n
      FROM (SELECT DISTINCT queue FROM ins) q
)
SELECT ins.id FROM ins, notified ORDER BY ins.id
"""

# A job with a unique key: inserted unless an unfinished job of its kind holds the key, in
# which case that job's id comes back with `existed`. (The other job may finish between the
# two halves; the caller then simply tries again.)
ENQUEUE_UNIQUE: Final[LiteralString] = """
WITH ins AS (
    INSERT INTO taskboard_jobs (kind, payload, queue, priority, run_at, max_attempts,
                                timeout_seconds, unique_key)
    VALUES (%(kind)s, %(payload)s, %(queue)s, %(priority)s, coalesce(%(run_at)s, now()),
            %(max_attempts)s, %(timeout)s, %(key)s)
    ON CONFLICT (kind, unique_key)
       WHERE unique_key IS NOT NULL AND completed_at IS NULL AND failed_at IS NULL
         AND cancelled_at IS NULL
       DO NOTHING
    RETURNING id, queue
), notified AS (
    SELECT count(pg_notify('taskboard_jobs', queue)) AS n FROM ins
)
SELECT ins.id, false AS existed FROM ins, notified
UNION ALL
SELECT j.id, true FROM taskboard_jobs j
 WHERE NOT EXISTS (SELECT 1 FROM ins) AND j.kind = %(kind)s AND j.unique_key = %(key)s
   AND j.completed_at IS NULL AND j.failed_at IS NULL AND j.cancelled_at IS NULL
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

# Cancel: the job is finished (cancelled) and its lease taken away in the same statement;
# the attempt that held it ends as `cancelled`, and the fleet hears it at once (NOTIFY), so
# the worker holding it stops its handler within a second instead of at its next renewal.
CANCEL_JOB: Final[LiteralString] = """
WITH old AS (
    SELECT id, lease_token FROM taskboard_jobs
     WHERE id = %(id)s AND completed_at IS NULL AND failed_at IS NULL AND cancelled_at IS NULL
       FOR UPDATE
), c AS (
    UPDATE taskboard_jobs j
       SET cancelled_at = now(), lease_token = NULL, lease_expires_at = NULL,
           last_error = coalesce(last_error, 'cancelled by operator')
      FROM old WHERE j.id = old.id
    RETURNING j.id
), history AS (
    UPDATE taskboard_attempts a SET outcome = 'cancelled', ended_at = now(),
           error = 'cancelled by operator'
      FROM old WHERE a.job_id = old.id AND a.lease_token = old.lease_token
       AND a.outcome IS NULL
), notified AS (
    SELECT count(pg_notify('taskboard_control', 'cancel:' || old.lease_token)) AS n
      FROM old WHERE old.lease_token IS NOT NULL
)
SELECT c.id FROM c, notified
"""

JOB_EXISTS: Final[LiteralString] = "SELECT 1 FROM taskboard_jobs WHERE id = %(id)s"


# --- queues --------------------------------------------------------------------------------

PAUSE_QUEUE: Final[LiteralString] = """
INSERT INTO taskboard_queues (name, paused_at, reason) VALUES (%(name)s, now(), %(reason)s)
ON CONFLICT (name) DO UPDATE
   SET paused_at = coalesce(taskboard_queues.paused_at, now()), reason = excluded.reason
RETURNING paused_at
"""
RESUME_QUEUE: Final[LiteralString] = """
WITH r AS (
    UPDATE taskboard_queues SET paused_at = NULL, reason = NULL
     WHERE name = %(name)s AND paused_at IS NOT NULL
    RETURNING name
)
SELECT r.name, pg_notify('taskboard_jobs', r.name) FROM r
"""
LIST_QUEUES: Final[LiteralString] = """
SELECT q.name, q.paused_at, q.reason,
       (SELECT count(*) FROM taskboard_jobs j
         WHERE j.queue = q.name AND j.lease_token IS NULL AND j.completed_at IS NULL
           AND j.failed_at IS NULL AND j.cancelled_at IS NULL AND j.run_at <= now())
           AS waiting
  FROM taskboard_queues q
 WHERE q.paused_at IS NOT NULL
 ORDER BY q.name
"""

# --- schedules -----------------------------------------------------------------------------

UPSERT_SCHEDULE: Final[LiteralString] = """
INSERT INTO taskboard_schedules
       (name, cron, kind, payload, queue, priority, max_attempts, timeout_seconds)
VALUES (%(name)s, %(cron)s, %(kind)s, %(payload)s, %(queue)s, %(priority)s,
        %(max_attempts)s, %(timeout)s)
ON CONFLICT (name) DO UPDATE
   SET cron = excluded.cron, kind = excluded.kind, payload = excluded.payload,
       queue = excluded.queue, priority = excluded.priority,
       max_attempts = excluded.max_attempts, timeout_seconds = excluded.timeout_seconds
RETURNING (xmax = 0) AS created
"""
REMOVE_SCHEDULE: Final[LiteralString] = (
    "DELETE FROM taskboard_schedules WHERE name = %(name)s RETURNING name"
)
LIST_SCHEDULES: Final[LiteralString] = """
SELECT name, cron, kind, payload, queue, priority, max_attempts, timeout_seconds,
       created_at, last_slot
  FROM taskboard_schedules ORDER BY name
"""
# One slot of one schedule, enqueued by whichever worker moves `last_slot` forward first:
# the others find it already there and enqueue nothing. The slot is the job's unique key,
# so even a schedule edited by hand cannot put the same slot in the queue twice at once.
ENQUEUE_SLOT: Final[LiteralString] = """
WITH claimed AS (
    UPDATE taskboard_schedules
       SET last_slot = %(slot)s
     WHERE name = %(name)s AND (last_slot IS NULL OR last_slot < %(slot)s)
    RETURNING name, kind, payload, queue, priority, max_attempts, timeout_seconds
), ins AS (
    INSERT INTO taskboard_jobs (kind, payload, queue, priority, max_attempts,
                                timeout_seconds, unique_key)
    SELECT kind, payload, queue, priority, max_attempts, timeout_seconds,
           'schedule:' || name || ':' || to_char(%(slot)s::timestamptz AT TIME ZONE 'UTC',
                                                 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
      FROM claimed
    ON CONFLICT (kind, unique_key)
       WHERE unique_key IS NOT NULL AND completed_at IS NULL AND failed_at IS NULL
         AND cancelled_at IS NULL
       DO NOTHING
    RETURNING id, queue
), notified AS (
    SELECT count(pg_notify('taskboard_jobs', queue)) AS n FROM ins
)
SELECT ins.id FROM ins, notified
"""

# --- retention -----------------------------------------------------------------------------

# Both run as the schema's owner (SECURITY DEFINER functions of migration 3), under an
# advisory lock so one worker of the fleet prunes at a time; each call deletes one batch.
PRUNE_LOCK: Final[LiteralString] = "SELECT pg_try_advisory_xact_lock(8816834908828729346)"
PRUNE_FINISHED: Final[LiteralString] = """
SELECT taskboard_prune_finished(make_interval(secs => %(completed)s),
                                make_interval(secs => %(dead)s),
                                make_interval(secs => %(cancelled)s), %(batch)s)
"""
PRUNE_WORKERS: Final[LiteralString] = """
SELECT taskboard_prune_workers(make_interval(secs => %(age)s))
"""
