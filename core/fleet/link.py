"""The dashboard's own connection to the database, and how healthy it looks.

Every read and command of the dashboard goes through one `BoardLink`. Each statement is
bounded twice: `statement_timeout` on the server, for a slow query, and an `AnswerGuard`
on the client, for a server that does not answer at all (its processes stopped: then no
server-side timeout ever fires, and without the guard the board would wait, silently, with
its last data on screen). The link remembers when the database last answered and what it
is waiting for now, so the dashboard can say "no answer for N s" while it waits.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import PoolTimeout
from taskboard.core import sql
from taskboard.core.base.errors import DatabaseUnavailable, TaskboardError
from taskboard.core.base.secrets import mask_text, one_line
from taskboard.core.engine.connection import AnswerGuard, session_params
from taskboard.core.runtime.db import connect
from taskboard.core.view.board import LinkHealth

T = TypeVar("T")
Conn = AsyncConnection[Any]

# A dashboard query is small and indexed; longer than this means the server is in trouble,
# and the operator should hear it rather than look at a board that quietly stopped moving.
ANSWER_TIMEOUT_SECONDS = 3.0


class BoardLink:
    """One autocommit connection, (re)opened on demand, used by one caller at a time."""

    def __init__(
        self,
        url: str,
        *,
        answer_timeout: float = ANSWER_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._url = url
        self.answer_timeout = answer_timeout
        self._clock = clock
        self._conn: Conn | None = None
        self._answered_at: float | None = None
        self._waiting: tuple[str, float] | None = None
        self._error: str | None = None
        self._turn = asyncio.Lock()

    async def run(self, what: str, op: Callable[[Conn], Awaitable[T]]) -> T:
        """`op` on the connection. A database that cannot be reached, drops the connection
        or does not answer within `answer_timeout` becomes `DatabaseUnavailable`; one that
        answers with an error (a timeout of its own, a refused statement), `TaskboardError`;
        both with one line naming `what`. `TaskboardError`s of `op` pass through.

        One call at a time: the dashboard's refresh and a demo step's read may overlap, and
        one call's answer guard closing the connection under another's statement (or psycopg
        refusing a second statement on a busy connection) broke the step with an error that
        was about neither."""
        async with self._turn:
            return await self._run(what, op)

    async def _run(self, what: str, op: Callable[[Conn], Awaitable[T]]) -> T:
        self._waiting = (what, self._clock())
        guard = AnswerGuard(lambda: self._conn, self.answer_timeout, what)
        try:
            async with guard:
                conn = await self._connection()
                result = await op(conn)
        except (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout, OSError,
                DatabaseUnavailable) as exc:
            await self.drop()
            self._error = _reason(exc)
            raise DatabaseUnavailable(self._error) from None
        except psycopg.Error as exc:
            self._answered()
            raise TaskboardError(f"{what}: the database refused: {_reason(exc)}") from None
        except TaskboardError:
            self._answered()
            raise
        finally:
            self._waiting = None
        self._answered()
        return result

    def _answered(self) -> None:
        self._answered_at = self._clock()
        self._error = None

    def health(self) -> LinkHealth:
        """The link as it stands now (cheap: no database call)."""
        now = self._clock()
        waiting = self._waiting
        return LinkHealth(
            last_answer_age=None if self._answered_at is None else now - self._answered_at,
            waiting_for=waiting[0] if waiting else None,
            waiting_seconds=now - waiting[1] if waiting else 0.0,
            last_error=self._error,
        )

    async def drop(self) -> None:
        """Close the connection; the next use opens a new one."""
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            try:
                await conn.close()
            except Exception:  # closing a broken connection may fail; it is gone either way
                pass

    async def _connection(self) -> Conn:
        if self._conn is None or self._conn.closed:
            conn = await connect(self._url)
            try:
                limit = self.answer_timeout
                await conn.execute(sql.CONTROL_SESSION, session_params(limit, limit / 2))
            except BaseException:
                await conn.close()
                raise
            self._conn = conn
        return self._conn


def _reason(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return mask_text(one_line(lines[0])) if lines else type(exc).__name__
