"""Durable steps and results: the fenced checkpoint, the records a later attempt replays,
and the job's result.

The checkpoint locks the job's row `FOR SHARE` while it checks the token: a reclaim (which
changes the token under `FOR NO KEY UPDATE`) either commits first, and the check finds
another token, or waits until the record is committed, so the new owner reads it. A refused
checkpoint is still written, as `rejected`: the effect it describes happened.
"""

from __future__ import annotations

from typing import Final, LiteralString

# The fenced checkpoints of one or more of a worker's attempts, in one statement (those that
# arrived while another was written go together: engine/step_group.py). Each job's row is
# locked FOR SHARE while its token is compared: a reclaim (which changes the token under
# FOR NO KEY UPDATE) either committed first, and the token differs (`rejected`), or waits
# until this commits, and the new owner reads the record. A row another session holds is
# skipped, not waited for: that record alone answers `busy` and is tried again (its caller
# polls until the lease's local deadline), so one locked job never holds the others back. A
# job that no longer exists is `rejected`. No row for a record: one of that name was there
# already (an earlier try whose answer was lost): `recorded`.
RECORD_STEPS: Final[LiteralString] = """
WITH wanted AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[], %(names)s::text[],
                         %(results)s::text[], %(attempts)s::int[])
        AS w(id, token, name, result, attempt)
), held AS (
    SELECT j.id, j.lease_token FROM taskboard_jobs j
     WHERE j.id = ANY(%(ids)s::bigint[])
     ORDER BY j.id
       FOR SHARE SKIP LOCKED
), judged AS (
    SELECT w.*, h.id IS NOT NULL AS locked, h.lease_token IS NOT DISTINCT FROM w.token AS ours,
           EXISTS (SELECT 1 FROM taskboard_jobs j WHERE j.id = w.id) AS present
      FROM wanted w LEFT JOIN held h ON h.id = w.id
), written AS (
    INSERT INTO taskboard_steps (job_id, name, outcome, result, attempt, worker_id)
    SELECT id, name, CASE WHEN locked AND ours THEN 'recorded' ELSE 'rejected' END,
           result::jsonb, attempt, %(worker)s
      FROM judged WHERE locked OR NOT present
    ON CONFLICT (job_id, name) WHERE outcome = 'recorded' DO NOTHING
    RETURNING job_id, name, outcome
)
SELECT j.id, j.name,
       CASE WHEN NOT j.locked AND j.present THEN 'busy' ELSE coalesce(x.outcome, 'recorded') END
  FROM judged j LEFT JOIN written x ON x.job_id = j.id AND x.name = j.name
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
# `(... = token) IS TRUE`, not `=`: see core/sql/lease.py (the job found by its id).
STORE_RESULT: Final[LiteralString] = """
UPDATE taskboard_jobs SET result = %(result)s::jsonb
 WHERE id = %(id)s AND (lease_token = %(token)s) IS TRUE
"""

JOB_RESULT: Final[LiteralString] = """
SELECT result, completed_at IS NOT NULL AS completed, failed_at IS NOT NULL AS dead,
       cancelled_at IS NOT NULL AS cancelled, last_error,
       CASE WHEN lease_token IS NOT NULL THEN 'running'
            WHEN waiting_on > 0 THEN 'waiting'
            WHEN run_at <= now() THEN 'pending' ELSE 'scheduled' END AS state
  FROM taskboard_jobs WHERE id = %(id)s
"""

# `jobs.result` waits on the channel the trigger of migration 13 notifies.
LISTEN_FINISHED: Final[LiteralString] = "LISTEN taskboard_finished"
UNLISTEN_FINISHED: Final[LiteralString] = "UNLISTEN taskboard_finished"
