"""Statements of the testing helper (`taskboard.core.runtime.testing`): what was waiting before a
run, and how each of those jobs (and the jobs the run enqueued) ended."""

from typing import Final, LiteralString

WAITING_BEFORE_RUN: Final[LiteralString] = """
SELECT array(SELECT id FROM taskboard_jobs
              WHERE kind = ANY(%(kinds)s) AND queue = ANY(%(queues)s)
                AND completed_at IS NULL AND failed_at IS NULL AND cancelled_at IS NULL),
       (SELECT coalesce(max(id), 0) FROM taskboard_jobs)
"""

OUTCOMES_OF_RUN: Final[LiteralString] = """
SELECT id, kind, payload,
       CASE WHEN completed_at IS NOT NULL THEN 'completed'
            WHEN failed_at IS NOT NULL THEN 'dead'
            WHEN cancelled_at IS NOT NULL THEN 'cancelled'
            WHEN lease_token IS NOT NULL THEN 'running'
            ELSE 'pending' END,
       attempts, last_error
  FROM taskboard_jobs
 WHERE id = ANY(%(ids)s) OR id > %(after)s
 ORDER BY id
"""
