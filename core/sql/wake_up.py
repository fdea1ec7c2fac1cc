"""The idle wake-up: when nothing is claimable, how long until something could be."""

from __future__ import annotations

from typing import Final, LiteralString

# When nothing is claimable: how long until something could be (a scheduled job comes due
# or a lease expires, in a queue that is not paused), so an idle worker sleeps exactly that
# long instead of polling.
#
# The earliest waiting job without reading them all: min(run_at) over the ready index read
# every waiting row of the worker's queues on each idle wake-up (32 ms with 200,000 jobs
# scheduled for tomorrow, and every NOTIFY makes one). The ready index is ordered by
# (queue, priority DESC, run_at), so the earliest job of one priority is the first entry
# of that priority: the statement steps from priority to priority (each step one index
# probe, `max(priority) ... < the last`) and takes each priority's first entry of the
# worker's kinds. Kinds under a fleet limit are looked up apart: one may be due and still
# not claimable, so it counts as due no sooner than `limited_wait` (a rate's next slot, a
# running slot freed), and greatest() of the earliest is the earliest of the greatest().
_READY_ROW: Final[LiteralString] = """j.lease_token IS NULL AND j.completed_at IS NULL
               AND j.failed_at IS NULL AND j.cancelled_at IS NULL AND j.waiting_on = 0"""
NEXT_WAKEUP: Final[LiteralString] = (
    """
WITH RECURSIVE open_queues AS (
    SELECT o.name FROM unnest(%(queues)s::text[]) AS o(name)
     WHERE NOT EXISTS (SELECT 1 FROM taskboard_queues q
                        WHERE q.name = o.name AND q.paused_at IS NOT NULL)
), levels AS (
    SELECT o.name AS queue,
           (SELECT max(j.priority) FROM taskboard_jobs j
             WHERE j.queue = o.name AND """
    + _READY_ROW
    + """) AS priority
      FROM open_queues o
    UNION ALL
    SELECT l.queue,
           (SELECT max(j.priority) FROM taskboard_jobs j
             WHERE j.queue = l.queue AND j.priority < l.priority AND """
    + _READY_ROW
    + """)
      FROM levels l
     WHERE l.priority IS NOT NULL
), firsts AS (
    SELECT (SELECT j.run_at FROM taskboard_jobs j
             WHERE j.queue = l.queue AND j.priority = l.priority AND """
    + _READY_ROW
    + """
               AND j.kind = ANY(%(kinds)s) AND NOT j.kind = ANY(%(limited)s::text[])
             ORDER BY j.run_at LIMIT 1) AS free_at,
           (SELECT j.run_at FROM taskboard_jobs j
             WHERE j.queue = l.queue AND j.priority = l.priority AND """
    + _READY_ROW
    + """
               AND j.kind = ANY(%(kinds)s) AND j.kind = ANY(%(limited)s::text[])
             ORDER BY j.run_at LIMIT 1) AS limited_at
      FROM levels l
     WHERE l.priority IS NOT NULL
)
SELECT extract(epoch FROM least(
           (SELECT min(free_at) FROM firsts),
           (SELECT CASE WHEN min(limited_at) IS NOT NULL
                        THEN greatest(min(limited_at),
                                      now() + make_interval(secs => %(limited_wait)s)) END
              FROM firsts),
           -- The earliest lease deadline: per kind, the first live entry of the held
           -- index (kind, lease_expires_at). As one min() over the kinds it was a bitmap
           -- scan of every entry of the kinds, dead ones included (a bitmap scan never
           -- marks them): 1 ms per idle wake-up at 3,400 jobs/s from a young table.
           (SELECT min(first.at) FROM unnest(%(kinds)s::text[]) AS k(kind),
                   LATERAL (SELECT j.lease_expires_at AS at FROM taskboard_jobs j
                             WHERE j.kind = k.kind AND j.lease_token IS NOT NULL
                               AND j.queue = ANY(%(queues)s)
                               AND NOT EXISTS (SELECT 1 FROM taskboard_queues q
                                                WHERE q.name = j.queue
                                                  AND q.paused_at IS NOT NULL)
                             ORDER BY j.lease_expires_at LIMIT 1) AS first)
       ) - now())
"""
)
