"""Enqueueing and the operator's commands on jobs (retry, cancel)."""

from __future__ import annotations

from typing import Final, LiteralString

from taskboard.core.sql.attempts import _ATTEMPT_FROM_JOB, _ATTEMPT_KEYS

# --- enqueue -----------------------------------------------------------------------------

# Both take one array per column, which core/queue/pg_arrays.py sends in binary (no text quoting
# of 20k payloads), and the payloads as JSON text already encoded by validation, parsed
# once here by `::jsonb`.
# (Measured against binary COPY, 20k jobs: COPY with ids reserved by nextval first, or into
# a temporary table then INSERT ... SELECT, was no faster; the server's insert dominates.
# COPY returns no ids, cannot say which unique keys were taken, and a temporary table
# needs the TEMP privilege that docs/least-privilege.sql takes away.)

# Jobs without a unique key. Their ids follow the input order (rows are inserted in
# ordinality order, so the identity hands out ids in that order); the queues to wake come
# from the caller, one NOTIFY per distinct queue, sent by PostgreSQL only on commit.
ENQUEUE_MANY: Final[LiteralString] = """
WITH ins AS (
    INSERT INTO taskboard_jobs
           (kind, payload, queue, priority, run_at, max_attempts, timeout_seconds,
            traceparent, tracestate)
    SELECT k, p::jsonb, q, pr, coalesce(ra, now()), ma, t,
           %(traceparent)s::text, %(tracestate)s::text
      FROM unnest(%(kinds)s::text[], %(payloads)s::text[], %(queues)s::text[],
                  %(priorities)s::int[], %(run_ats)s::timestamptz[], %(max_attempts)s::int[],
                  %(timeouts)s::float8[])
           WITH ORDINALITY AS t(k, p, q, pr, ra, ma, t, n)
     ORDER BY n
    RETURNING id
)
SELECT array_agg(id ORDER BY id),
       (SELECT count(pg_notify('taskboard_jobs', w)) FROM unnest(%(wake)s::text[]) w)
  FROM ins
"""

# Jobs with a unique key, one row per distinct (kind, key) of the batch: each is inserted
# unless an unfinished job of its kind holds the key; then that job's id comes back with
# `existed`. Rows are inserted in key order, so two batches sharing keys wait on each other
# in one order and cannot deadlock. A row with no id (the holder finished between the two
# halves, or committed after this statement's snapshot) is simply sent again.
ENQUEUE_UNIQUE_MANY: Final[LiteralString] = """
WITH batch AS (
    SELECT * FROM unnest(%(kinds)s::text[], %(payloads)s::text[], %(queues)s::text[],
                         %(priorities)s::int[], %(run_ats)s::timestamptz[],
                         %(max_attempts)s::int[], %(timeouts)s::float8[], %(keys)s::text[])
                  WITH ORDINALITY AS t(k, p, q, pr, ra, ma, t, key, n)
), ins AS (
    INSERT INTO taskboard_jobs (kind, payload, queue, priority, run_at, max_attempts,
                                timeout_seconds, unique_key, traceparent, tracestate)
    SELECT k, p::jsonb, q, pr, coalesce(ra, now()), ma, t, key,
           %(traceparent)s::text, %(tracestate)s::text FROM batch ORDER BY k, key
    ON CONFLICT (kind, unique_key)
       WHERE unique_key IS NOT NULL AND completed_at IS NULL AND failed_at IS NULL
         AND cancelled_at IS NULL
       DO NOTHING
    RETURNING id, kind, unique_key, queue
), notified AS (
    SELECT count(pg_notify('taskboard_jobs', queue)) AS n
      FROM (SELECT DISTINCT queue FROM ins) q
)
SELECT b.n, coalesce(i.id, held.id), i.id IS NULL AS existed
  FROM notified, batch b
  LEFT JOIN ins i ON i.kind = b.k AND i.unique_key = b.key
  LEFT JOIN LATERAL (
        SELECT j.id FROM taskboard_jobs j
         WHERE i.id IS NULL AND j.kind = b.k AND j.unique_key = b.key
           AND j.completed_at IS NULL AND j.failed_at IS NULL AND j.cancelled_at IS NULL
       ) held ON true
 ORDER BY b.n
"""

# Any statement: on a connection that is not in autocommit, psycopg sends BEGIN before it.
BEGIN_IMPLICITLY: Final[LiteralString] = "SELECT 1"


# --- operator commands -------------------------------------------------------------------

