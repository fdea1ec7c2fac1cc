"""The engine's hot statements keep cheap plans once ANALYZE has seen the table (issue 25).

The engine's sessions force generic plans (core/sql/workers.py), and autovacuum's ANALYZE
replaces them. Each test gives the table the statistics that once turned a plan bad, then
reads the generic plan PostgreSQL would cache (`EXPLAIN (GENERIC_PLAN)`, the statement's
named parameters numbered as psycopg sends them) and checks which index it reads.
"""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg
from taskboard.core import sql
from taskboard.core.engine.connection import session_params
from taskboard.core.engine.leases import _claim_params, _completion_params


def _numbered(query: str) -> str:
    """`%(name)s` as `$n` (numbered by first use, as psycopg does) and `%%` as `%`."""
    names: list[str] = []

    def number(m: re.Match[str]) -> str:
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    return re.sub(r"%\((\w+)\)s", number, query).replace("%%", "%")


async def _generic_plan(conn: psycopg.AsyncConnection[Any], query: str) -> str:
    cur = await conn.execute(
        "EXPLAIN (GENERIC_PLAN, FORMAT JSON) " + _numbered(query))  # type: ignore[arg-type]
    row = await cur.fetchone()
    assert row is not None
    return json.dumps(row[0])


def _scans_of_jobs(plan: str) -> list[tuple[str, str]]:
    """(node type, index) of every read of taskboard_jobs in a JSON plan."""
    found: list[tuple[str, str]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if (node.get("Relation Name") == "taskboard_jobs"
                    and node.get("Node Type") != "ModifyTable") or (
                    node.get("Node Type") == "Bitmap Index Scan"
                    and str(node.get("Index Name", "")).startswith("taskboard_jobs")):
                found.append((str(node["Node Type"]), str(node.get("Index Name", ""))))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(plan))
    return found


async def _one_kind_waiting(conn: psycopg.AsyncConnection[Any], n: int) -> None:
    await conn.execute("INSERT INTO taskboard_jobs (kind) SELECT 'noop'"
                       " FROM generate_series(1, %s)", (n,))
    await conn.execute("ANALYZE taskboard_jobs")


