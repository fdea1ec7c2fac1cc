"""Fleet-wide limits per kind (`max_running`, `rate_per_second`), enforced at claim.

A claim of limited kinds is one transaction of three statements, sent together (one round
trip): `LOCK_LIMITS` takes the kinds' rows in `taskboard_kind_limits` (in kind order, so
two claimers never deadlock); `CLAIM_LIMITED` then counts what it may take, in a snapshot
taken after the lock, so it sees every claim of those kinds committed before it; and
`CHARGE_LIMITS` writes the claim times into the rate window. The next claimer of the kind
waits for the commit (a few milliseconds), then sees it. Kinds without limits never take
these locks: the ordinary claim leaves limited kinds out (`claim._UNLIMITED`) and looks
nowhere else. A held slot is an unexpired lease, so a dead worker's slot frees when its
lease expires, with nothing to clean up.
"""

from __future__ import annotations

from typing import Final, LiteralString

from taskboard.core.sql.claim import (
    _CANDIDATE_COLUMNS,
    _CLAIM_REST,
    _EXPIRED_CANDIDATE,
    _EXPIRED_WHERE,
    _FRESH_CANDIDATE,
    _FRESH_WHERE,
)

# Written at registration by a worker for every kind it runs: the code declares the limits.
# A kind registered without any has its limits cleared (its limit was removed from the
# code); the row stays, as the worker's role deletes nothing.
SET_KIND_LIMITS: Final[LiteralString] = """
WITH given AS (
    SELECT * FROM unnest(%(kinds)s::text[], %(running)s::int[], %(rates)s::float8[])
             AS g(kind, max_running, rate)
), cleared AS (
    UPDATE taskboard_kind_limits l
       SET max_running = NULL, rate_per_second = NULL, updated_at = now()
      FROM given g
     WHERE l.kind = g.kind AND g.max_running IS NULL AND g.rate IS NULL
       AND (l.max_running IS NOT NULL OR l.rate_per_second IS NOT NULL)
)
INSERT INTO taskboard_kind_limits AS l (kind, max_running, rate_per_second)
SELECT kind, max_running, rate FROM given WHERE max_running IS NOT NULL OR rate IS NOT NULL
ON CONFLICT (kind) DO UPDATE
   SET max_running = excluded.max_running, rate_per_second = excluded.rate_per_second,
       updated_at = now()
 WHERE l.max_running IS DISTINCT FROM excluded.max_running
    OR l.rate_per_second IS DISTINCT FROM excluded.rate_per_second
"""

LOCK_LIMITS: Final[LiteralString] = """
SELECT kind FROM taskboard_kind_limits WHERE kind = ANY(%(kinds)s::text[])
 ORDER BY kind FOR NO KEY UPDATE
"""

# The rate window of a limit row `l`: `rate` claims in any second, or one in any 1/rate s.
_WINDOW: Final[LiteralString] = """make_interval(secs => CASE WHEN l.rate_per_second >= 1
                                          THEN 1 ELSE 1 / l.rate_per_second END)"""
_WINDOW_CLAIMS: Final[LiteralString] = """CASE WHEN l.rate_per_second IS NULL THEN NULL
                 WHEN l.rate_per_second >= 1 THEN floor(l.rate_per_second)::int ELSE 1 END"""

# How many of each kind this claim may take: what `max_running` leaves beside the unexpired
# leases of the kind, and what the rate window leaves beside the claims inside it.
_ALLOWANCE: Final[LiteralString] = (
    """
WITH lim AS (
    SELECT l.kind, greatest(0, least(
               %(limit)s,
               l.max_running - (SELECT count(*) FROM taskboard_jobs h
                                 WHERE h.kind = l.kind AND h.lease_token IS NOT NULL
                                   AND h.lease_expires_at > now()),
               """
    + _WINDOW_CLAIMS
    + """ - (SELECT count(*) FROM unnest(l.recent) t
                       WHERE t > now() - """
    + _WINDOW
    + """)))::int AS allowance
      FROM taskboard_kind_limits l WHERE l.kind = ANY(%(kinds)s::text[])
)"""
)

# The claim of limited kinds: per kind, its expired leases and fresh jobs up to its
# allowance (each kind its own LIMIT, so a kind at its limit never fills the claim and
# keeps another waiting), then the ordinary claim's rest. Exhausted rows are buried as the
# ordinary claim does. `expired` is empty: both kinds of candidate are in `fresh`.
CLAIM_LIMITED: Final[LiteralString] = (
    _ALLOWANCE
    + """, lapsed AS (
    SELECT c.* FROM lim CROSS JOIN LATERAL (
        """
    + _EXPIRED_CANDIDATE
    + _EXPIRED_WHERE
    + """
           AND kind = lim.kind
         ORDER BY lease_expires_at LIMIT lim.allowance
           FOR NO KEY UPDATE SKIP LOCKED) c
     WHERE lim.allowance > 0
), due AS (
    SELECT c.* FROM lim CROSS JOIN LATERAL (
        """
    + _FRESH_CANDIDATE
    + _FRESH_WHERE
    + """
           AND kind = lim.kind
         ORDER BY queue, priority DESC, run_at, id LIMIT lim.allowance
           FOR NO KEY UPDATE SKIP LOCKED) c
     WHERE lim.allowance > 0
), fresh AS (
    SELECT """
    + _CANDIDATE_COLUMNS
    + """ FROM (
        SELECT u.*, lim.allowance,
               row_number() OVER (PARTITION BY u.kind, u.exhausted
                                  ORDER BY u.rank, u.priority DESC, u.due, u.id) AS n
          FROM (SELECT * FROM lapsed UNION ALL SELECT * FROM due) u
          JOIN lim ON lim.kind = u.kind
    ) x
     WHERE exhausted OR n <= allowance
), expired AS (
    SELECT """
    + _CANDIDATE_COLUMNS
    + """
      FROM fresh WHERE false
)"""
    + _CLAIM_REST
)

# The claim times of this transaction's claims (`claimed_at = now()`, by this worker) join
# the rate window; the times that left it are dropped.
CHARGE_LIMITS: Final[LiteralString] = (
    """
UPDATE taskboard_kind_limits l
   SET recent = ARRAY(
           SELECT t FROM unnest(l.recent) t WHERE t > now() - """
    + _WINDOW
    + """
           UNION ALL
           SELECT j.claimed_at FROM taskboard_jobs j
            WHERE j.kind = l.kind AND j.lease_token IS NOT NULL
              AND j.claimed_by = %(worker)s AND j.claimed_at = now())
 WHERE l.kind = ANY(%(kinds)s::text[]) AND l.rate_per_second IS NOT NULL
"""
)

# Each limit, with what holds it and what waits on it (due, unclaimed jobs of the kind).
KIND_LIMITS: Final[LiteralString] = """
SELECT l.kind, l.max_running, l.rate_per_second,
       (SELECT count(*) FROM taskboard_jobs h
         WHERE h.kind = l.kind AND h.lease_token IS NOT NULL
           AND h.lease_expires_at > now())::int AS running,
       (SELECT count(*) FROM taskboard_jobs w
         WHERE w.kind = l.kind AND w.lease_token IS NULL AND w.completed_at IS NULL
           AND w.failed_at IS NULL AND w.cancelled_at IS NULL AND w.waiting_on = 0
           AND w.run_at <= now())::int
           AS waiting
  FROM taskboard_kind_limits l
 WHERE l.max_running IS NOT NULL OR l.rate_per_second IS NOT NULL
 ORDER BY l.kind
"""
