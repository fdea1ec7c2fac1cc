"""Retry and cancel by filter: the operator's commands on many jobs after an outage."""

from __future__ import annotations

from typing import Final, LiteralString

from taskboard.core.sql.jobs import _CANCEL_LOCKED

# The filter every statement below applies to a job `j`, each part off when its parameter is
# NULL. `needle` is the dashboard's job-list filter, the same test as its lists (board.py).
# `state` is one of the states `status` counts, or `retryable` (dead or cancelled) or
# `unfinished` (pending, scheduled or running). A job's state time is when it entered its
# state (died, was cancelled, completed), or its creation for unfinished ones; `since` and
# `until` bound it, so jobs that die while the command runs are not swept up with the rest.
# Every writing statement applies it again to the row it writes (invariant 15): under READ
# COMMITTED an UPDATE re-reads a row changed since its snapshot and re-checks these
# conditions on the newest version.
_FILTER: Final[LiteralString] = """
   AND (%(kind)s::text IS NULL OR j.kind = %(kind)s)
   AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
   AND (%(error)s::text IS NULL
        OR strpos(lower(coalesce(j.last_error, '')), lower(%(error)s)) > 0)
   AND (%(needle)s::text IS NULL OR j.kind ILIKE %(like)s OR j.queue ILIKE %(like)s
        OR j.id::text = %(needle)s OR j.last_error ILIKE %(like)s)
   AND coalesce(j.failed_at, j.cancelled_at, j.completed_at, j.created_at)
       BETWEEN coalesce(%(since)s::timestamptz, '-infinity') AND %(until)s::timestamptz
   AND CASE %(state)s::text
         WHEN 'dead' THEN j.failed_at IS NOT NULL
         WHEN 'cancelled' THEN j.cancelled_at IS NOT NULL
         WHEN 'completed' THEN j.completed_at IS NOT NULL
         WHEN 'retryable' THEN j.failed_at IS NOT NULL OR j.cancelled_at IS NOT NULL
         ELSE j.completed_at IS NULL AND j.failed_at IS NULL AND j.cancelled_at IS NULL
              AND CASE %(state)s::text
                    WHEN 'running' THEN j.lease_token IS NOT NULL
                    WHEN 'pending' THEN j.lease_token IS NULL AND j.waiting_on = 0
                                        AND j.run_at <= now()
                    WHEN 'scheduled' THEN j.lease_token IS NULL
                                          AND (j.waiting_on > 0 OR j.run_at > now())
                    ELSE true END
       END"""

# The command's clock: `until` and, from the operator's duration, `since`.
FILTER_CLOCK: Final[LiteralString] = """
SELECT now(), now() - make_interval(secs => %(seconds)s::float8)
"""

# A dry run: how many jobs the filter names and the first of them, nothing written.
COUNT_MATCHING: Final[LiteralString] = (
    """
SELECT count(*), (array_agg(j.id ORDER BY j.id))[1:%(shown)s]
  FROM taskboard_jobs j
 WHERE true"""
    + _FILTER
)

# The next batch of candidates after `after`, in id order (the primary key), read without
# locks: each writing statement below decides again on the rows themselves.
NEXT_MATCHING: Final[LiteralString] = (
    """
SELECT array_agg(id ORDER BY id) FROM (
    SELECT j.id FROM taskboard_jobs j
     WHERE j.id > %(after)s"""
    + _FILTER
    + """
     ORDER BY j.id LIMIT %(batch)s
) picked
"""
)

