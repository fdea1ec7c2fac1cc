"""Reads for `taskboard status` and the dashboard: counts, workers, claims, trouble, history."""

from __future__ import annotations

from typing import Final, LiteralString

# --- status and the dashboard ------------------------------------------------------------

# Jobs by state without scanning finished rows or the backlog: waiting jobs (unleased,
# unfinished) and finished ones are kept counted by triggers (migrations 5 and 3); of the
# waiting ones only those not due are counted here: those due later from the partial
# "ready" index (PostgreSQL 18 skips to run_at within each queue and priority), children
# waiting on their parents (parked, migration 13) from their own (migration 16); pending is
# the rest. Leased rows are counted through their partial index: no more than the fleet
# holds.
JOB_COUNTS: Final[LiteralString] = """
SELECT w.n - s.n AS pending, s.n AS scheduled,
       (SELECT count(*) FROM taskboard_jobs
         WHERE lease_token IS NOT NULL AND lease_expires_at > now()) AS claimed,
       (SELECT count(*) FROM taskboard_jobs
         WHERE lease_token IS NOT NULL AND lease_expires_at <= now()) AS expired,
       coalesce((SELECT sum(n) FROM taskboard_finished_counts WHERE state = 'completed'), 0)::bigint
           AS completed,
       coalesce((SELECT sum(n) FROM taskboard_finished_counts WHERE state = 'dead'), 0)::bigint
           AS dead,
       coalesce((SELECT sum(n) FROM taskboard_finished_counts WHERE state = 'cancelled'), 0)::bigint
           AS cancelled,
       now() AS db_now
  FROM (SELECT coalesce(sum(n), 0)::bigint AS n FROM taskboard_waiting_counts) w,
       (SELECT (SELECT count(*) FROM taskboard_jobs
                 WHERE lease_token IS NULL AND completed_at IS NULL AND failed_at IS NULL
                   AND cancelled_at IS NULL AND waiting_on = 0 AND run_at > now())
             + (SELECT count(*) FROM taskboard_jobs
                 WHERE waiting_on > 0 AND lease_token IS NULL AND completed_at IS NULL
                   AND failed_at IS NULL AND cancelled_at IS NULL) AS n) s
"""

# The same by queue, for the metrics endpoint and `taskboard queue list`: a queue's pending
# and scheduled rows appear only while it has some (a drained queue's gauge goes away), its
# finished counts always.
JOB_COUNTS_BY_QUEUE: Final[LiteralString] = """
WITH waiting AS (
    SELECT queue, sum(n) AS n FROM taskboard_waiting_counts GROUP BY queue
), scheduled AS (
    SELECT queue, count(*) AS n FROM (
        SELECT queue FROM taskboard_jobs
         WHERE lease_token IS NULL AND completed_at IS NULL AND failed_at IS NULL
           AND cancelled_at IS NULL AND waiting_on = 0 AND run_at > now()
        UNION ALL
        SELECT queue FROM taskboard_jobs
         WHERE waiting_on > 0 AND lease_token IS NULL AND completed_at IS NULL
           AND failed_at IS NULL AND cancelled_at IS NULL
    ) later
     GROUP BY queue
)
SELECT queue, state, n FROM (
    SELECT w.queue, 'pending' AS state, (w.n - coalesce(s.n, 0))::bigint AS n
      FROM waiting w LEFT JOIN scheduled s ON s.queue = w.queue
    UNION ALL
    SELECT queue, 'scheduled', n FROM scheduled
    UNION ALL
    SELECT queue, 'running', count(*) FROM taskboard_jobs
     WHERE lease_token IS NOT NULL
     GROUP BY queue
    UNION ALL
    SELECT queue, state, sum(n)::bigint FROM taskboard_finished_counts GROUP BY queue, state
) s
 WHERE n > 0 OR state IN ('completed', 'dead', 'cancelled')
 ORDER BY queue, state
"""

