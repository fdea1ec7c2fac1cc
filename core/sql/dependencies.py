"""Dependencies between jobs: attaching a new job to its parents, and what a child reads of
them. What happens when a parent ends is the trigger `taskboard_parent_ended` (migration 13).
"""

from __future__ import annotations

from typing import Final, LiteralString

# In the enqueue's transaction, right after the children were inserted. Each parent's row is
# updated (marked a parent), which locks it: a parent completing concurrently either
# committed first (then it counts as done here) or waits for this transaction and then
# finds the new children in its trigger. Answers the parents that do not exist, and those
# that are dead or cancelled (then the caller rolls the whole enqueue back), and the trace
# context each parent carries (the enqueue span links to them: they release the child).
ATTACH_PARENTS: Final[LiteralString] = """
WITH wanted AS (
    SELECT child, parent FROM unnest(%(children)s::bigint[], %(parents)s::bigint[])
        AS w(child, parent)
), parents AS (
    UPDATE taskboard_jobs p SET has_children = true
     WHERE p.id = ANY (%(parents)s::bigint[])
    RETURNING p.id, p.completed_at IS NOT NULL AS done,
              p.failed_at IS NOT NULL OR p.cancelled_at IS NOT NULL AS over,
              p.traceparent, p.tracestate
), links AS (
    INSERT INTO taskboard_job_parents (child_id, parent_id)
    SELECT child, parent FROM wanted WHERE parent IN (SELECT id FROM parents)
    ON CONFLICT DO NOTHING
), open AS (
    SELECT w.child, count(*) AS n FROM wanted w JOIN parents p ON p.id = w.parent
     WHERE NOT p.done GROUP BY w.child
), parked AS (
    UPDATE taskboard_jobs c
       SET waiting_on = o.n, wait_run_at = c.run_at, run_at = '9999-01-01 00:00:00+00'
      FROM open o WHERE c.id = o.child
)
SELECT coalesce((SELECT array_agg(DISTINCT parent) FROM wanted
                  WHERE parent NOT IN (SELECT id FROM parents)), '{}') AS missing,
       coalesce((SELECT array_agg(id) FROM parents WHERE over), '{}') AS over,
       (SELECT array_agg(ARRAY[id::text, traceparent, tracestate] ORDER BY id) FROM parents
         WHERE traceparent IS NOT NULL) AS traced
"""

PARENT_RESULTS: Final[LiteralString] = """
SELECT p.parent_id, j.result FROM taskboard_job_parents p
  JOIN taskboard_jobs j ON j.id = p.parent_id
 WHERE p.child_id = %(id)s ORDER BY p.parent_id
"""

# What a waiting job waits on: its parents not yet completed, with their state.
WAITS_ON: Final[LiteralString] = """
SELECT j.id, j.kind,
       CASE WHEN j.completed_at IS NOT NULL THEN 'completed'
            WHEN j.failed_at IS NOT NULL THEN 'dead'
            WHEN j.cancelled_at IS NOT NULL THEN 'cancelled'
            WHEN j.lease_token IS NOT NULL THEN 'running'
            WHEN j.waiting_on > 0 THEN 'waiting'
            ELSE 'pending' END AS state
  FROM taskboard_job_parents p JOIN taskboard_jobs j ON j.id = p.parent_id
 WHERE p.child_id = %(id)s ORDER BY j.id
"""
