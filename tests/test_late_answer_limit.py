"""An answer limit that comes due while the worker's process was not running (SIGSTOP, a
frozen VM, a loop blocked by a handler) looks at the socket before it calls the server
silent: the answer may have come meanwhile. Without that look, the first thing a stopped
worker did on waking was to close connections whose answers were waiting to be read, a
claim's among them (its jobs then sat leased to nobody for a lease)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
from taskboard.core.engine.connection import AnswerGuard, answered

LIMIT = 0.3
STOPPED = 1.5  # the loop blocked from 0.05 s to 1.55 s: past the limit; the answer (due at
# ~0.1 s) has well over a second to arrive, on a busy host too


def _block_the_loop_soon() -> None:
    asyncio.get_running_loop().call_later(0.05, time.sleep, STOPPED)


async def _slow_answer(conn: psycopg.AsyncConnection[Any]) -> int:
    cur = await conn.execute("SELECT 7 FROM pg_sleep(0.1)")
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def test_a_guard_due_while_the_loop_was_stopped_reads_the_waiting_answer(conn):
    _block_the_loop_soon()
    guard = AnswerGuard(lambda: conn, LIMIT, "test")
    async with guard:
        assert await _slow_answer(conn) == 7
    assert not guard.fired and not conn.closed
    cur = await conn.execute("SELECT 1")
    assert await cur.fetchone() == (1,)


async def test_answered_due_while_the_loop_was_stopped_reads_the_waiting_answer(conn):
    _block_the_loop_soon()
    assert await answered(conn, _slow_answer(conn), LIMIT, "test") == 7
    assert not conn.closed


async def test_a_late_look_still_finds_a_silent_server_silent(conn):
    # The grace is one look, not a new limit: no answer then is no answer.
    _block_the_loop_soon()
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        await answered(conn, conn.execute("SELECT pg_sleep(5)"), LIMIT, "test")
    except TimeoutError as exc:
        assert "no answer" in str(exc)
    else:
        raise AssertionError("a statement past its limit was answered")
    assert conn.closed
    assert loop.time() - started < 0.05 + STOPPED + 2.0  # not the 5 s of pg_sleep
