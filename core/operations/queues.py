"""Pausing a queue for an incident ("Stripe is down"): no worker of the fleet claims from
it until it is resumed; jobs already running finish and keep renewing.

The claim itself checks `taskboard_queues`, so a pause holds from the next claim on, on
every worker, without waiting for anyone to hear about it. This is the operator's tool; the
dashboard's pause of one worker (`p`) is the training lever that lets leases expire.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import class_row
from taskboard.core import sql
from taskboard.core.base.errors import ConfigError, JobNotFound, ValidationError
from taskboard.core.base.names import check_queue_name


@dataclass(frozen=True)
class PausedQueue:
    """A paused queue and how many jobs wait in it."""

    name: str
    paused_at: datetime
    reason: str | None
    waiting: int


def _name(queue: str) -> str:
    try:
        return check_queue_name(queue)
    except ConfigError as exc:
        raise ValidationError(str(exc).removeprefix("queue "), field="queue") from None


async def pause_queue(conn: AsyncConnection[Any], queue: str, reason: str | None = None) -> None:
    """Stop claims from `queue`, fleet-wide (pausing a paused queue keeps its first time)."""
    await conn.execute(sql.PAUSE_QUEUE, {"name": _name(queue), "reason": reason})


async def resume_queue(conn: AsyncConnection[Any], queue: str) -> None:
    """Let claims take from `queue` again (and wake idle workers); `JobNotFound` (exit 3)
    if it was not paused."""
    cur = await conn.execute(sql.RESUME_QUEUE, {"name": _name(queue)})
    if await cur.fetchone() is None:
        raise JobNotFound(f"queue {queue!r} is not paused")


async def paused_queues(conn: AsyncConnection[Any]) -> list[PausedQueue]:
    """The paused queues, by name."""
    async with conn.cursor(row_factory=class_row(PausedQueue)) as cur:
        await cur.execute(sql.LIST_QUEUES)
        return await cur.fetchall()
