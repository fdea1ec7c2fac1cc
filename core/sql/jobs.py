"""Enqueueing and the operator's commands on jobs (retry, cancel)."""

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

