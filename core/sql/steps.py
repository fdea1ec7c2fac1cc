"""Durable steps and results: the fenced checkpoint, the records a later attempt replays,
and the job's result.

The checkpoint locks the job's row `FOR SHARE` while it checks the token: a reclaim (which
changes the token under `FOR NO KEY UPDATE`) either commits first, and the re-check finds
another token, or waits until the record is committed, so the new owner reads it. A refused
checkpoint is still written, as `rejected`: the effect it describes happened.
"""

from __future__ import annotations

from typing import Final, LiteralString

RECORD_STEP: Final[LiteralString] = """
WITH holder AS (
    SELECT id FROM taskboard_jobs WHERE id = %(id)s AND lease_token = %(token)s FOR SHARE
), written AS (
    INSERT INTO taskboard_steps (job_id, name, outcome, result, attempt, worker_id)
    SELECT %(id)s, %(name)s,
           CASE WHEN EXISTS (SELECT 1 FROM holder) THEN 'recorded' ELSE 'rejected' END,
           %(result)s::jsonb, %(attempt)s, %(worker)s
    ON CONFLICT (job_id, name) WHERE outcome = 'recorded' DO NOTHING
    RETURNING outcome
)
SELECT outcome FROM written
"""

RECORDED_STEPS: Final[LiteralString] = """
SELECT name, result FROM taskboard_steps WHERE job_id = %(id)s AND outcome = 'recorded'
"""

JOB_STEPS: Final[LiteralString] = """
SELECT name, outcome, attempt, worker_id, recorded_at, result
  FROM taskboard_steps WHERE job_id = %(id)s ORDER BY recorded_at, id
"""

# Written by the holder just before its fenced completion (in the handler's transaction for
# kinds that write to the database): zero rows means the lease is not ours any more.
STORE_RESULT: Final[LiteralString] = """
UPDATE taskboard_jobs SET result = %(result)s::jsonb WHERE id = %(id)s AND lease_token = %(token)s
"""

JOB_RESULT: Final[LiteralString] = """
SELECT result, completed_at IS NOT NULL AS completed, failed_at IS NOT NULL AS dead,
       cancelled_at IS NOT NULL AS cancelled, last_error,
       CASE WHEN lease_token IS NOT NULL THEN 'running'
            WHEN run_at <= now() THEN 'pending' ELSE 'scheduled' END AS state
  FROM taskboard_jobs WHERE id = %(id)s
"""

# `jobs.result` waits on the channel the trigger of migration 13 notifies.
LISTEN_FINISHED: Final[LiteralString] = "LISTEN taskboard_finished"
UNLISTEN_FINISHED: Final[LiteralString] = "UNLISTEN taskboard_finished"