# The state a worker's row shows: what it wrote, unless it stopped, its heartbeat is older
# than `gone_after` seconds (gone), or a pause was asked and not yet obeyed (pausing).
LIST_WORKERS: Final[LiteralString] = """
SELECT id, host, pid, started_at, heartbeat_at,
       CASE WHEN stopped_at IS NOT NULL THEN 'stopped'
            WHEN heartbeat_at < now() - make_interval(secs => %(gone_after)s) THEN 'gone'
            WHEN pause_requested AND state = 'running' THEN 'pausing'
            ELSE state END AS state,
       in_flight, capacity, lease_seconds, renewals_ok, renewals_failed,
       pool_max, pool_in_use, pool_idle, pool_waiting, false AS embedded, kinds, last_error
  FROM taskboard_workers
 WHERE stopped_at IS NULL OR stopped_at > now() - make_interval(secs => %(keep_stopped)s)
 ORDER BY started_at, id
"""

# With each claim, the worker it was taken from when it is a reclaim (the previous attempt
# lost its lease to this very claim): the row can say "reclaimed from A" for the whole
# lease, although the expired state itself may last only milliseconds.
LIST_CLAIMS: Final[LiteralString] = """
SELECT j.id AS job_id, j.kind, j.queue, coalesce(j.claimed_by, '?') AS worker_id,
       j.lease_token::text AS token, j.attempts AS attempt, j.max_attempts, j.claimed_at,
       j.lease_expires_at,
       coalesce(w.lease_seconds,
                extract(epoch FROM j.lease_expires_at - j.claimed_at))::float8 AS lease_seconds,
       p.worker_id AS reclaimed_from
  FROM taskboard_jobs j
  LEFT JOIN taskboard_workers w ON w.id = j.claimed_by
  LEFT JOIN LATERAL (
        -- The attempt this very claim superseded (one statement: the same now()).
        SELECT a.worker_id FROM taskboard_attempts a
         WHERE a.job_id = j.id AND a.superseded_at = j.claimed_at
         ORDER BY a.id DESC LIMIT 1) p ON true
 WHERE j.lease_token IS NOT NULL
 ORDER BY j.lease_expires_at, j.id
 LIMIT %(limit)s
"""

# Newest first, read straight off the trouble index (migration 5): the same expression and
# order, so the list costs its `limit` rows however many trouble attempts history holds.
LIST_TROUBLE: Final[LiteralString] = """
SELECT coalesce(ended_at, renewal_failed_at, claimed_at) AS at, job_id, worker_id,
       lease_token::text AS token,
       CASE WHEN outcome IS NULL THEN 'renewal_failed'
            -- An external call refused because the lease was lost or its local deadline
            -- had passed: the send that did not happen, shown as its own line.
            WHEN outcome = 'lease_lost' AND error LIKE '%%; not starting %%'
            THEN 'effect_refused'
            ELSE outcome END AS outcome,
       coalesce(error, '') AS detail
  FROM taskboard_attempts
 WHERE outcome IN ('completion_rejected', 'lease_lost') OR renewal_failed_at IS NOT NULL
 ORDER BY coalesce(ended_at, renewal_failed_at, claimed_at) DESC, id DESC
 LIMIT %(limit)s
"""

LIST_DEAD: Final[LiteralString] = """
SELECT id AS job_id, kind, attempts, coalesce(last_error, '') AS last_error, failed_at
  FROM taskboard_jobs
 WHERE failed_at IS NOT NULL
 ORDER BY failed_at DESC, id DESC
 LIMIT %(limit)s
"""

# An attempt's row is written when it ends (migration 15): the running one is read from its
# job row, unless it has a row already (a renewal failure wrote it early).
_RUNNING_ATTEMPT: Final[LiteralString] = """
  FROM taskboard_jobs j
 WHERE j.id = %(id)s AND j.lease_token IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM taskboard_attempts a
                    WHERE a.job_id = j.id AND a.lease_token = j.lease_token)"""

