"""A connection closed under a statement that waits on it leaves the event loop clean.

An answer limit (or a lost lease) closes the connection first and then cancels the task
waiting on it. Closing frees the socket's file descriptor at once, and the next socket the
process opens may get the same number before the cancelled task runs again: in the fault
suite, the test's proxy accepted a connection in between. psycopg's wait, unwinding, then
asked the loop to stop reading a descriptor that now belonged to that socket: asyncio
refused with `RuntimeError: File descriptor 16 is used by transport`, which escaped as the
handler's failure (an attempt recorded "failed", not "lease_lost"); and the loop, still
holding the old registration for that number, never told the new socket it could read.

Each test here reuses the number on purpose, in the window between the close and the
cancelled task's next step, and checks both: the statement ends as "no answer" and the
new socket hears what is sent to it.
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

import psycopg
import pytest
from taskboard.core.engine.connection import AnswerGuard, answered
from taskboard.core.engine.db_errors import AnswerTimeout

LIMIT = 0.3
HEARD_WITHIN = 2.0


class Heard(asyncio.Protocol):
    def __init__(self) -> None:
        self.data = asyncio.Event()

    def data_received(self, data: bytes) -> None:
        self.data.set()


class Reuse:
    """Gives the descriptor number of `conn`'s socket to a new socket transport the moment
    the number is free: armed a little before the limit, it looks once per loop pass, so
    it runs between the close and the cancelled task's next step."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.number = conn.pgconn.socket
        self.ours, self.theirs = socket.socketpair()
        self.protocol = Heard()
        self.transport: asyncio.BaseTransport | None = None
        self.grabbed: asyncio.Task[None] | None = None

    def arm(self, seconds: float) -> None:
        asyncio.get_running_loop().call_later(seconds, self._start)

    def _start(self) -> None:
        self.grabbed = asyncio.ensure_future(self._grab())

    async def _grab(self) -> None:
        while _open(self.number):  # noqa: ASYNC110 - one look per loop pass is the point
            await asyncio.sleep(0)
        os.dup2(self.ours.fileno(), self.number)  # free: nobody else's to clobber
        sock = socket.socket(fileno=self.number)
        loop = asyncio.get_running_loop()
        self.transport, _ = await loop.connect_accepted_socket(lambda: self.protocol, sock=sock)

    async def heard(self) -> bool:
        assert self.grabbed is not None, "the limit never closed the connection"
        await self.grabbed
        self.theirs.send(b"hello")
        try:
            await asyncio.wait_for(self.protocol.data.wait(), HEARD_WITHIN)
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        if self.grabbed is not None:
            self.grabbed.cancel()
        if self.transport is not None:
            self.transport.close()
        self.ours.close()
        self.theirs.close()


def _open(number: int) -> bool:
    try:
        os.fstat(number)
    except OSError:
        return False
    return True


@pytest.fixture
def reuse(conn: psycopg.AsyncConnection[Any]) -> Any:
    taken = Reuse(conn)
    yield taken
    taken.close()


async def test_a_guard_that_closes_a_waiting_statement_ends_it_as_no_answer(
    conn: psycopg.AsyncConnection[Any], reuse: Reuse
) -> None:
    reuse.arm(LIMIT * 0.8)
    guard = AnswerGuard(lambda: conn, LIMIT, "a statement left waiting")
    with pytest.raises(AnswerTimeout, match="no answer from the database"):
        async with guard:
            await conn.execute("SELECT pg_sleep(30)")
    assert guard.fired and guard.closed and conn.closed
    assert await reuse.heard(), "the socket given the closed connection's number is deaf"
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0  # the guard's cancel is spent


async def test_answered_closing_a_waiting_statement_leaves_the_new_socket_hearing(
    conn: psycopg.AsyncConnection[Any], reuse: Reuse
) -> None:
    reuse.arm(LIMIT * 0.8)
    with pytest.raises(AnswerTimeout, match="no answer from the database"):
        await answered(conn, conn.execute("SELECT pg_sleep(30)"), LIMIT, "left waiting")
    assert conn.closed
    assert await reuse.heard(), "the socket given the closed connection's number is deaf"
