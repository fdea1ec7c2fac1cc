"""The lease protocol's statements on held jobs: renew, complete, fail, release, snooze
(the attempts history they write beside: `attempts.py`).

Every statement that changes a held job presents its token (`lease_token = $token`): zero
rows is the fence saying "not yours any more". Deadlines are compared with the database's
clock; renewal uses `clock_timestamp()` (the moment the row is checked, not the start of a
statement that may have waited) so a renewal can never extend a lease that ran out while
it waited.

End times (`completed_at`, `failed_at`, an attempt's `ended_at`) are the ending statement's
own time, `statement_timestamp()`, not `now()`: `now()` is the transaction's start, and a
handler that writes to the database completes in its own transaction, so its job "ended"
before the work it did (a charge at .871 recorded as ended at .628). One value per
statement, so a job's end and its attempt's end agree to the microsecond (per-row
`clock_timestamp()` would not).

Statements that lock held rows do it with `SKIP LOCKED`: a row another session holds (an
operator's open transaction, a stuck handler) is reported back as busy instead of making
the worker's one engine connection wait, so one locked row never holds up the renewal of
the others.
"""

from __future__ import annotations

from typing import Final, LiteralString

from taskboard.core.sql.attempts import _ATTEMPT_FROM_JOB, _ATTEMPT_KEYS

# Every statement below finds its job rows by id (the primary key) and tests the token as
# `(lease_token = token) IS TRUE`, which keeps exactly what `=` keeps in a WHERE: a bare `=`
# implies `lease_token IS NOT NULL`, the predicate of the partial indexes of held rows
# (`taskboard_jobs_held_by_kind`, `taskboard_jobs_leased`), and once an ANALYZE had seen few
# held rows the planner read every held row of the fleet through one of them, for a group
# and for a single job alike, instead of looking the job up by id (issue 25;
# tests/test_hot_plans.py).
#
# Renew every in-flight lease of one worker in one statement. A lease is renewed only with
# the current token and while unexpired by the clock at the moment its row is checked; a
# row locked by another session is skipped and reported `busy` (still ours as far as this
# snapshot can tell, renewed next time, lost if that never happens before its deadline).
# `j.id = ANY(ids)` lets the generic plan take the primary key.
RENEW: Final[LiteralString] = """
WITH held AS (
    SELECT id, token FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS h(id, token)
), mine AS (
    SELECT j.id FROM taskboard_jobs j
      JOIN held h ON h.id = j.id AND (j.lease_token = h.token) IS TRUE
     WHERE j.id = ANY (%(ids)s::bigint[]) AND j.lease_expires_at > clock_timestamp()
       FOR NO KEY UPDATE OF j SKIP LOCKED
), renewed AS (
    UPDATE taskboard_jobs j
       -- Each lease keeps its own length (`leases`, by position in `ids`; a job listed
       -- twice, stale and current, is of one kind, so of one length).
       SET lease_expires_at = clock_timestamp() + make_interval(secs => coalesce(
               (%(leases)s::float8[])[array_position(%(ids)s::bigint[], j.id)], %(lease)s))
     WHERE j.id = ANY (ARRAY(SELECT id FROM mine))
    RETURNING j.id, j.lease_token, j.lease_expires_at
)
-- Joined on the token too: a worker may hold a stale and a current lease of one job (it
-- reclaimed its own expired job), and only the current one was renewed.
SELECT h.id, h.token, r.lease_expires_at,
       r.id IS NULL AND EXISTS (
           SELECT 1 FROM taskboard_jobs j
            WHERE j.id = h.id AND (j.lease_token = h.token) IS TRUE
              AND j.lease_expires_at > clock_timestamp()) AS busy,
       -- Not lost but cancelled by an operator (the cancel took the lease): stop, quietly.
       r.id IS NULL AND EXISTS (
           SELECT 1 FROM taskboard_attempts a
            WHERE a.job_id = h.id AND a.lease_token = h.token AND a.outcome = 'cancelled')
           AS cancelled
  FROM held h LEFT JOIN renewed r ON r.id = h.id AND r.lease_token = h.token
"""

# Fenced completion inside the handler's own transaction (kinds that write to the
# database): its writes commit or roll back with this row.
COMPLETE: Final[LiteralString] = (
    """
WITH done AS (
    UPDATE taskboard_jobs
       SET completed_at = statement_timestamp(), lease_token = NULL, lease_expires_at = NULL
     WHERE id = %(id)s AND (lease_token = %(token)s) IS TRUE
    RETURNING id
), history AS (
    INSERT INTO taskboard_attempts AS a ("""
    + _ATTEMPT_KEYS
    + """, outcome, ended_at, handler_seconds,
                                         min_margin_seconds)
    SELECT """
    + _ATTEMPT_FROM_JOB
    + """, 'completed', statement_timestamp(), %(took)s, %(margin)s
      FROM taskboard_jobs j
     WHERE j.id = %(id)s AND (j.lease_token = %(token)s) IS TRUE AND EXISTS (SELECT 1 FROM done)
    ON CONFLICT (job_id, lease_token) DO UPDATE
       SET outcome = 'completed', ended_at = excluded.ended_at,
           handler_seconds = excluded.handler_seconds,
           min_margin_seconds = excluded.min_margin_seconds
)
SELECT count(*) FROM done
"""
)

