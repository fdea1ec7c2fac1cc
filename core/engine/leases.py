"""The fenced lease operations as typed async functions over one connection.

Each function runs exactly one statement from `taskboard.core.engine.sql`. Ownership is proven by
the token alone; `worker_id` is recorded for display and audit, never used for fencing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg import AsyncConnection
from taskboard.core.engine import sql

Conn = AsyncConnection[Any]


@dataclass(frozen=True)
class ClaimedJob:
    """A job this worker now holds, with the token that proves it."""

    id: int
    kind: str
    payload: str  # JSON text, decoded by the worker (see sql.CLAIM)
    queue: str
    attempt: int
    max_attempts: int
    token: UUID
    lease_expires_at: datetime
    previous_token: UUID | None
    previous_worker: str | None
    db_now: datetime

    @property
    def is_reclaim(self) -> bool:
        """True when the claim took over an expired lease from another attempt."""
        return self.previous_token is not None


@dataclass(frozen=True)
class Renewal:
    """Outcome of one renewal statement."""

    renewed: dict[tuple[int, UUID], datetime]  # (job id, token) -> new deadline
    lost: list[tuple[int, UUID]]  # (job id, token) that were not renewed
    db_now: datetime | None


@dataclass(frozen=True)
class FailOutcome:
    """Outcome of a fenced failure: `owned` is False when the token was stale."""

    owned: bool
    dead: bool = False
    retry_at: datetime | None = None


async def claim(
    conn: Conn, *, worker_id: str, limit: int, lease_seconds: float, queues: Sequence[str]
) -> list[ClaimedJob]:
    """Claim up to `limit` jobs (fresh or with expired leases) with fresh tokens."""
    if limit <= 0:
        return []
    cur = await conn.execute(
        sql.CLAIM,
        {
            "worker": worker_id,
            "limit": limit,
            "lease": lease_seconds,
            "queues": list(queues),
            "completing": [],
        },
    )
    return _claimed(await cur.fetchall())


async def complete_many_and_claim(
    conn: Conn,
    completed: Sequence[tuple[int, UUID]],
    *,
    worker_id: str,
    limit: int,
    lease_seconds: float,
    queues: Sequence[str],
) -> tuple[set[tuple[int, UUID]], list[ClaimedJob]]:
    """Fenced group completion plus a claim for the freed slots: one round trip, one commit.

    With fsync on, the commit is the cost of a job; sharing it between the completions
    and the next claims is what lets a worker keep 8 jobs in flight cheaply. Two statements,
    not one: PostgreSQL cannot re-check (EvalPlanQual) a row updated concurrently inside a
    statement whose other CTEs also modify the table ("ModifyTable should not be called
    during EvalPlanQual"), which a fault run hit. No BEGIN/COMMIT either: on an autocommit
    connection everything a pipeline sends before its Sync is one implicit transaction, so
    the two commit together, or, if either fails, neither does.
    """
    if not conn.autocommit:
        raise ValueError("complete_many_and_claim needs an autocommit connection")
    async with conn.pipeline():
        done = await conn.execute(
            sql.COMPLETE_MANY,
            {"ids": [i for i, _ in completed], "tokens": [t for _, t in completed]},
        )
        got = await conn.execute(
            sql.CLAIM,
            {
                "worker": worker_id,
                "limit": limit,
                "lease": lease_seconds,
                "queues": list(queues),
                "completing": [i for i, _ in completed],
            },
        )
    owned = {(row[0], row[1]) for row in await done.fetchall()}
    return owned, _claimed(await got.fetchall())


def _claimed(rows: Sequence[Any]) -> list[ClaimedJob]:
    return [
        ClaimedJob(
            id=row[0],
            kind=row[1],
            payload=row[2],
            queue=row[3],
            attempt=row[4],
            max_attempts=row[5],
            token=row[6],
            lease_expires_at=row[7],
            previous_token=row[8],
            previous_worker=row[9],
            db_now=row[10],
        )
        for row in rows
    ]


async def renew(conn: Conn, leases: Sequence[tuple[int, UUID]], *, lease_seconds: float) -> Renewal:
    """Renew all `leases` (job id, token) in one statement; missing rows are lost leases."""
    if not leases:
        return Renewal({}, [], None)
    cur = await conn.execute(
        sql.RENEW,
        {
            "ids": [job_id for job_id, _ in leases],
            "tokens": [token for _, token in leases],
            "lease": lease_seconds,
        },
    )
    rows = await cur.fetchall()
    renewed = {(row[0], row[1]): row[2] for row in rows}
    db_now = rows[0][3] if rows else None
    lost = [lease for lease in leases if lease not in renewed]
    return Renewal(renewed, lost, db_now)


async def record_renewal_failed(conn: Conn, lost: Sequence[tuple[int, UUID]]) -> None:
    """Mark the attempts whose renewal failed, so the fleet's failure log shows them."""
    if lost:
        await conn.execute(
            sql.RECORD_RENEWAL_FAILED,
            {"ids": [i for i, _ in lost], "tokens": [t for _, t in lost]},
        )


async def complete(conn: Conn, job_id: int, token: UUID) -> bool:
    """Fenced completion. False means zero rows: the token is stale, the job is not ours."""
    cur = await conn.execute(sql.COMPLETE, {"id": job_id, "token": token})
    row = await cur.fetchone()
    return bool(row and row[0] == 1)


async def complete_many(conn: Conn, leases: Sequence[tuple[int, UUID]]) -> set[tuple[int, UUID]]:
    """Fenced completion of many jobs in one statement; returns the leases that were ours."""
    if not leases:
        return set()
    cur = await conn.execute(
        sql.COMPLETE_MANY,
        {"ids": [i for i, _ in leases], "tokens": [t for _, t in leases]},
    )
    return {(row[0], row[1]) for row in await cur.fetchall()}


async def record_rejected(conn: Conn, leases: Sequence[tuple[int, UUID]]) -> None:
    """Mark rejected completions in the attempts history (after any rollback)."""
    if len(leases) == 1:
        job_id, token = leases[0]
        await conn.execute(sql.RECORD_REJECTED, {"id": job_id, "token": token})
    elif leases:
        await conn.execute(
            sql.RECORD_REJECTED_MANY,
            {"ids": [i for i, _ in leases], "tokens": [t for _, t in leases]},
        )


async def fail(
    conn: Conn,
    job_id: int,
    token: UUID,
    *,
    error: str,
    backoff_seconds: float,
    permanent: bool = False,
) -> FailOutcome:
    """Fenced failure: retry after `backoff_seconds`, or dead if attempts are used up."""
    cur = await conn.execute(
        sql.FAIL,
        {
            "id": job_id,
            "token": token,
            "error": error,
            "backoff": backoff_seconds,
            "permanent": permanent,
        },
    )
    row = await cur.fetchone()
    if row is None:
        return FailOutcome(owned=False)
    dead = bool(row[0])
    return FailOutcome(owned=True, dead=dead, retry_at=None if dead else row[1])


async def release(conn: Conn, leases: Sequence[tuple[int, UUID]]) -> set[int]:
    """Fenced release of unfinished leases so another worker can claim them at once."""
    if not leases:
        return set()
    cur = await conn.execute(
        sql.RELEASE, {"ids": [i for i, _ in leases], "tokens": [t for _, t in leases]}
    )
    return {row[0] for row in await cur.fetchall()}


async def seconds_until_claimable(conn: Conn, queues: Sequence[str]) -> float | None:
    """Seconds until a scheduled job comes due or a lease expires; None if nothing waits."""
    cur = await conn.execute(sql.NEXT_WAKEUP, {"queues": list(queues)})
    row = await cur.fetchone()
    if row is None or row[0] is None:
        return None
    return max(0.0, float(row[0]))
