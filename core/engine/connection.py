"""The one connection a worker runs its own lease statements on: claims, group completions,
renewals, releases.

Why one, taken out of the pool for the worker's life, instead of any pool connection per
statement: PostgreSQL keeps plan and catalog caches per backend, and a claim that ran on
whichever backend was next in the pool cost about three times as much server time (408 vs
256 buffers and 1.5 vs 0.45 ms per 8-row claim, measured with `bench/profile_taskboard.py`)
as the same claim always on one backend. It also means renewal never waits for a pool
connection while handlers hold the rest; it waits at most for the statement in progress.

The budget stays the one the README gives: a pool of N holds the control connection, this
one, and at most N - 2 handlers.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from psycopg import AsyncConnection, pq
from psycopg_pool import AsyncConnectionPool
from taskboard.core.engine import sql


class EngineConnection:
    """A dedicated, lazily (re)opened connection, one statement group at a time."""

    def __init__(self, pool: AsyncConnectionPool[AsyncConnection[Any]]) -> None:
        self._pool = pool
        self._conn: AsyncConnection[Any] | None = None
        self._lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def use(self) -> AsyncIterator[AsyncConnection[Any]]:
        """The connection, exclusively, until the block ends.

        Any error that leaves it outside an idle session (a broken link, a cancelled
        statement) gives it back to the pool to be replaced; the next use takes a new one.
        """
        async with self._lock:
            conn = await self._acquire()
            try:
                yield conn
            finally:
                if conn.closed or conn.info.transaction_status != pq.TransactionStatus.IDLE:
                    await self._discard()

    async def close(self) -> None:
        """Give the connection back to the pool (at worker stop)."""
        async with self._lock:
            conn = self._conn
            if conn is not None and not conn.closed:
                try:
                    await conn.execute(sql.ENGINE_SESSION_RESET)
                except Exception:
                    await self._discard()
                    return
                self._conn = None
                await self._pool.putconn(conn)
            else:
                await self._discard()

    async def _acquire(self) -> AsyncConnection[Any]:
        if self._conn is not None and self._conn.closed:
            await self._discard()
        if self._conn is None:
            conn = await self._pool.getconn()
            try:
                await conn.execute(sql.ENGINE_SESSION)
            except BaseException:
                await self._pool.putconn(conn)
                raise
            self._conn = conn
        return self._conn

    async def _discard(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        # Closed first: a connection in an unknown state, possibly with the session settings
        # above, must not reach a handler; the pool replaces a closed connection.
        with contextlib.suppress(Exception):
            await conn.close()
        await self._pool.putconn(conn)
