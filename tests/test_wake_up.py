"""The idle wake-up timer (`leases.seconds_until_claimable`): the earliest moment a job of
the worker's kinds comes due or a lease it could reclaim expires, in queues not paused.

The statement steps through the ready index priority by priority instead of reading every
waiting row; these tests hold it to the plain definition (`REFERENCE`, the statement as
it was) over mixed tables, and check that a large scheduled backlog is not read whole.
"""

from __future__ import annotations

import json
import random
from typing import Any

import psycopg
import pytest
from taskboard.core import sql
from taskboard.core.engine.connection import session_params

Conn = psycopg.AsyncConnection[Any]

# The definition: the minimum over every waiting row (limited kinds no sooner than
# `limited_wait` from now) and every held lease, of the worker's queues not paused.
REFERENCE = """
SELECT extract(epoch FROM least(
           (SELECT min(CASE WHEN kind = ANY(%(limited)s::text[])
                            THEN greatest(run_at, now() + make_interval(secs => %(limited_wait)s))
                            ELSE run_at END) FROM taskboard_jobs
             WHERE lease_token IS NULL AND completed_at IS NULL AND failed_at IS NULL
               AND cancelled_at IS NULL AND waiting_on = 0 AND queue = ANY(%(queues)s)
               AND kind = ANY(%(kinds)s)
               AND NOT EXISTS (SELECT 1 FROM taskboard_queues q
                                WHERE q.name = queue AND q.paused_at IS NOT NULL)),
           (SELECT min(lease_expires_at) FROM taskboard_jobs
             WHERE lease_token IS NOT NULL AND queue = ANY(%(queues)s)
               AND kind = ANY(%(kinds)s)
               AND NOT EXISTS (SELECT 1 FROM taskboard_queues q
                                WHERE q.name = queue AND q.paused_at IS NOT NULL))
       ) - now())
"""

QUEUES = ["default", "other", "paused"]
KINDS = ["noop", "email", "limited", "foreign"]


async def _mixed_table(conn: Conn, rng: random.Random, n: int) -> None:
    """`n` rows of every state, queue, priority and kind, due from an hour ago to a day
    ahead; the queue 'paused' paused."""
    rows = []
    for _ in range(n):
        state = rng.choice(["waiting", "waiting", "waiting", "held", "done", "child"])
        rows.append((
            rng.choice(KINDS), rng.choice(QUEUES), rng.choice([-5, 0, 0, 0, 3, 10]),
            rng.uniform(-3_600, 86_400), state,
            rng.uniform(1, 600) if state == "held" else None,
        ))
    await conn.execute(
        """
        INSERT INTO taskboard_jobs (kind, queue, priority, run_at, lease_token,
                                    lease_expires_at, claimed_by, completed_at, waiting_on)
        SELECT r->>0, r->>1, (r->>2)::int, now() + make_interval(secs => (r->>3)::float8),
               CASE WHEN r->>4 = 'held' THEN gen_random_uuid() END,
               CASE WHEN r->>4 = 'held' THEN now() + make_interval(secs => (r->>5)::float8) END,
               CASE WHEN r->>4 = 'held' THEN 'w' END,
               CASE WHEN r->>4 = 'done' THEN now() END,
               CASE WHEN r->>4 = 'child' THEN 1 ELSE 0 END
          FROM jsonb_array_elements(%s::jsonb) AS r
        """,
        (json.dumps(rows),),
    )
    await conn.execute("INSERT INTO taskboard_queues (name, paused_at) VALUES ('paused', now())"
                       " ON CONFLICT (name) DO UPDATE SET paused_at = now()")


async def _both(conn: Conn, params: dict[str, Any]) -> tuple[Any, Any]:
    """The statement and the definition, in one transaction (one `now()`)."""
    async with conn.transaction():
        cur = await conn.execute(sql.NEXT_WAKEUP, params)
        got = await cur.fetchone()
        cur = await conn.execute(REFERENCE, params)  # type: ignore[arg-type]
        want = await cur.fetchone()
    assert got is not None and want is not None
    return got[0], want[0]


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
async def test_the_wake_up_is_the_earliest_due_or_expiring_of_the_workers_jobs(
    conn: Conn, seed: int
) -> None:
    rng = random.Random(seed)
    await _mixed_table(conn, rng, 300)
    await conn.execute(sql.ENGINE_SESSION, session_params(5.0, 1.0))
    cases = [
        (["default"], ["noop"], []),
        (["default", "other"], ["noop", "email", "limited"], ["limited"]),
        (["other", "paused"], ["limited"], ["limited"]),
        (["paused"], KINDS, []),
        (["nowhere"], KINDS, []),
        (QUEUES, KINDS, ["limited", "email"]),
        (["default"], ["nothing-of-this-kind"], []),
    ]
    for queues, kinds, limited in cases:
        for wait in (0.5, 7_200.0):
            params = {"queues": queues, "kinds": kinds, "limited": limited,
                      "limited_wait": wait}
            got, want = await _both(conn, params)
            assert got == want, (queues, kinds, limited, wait)


async def test_the_wake_up_answers_none_and_the_due_when_nothing_or_a_past_job_waits(
    conn: Conn,
) -> None:
    params = {"queues": ["default"], "kinds": ["noop"], "limited": [], "limited_wait": 1.0}
    assert await _both(conn, params) == (None, None)
    await conn.execute("INSERT INTO taskboard_jobs (kind, run_at)"
                       " VALUES ('noop', now() - interval '5 s')")
    got, want = await _both(conn, params)
    assert got == want and -20 < float(got) < -4  # 5 s ago, and however long the insert took


async def test_a_day_of_scheduled_jobs_is_not_read_whole_on_each_wake_up(conn: Conn) -> None:
    """100,000 jobs scheduled for tomorrow at three priorities: the wake-up reads a few
    index pages, not all of them (the definition reads them all: every idle wake-up, one
    per NOTIFY, cost 32 ms of server time with 200,000)."""
    await conn.execute(
        "INSERT INTO taskboard_jobs (kind, priority, run_at)"
        " SELECT 'noop', g % 3, now() + interval '1 day' + g * interval '1 s'"
        "   FROM generate_series(1, 100000) g")
    await conn.execute("ANALYZE taskboard_jobs")
    await conn.execute(sql.ENGINE_SESSION, session_params(5.0, 1.0))
    params = {"queues": ["default"], "kinds": ["noop", "email"], "limited": [],
              "limited_wait": 1.0}
    got, want = await _both(conn, params)
    # The first is due a day and a second after the INSERT's now(); the wake-up's now()
    # comes after the insert and ANALYZE of 100,000 rows (1.5 s on a busy CI host).
    assert got == want and 86_400 - 60 < float(got) < 86_402

    async def buffers(query: str) -> int:
        cur = await conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query,  # type: ignore[arg-type]
            params)
        row = await cur.fetchone()
        assert row is not None
        plan = row[0][0]["Plan"]
        return int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])

    assert await buffers(REFERENCE) > 1_000  # the whole backlog: the test has teeth
    assert await buffers(sql.NEXT_WAKEUP) < 100