# Retry re-checks "dead or cancelled" on the row it updates: a second retry, or one that
# waited on a prune deleting the row, changes nothing and says so. Fresh attempts and a
# fresh snooze budget (a job failed for snoozing too often may be retried once fixed).
# The retried job carries the retry's trace context (one it had comes back, for a link);
# a retry that has none (no SDK, no caller's span) leaves the job in the trace it had.
RETRY_JOB: Final[LiteralString] = """
WITH prior AS (
    SELECT traceparent, tracestate FROM taskboard_jobs WHERE id = %(id)s
), r AS (
    UPDATE taskboard_jobs
       SET failed_at = NULL, cancelled_at = NULL, attempts = 0, snoozes = 0, run_at = now(),
           last_error = NULL,
           traceparent = coalesce(%(traceparent)s::text, traceparent),
           tracestate = CASE WHEN %(traceparent)s::text IS NULL THEN tracestate
                             ELSE %(tracestate)s::text END
     WHERE id = %(id)s AND (failed_at IS NOT NULL OR cancelled_at IS NOT NULL)
    RETURNING id, queue
)
SELECT id, pg_notify('taskboard_jobs', queue), prior.traceparent, prior.tracestate
  FROM r, prior
"""

# A retry refused by the unique index: the unfinished job of the same kind holding the key.
UNIQUE_KEY_HOLDER: Final[LiteralString] = """
SELECT h.id, j.unique_key
  FROM taskboard_jobs j
  JOIN taskboard_jobs h ON h.kind = j.kind AND h.unique_key = j.unique_key AND h.id <> j.id
 WHERE j.id = %(id)s
   AND h.completed_at IS NULL AND h.failed_at IS NULL AND h.cancelled_at IS NULL
 LIMIT 1
"""

# Cancel takes the row lock in a statement of its own before CANCEL_JOB writes: a claim
# that commits while the cancel waits has inserted its attempt row too, which a single
# statement's snapshot (taken before the wait) could not see, so that attempt would stay
# open and its worker would hear "lease lost" instead of "cancelled". CANCEL_JOB's snapshot
# is taken once the lock is held, so it sees every row the previous holder committed.
LOCK_UNFINISHED_JOB: Final[LiteralString] = """
SELECT id FROM taskboard_jobs
 WHERE id = %(id)s AND completed_at IS NULL AND failed_at IS NULL AND cancelled_at IS NULL
   FOR UPDATE
"""

# Cancel: the job is finished (cancelled) and its lease taken away in the same statement;
# the attempt that held it ends as `cancelled`, and the fleet hears it at once (NOTIFY), so
# the worker holding it stops its handler within a second instead of at its next renewal.
# What a cancel does to the jobs its `old` CTE has locked (`_CANCEL_OLD`'s columns), shared
# with CANCEL_BATCH (bulk.py), which appends its own CTEs and result after `notified`.
_CANCEL_OLD: Final[LiteralString] = "id, lease_token, claim_count, claimed_by, claimed_at, run_at"
_CANCEL_LOCKED: Final[LiteralString] = (
    """
), c AS (
    UPDATE taskboard_jobs j
       SET cancelled_at = statement_timestamp(), lease_token = NULL, lease_expires_at = NULL,
           last_error = coalesce(last_error, 'cancelled by operator')
      FROM old WHERE j.id = old.id
    RETURNING j.id
), history AS (
    -- The running attempt's row, written as it ends (migration 15), from the locked row.
    INSERT INTO taskboard_attempts AS a ("""
    + _ATTEMPT_KEYS
    + """, outcome, ended_at, error)
    SELECT """
    + _ATTEMPT_FROM_JOB
    + """, 'cancelled', statement_timestamp(),
           'cancelled by operator'
      FROM old j WHERE j.lease_token IS NOT NULL
    ON CONFLICT (job_id, lease_token) DO UPDATE
       SET outcome = 'cancelled', ended_at = excluded.ended_at, error = excluded.error
     WHERE a.outcome IS NULL
), notified AS (
    SELECT count(pg_notify('taskboard_control', 'cancel:' || old.lease_token)) AS n
      FROM old WHERE old.lease_token IS NOT NULL
)"""
)