# Fenced completion of many jobs whose handlers wrote nothing: one statement, one verdict
# per row (completed; busy: locked by another session, try again; already: completed by an
# earlier try; none of these: rejected).
COMPLETE_MANY: Final[LiteralString] = (
    """
WITH held AS (
    -- Each lease once: the attempts' insert below may not meet one row twice.
    SELECT DISTINCT ON (id, token) id, token, took, margin
      FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[], %(durations)s::float8[],
                  %(margins)s::float8[]) AS h(id, token, took, margin)
), mine AS (
    -- The attempt's columns from the row as locked (the job row holds the running attempt).
    SELECT j.id, h.token, h.took, h.margin, j.claim_count, j.claimed_by, j.claimed_at,
           greatest(extract(epoch FROM j.claimed_at - j.run_at), 0) AS pickup
      FROM taskboard_jobs j
      JOIN held h ON h.id = j.id AND (j.lease_token = h.token) IS TRUE
     WHERE j.id = ANY (%(ids)s::bigint[])
       FOR NO KEY UPDATE OF j SKIP LOCKED
), done AS (
    UPDATE taskboard_jobs j
       SET completed_at = statement_timestamp(), lease_token = NULL, lease_expires_at = NULL
     WHERE j.id = ANY (ARRAY(SELECT id FROM mine))
    RETURNING j.id
), history AS (
    -- The attempts' rows, written once (migration 15): an insert, whose conflict check
    -- takes the (job_id, lease_token) index per row; a row written earlier (a renewal
    -- failure) is updated instead.
    INSERT INTO taskboard_attempts AS a ("""
    + _ATTEMPT_KEYS
    + """, outcome, ended_at, handler_seconds,
                                         min_margin_seconds)
    SELECT id, claim_count, token, coalesce(claimed_by, '?'), coalesce(claimed_at, now()),
           pickup, 'completed', statement_timestamp(), took, margin
      FROM mine
    ON CONFLICT (job_id, lease_token) DO UPDATE
       SET outcome = 'completed', ended_at = excluded.ended_at,
           handler_seconds = excluded.handler_seconds,
           min_margin_seconds = excluded.min_margin_seconds
)
-- Verdicts by (id, token), not id alone: a worker may present a stale and a current lease
-- of one job in one group (it reclaimed its own expired job), and only one completed.
-- Every row of `mine` is updated by `done` (it runs to completion whether read or not).
SELECT h.id, h.token, m.id IS NOT NULL AS completed,
       m.id IS NULL AND EXISTS (
           SELECT 1 FROM taskboard_jobs j
            WHERE j.id = h.id AND (j.lease_token = h.token) IS TRUE) AS busy,
       -- An earlier try of this completion that committed but whose answer was lost.
       m.id IS NULL AND EXISTS (
           SELECT 1 FROM taskboard_attempts a
            WHERE a.job_id = h.id AND a.lease_token = h.token AND a.outcome = 'completed')
           AS already,
       -- The job's row is gone (pruned, with its history): whether an earlier try of this
       -- completion committed can no longer be read, so it is neither done nor refused.
       -- (A scalar subquery, not NOT EXISTS: that may be planned as one hashed read of
       -- the whole table; this is a primary-key probe, run only for a row not completed.)
       m.id IS NULL AND (SELECT j.id FROM taskboard_jobs j WHERE j.id = h.id) IS NULL
           AS gone
  FROM held h LEFT JOIN mine m ON m.id = h.id AND m.token = h.token
"""
)

