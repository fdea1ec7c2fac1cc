"""The dashboard's `BoardLink` runs one call at a time: a call whose answer guard fires
closes the connection under itself only, never under another caller's statement (the
training demo's step and the board's refresh overlap on a loaded host)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from psycopg import AsyncConnection
from taskboard.core.base.errors import DatabaseUnavailable
from taskboard.core.fleet.link import BoardLink


async def test_a_call_whose_guard_fires_leaves_the_next_caller_alone(db_url: str) -> None:
    link = BoardLink(db_url, answer_timeout=0.5)
    started = asyncio.Event()

    async def stuck(conn: AsyncConnection[Any]) -> None:
        started.set()
        await conn.execute("SELECT pg_sleep(2)")

    async def read(conn: AsyncConnection[Any]) -> int:
        cur = await conn.execute("SELECT 41 + 1")
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])

    first = asyncio.create_task(link.run("a slow read", stuck))
    await started.wait()  # the slow statement is on the connection now
    second = asyncio.create_task(link.run("the board", read))
    with pytest.raises(DatabaseUnavailable):
        await first
    assert await second == 42
    await link.drop()
