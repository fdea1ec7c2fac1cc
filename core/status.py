"""Reading the board from the database: counts, workers, claims, failures, dead jobs.

Used by `taskboard status` and by the dashboard's refresh. Runs a handful of cheap reads,
each row read as a typed record; the claims list is capped so a board with a million rows
still refreshes quickly.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import class_row, dict_row
from taskboard.core import sql
from taskboard.core.board import (
    BoardSnapshot,
    ClaimRow,
    DeadRow,
    Effects,
    FailureRow,
    JobCounts,
    OrphanKind,
    WorkerRow,
)

# A worker whose heartbeat is older than this is shown as gone.
GONE_AFTER_SECONDS = 10.0
KEEP_STOPPED_SECONDS = 300.0


@dataclass(frozen=True)
class _Counts:
    pending: int
    scheduled: int
    claimed: int
    expired: int
    completed: int
    dead: int
    cancelled: int
    db_now: datetime


@dataclass(frozen=True)
class _Worker:
    id: str
    host: str
    pid: int
    started_at: datetime
    heartbeat_at: datetime
    stopped_at: datetime | None
    state: str
    pause_requested: bool
    drain_requested: bool
    in_flight: int
    capacity: int
    lease_seconds: float
    renewals_ok: int
    renewals_failed: int
    pool_max: int
    pool_in_use: int
    pool_idle: int
    pool_waiting: int
    heartbeat_age: float
    kinds: list[str]
    last_error: str | None

    def row(self, embedded: bool) -> WorkerRow:
        return WorkerRow(
            id=self.id,
            host=self.host,
            pid=self.pid,
            started_at=self.started_at,
            heartbeat_at=self.heartbeat_at,
            state=_worker_state(self),
            in_flight=self.in_flight,
            capacity=self.capacity,
            lease_seconds=self.lease_seconds,
            renewals_ok=self.renewals_ok,
            renewals_failed=self.renewals_failed,
            pool_max=self.pool_max,
            pool_in_use=self.pool_in_use,
            pool_idle=self.pool_idle,
            pool_waiting=self.pool_waiting,
            embedded=embedded,
            kinds=tuple(self.kinds),
            last_error=self.last_error,
        )


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
    """One consistent-enough snapshot of the board (one read per panel, one round trip)."""
    async with conn.pipeline():
        counts_cur = conn.cursor(row_factory=class_row(_Counts))
        workers_cur = conn.cursor(row_factory=class_row(_Worker))
        claims_cur = conn.cursor(row_factory=class_row(ClaimRow))
        trouble_cur = conn.cursor(row_factory=class_row(FailureRow))
        dead_cur = conn.cursor(row_factory=class_row(DeadRow))
        orphans_cur = conn.cursor(row_factory=class_row(OrphanKind))
        await counts_cur.execute(sql.JOB_COUNTS)
        await workers_cur.execute(sql.LIST_WORKERS, {"keep_stopped": KEEP_STOPPED_SECONDS})
        await claims_cur.execute(sql.LIST_CLAIMS, {"limit": claims_limit})
        await trouble_cur.execute(sql.LIST_TROUBLE, {"limit": failures_limit})
        await dead_cur.execute(sql.LIST_DEAD, {"limit": dead_limit})
        await orphans_cur.execute(sql.ORPHAN_KINDS, {"gone_after": GONE_AFTER_SECONDS})
    [c] = await counts_cur.fetchall()
    counts = JobCounts(
        c.pending, c.scheduled, c.claimed, c.expired, c.completed, c.dead, c.cancelled
    )
    return BoardSnapshot(
        db_now=c.db_now,
        database=database,
        mode=mode,
        workers=tuple(w.row(w.id in embedded_ids) for w in await workers_cur.fetchall()),
        claims=tuple(await claims_cur.fetchall()),
        claims_total=counts.claimed + counts.expired,
        failures=tuple(reversed(await trouble_cur.fetchall())),
        dead=tuple(await dead_cur.fetchall()),
        counts=counts,
        orphans=tuple(await orphans_cur.fetchall()),
        effects=effects or Effects(),
    )


def _worker_state(w: _Worker) -> str:
    if w.stopped_at is not None:
        return "stopped"
    if w.heartbeat_age > GONE_AFTER_SECONDS:
        return "gone"
    if w.pause_requested and w.state == "running":
        return "pausing"
    return w.state


async def job_history(conn: AsyncConnection[Any], job_id: int) -> list[dict[str, Any]]:
    """The attempts history of one job, oldest first."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(sql.JOB_ATTEMPTS, {"id": job_id})
        return await cur.fetchall()