# One batch of retries: dead or cancelled jobs of the batch that still match are pending
# again with fresh attempts and snoozes, like RETRY_JOB, and each says so in its history.
# A job whose unique key an unfinished job holds is left as it is (the index would refuse
# the whole batch); the caller names it. The fleet is woken once per queue. Each retried job
# carries the batch's retry context (the ones they had come back, for links), or keeps its
# own when the retry has none (no SDK, no caller's span), as RETRY_JOB.
RETRY_BATCH: Final[LiteralString] = (
    """
WITH prior AS (
    SELECT id, traceparent, tracestate FROM taskboard_jobs WHERE id = ANY(%(ids)s::bigint[])
), r AS (
    UPDATE taskboard_jobs j
       SET failed_at = NULL, cancelled_at = NULL, attempts = 0, snoozes = 0, run_at = now(),
           last_error = NULL,
           traceparent = coalesce(%(traceparent)s::text, traceparent),
           tracestate = CASE WHEN %(traceparent)s::text IS NULL THEN tracestate
                             ELSE %(tracestate)s::text END
     WHERE j.id = ANY(%(ids)s::bigint[])
       AND (j.failed_at IS NOT NULL OR j.cancelled_at IS NOT NULL)
       AND (j.unique_key IS NULL OR NOT EXISTS (
             SELECT 1 FROM taskboard_jobs h
              WHERE h.kind = j.kind AND h.unique_key = j.unique_key AND h.id <> j.id
                AND h.completed_at IS NULL AND h.failed_at IS NULL AND h.cancelled_at IS NULL))"""
    + _FILTER
    + """
    RETURNING j.id, j.queue
), noted AS (
    INSERT INTO taskboard_job_actions (job_id, action, detail)
    SELECT id, 'retried', %(detail)s FROM r
), notified AS (
    SELECT count(pg_notify('taskboard_jobs', queue)) AS n FROM (SELECT DISTINCT queue FROM r) q
)
SELECT coalesce((SELECT array_agg(id ORDER BY id) FROM r), '{}'), (SELECT n FROM notified),
       (SELECT array_agg(ARRAY[p.id::text, p.traceparent, p.tracestate] ORDER BY p.id)
          FROM r JOIN prior p USING (id) WHERE p.traceparent IS NOT NULL)
"""
)

# A job the by-id retry made pending again, when a batch fell back to one job at a time.
NOTE_RETRIED: Final[LiteralString] = """
INSERT INTO taskboard_job_actions (job_id, action, detail) VALUES (%(id)s, 'retried', %(detail)s)
"""

# Cancel takes its row locks in a statement of its own first, as LOCK_UNFINISHED_JOB does
# for one job: CANCEL_BATCH's snapshot is then taken after every claim it waited on
# committed, so it sees and closes those claims' attempt rows.
LOCK_BATCH: Final[LiteralString] = (
    """
SELECT j.id FROM taskboard_jobs j
 WHERE j.id = ANY(%(ids)s::bigint[])"""
    + _FILTER
    + """
 ORDER BY j.id
   FOR UPDATE
"""
)

# One batch of cancels, CANCEL_JOB for many: each job still unfinished and matching is
# cancelled, its lease taken away, its open attempt ended `cancelled`, a line in its
# history, and the worker holding it told at once.
CANCEL_BATCH: Final[LiteralString] = (
    """
WITH old AS (
    SELECT j.id, j.lease_token, j.claim_count, j.claimed_by, j.claimed_at, j.run_at
      FROM taskboard_jobs j
     WHERE j.id = ANY(%(ids)s::bigint[])
       AND j.completed_at IS NULL AND j.failed_at IS NULL AND j.cancelled_at IS NULL"""
    + _FILTER
    + """
       FOR UPDATE"""
    + _CANCEL_LOCKED
    + """, noted AS (
    INSERT INTO taskboard_job_actions (job_id, action, detail)
    SELECT id, 'cancelled', %(detail)s FROM c
)
SELECT coalesce((SELECT array_agg(id ORDER BY id) FROM c), '{}'), (SELECT n FROM notified)
"""
)

# What operators did to one job, oldest first (`history`).
JOB_ACTIONS: Final[LiteralString] = """
SELECT action, at, detail FROM taskboard_job_actions WHERE job_id = %(id)s ORDER BY at, id
"""
