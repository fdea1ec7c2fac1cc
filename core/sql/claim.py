"""Claiming: fresh jobs and expired leases in one statement, the probe that finds a row
breaking it, the quarantine of that row, and when to look again.

The claim is built by joining this module's own constants (its variants share their CTEs);
no user data is ever part of a statement's text.
"""

from __future__ import annotations

from typing import Final, LiteralString

from taskboard.core.sql.attempts import _ATTEMPT_FROM_JOB, _ATTEMPT_KEYS

# Rows a claim may take: fresh jobs due now, and expired leases of unfinished jobs, in the
# worker's queues and of kinds it knows (a job of a kind no running worker knows waits for
# one that does, instead of dying as "unknown kind" on an old worker of a rolling deploy).
# `skip` holds ids the worker must not take: rows it is completing right now, and rows it
# could not quarantine. NO KEY UPDATE, not UPDATE: a stalled worker whose open transaction
# wrote a row referencing the job (billing's record) holds a KEY SHARE lock on it, and FOR
# UPDATE would skip that job for ever; the claim never changes the key.
# Exhausted rows (attempts used up) are not claimed but buried in the same statement: an
# expired lease on the last attempt, or a row written by hand with attempts >= max_attempts
# (whose `attempts + 1` could otherwise overflow and fail every claim of the queue).
# A paused queue (taskboard_queues.paused_at) gives no claim anything, at once, fleet-wide.
# Payloads: a claim returns each whole, so it takes rows while their sizes fit `max_bytes`
# (its first row always, so a row larger than that is claimed alone), and it buries rows
# over the schema's ceiling (16 MiB, migration 10; rows written before it existed) with the
# size named, reading `payload_bytes`, never the payload itself. A row of unknown size
# (written with triggers off) counts its stored size.
# Paused queues and limited kinds (`_UNLIMITED`) leave the worker's lists once per statement,
# not row by row: once ANALYZE has seen a table of one kind it estimates `kind <> x` at no
# row, and the cached generic claim read and sorted every waiting job instead of the ready
# index's first rows (13 ms instead of ~0.3 per 100 of 15,000; issue 25, test_hot_plans.py).
_NOT_PAUSED: Final[LiteralString] = """
       AND queue = ANY (ARRAY(SELECT u.name FROM unnest(%(queues)s::text[]) u(name)
                               WHERE NOT EXISTS (SELECT 1 FROM taskboard_queues q
                                                  WHERE q.name = u.name
                                                    AND q.paused_at IS NOT NULL)))"""
_FRESH_WHERE: Final[LiteralString] = (
    """
     WHERE lease_token IS NULL AND completed_at IS NULL AND failed_at IS NULL
       AND cancelled_at IS NULL AND waiting_on = 0 AND queue = ANY(%(queues)s)
       AND run_at <= now() AND kind = ANY(%(kinds)s) AND id <> ALL(%(skip)s::bigint[])"""
    + _NOT_PAUSED
)
_EXPIRED_WHERE: Final[LiteralString] = (
    """
     WHERE lease_token IS NOT NULL AND lease_expires_at <= now()
       AND completed_at IS NULL AND failed_at IS NULL AND cancelled_at IS NULL
       AND queue = ANY(%(queues)s) AND kind = ANY(%(kinds)s)
       AND id <> ALL(%(skip)s::bigint[])"""
    + _NOT_PAUSED
)
# The probe after a claim failed: the same claim, restricted to given ids, one at a time.
_ONLY: Final[LiteralString] = "\n       AND id = ANY(%(only)s::bigint[])"


# An expired candidate's attempt, as the row it was locked in holds it: the claim that takes
# the job over writes that attempt's history row (`closed`).
_PREV_ATTEMPT: Final[LiteralString] = """
           claim_count AS prev_ordinal, claimed_at AS prev_claimed_at,
           greatest(extract(epoch FROM claimed_at - run_at), 0)::float8 AS prev_pickup,"""
_NO_PREV_ATTEMPT: Final[LiteralString] = """
           NULL::integer AS prev_ordinal, NULL::timestamptz AS prev_claimed_at,
           NULL::float8 AS prev_pickup,"""
