"""The attempts history: the columns every statement that ends an attempt inserts, and
the records a worker writes beside its fenced lease statements (a renewal that failed, a
completion the fence rejected, a lease given up) and reads back when an answer was lost.

None of these changes who owns a job (that is `lease.py`), so they are safe to run late or
twice.
"""

from __future__ import annotations

from typing import Final, LiteralString

# An attempt's row is written once, when it ends (migration 15): while it runs, its job row
# holds it (the token, `claim_count` as its number, `claimed_by`, `claimed_at`). These are the
# columns every ending statement inserts, read from the job row `j` as the statement's
# snapshot has it, before the statement's own update. The pickup is what the claim measured
# (`run_at` does not change while a job is held). An attempt whose row exists already (its
# worker recorded a renewal failure, a row from before migration 15) is updated instead
# (`ON CONFLICT`, on the (job_id, lease_token) key).
_ATTEMPT_KEYS: Final[LiteralString] = (
    "job_id, attempt, lease_token, worker_id, claimed_at, pickup_seconds"
)
_ATTEMPT_FROM_JOB: Final[LiteralString] = """j.id, j.claim_count, j.lease_token,
           coalesce(j.claimed_by, '?'), coalesce(j.claimed_at, now()),
           greatest(extract(epoch FROM j.claimed_at - j.run_at), 0)"""

# A renewal failure of an attempt still running writes its row early (the board lists it
# as trouble); one that ended already has its row, updated. KEY SHARE on the job, as the
# foreign key migration 15 dropped took: a job deleted meanwhile leaves no orphan row.
RECORD_RENEWAL_FAILED: Final[LiteralString] = (
    """
WITH r AS (
    -- Each attempt once: an insert may not meet one row twice.
    SELECT DISTINCT ON (id, token) id, token, reason
      FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[], %(reasons)s::text[])
           AS r(id, token, reason)
), running AS (
    INSERT INTO taskboard_attempts AS a ("""
    + _ATTEMPT_KEYS
    + """, renewal_failed_at, error)
    SELECT """
    + _ATTEMPT_FROM_JOB
    + """, now(), r.reason
      FROM r JOIN taskboard_jobs j ON j.id = r.id AND (j.lease_token = r.token) IS TRUE
       FOR KEY SHARE OF j
    ON CONFLICT (job_id, lease_token) DO UPDATE
       SET renewal_failed_at = coalesce(a.renewal_failed_at, now()),
           error = coalesce(a.error, excluded.error)
)
UPDATE taskboard_attempts a
   SET renewal_failed_at = coalesce(a.renewal_failed_at, now()),
       error = coalesce(a.error, r.reason)
  FROM r
 WHERE a.job_id = r.id AND a.lease_token = r.token
   AND NOT EXISTS (SELECT 1 FROM taskboard_jobs j
                    WHERE j.id = r.id AND (j.lease_token = r.token) IS TRUE)
"""
)

# The stale attempts' side of a rejection, written after any rollback of their writes:
# stamped when the stale worker came back, which is what proves it was late.
RECORD_REJECTED: Final[LiteralString] = """
UPDATE taskboard_attempts a
   SET outcome = 'completion_rejected', ended_at = statement_timestamp()
  FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS r(id, token)
 WHERE a.job_id = r.id AND a.lease_token = r.token
"""

# A worker gave up a lease it lost (renewal said so, or its local deadline passed): the
# attempt ends as lease_lost with the worker's last word on why (which names the external
# call it refused to start, if any), unless another outcome was already recorded.
# An attempt whose job still holds its lease (expired, not yet reclaimed) gets its row here;
# one reclaimed already has it (written by the claim).
RECORD_LOST: Final[LiteralString] = (
    """
WITH r AS (
    -- Each attempt once: an insert may not meet one row twice.
    SELECT DISTINCT ON (id, token) id, token, reason
      FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[], %(reasons)s::text[])
           AS r(id, token, reason)
), held AS (
    INSERT INTO taskboard_attempts AS a ("""
    + _ATTEMPT_KEYS
    + """, outcome, ended_at, error)
    SELECT """
    + _ATTEMPT_FROM_JOB
    + """, 'lease_lost', statement_timestamp(), r.reason
      FROM r JOIN taskboard_jobs j ON j.id = r.id AND (j.lease_token = r.token) IS TRUE
       FOR KEY SHARE OF j
    ON CONFLICT (job_id, lease_token) DO UPDATE
       SET outcome = 'lease_lost', ended_at = excluded.ended_at, error = excluded.error
     WHERE a.outcome IS NULL OR a.outcome = 'lease_lost'
)
UPDATE taskboard_attempts a
   SET outcome = 'lease_lost', ended_at = statement_timestamp(), error = r.reason
  FROM r
 WHERE a.job_id = r.id AND a.lease_token = r.token
   AND (a.outcome IS NULL OR a.outcome = 'lease_lost')
   AND NOT EXISTS (SELECT 1 FROM taskboard_jobs j
                    WHERE j.id = r.id AND (j.lease_token = r.token) IS TRUE)
"""
)

# What the database recorded for one attempt: used when an answer was lost on the way
# (the connection dropped during a commit), so a retried completion or failure can tell
# "my earlier statement got through" from "the job is not mine".
ATTEMPT_OUTCOME: Final[LiteralString] = """
SELECT outcome FROM taskboard_attempts WHERE job_id = %(id)s AND lease_token = %(token)s
"""
