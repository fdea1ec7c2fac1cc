"""The worker's pool that leaves a server whose sessions turned read-only (`LeavingPool`).

A read-only session does not get better by waiting: a demoted primary keeps its
connections, and `default_transaction_read_only` switched on stays on. Every idle
connection of the pool is on that same server, so closing only the one that met the error
would hand out the next bad one, and the next, one failed statement each. Instead the first
read-only error drains the pool: idle connections are closed, those in use are closed when
they come back, and new ones are opened through the URL, where a multi-host URL with
`target_session_attrs=read-write` skips the read-only server and finds the new primary.

One drain per departure: a read-only error from a connection handed out before the last
drain is a straggler of the server already left (closing it is enough); one from a
connection handed out after it means the server we moved to is read-only too, and the pool
drains again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any, Literal

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from taskboard.core import sql
from taskboard.core.engine.db_errors import is_read_only


class LeavingPool(AsyncConnectionPool[AsyncConnection[Any]]):
    """`AsyncConnectionPool` whose `connection()` leaves a read-only server (see the
    module docstring); connections taken with `getconn` report theirs to `leave`."""

    _left_at = float("-inf")

    @contextlib.asynccontextmanager
    async def connection(self, timeout: float | None = None) -> AsyncIterator[AsyncConnection[Any]]:
        handed_out = time.monotonic()
        async with super().connection(timeout) as conn:
            try:
                yield conn
            except psycopg.Error as exc:
                if is_read_only(exc):
                    await self.leave(conn, handed_out)
                raise

    async def leave(self, conn: AsyncConnection[Any] | None, handed_out: float) -> None:
        """`conn`, handed out at `handed_out` (`time.monotonic()`), met a read-only
        session: close it (the pool replaces a closed connection when it comes back) and
        drain the pool unless a drain since `handed_out` already left that server."""
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()
        if handed_out >= self._left_at:
            self._left_at = time.monotonic()
            # A pool closing (the worker stopping) has nothing to leave; the caller's own
            # error is the one to raise.
            with contextlib.suppress(Exception):
                await self.drain()


async def leave_read_only(
    pool: AsyncConnectionPool[AsyncConnection[Any]],
    conn: AsyncConnection[Any] | None,
    handed_out: float,
) -> None:
    """`LeavingPool.leave` for a pool typed as any `AsyncConnectionPool` (a plain pool is
    drained every time)."""
    if isinstance(pool, LeavingPool):
        await pool.leave(conn, handed_out)
        return
    if conn is not None:
        with contextlib.suppress(Exception):
            await conn.close()
    with contextlib.suppress(Exception):
        await pool.drain()


ServerState = Literal["writable", "read-only", "silent"]


async def server_state(conninfo: str, seconds: float) -> ServerState:
    """What a fresh session through `conninfo` finds within `seconds`: a server that takes
    writes, one whose sessions are read-only (or a URL whose `target_session_attrs` found
    only such servers), or no answer at all (down, frozen, unreachable). The supervisor
    asks before it calls a worker that found no writable server unhealthy: a worker whose
    pool is reconnecting to a frozen server sees the same as one with nowhere writable to
    go, and only the first is an outage to wait out."""
    try:
        async with asyncio.timeout(seconds):
            conn = await AsyncConnection.connect(conninfo, autocommit=True)
            async with conn:
                cur = await conn.execute(sql.SESSION_READ_ONLY)
                row = await cur.fetchone()
    except psycopg.Error as exc:
        return "read-only" if "read-only" in str(exc) or is_read_only(exc) else "silent"
    except TimeoutError:
        return "silent"
    return "read-only" if row is not None and row[0] == "on" else "writable"