JOB_ATTEMPTS: Final[LiteralString] = (
    """
SELECT attempt, token, worker, claimed_at, ended_at, outcome, error, renewal_failed_at,
       superseded_at
  FROM (SELECT id, attempt, lease_token::text AS token, worker_id AS worker, claimed_at,
               ended_at, outcome, error, renewal_failed_at, superseded_at
          FROM taskboard_attempts
         WHERE job_id = %(id)s
        UNION ALL
        SELECT NULL, j.claim_count, j.lease_token::text, coalesce(j.claimed_by, '?'),
               j.claimed_at, NULL, NULL, NULL, NULL, NULL"""
    + _RUNNING_ATTEMPT
    + """) h
 ORDER BY attempt, id NULLS LAST
"""
)

DB_NOW: Final[LiteralString] = "SELECT now()"

# Kinds with jobs waiting that no live worker runs (in that queue): they wait for a worker
# that knows them, and `status` and the dashboard say so; `queue_worked` tells a queue no
# live worker works at all from a kind nobody runs in a worked queue. Reads the kept waiting
# counts (migration 5), not the waiting rows.
ORPHAN_KINDS: Final[LiteralString] = """
WITH live AS (
    SELECT kinds, queues FROM taskboard_workers
     WHERE stopped_at IS NULL AND heartbeat_at > now() - make_interval(secs => %(gone_after)s)
)
SELECT c.kind, c.queue, sum(c.n)::bigint AS waiting,
       EXISTS (SELECT 1 FROM live WHERE c.queue = ANY (live.queues)) AS queue_worked
  FROM taskboard_waiting_counts c
 WHERE NOT EXISTS (SELECT 1 FROM live WHERE c.kind = ANY (live.kinds)
                                         AND c.queue = ANY (live.queues))
 GROUP BY c.kind, c.queue
HAVING sum(c.n) > 0
 ORDER BY c.kind, c.queue
"""

# Whether a queue is known at all: a job was ever counted in it, a live worker works it, or
# it was paused before. Pausing an unknown name is allowed (ahead of a deploy) but said.
QUEUE_KNOWN: Final[LiteralString] = """
SELECT EXISTS (SELECT 1 FROM taskboard_waiting_counts WHERE queue = %(name)s)
    OR EXISTS (SELECT 1 FROM taskboard_finished_counts WHERE queue = %(name)s)
    OR EXISTS (SELECT 1 FROM taskboard_queues WHERE name = %(name)s)
    OR EXISTS (SELECT 1 FROM taskboard_workers
                WHERE stopped_at IS NULL AND %(name)s = ANY (queues)
                  AND heartbeat_at > now() - make_interval(secs => %(gone_after)s))
"""

# Paused queues with their due jobs, as `LIST_QUEUES` (core/sql/jobs.py) says them, from the
# kept waiting counts: a queue paused through an outage holds its whole backlog.
BOARD_PAUSED_QUEUES: Final[LiteralString] = """
SELECT q.name, q.paused_at, q.reason,
       (coalesce((SELECT sum(c.n) FROM taskboard_waiting_counts c WHERE c.queue = q.name), 0)
        - (SELECT count(*) FROM taskboard_jobs j
            WHERE j.queue = q.name AND j.lease_token IS NULL AND j.completed_at IS NULL
              AND j.failed_at IS NULL AND j.cancelled_at IS NULL AND j.waiting_on = 0
              AND j.run_at > now())
        - (SELECT count(*) FROM taskboard_jobs j
            WHERE j.queue = q.name AND j.waiting_on > 0 AND j.lease_token IS NULL
              AND j.completed_at IS NULL AND j.failed_at IS NULL AND j.cancelled_at IS NULL)
       )::bigint AS waiting
  FROM taskboard_queues q
 WHERE q.paused_at IS NOT NULL
 ORDER BY q.name
"""

