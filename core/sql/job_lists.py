"""Jobs in one state, for `taskboard jobs STATE` and the dashboard's job lists."""

from __future__ import annotations

from typing import Final, LiteralString

# Jobs in one state, newest first for finished states (through their indexes), in claim
# order for the rest; `needle` filters by kind, queue, id or error text.
_LIST_COLUMNS: Final[LiteralString] = """
SELECT id, kind, queue, priority, attempts, max_attempts, run_at, created_at,
       coalesce(completed_at, failed_at, cancelled_at) AS finished_at, claimed_by,
       lease_expires_at, coalesce(last_error, '') AS last_error
  FROM taskboard_jobs
 WHERE (%(needle)s::text IS NULL OR kind ILIKE %(like)s OR queue ILIKE %(like)s
        OR id::text = %(needle)s OR last_error ILIKE %(like)s)"""
LIST_PENDING: Final[LiteralString] = (
    _LIST_COLUMNS
    + """
   AND lease_token IS NULL AND completed_at IS NULL AND failed_at IS NULL
   AND cancelled_at IS NULL AND waiting_on = 0 AND run_at <= now()
 ORDER BY queue, priority DESC, run_at, id LIMIT %(limit)s"""
)
LIST_SCHEDULED: Final[LiteralString] = (
    _LIST_COLUMNS
    + """
   AND id IN (SELECT id FROM taskboard_jobs
               WHERE lease_token IS NULL AND completed_at IS NULL AND failed_at IS NULL
                 AND cancelled_at IS NULL AND waiting_on = 0 AND run_at > now()
              UNION ALL
              SELECT id FROM taskboard_jobs
               WHERE waiting_on > 0 AND lease_token IS NULL AND completed_at IS NULL
                 AND failed_at IS NULL AND cancelled_at IS NULL)
 ORDER BY run_at, id LIMIT %(limit)s"""
)
LIST_RUNNING: Final[LiteralString] = (
    _LIST_COLUMNS
    + """
   AND lease_token IS NOT NULL
 ORDER BY lease_expires_at, id LIMIT %(limit)s"""
)
LIST_COMPLETED: Final[LiteralString] = (
    _LIST_COLUMNS + "\n   AND completed_at IS NOT NULL ORDER BY completed_at DESC LIMIT %(limit)s"
)
LIST_DEAD_JOBS: Final[LiteralString] = (
    _LIST_COLUMNS + "\n   AND failed_at IS NOT NULL ORDER BY failed_at DESC LIMIT %(limit)s"
)
LIST_CANCELLED: Final[LiteralString] = (
    _LIST_COLUMNS + "\n   AND cancelled_at IS NOT NULL ORDER BY cancelled_at DESC LIMIT %(limit)s"
)
