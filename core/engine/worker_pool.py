"""The worker's connection pool: how it is opened, the check before it hands a connection
out, and the housekeeping roles' way of borrowing one.

Every pool connection carries Taskboard's libpq settings (core/base/libpq_settings.py: connect
and TCP user timeouts, keepalives, `taskboard-worker:<id>` as application_name) unless the
URL sets them. A connection can die without a word (a NAT that forgets its flows, a
frozen server): the check before checkout finds it within `CHECK_SECONDS` at most, closes
it rather than cancelling (see connection.py), and drains the other idle ones with it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from psycopg import AsyncConnection, pq
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from taskboard.core import sql
from taskboard.core.base import libpq_settings
from taskboard.core.base.errors import DatabaseUnavailable
from taskboard.core.engine.connection import AnswerGuard, answered
from taskboard.core.engine.read_only import LeavingPool

POOL_TIMEOUT_SECONDS = 10.0
# The longest a pool connection's check before checkout may take (less with a short lease's
# answer limit): an empty statement is answered in well under a millisecond nearby, and in
# a round trip or two over a WAN.
CHECK_SECONDS = 2.0


def worker_conninfo(url: str, worker_id: str) -> str:
    """`url` with Taskboard's connection settings, sessions named after the worker."""
    return libpq_settings.with_defaults(url, f"taskboard-worker:{worker_id}")


async def open_pool(
    url: str, worker_id: str, size: int, check: ConnectionCheck
) -> AsyncConnectionPool[AsyncConnection[Any]]:
    """The worker's pool of `size` connections checked by `check`, open and full
    (`DatabaseUnavailable` when it cannot be filled within `POOL_TIMEOUT_SECONDS`)."""
    pool: AsyncConnectionPool[AsyncConnection[Any]] = LeavingPool(
        worker_conninfo(url, worker_id),
        min_size=size,
        max_size=size,
        kwargs={"autocommit": True},
        open=False,
        name=f"taskboard-{worker_id}",
        timeout=POOL_TIMEOUT_SECONDS,
        check=check,
    )
    check.pool = pool
    try:
        await pool.open(wait=True, timeout=POOL_TIMEOUT_SECONDS)
    except PoolTimeout:
        await pool.close()
        raise DatabaseUnavailable(
            f"worker {worker_id}: could not open {size} connections within "
            f"{POOL_TIMEOUT_SECONDS:g} s (database down, or max_connections reached?)"
        ) from None
    return pool


class Borrowed:
    """Housekeeping's connections (the scheduler, the janitor): any pool connection, one
    per use, with the same session timeouts and answer limit as the engine connection,
    reset before it goes back. Not the engine connection: a housekeeping statement stuck
    on a bad row or a slow disk would hold the engine lock, and every renewal and claim
    behind it, for up to an answer limit; a lease of a few seconds cannot spare that. The
    wait for a free pool connection (handlers may hold them all for a while) is not part
    of the answer limit, and not an error: housekeeping waits its turn."""

    def __init__(
        self,
        pool: AsyncConnectionPool[AsyncConnection[Any]],
        *,
        session_params: dict[str, Any],
        answer_timeout: float,
        on_dead: Callable[[], None] | None = None,
    ) -> None:
        self._pool = pool
        self._session_params = session_params
        self.answer_timeout = answer_timeout
        self._on_dead = on_dead

    @contextlib.asynccontextmanager
    async def use(
        self, what: str, timeout: float | None = None
    ) -> AsyncIterator[AsyncConnection[Any]]:
        """A pool connection until the block ends (see `HeldConnection.use`)."""
        limit = self.answer_timeout if timeout is None else timeout
        conn = await self._getconn()
        clean = False
        guard = AnswerGuard(lambda: conn, limit, what)
        try:
            async with guard:
                await conn.execute(sql.CONTROL_SESSION, self._session_params)
                yield conn
                await conn.execute(sql.SESSION_RESET)
                clean = conn.info.transaction_status == pq.TransactionStatus.IDLE
        finally:
            if guard.closed and self._on_dead is not None:
                self._on_dead()
            if not clean:
                # Its session settings must not reach a handler: closed, and replaced.
                with contextlib.suppress(Exception):
                    await conn.close()
            await self._pool.putconn(conn)


    async def _getconn(self) -> AsyncConnection[Any]:
        # Every connection busy (handlers that write hold theirs for a whole job) is no
        # fault: housekeeping waits its turn, never counted as "database unavailable" (a
        # burst worker would give up on it). A database that is really down is reported
        # by the roles that cannot wait (claims, renewals, control).
        while True:
            try:
                return await self._pool.getconn(timeout=POOL_TIMEOUT_SECONDS)
            except PoolTimeout:
                continue


class ConnectionCheck:
    """The pool's `check=`: before a pool connection is handed out, an empty statement must
    be answered within `seconds` (`CHECK_SECONDS`, or the answer limit if less), else the
    connection is closed (not cancelled) and the pool tries the next one. One failed check
    also drains the pool's other idle connections at once (psycopg_pool's `drain`: closed,
    and replaced by new ones): they were opened the same way and most likely died the same
    way (a NAT that forgot its flows, a frozen or restarted server), and checking them one
    by one would cost `seconds` each. Set `pool` once the pool exists.

    A connection found dead elsewhere (a statement that got no answer on the engine or
    control connection) is the same news: `casualty()` drains the idle ones too, and tells
    each of `listeners` (the worker's held connections drop theirs if nobody is using it),
    so the next claim after a silent drop starts on a live connection instead of spending
    an answer limit to find its own dead."""

    def __init__(self, answer_timeout: float) -> None:
        self.seconds = min(CHECK_SECONDS, answer_timeout)
        self.pool: AsyncConnectionPool[AsyncConnection[Any]] | None = None
        self.failed = 0
        self.listeners: list[Callable[[], None]] = []
        self._draining: asyncio.Task[None] | None = None

    async def __call__(self, conn: AsyncConnection[Any]) -> None:
        try:
            await answered(conn, conn.execute(""), self.seconds, "connection check")
        except Exception:
            self.failed += 1
            self.casualty()
            raise

    def casualty(self) -> None:
        """A pool connection died without a word: drop its likely fellows now."""
        self._drain_idle()
        for listener in self.listeners:
            listener()

    def _drain_idle(self) -> None:
        if self.pool is None or (self._draining is not None and not self._draining.done()):
            return
        self._draining = asyncio.get_running_loop().create_task(self._drain(self.pool))

    @staticmethod
    async def _drain(pool: AsyncConnectionPool[AsyncConnection[Any]]) -> None:
        with contextlib.suppress(Exception):
            await pool.drain()