# --- one job, lease advice (jobs by state: job_lists.py) ----------------------------------

JOB_ROW: Final[LiteralString] = """
SELECT id, kind, queue, priority, payload, attempts, max_attempts, claim_count, run_at,
       created_at, completed_at, failed_at, cancelled_at, lease_token::text AS token,
       lease_expires_at, claimed_by, last_error, unique_key, timeout_seconds, traceparent,
       result, waiting_on
  FROM taskboard_jobs WHERE id = %(id)s
"""

# `attempt` in the history is the claim's ordinal (the job's `claim_count`): it counts every
# claim, retries included, and is what `X-Taskboard-Attempt` carries.
JOB_ATTEMPTS_DETAIL: Final[LiteralString] = (
    """
SELECT ordinal, token, worker, claimed_at, ended_at, superseded_at, renewal_failed_at,
       outcome, error, pickup_seconds, handler_seconds, min_margin_seconds
  FROM (SELECT id, attempt AS ordinal, lease_token::text AS token, worker_id AS worker,
               claimed_at, ended_at, superseded_at, renewal_failed_at, outcome, error,
               pickup_seconds, handler_seconds, min_margin_seconds
          FROM taskboard_attempts WHERE job_id = %(id)s
        UNION ALL
        SELECT NULL, j.claim_count, j.lease_token::text, coalesce(j.claimed_by, '?'),
               j.claimed_at, NULL, NULL, NULL, NULL, NULL,
               greatest(extract(epoch FROM j.claimed_at - j.run_at), 0)::float8, NULL, NULL"""
    + _RUNNING_ATTEMPT
    + """) h
 ORDER BY ordinal, id NULLS LAST
"""
)

# Per kind, over its most recent attempts with a recorded run (newest ids first: the
# primary key, no extra index on the hot path): how long handlers take, the least lease left
# at a renewal, and the lease their workers ran with.
LEASE_ADVICE: Final[LiteralString] = """
WITH recent AS (
    SELECT a.handler_seconds, a.min_margin_seconds, a.worker_id, a.claimed_at,
           a.ended_at, j.kind
      FROM taskboard_attempts a JOIN taskboard_jobs j ON j.id = a.job_id
     WHERE a.handler_seconds IS NOT NULL
     ORDER BY a.id DESC
     LIMIT %(window)s
)
SELECT r.kind, count(*) AS samples,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY r.handler_seconds) AS p50,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY r.handler_seconds) AS p99,
       max(r.handler_seconds) AS longest,
       min(r.min_margin_seconds) AS least_margin,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY coalesce(
           w.lease_seconds, extract(epoch FROM r.ended_at - r.claimed_at)))::float8 AS lease
  FROM recent r LEFT JOIN taskboard_workers w ON w.id = r.worker_id
 GROUP BY r.kind
 ORDER BY r.kind
"""

# Trends: what happened in the last `window` seconds, fleet-wide, through indexes only.
# Completions are counted up to 10,000 (a floor past that, 1,000 jobs/s over 10 s): each
# costs an index entry and, on a busy fleet, a heap visit, and the refresh must stay cheap.
# The trouble index is in the order of the trouble's time (migration 5).
RECENT_ACTIVITY: Final[LiteralString] = """
SELECT (SELECT count(*) FROM (
            SELECT 1 FROM taskboard_jobs
             WHERE completed_at > now() - make_interval(secs => %(window)s)
             LIMIT 10000) c) AS completed,
       (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY pickup_seconds)
          FROM (SELECT pickup_seconds FROM taskboard_attempts
                 ORDER BY id DESC LIMIT 200) p) AS pickup_p50,
       (SELECT count(*) FROM taskboard_attempts
         WHERE outcome IN ('completion_rejected', 'lease_lost')
           AND coalesce(ended_at, renewal_failed_at, claimed_at)
               > now() - make_interval(secs => %(window)s)) AS lost
"""