# Fenced failure: retry after a backoff computed by the caller, or dead when attempts are
# used up or the error is permanent.
FAIL: Final[LiteralString] = (
    """
WITH f AS (
    UPDATE taskboard_jobs
       SET lease_token = NULL, lease_expires_at = NULL, last_error = %(error)s,
           failed_at = CASE WHEN %(permanent)s OR attempts >= max_attempts
                            THEN statement_timestamp() END,
           run_at = CASE WHEN %(permanent)s OR attempts >= max_attempts THEN run_at
                         ELSE now() + make_interval(secs => %(backoff)s) END
     WHERE id = %(id)s AND (lease_token = %(token)s) IS TRUE
    RETURNING failed_at IS NOT NULL AS dead, run_at
), history AS (
    INSERT INTO taskboard_attempts AS a ("""
    + _ATTEMPT_KEYS
    + """, outcome, ended_at, error, handler_seconds,
                                         min_margin_seconds)
    SELECT """
    + _ATTEMPT_FROM_JOB
    + """, 'failed', statement_timestamp(), %(error)s, %(took)s, %(margin)s
      FROM taskboard_jobs j
     WHERE j.id = %(id)s AND (j.lease_token = %(token)s) IS TRUE AND EXISTS (SELECT 1 FROM f)
    ON CONFLICT (job_id, lease_token) DO UPDATE
       SET outcome = 'failed', ended_at = excluded.ended_at, error = excluded.error,
           handler_seconds = excluded.handler_seconds,
           min_margin_seconds = excluded.min_margin_seconds
)
SELECT dead, run_at FROM f
"""
)

# Fenced release (drain): the job is claimable at once. A job whose handler never started
# gets its attempt back; one whose handler started keeps it counted (it may have done part
# of its work), and the history says which.
RELEASE: Final[LiteralString] = (
    """
WITH x AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[], %(started)s::boolean[])
             AS x(id, token, started)
), r AS (
    UPDATE taskboard_jobs j
       SET lease_token = NULL, lease_expires_at = NULL, run_at = now(),
           attempts = CASE WHEN x.started THEN j.attempts ELSE greatest(j.attempts - 1, 0) END
      FROM x
     WHERE j.id = x.id AND (j.lease_token = x.token) IS TRUE
    RETURNING j.id, x.token, x.started
), history AS (
    INSERT INTO taskboard_attempts AS a ("""
    + _ATTEMPT_KEYS
    + """, outcome, ended_at, error)
    SELECT """
    + _ATTEMPT_FROM_JOB
    + """, 'released', statement_timestamp(),
           CASE WHEN r.started
                THEN 'released by a draining worker after its handler started'
                ELSE 'released by a draining worker before its handler started '
                     '(attempt not counted)' END
      FROM r JOIN taskboard_jobs j ON j.id = r.id AND (j.lease_token = r.token) IS TRUE
    ON CONFLICT (job_id, lease_token) DO UPDATE
       SET outcome = 'released', ended_at = excluded.ended_at, error = excluded.error
), notified AS (
    SELECT count(pg_notify('taskboard_jobs', 'released')) AS n WHERE EXISTS (SELECT 1 FROM r)
)
SELECT r.id FROM r LEFT JOIN notified ON true
"""
)

# Fenced snooze: the handler puts its own job back for later; the attempt does not count.
# Snoozes are counted instead, and the one past the worker's cap makes the job dead with
# the reason (a job snoozing in a loop would otherwise run and write history for ever).
# Both decided on the row as this statement locks it (`snoozes` is its value before).
SNOOZE: Final[LiteralString] = (
    """
WITH s AS (
    UPDATE taskboard_jobs
       SET lease_token = NULL, lease_expires_at = NULL,
           snoozes = snoozes + 1,
           run_at = CASE WHEN snoozes >= %(cap)s THEN run_at
                         ELSE now() + make_interval(secs => %(seconds)s) END,
           attempts = CASE WHEN snoozes >= %(cap)s THEN attempts
                           ELSE greatest(attempts - 1, 0) END,
           failed_at = CASE WHEN snoozes >= %(cap)s THEN statement_timestamp() END,
           last_error = CASE WHEN snoozes >= %(cap)s
                             THEN format('snoozed %%s times, the cap (max snoozes %%s): not '
                                         'run again (retry it once the handler is fixed)',
                                         snoozes, %(cap)s::int)
                             ELSE last_error END
     WHERE id = %(id)s AND (lease_token = %(token)s) IS TRUE
    RETURNING run_at, failed_at IS NOT NULL AS dead, last_error
), history AS (
    INSERT INTO taskboard_attempts AS a ("""
    + _ATTEMPT_KEYS
    + """, outcome, ended_at, error)
    SELECT """
    + _ATTEMPT_FROM_JOB
    + """, CASE WHEN s.dead THEN 'failed' ELSE 'snoozed' END,
           statement_timestamp(),
           CASE WHEN s.dead THEN s.last_error
                ELSE format('snoozed for %%s s', %(seconds)s::text) END
      FROM s, taskboard_jobs j
     WHERE j.id = %(id)s AND (j.lease_token = %(token)s) IS TRUE
    ON CONFLICT (job_id, lease_token) DO UPDATE
       SET outcome = excluded.outcome, ended_at = excluded.ended_at, error = excluded.error
)
SELECT run_at, dead, last_error FROM s
"""
)