# The candidates' columns, in the order every candidate CTE gives them.
_CANDIDATE_COLUMNS: Final[LiteralString] = (
    "id, prev_token, prev_worker, prev_ordinal, prev_claimed_at, prev_pickup, exhausted, rank,"
    " kind, priority, due, bytes"
)

# A candidate row of each sort, in `_CANDIDATE_COLUMNS`' order (the WHERE follows): shared
# with `CLAIM_LIMITED` (limits.py), which takes them per kind.
_FRESH_CANDIDATE: Final[LiteralString] = (
    """SELECT id, NULL::uuid AS prev_token, NULL::text AS prev_worker,"""
    + _NO_PREV_ATTEMPT
    + """
           attempts >= max_attempts OR coalesce(payload_bytes, 0) > 16777216 AS exhausted,
           1 AS rank, kind, priority, run_at AS due,
           coalesce(payload_bytes, pg_column_size(payload)) AS bytes
      FROM taskboard_jobs"""
)
_EXPIRED_CANDIDATE: Final[LiteralString] = (
    """SELECT id, lease_token AS prev_token, claimed_by AS prev_worker,"""
    + _PREV_ATTEMPT
    + """
           attempts >= max_attempts OR coalesce(payload_bytes, 0) > 16777216 AS exhausted,
           0 AS rank, kind, priority, lease_expires_at AS due,
           coalesce(payload_bytes, pg_column_size(payload)) AS bytes
      FROM taskboard_jobs"""
)

_CLAIM_HEAD: Final[LiteralString] = """
WITH fresh AS (
    """ + _FRESH_CANDIDATE
_CLAIM_MIDDLE: Final[LiteralString] = (
    """
     ORDER BY queue, priority DESC, run_at, id
     LIMIT %(limit)s
     FOR NO KEY UPDATE SKIP LOCKED
), expired AS (
    """
    + _EXPIRED_CANDIDATE
)
# Kinds under a fleet limit are claimed by `CLAIM_LIMITED` alone (`taskboard.core.sql.limits`):
# one small table's kinds, read once per statement.
_UNLIMITED: Final[LiteralString] = """
       AND kind = ANY (ARRAY(SELECT u.kind FROM unnest(%(kinds)s::text[]) u(kind)
                              WHERE NOT EXISTS (SELECT 1 FROM taskboard_kind_limits l
                                                 WHERE l.kind = u.kind
                                                   AND (l.max_running IS NOT NULL
                                                        OR l.rate_per_second IS NOT NULL))))"""
