"""The attempts history a worker writes beside its fenced lease operations: renewal
failures, lost leases, rejected completions, and what the history holds for one attempt.

These stamp `taskboard_attempts` only; none of them changes who owns a job (that is
`leases.py`), so they are safe to run late or twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from psycopg import AsyncConnection
from taskboard.core import sql
from taskboard.core.engine.db_errors import named
from taskboard.core.engine.records import Lease

Conn = AsyncConnection[Any]


def _reasons(items: Sequence[tuple[Lease, str]]) -> dict[str, Any]:
    return {
        "ids": [lease[0] for lease, _ in items],
        "tokens": [lease[1] for lease, _ in items],
        "reasons": [reason for _, reason in items],
    }


async def record_renewal_failed(conn: Conn, items: Sequence[tuple[Lease, str]]) -> None:
    """Stamp the attempts whose renewal failed (with why), for the fleet's failure log."""
    if items:
        async with named("RECORD_RENEWAL_FAILED"):
            await conn.execute(sql.RECORD_RENEWAL_FAILED, _reasons(items))


async def record_lost(conn: Conn, items: Sequence[tuple[Lease, str]]) -> None:
    """End the attempts this worker gave up as lease_lost, with why."""
    if items:
        async with named("RECORD_LOST"):
            await conn.execute(sql.RECORD_LOST, _reasons(items))


async def record_rejected(conn: Conn, leases: Sequence[Lease]) -> None:
    """Mark rejected completions in the attempts history (after any rollback)."""
    if leases:
        params = {"ids": [i for i, _ in leases], "tokens": [t for _, t in leases]}
        async with named("RECORD_REJECTED"):
            await conn.execute(sql.RECORD_REJECTED, params)


async def attempt_outcome(conn: Conn, job_id: int, token: UUID) -> str | None:
    """What the history holds for one attempt (None while it is open)."""
    async with named("ATTEMPT_OUTCOME"):
        cur = await conn.execute(sql.ATTEMPT_OUTCOME, {"id": job_id, "token": token})
        row = await cur.fetchone()
    return None if row is None else row[0]
