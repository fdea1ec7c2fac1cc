"""Operator requests to workers, written to `taskboard_workers` so any host can obey them.

A worker reads its row on every heartbeat; the NOTIFY makes it read at once.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection
from taskboard.core import sql
from taskboard.core.view.control import CommandRefused


async def request_pause(conn: AsyncConnection[Any], worker_id: str, pause: bool) -> None:
    """Ask a worker to pause (True) or resume (False)."""
    cur = await conn.execute(sql.REQUEST_PAUSE, {"id": worker_id, "pause": pause})
    if await cur.fetchone() is None:
        raise CommandRefused(f"worker {worker_id} is not running")
    await conn.execute(sql.NOTIFY_CONTROL, {"worker": worker_id})


async def request_drain(conn: AsyncConnection[Any], worker_id: str) -> None:
    """Ask a worker to finish or release its jobs and stop."""
    cur = await conn.execute(sql.REQUEST_DRAIN, {"id": worker_id})
    if await cur.fetchone() is None:
        raise CommandRefused(f"worker {worker_id} is not running")
    await conn.execute(sql.NOTIFY_CONTROL, {"worker": worker_id})