_EXPIRED_END: Final[LiteralString] = """
     ORDER BY lease_expires_at
     LIMIT %(limit)s
     FOR NO KEY UPDATE SKIP LOCKED
)"""
# From the candidates (`fresh`, `expired`) on: shared with `CLAIM_LIMITED`, which also
# takes the candidates' conditions (`_FRESH_WHERE`, `_EXPIRED_WHERE`).
_CLAIM_REST: Final[LiteralString] = """, picked AS (
    -- At most `db_limit` rows of `db_kinds` (kinds whose handlers each hold a connection:
    -- the worker has only so many), the rest of any kind, `limit` in all. The caller
    -- leaves `db_kinds` out of `kinds` when it has no connection free, so a queue full of
    -- them never keeps the others waiting behind. Then rows while the payloads before
    -- them stay under `max_bytes`.
    SELECT id, prev_token, prev_worker FROM (
        SELECT id, prev_token, prev_worker, rank, priority, due,
               sum(bytes) OVER (ORDER BY rank, priority DESC, due, id ROWS UNBOUNDED PRECEDING)
                   - bytes AS before
          FROM (
            SELECT id, prev_token, prev_worker, rank, priority, due, holds, bytes,
                   row_number() OVER (PARTITION BY holds ORDER BY rank, priority DESC, due, id)
                       AS n
              FROM (
                SELECT id, prev_token, prev_worker, rank, priority, due, bytes,
                       kind = ANY(%(db_kinds)s::text[]) AS holds
                  FROM expired WHERE NOT exhausted
                UNION ALL
                SELECT id, prev_token, prev_worker, rank, priority, due, bytes,
                       kind = ANY(%(db_kinds)s::text[]) AS holds
                  FROM fresh WHERE NOT exhausted
              ) u
          ) c
         WHERE NOT holds OR n <= %(db_limit)s
    ) b
    WHERE before < %(max_bytes)s
    ORDER BY rank, priority DESC, due, id
    LIMIT %(limit)s
), claimed AS (
    -- Rows by an id array, not a join with `picked`: the plan is cached and generic, and
    -- with LIMIT a parameter the planner guesses `picked` at a tenth of the table; after an
    -- ANALYZE its join became a sequential scan of every job (5.5 ms per claim instead of
    -- 0.5, measured). An id array always takes the primary key.
    UPDATE taskboard_jobs j
       SET lease_token = gen_random_uuid(),
           -- The kind's own lease where it sets one (`lease_kinds`/`kind_leases`), else
           -- the worker's.
           lease_expires_at = now() + make_interval(secs => coalesce(
               (%(kind_leases)s::float8[])[array_position(%(lease_kinds)s::text[], j.kind)],
               %(lease)s)),
           claimed_by = %(worker)s,
           claimed_at = now(),
           attempts = j.attempts + 1,
           claim_count = j.claim_count + 1
     WHERE j.id = ANY (ARRAY(SELECT id FROM picked))
    -- The payload as text: the worker decodes it per job, so one row too deep or too
    -- large to decode becomes one dead job instead of a claim that always fails.
    RETURNING j.id, j.kind, j.payload::text AS payload, j.queue, j.attempts, j.max_attempts,
              j.claim_count, j.lease_token, j.lease_expires_at, j.timeout_seconds, j.run_at,
              j.identity, j.traceparent, j.tracestate
), spent AS (
    SELECT id, prev_token FROM expired WHERE exhausted
    UNION ALL
    SELECT id, prev_token FROM fresh WHERE exhausted
), buried AS (
    UPDATE taskboard_jobs j
       SET failed_at = now(), lease_token = NULL, lease_expires_at = NULL,
           last_error = CASE
               WHEN j.payload_bytes > 16777216 THEN
                   format('quarantined: its payload of %%s bytes is over the ceiling of '
                          '16777216 bytes; no claim returns it', j.payload_bytes)
               WHEN j.lease_token IS NULL THEN
                   format('attempts used up before a claim (%%s of %%s)',
                          j.attempts, j.max_attempts)
               ELSE format('lease expired on attempt %%s of %%s: worker %%s stopped renewing',
                           j.attempts, j.max_attempts, coalesce(j.claimed_by, '?'))
           END
     WHERE j.id = ANY (ARRAY(SELECT id FROM spent))
    RETURNING j.id
), closed AS (
    -- The lost holder's attempt, written once, now (migration 15: a running attempt lives
    -- on its job row), from its candidate row: every picked row is claimed and every
    -- exhausted (spent) one buried, both locked above. `superseded_at` says when it lost
    -- the job; `ended_at` is stamped now for a worker that never comes back, and restamped
    -- by the stale worker's rejected completion if it does (RECORD_REJECTED). An attempt
    -- whose row exists already (its worker recorded a renewal failure or gave it up) is
    -- closed the same way unless it has an outcome.
    INSERT INTO taskboard_attempts AS a (job_id, attempt, lease_token, worker_id, claimed_at,
                                         pickup_seconds, outcome, superseded_at, ended_at)
    SELECT c.id, c.prev_ordinal, c.prev_token, coalesce(c.prev_worker, '?'),
           coalesce(c.prev_claimed_at, now()), c.prev_pickup, 'lease_lost', now(), now()
      FROM (SELECT id, prev_token, prev_worker, prev_ordinal, prev_claimed_at, prev_pickup,
                   exhausted FROM expired
            UNION ALL
            SELECT id, prev_token, prev_worker, prev_ordinal, prev_claimed_at, prev_pickup,
                   exhausted FROM fresh) c
     WHERE c.prev_token IS NOT NULL
       AND (c.exhausted OR c.id IN (SELECT id FROM picked))
    ON CONFLICT (job_id, lease_token) DO UPDATE
       SET outcome = 'lease_lost', superseded_at = now(), ended_at = coalesce(a.ended_at, now())
     WHERE a.outcome IS NULL
)
SELECT c.id, c.kind, c.payload, c.queue, c.attempts AS attempt, c.max_attempts,
       c.claim_count AS ordinal, c.lease_token AS token, c.lease_expires_at,
       c.timeout_seconds AS timeout, c.run_at,
       p.prev_token AS previous_token, p.prev_worker AS previous_worker, now() AS db_now,
       -- What its effects are keyed by: rows enqueued before migration 9 keep their id.
       coalesce(c.identity::text, c.id::text) AS identity,
       -- The enqueuer's trace context (migration 12): each attempt's span joins it.
       c.traceparent, c.tracestate
  FROM claimed c JOIN picked p ON p.id = c.id
 ORDER BY c.id
"""