CANCEL_JOB: Final[LiteralString] = (
    """
WITH old AS (
    SELECT """
    + _CANCEL_OLD
    + """ FROM taskboard_jobs
     WHERE id = %(id)s AND completed_at IS NULL AND failed_at IS NULL AND cancelled_at IS NULL
       FOR UPDATE"""
    + _CANCEL_LOCKED
    + """
SELECT c.id FROM c, notified
"""
)

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
           AND j.failed_at IS NULL AND j.cancelled_at IS NULL AND j.waiting_on = 0
           AND j.run_at <= now())
           AS waiting
  FROM taskboard_queues q
 WHERE q.paused_at IS NOT NULL
 ORDER BY q.name
"""

# --- schedules -----------------------------------------------------------------------------

# Adding a schedule again replaces it, enables it (a disabled one was disabled for an error
# in what this replaces) and moves its revision, so a slot computed from the old version
# does not fire.
UPSERT_SCHEDULE: Final[LiteralString] = """
INSERT INTO taskboard_schedules
       (name, cron, kind, payload, queue, priority, max_attempts, timeout_seconds, tz,
        traceparent, tracestate)
VALUES (%(name)s, %(cron)s, %(kind)s, %(payload)s, %(queue)s, %(priority)s,
        %(max_attempts)s, %(timeout)s, %(tz)s, %(traceparent)s, %(tracestate)s)
ON CONFLICT (name) DO UPDATE
   SET cron = excluded.cron, kind = excluded.kind, payload = excluded.payload,
       queue = excluded.queue, priority = excluded.priority,
       max_attempts = excluded.max_attempts, timeout_seconds = excluded.timeout_seconds,
       tz = excluded.tz, revision = taskboard_schedules.revision + 1,
       traceparent = excluded.traceparent, tracestate = excluded.tracestate,
       disabled_at = NULL, disabled_error = NULL
RETURNING (xmax = 0) AS created
"""
REMOVE_SCHEDULE: Final[LiteralString] = (
    "DELETE FROM taskboard_schedules WHERE name = %(name)s RETURNING name"
)
LIST_SCHEDULES: Final[LiteralString] = """
SELECT name, cron, kind, payload, queue, priority, max_attempts, timeout_seconds,
       created_at, last_slot, tz, revision, disabled_at, disabled_error
  FROM taskboard_schedules ORDER BY name
"""
# One slot of one schedule, enqueued by whichever worker moves `last_slot` forward first:
# the others find it already there and enqueue nothing. The UPDATE re-checks, on the row
# as it is when the statement writes (after waiting for any writer holding it), that the
# schedule is still the version the slot was computed from (`revision`: not edited, not
# removed and added again), still enabled, and not yet past the slot; a worker that read the
# schedule before an edit fires nothing, and the next pass computes the slot afresh. The
# slot is the job's unique key, so even a schedule edited by hand cannot put the same slot
# in the queue twice at once.
ENQUEUE_SLOT: Final[LiteralString] = """
WITH claimed AS (
    UPDATE taskboard_schedules
       SET last_slot = %(slot)s
     WHERE name = %(name)s AND revision = %(revision)s AND disabled_at IS NULL
       AND (last_slot IS NULL OR last_slot < %(slot)s)
       AND created_at < %(slot)s
    RETURNING name, kind, payload, queue, priority, max_attempts, timeout_seconds,
              traceparent, tracestate
), ins AS (
    INSERT INTO taskboard_jobs (kind, payload, queue, priority, max_attempts,
                                timeout_seconds, unique_key, traceparent, tracestate)
    SELECT kind, payload, queue, priority, max_attempts, timeout_seconds,
           'schedule:' || name || ':' || to_char(%(slot)s::timestamptz AT TIME ZONE 'UTC',
                                                 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
           %(traceparent)s::text, %(tracestate)s::text
      FROM claimed
    ON CONFLICT (kind, unique_key)
       WHERE unique_key IS NOT NULL AND completed_at IS NULL AND failed_at IS NULL
         AND cancelled_at IS NULL
       DO NOTHING
    RETURNING id, queue
), notified AS (
    SELECT count(pg_notify('taskboard_jobs', queue)) AS n FROM ins
)
SELECT ins.id, claimed.traceparent, claimed.tracestate FROM ins, notified, claimed
"""
# A schedule that failed at run time, disabled with its error, unless it was replaced
# since the failing worker read it (the new version gets its own chance).
DISABLE_SCHEDULE: Final[LiteralString] = """
UPDATE taskboard_schedules
   SET disabled_at = now(), disabled_error = %(error)s
 WHERE name = %(name)s AND revision = %(revision)s AND disabled_at IS NULL
RETURNING name
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
