"""Reading the board from the database: counts, workers, claims, failures, dead jobs.

Used by `taskboard status` and by the dashboard's refresh. Runs a handful of cheap reads;
the claims list is capped so a board with a million rows still refreshes quickly.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection
from taskboard.core.board import (
    BoardSnapshot,
    ClaimRow,
    DeadRow,
    Effects,
    FailureRow,
    JobCounts,
    WorkerRow,
)
from taskboard.core.engine import sql

# A worker whose heartbeat is older than this many heartbeats is shown as gone.
GONE_AFTER_SECONDS = 10.0
KEEP_STOPPED_SECONDS = 300.0


async def read_board(
    conn: AsyncConnection[Any],
    *,
    database: str,
    mode: str,
    claims_limit: int = 200,
    failures_limit: int = 50,
    dead_limit: int = 50,
    embedded_ids: frozenset[str] = frozenset(),
    effects: Effects | None = None,
) -> BoardSnapshot:
    """One consistent-enough snapshot of the board (one read per panel)."""
    cur = await conn.execute(sql.JOB_COUNTS)
    row = await cur.fetchone()
    assert row is not None
    counts = JobCounts(*[int(v) for v in row[:7]])
    db_now = row[7]

    cur = await conn.execute(sql.LIST_WORKERS, {"keep_stopped": KEEP_STOPPED_SECONDS})
    workers = tuple(
        WorkerRow(
            id=r[0],
            host=r[1],
            pid=r[2],
            started_at=r[3],
            heartbeat_at=r[4],
            state=_worker_state(r[6], r[5], float(r[18]), r[7]),
            in_flight=r[9],
            capacity=r[10],
            lease_seconds=r[11],
            renewals_ok=r[12],
            renewals_failed=r[13],
            pool_max=r[14],
            pool_in_use=r[15],
            pool_idle=r[16],
            pool_waiting=r[17],
            embedded=r[0] in embedded_ids,
        )
        for r in await cur.fetchall()
    )

    cur = await conn.execute(sql.LIST_CLAIMS, {"limit": claims_limit})
    claims = tuple(
        ClaimRow(
            job_id=r[0],
            kind=r[1],
            queue=r[2],
            worker_id=r[3] or "?",
            token=str(r[4]),
            attempt=r[5],
            max_attempts=r[6],
            claimed_at=r[7],
            lease_expires_at=r[8],
            lease_seconds=float(r[9]),
        )
        for r in await cur.fetchall()
    )
    claims_total = counts.claimed + counts.expired

    cur = await conn.execute(sql.LIST_TROUBLE, {"limit": failures_limit})
    failures = tuple(
        FailureRow(at=r[0], job_id=r[1], worker_id=r[2], token=str(r[3]), outcome=r[4], detail=r[5])
        for r in reversed(await cur.fetchall())
    )

    cur = await conn.execute(sql.LIST_DEAD, {"limit": dead_limit})
    dead = tuple(
        DeadRow(job_id=r[0], kind=r[1], attempts=r[2], last_error=r[3], failed_at=r[4])
        for r in await cur.fetchall()
    )
    return BoardSnapshot(
        db_now=db_now,
        database=database,
        mode=mode,
        workers=workers,
        claims=claims,
        claims_total=claims_total,
        failures=failures,
        dead=dead,
        counts=counts,
        effects=effects or Effects(),
    )


def _worker_state(state: str, stopped_at: Any, heartbeat_age: float, pause_requested: bool) -> str:
    if stopped_at is not None:
        return "stopped"
    if heartbeat_age > GONE_AFTER_SECONDS:
        return "gone"
    if pause_requested and state == "running":
        return "pausing"
    return state


async def job_history(conn: AsyncConnection[Any], job_id: int) -> list[dict[str, Any]]:
    """The attempts history of one job, oldest first."""
    cur = await conn.execute(sql.JOB_ATTEMPTS, {"id": job_id})
    return [
        {
            "attempt": r[0],
            "token": str(r[1]),
            "worker": r[2],
            "claimed_at": r[3],
            "ended_at": r[4],
            "outcome": r[5],
            "error": r[6],
            "renewal_failed_at": r[7],
        }
        for r in await cur.fetchall()
    ]