async def test_the_claim_reads_the_ready_index_after_analyze_saw_one_kind(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    """15,000 waiting jobs of one kind, analyzed: the generic claim still takes the ready
    index's first rows. It read and sorted every waiting job (a sequential scan, 13 ms for
    100 of 15,000) while the limited kinds were left out per row with `kind <> ALL(...)`,
    which the statistics of a one-kind table estimate at no row."""
    await _one_kind_waiting(conn, 15_000)
    plan = await _generic_plan(conn, sql.CLAIM)
    scans = _scans_of_jobs(plan)
    assert ("Seq Scan", "") not in scans, scans
    assert any(index == "taskboard_jobs_ready" for _, index in scans), scans
    # And it claims what it should: the oldest 100, through the engine's own parameters.
    await conn.execute("SET plan_cache_mode = force_generic_plan")
    params = _claim_params("w", 100, 60.0, ["default"], ["noop"], [])
    cur = await conn.execute(sql.CLAIM, params, prepare=True)
    assert [r[0] for r in await cur.fetchall()] == list(range(1, 101))


async def test_the_lease_statements_find_their_rows_by_id(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    """Analyzed while no job was held, then 500 held by other workers: the plans of the
    grouped completion, the renewal, the single-job completion, failure, snooze and
    release, the attempt records of a renewal failure and a lost lease, and the result's
    write look their rows up by primary key. With `lease_token = token` they read every
    held row of the fleet through the partial index of held rows, which that ANALYZE
    estimated at one row."""
    await _one_kind_waiting(conn, 2_000)
    await conn.execute("SET plan_cache_mode = force_generic_plan")
    cur = await conn.execute(sql.CLAIM, _claim_params("other", 500, 600.0, ["default"],
                                                      ["noop"], []), prepare=True)
    assert len(await cur.fetchall()) == 500
    for name in ("COMPLETE_MANY", "RENEW", "COMPLETE", "FAIL", "SNOOZE", "RELEASE",
                 "RECORD_RENEWAL_FAILED", "RECORD_LOST", "STORE_RESULT"):
        scans = _scans_of_jobs(await _generic_plan(conn, getattr(sql, name)))
        assert scans and all(index == "taskboard_jobs_pkey" for _, index in scans), (
            name, scans)
    # The verdicts stay what they were: ours completes, a stale token is rejected.
    cur = await conn.execute(sql.CLAIM, _claim_params("w", 2, 60.0, ["default"], ["noop"], []),
                             prepare=True)
    mine = [(r[0], r[7]) for r in await cur.fetchall()]
    stale = (mine[1][0], mine[0][1])
    cur = await conn.execute(
        sql.COMPLETE_MANY, _completion_params([mine[0], stale], None), prepare=True)
    verdicts = {(r[0], r[1]): (r[2], r[3], r[4]) for r in await cur.fetchall()}
    assert verdicts == {mine[0]: (True, False, False), stale: (False, False, False)}


async def test_plans_made_on_an_empty_table_still_read_the_indexes(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    """A generic plan is made once and kept until ANALYZE replaces it. Made in the engine's
    session on an empty, never analyzed table (a new install, a queue drained and pruned),
    the hot statements were sequential scans, and every claim and completion then read the
    whole table as it grew: a steady 3,400 jobs/s from empty made a completion of 67 jobs
    take 12 ms, reading 34,000 rows, until autovacuum came by. The engine's session turns
    sequential scans off, so these plans take their indexes at any size."""
    await conn.execute(sql.ENGINE_SESSION, session_params(5.0, 1.0))
    for name in ("CLAIM", "CLAIM_ONLY", "CLAIM_CANDIDATES", "COMPLETE_MANY", "RENEW", "COMPLETE",
                 "FAIL", "SNOOZE", "RELEASE", "RECORD_RENEWAL_FAILED", "RECORD_LOST",
                 "STORE_RESULT", "NEXT_WAKEUP"):
        scans = _scans_of_jobs(await _generic_plan(conn, getattr(sql, name)))
        assert scans and ("Seq Scan", "") not in scans, (name, scans)
    # The same statements, planned outside the engine's session, would scan: the table is
    # empty, so the test is about the session, not the statements.
    await conn.execute(sql.SESSION_RESET)
    scans = _scans_of_jobs(await _generic_plan(conn, sql.COMPLETE_MANY))
    assert ("Seq Scan", "") in scans, scans


async def test_the_idle_wake_up_reads_the_held_index_in_order(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    """The wake-up timer's earliest lease deadline, planned in the engine's session on a
    young table (never analyzed, as in a steady run from empty): an ordered scan of the
    held index, which stops at its first live row. As `min()` it was a bitmap scan of
    every entry of the kinds, dead ones included (a bitmap scan never marks them dead):
    about 1 ms per idle wake-up at a steady 3,400 jobs/s (bench/issue25.py's latency)."""
    await conn.execute("INSERT INTO taskboard_jobs (kind) SELECT 'noop'"
                       " FROM generate_series(1, 2000)")
    await conn.execute("SET plan_cache_mode = force_generic_plan")
    cur = await conn.execute(sql.CLAIM, _claim_params("other", 2_000, 600.0, ["default"],
                                                      ["noop"], []), prepare=True)
    assert len(await cur.fetchall()) == 2_000
    await conn.execute("UPDATE taskboard_jobs SET completed_at = now(), lease_token = NULL,"
                       " lease_expires_at = NULL WHERE id > 500")
    await conn.execute(sql.ENGINE_SESSION, session_params(5.0, 1.0))
    scans = _scans_of_jobs(await _generic_plan(conn, sql.NEXT_WAKEUP))
    assert ("Index Scan", "taskboard_jobs_held_by_kind") in scans, scans
    assert ("Bitmap Index Scan", "taskboard_jobs_held_by_kind") not in scans, scans
    # And it still tells the earliest deadline: the first 500's lease, ~600 s away.
    params = {"limited": [], "limited_wait": 1.0, "queues": ["default"], "kinds": ["noop"]}
    cur = await conn.execute(sql.NEXT_WAKEUP, params, prepare=True)
    row = await cur.fetchone()
    assert row is not None and 590 < float(row[0]) <= 600, row
