"""Connections a worker keeps for itself: the engine connection and the control connection.

The engine connection runs the worker's own lease statements (claims, grouped completions,
renewals, releases), one group at a time. Why one, taken out of the pool for the worker's
life, instead of any pool connection per statement: PostgreSQL keeps plan and catalog
caches per backend, and a claim that ran on whichever backend was next in the pool cost
about three times as much server time (408 vs 256 buffers and 1.5 vs 0.45 ms per 8-row
claim, measured with `bench/profile_taskboard.py`) as the same claim always on one backend.
It also means renewal never waits for a pool connection while handlers hold the rest; it
waits at most for the statement in progress. The budget stays the one the README gives: a
pool of N holds the control connection, this one, a second engine connection for grouped
completions where the worker has one (see `completer`), and the rest for handlers.

Both carry server-side `statement_timeout` and `lock_timeout` well under the renewal
interval, and every use has a client-side answer limit: a frozen server (its processes
stopped) never runs `statement_timeout`, so when no answer comes the worker closes the
socket itself and the role retries on a fresh connection. Closing, not cancelling: psycopg
answers a cancelled query by asking the server to cancel it and waiting up to 10 s for
that, which a frozen server never grants, nor a connection whose packets a NAT or
firewall silently drops. The limit covers a connection's session setup too (a fresh
connection can be dead already), and `answered` gives one statement on any connection the
same treatment, also when its caller is cancelled. The housekeeping roles (scheduler,
janitor) do not use the engine connection: see `worker_pool.Borrowed`.

All of this is session state, so both must stay on one server session for their life:
a direct connection or a session-mode pooler. A worker refuses a transaction pooler at
start (pooler.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Literal, TypeVar

import psycopg
from psycopg import AsyncConnection, pq
from psycopg_pool import AsyncConnectionPool
from taskboard.core import sql
from taskboard.core.base.closing import close_under_waiter
from taskboard.core.engine.db_errors import AnswerTimeout, is_read_only, lost_prepared
from taskboard.core.engine.read_only import leave_read_only

T = TypeVar("T")

# An answer limit that comes due more than this late (the process was stopped, the loop
# blocked) first gives the socket this long: the answer may be waiting there, its reader
# queued behind the limit's own timer. One look, then the limit stands.
LATE_LOOK = 0.05
# The session reset when a worker stops gives its connections back: best effort, as the
# stop's records are (registration.STOP_RECORD_SECONDS), not a whole answer limit each.
RESET_SECONDS = 2.0


class HeldConnection:
    """A dedicated, lazily (re)opened pool connection with session settings, one user at
    a time, every use bounded by `answer_timeout` seconds. The control connection also
    LISTENs, again after every reconnect."""

    def __init__(
        self,
        pool: AsyncConnectionPool[AsyncConnection[Any]],
        *,
        role: Literal["engine", "control"],
        session_params: dict[str, Any],
        answer_timeout: float,
        on_dead: Callable[[], None] | None = None,
    ) -> None:
        self._pool = pool
        self._role = role
        self._session_params = session_params
        self.answer_timeout = answer_timeout
        self._on_dead = on_dead  # told when a use got no answer (see worker_pool)
        self._conn: AsyncConnection[Any] | None = None
        self._handed_out = 0.0  # time.monotonic() when the pool handed `_conn` out
        self._lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def use(
        self, what: str, timeout: float | None = None, *, wait_counts: bool = False
    ) -> AsyncIterator[AsyncConnection[Any]]:
        """The connection, exclusively, until the block ends; `what` names the work for
        the error raised when the server does not answer within `timeout` (default
        `answer_timeout`) seconds (`AnswerTimeout`). With `wait_counts`, the limit also
        covers the wait for the connection's current user (in an outage a role may hold it
        while the pool tries to connect, up to the pool's own timeout): for a stop's
        best-effort write.

        Any error that leaves the connection outside an idle session (a broken link, a
        cancelled statement) gives it back to the pool to be replaced; the next use takes
        a new one. So does a read-only error, and the pool leaves that server
        (`read_only`), and a statement psycopg believes prepared that the server does not
        know (`db_errors.lost_prepared`): every run of it would fail on this connection.
        """
        limit = self.answer_timeout if timeout is None else timeout
        if wait_counts:
            loop = asyncio.get_running_loop()
            began = loop.time()
            try:
                await asyncio.wait_for(self._lock.acquire(), limit)
            except TimeoutError:
                raise AnswerTimeout(f"{what}: the connection stayed busy for {limit:g} s",
                                    silent=False) from None
            limit = max(0.0, limit - (loop.time() - began))
        else:
            await self._lock.acquire()
        try:
            conn: AsyncConnection[Any] | None = None
            guard = AnswerGuard(lambda: self._conn, limit, what)
            try:
                async with guard:
                    conn = await self._acquire()
                    yield conn
            except psycopg.Error as exc:
                if is_read_only(exc):
                    # Idle and healthy, but on a server that no longer takes writes.
                    handed_out = self._handed_out
                    await self._discard()
                    await leave_read_only(self._pool, None, handed_out)
                elif lost_prepared(exc):
                    await self._discard()
                raise
            finally:
                if guard.closed and self._on_dead is not None:
                    self._on_dead()
                if (
                    guard.fired
                    or conn is None
                    or conn.closed
                    or conn.info.transaction_status != pq.TransactionStatus.IDLE
                ):
                    await self._discard()
        finally:
            self._lock.release()

    def suspect(self) -> None:
        """Another connection died without a word: if nobody is using this one, close it
        now (the next use takes a checked one) rather than find out at the next answer
        limit. One in use is left to its own limit."""
        if self._conn is not None and not self._conn.closed and not self._lock.locked():
            close_under_waiter(self._conn)

    async def close(self) -> None:
        """Give the connection back to the pool (at worker stop), session settings reset."""
        async with self._lock:
            conn = self._conn
            if conn is None or conn.closed:
                await self._discard()
                return
            try:
                # Closed, not cancelled, if unanswered: psycopg's cancel of a statement a
                # frozen server never answers waits 5 s, then 5 s more.
                await answered(conn, conn.execute(sql.SESSION_RESET),
                               min(self.answer_timeout, RESET_SECONDS), "session reset")
            except Exception:
                await self._discard()
                return
            self._conn = None
            await self._pool.putconn(conn)

    async def _acquire(self) -> AsyncConnection[Any]:
        if self._conn is not None and self._conn.closed:
            await self._discard()
        if self._conn is None:
            handed_out = time.monotonic()
            # Held from the start, so the answer guard can close it while its session is
            # set up too: a cancelled setup statement would wait for psycopg's cancel.
            self._conn = conn = await self._pool.getconn()
            self._handed_out = handed_out
            try:
                if self._role == "engine":
                    await conn.execute(sql.ENGINE_SESSION, self._session_params)
                else:
                    await conn.execute(sql.CONTROL_SESSION, self._session_params)
                    await conn.execute(sql.LISTEN_JOBS)
                    await conn.execute(sql.LISTEN_CONTROL)
            except BaseException:
                await self._discard()
                raise
        return self._conn

    async def _discard(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        # Closed first: a connection in an unknown state, possibly with the session settings
        # above, must not reach a handler; the pool replaces a closed connection.
        with contextlib.suppress(Exception):
            await conn.close()
        with contextlib.suppress(Exception):
            await self._pool.putconn(conn)


async def answered(
    conn: AsyncConnection[Any], work: Awaitable[T], seconds: float, what: str
) -> T:
    """`work` (a statement on `conn`) if it is answered within `seconds`; otherwise, or if
    the caller is cancelled meanwhile, `conn` is closed first and the statement abandoned,
    never cancelled-and-waited-for (see the module docstring). A timeout raises
    `AnswerTimeout`."""
    task = asyncio.ensure_future(work)
    loop = asyncio.get_running_loop()
    try:
        due = loop.time() + seconds
        # asyncio.wait, not wait_for: a timeout leaves the statement running, for the
        # late look and for the close below (never a cancel-and-wait).
        await asyncio.wait((task,), timeout=seconds)
        if not task.done() and loop.time() - due > LATE_LOOK:
            await asyncio.wait((task,), timeout=LATE_LOOK)
        if not task.done():
            raise TimeoutError
        return task.result()
    except BaseException as exc:
        if task.done():
            raise
        close_under_waiter(conn)
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        if isinstance(exc, TimeoutError):
            raise AnswerTimeout(
                f"{what}: no answer from the database within {seconds:.2g} s", silent=True
            ) from None
        raise


def session_params(statement_timeout: float, lock_timeout: float) -> dict[str, Any]:
    """Parameters of `sql.ENGINE_SESSION` / `sql.CONTROL_SESSION` (milliseconds as text)."""
    return {
        "statement_timeout": f"{max(1, round(statement_timeout * 1000))}ms",
        "lock_timeout": f"{max(1, round(lock_timeout * 1000))}ms",
    }


class AnswerGuard:
    """`async with AnswerGuard(current_connection, seconds, what):` — if the block is still
    waiting after `seconds`, close the connection under it (see the module docstring) and
    raise `AnswerTimeout` instead of waiting on a server that does not answer."""

    def __init__(
        self, connection: Callable[[], AsyncConnection[Any] | None], seconds: float, what: str
    ) -> None:
        self._connection = connection
        self._seconds = seconds
        self._what = what
        self.fired = False
        self.closed = False
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[Any] | None = None
        self._due = 0.0
        self._looked = False

    async def __aenter__(self) -> AnswerGuard:
        self._task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        self._due = loop.time() + self._seconds
        self._timer = loop.call_at(self._due, self._expire)
        return self

    def _expire(self) -> None:
        loop = asyncio.get_running_loop()
        if not self._looked and loop.time() - self._due > LATE_LOOK:
            self._looked = True  # late: the answer may be in the socket (see LATE_LOOK)
            self._timer = loop.call_later(LATE_LOOK, self._expire)
            return
        self.fired = True
        conn = self._connection()
        if conn is not None and not conn.closed:
            close_under_waiter(conn)
            self.closed = True  # a connection went silent (not just a wait for the pool)
        if self._task is not None:
            self._task.cancel()

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if not self.fired or kind is None or self._task is None:
            return
        if not issubclass(kind, Exception | asyncio.CancelledError):
            return
        # Our cancel came out as CancelledError, or as whatever the code unwinding from
        # it raised instead (psycopg's wait on the closed connection: see
        # `close_under_waiter`). Either way the limit is why; a cancel from outside
        # that came with ours still stands.
        if self._task.uncancel() > 0:
            if kind is asyncio.CancelledError:
                return
            raise asyncio.CancelledError
        raise AnswerTimeout(
            f"{self._what}: no answer from the database within {self._seconds:.2g} s",
            silent=self.closed,
        ) from None