_CLAIM_TAIL: Final[LiteralString] = _EXPIRED_END + _CLAIM_REST

CLAIM: Final[LiteralString] = (
    _CLAIM_HEAD + _FRESH_WHERE + _UNLIMITED + _CLAIM_MIDDLE + _EXPIRED_WHERE + _UNLIMITED
    + _CLAIM_TAIL
)
# The probe's trials roll back, so they may take a limited kind's row too: a row of any
# kind that breaks a claim (the ordinary one or `CLAIM_LIMITED`) is found and put aside.
CLAIM_ONLY: Final[LiteralString] = (
    _CLAIM_HEAD + _FRESH_WHERE + _ONLY + _CLAIM_MIDDLE + _EXPIRED_WHERE + _ONLY + _CLAIM_TAIL
)

# After a claim failed on something other than a connection: the ids it would have looked
# at (no locks), so each can be tried alone and the one that breaks it quarantined.
CLAIM_CANDIDATES: Final[LiteralString] = (
    """
(SELECT id FROM taskboard_jobs"""
    + _EXPIRED_WHERE
    + """
  ORDER BY lease_expires_at LIMIT %(limit)s)
UNION ALL
(SELECT id FROM taskboard_jobs"""
    + _FRESH_WHERE
    + """
  ORDER BY queue, priority DESC, run_at, id LIMIT %(limit)s)
"""
)

# The probe holds each row it tries from its trial until its quarantine commits, so no
# other claim meets a poison row in between; a row held by another (or finished) is left.
PROBE_LOCK: Final[LiteralString] = """
SELECT id FROM taskboard_jobs
 WHERE id = %(id)s AND completed_at IS NULL AND failed_at IS NULL AND cancelled_at IS NULL
   FOR NO KEY UPDATE SKIP LOCKED
"""

# A row whose claim alone timed out: its payload's size, known (`payload_bytes`) and as
# stored (compressed, perhaps), read without fetching the payload. That this answers in time
# while the claim did not is what puts the blame on the payload rather than the server.
ROW_SIZE: Final[LiteralString] = """
SELECT payload_bytes, pg_column_size(payload) FROM taskboard_jobs WHERE id = %(id)s
"""

# One row the worker cannot claim, renew or finish without the statement failing: dead
# with the reason, so it never stalls the queue. Fenced like everything else: the row must
# be unfinished and either free, held by this token, or expired.
QUARANTINE: Final[LiteralString] = (
    """
WITH q AS (
    UPDATE taskboard_jobs
       SET failed_at = statement_timestamp(), lease_token = NULL, lease_expires_at = NULL,
           last_error = %(error)s
     WHERE id = %(id)s AND completed_at IS NULL AND failed_at IS NULL AND cancelled_at IS NULL
       AND (lease_token IS NULL OR lease_token = %(token)s::uuid OR lease_expires_at <= now())
    RETURNING id
), history AS (
    -- The attempt that held it, if one did (its row written now, as it ends).
    INSERT INTO taskboard_attempts AS a ("""
    + _ATTEMPT_KEYS
    + """, outcome, ended_at, error)
    SELECT """
    + _ATTEMPT_FROM_JOB
    + """, 'failed', statement_timestamp(), %(error)s
      FROM taskboard_jobs j
     WHERE j.id = %(id)s AND j.lease_token IS NOT NULL AND EXISTS (SELECT 1 FROM q)
    ON CONFLICT (job_id, lease_token) DO UPDATE
       SET outcome = 'failed', ended_at = excluded.ended_at, error = excluded.error
     WHERE a.outcome IS NULL
)
SELECT count(*) FROM q
"""
)

