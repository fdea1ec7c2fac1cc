"""The counts the board reads (kept by triggers, never scanned) against the same counts
scanned from the jobs: the oracle of the board-counts tests and of the fault checker."""

from __future__ import annotations

from typing import Any

import psycopg

WAITING = ("lease_token IS NULL AND completed_at IS NULL AND failed_at IS NULL"
           " AND cancelled_at IS NULL")
KEPT_WAITING = """
SELECT queue, kind, sum(n)::bigint FROM taskboard_waiting_counts
 GROUP BY 1, 2 HAVING sum(n) <> 0 ORDER BY 1, 2"""
SCANNED_WAITING = f"""
SELECT queue, kind, count(*) FROM taskboard_jobs WHERE {WAITING}
 GROUP BY 1, 2 ORDER BY 1, 2"""
KEPT_FINISHED = """
SELECT queue, state, sum(n)::bigint FROM taskboard_finished_counts
 GROUP BY 1, 2 HAVING sum(n) <> 0 ORDER BY 1, 2"""
SCANNED_FINISHED = """
SELECT queue, taskboard_finished_state(completed_at, failed_at, cancelled_at), count(*)
  FROM taskboard_jobs
 WHERE completed_at IS NOT NULL OR failed_at IS NOT NULL OR cancelled_at IS NOT NULL
 GROUP BY 1, 2 ORDER BY 1, 2"""
PAIRS = (("waiting", KEPT_WAITING, SCANNED_WAITING),
         ("finished", KEPT_FINISHED, SCANNED_FINISHED))


async def rows(conn: psycopg.AsyncConnection[Any], query: str, params: Any = None) -> list[Any]:
    """Every row of a query, as tuples."""
    cur = await conn.execute(query, params)
    return [tuple(r) for r in await cur.fetchall()]


async def count_mismatches(conn: psycopg.AsyncConnection[Any], listed: int = 8) -> list[str]:
    """One line per kept count that differs from its scan (empty: all agree)."""
    out = []
    for name, kept_sql, scanned_sql in PAIRS:
        kept, scanned = await rows(conn, kept_sql), await rows(conn, scanned_sql)
        if kept != scanned:
            out.append(f"{name}: kept {kept[:listed]} scanned {scanned[:listed]}")
    return out
