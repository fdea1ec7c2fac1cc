"""Control: LISTEN for new jobs and operator requests, and the heartbeat.

The control connection (one of the two a worker keeps for itself) listens on
`taskboard_jobs` (enqueues wake the producer) and `taskboard_control` (an operator asked a
worker something, the payload names it; or cancelled a job, `cancel:<token>`, and the worker
holding that token stops its handler at once). Every heartbeat writes the worker's row (state,
in flight, renewals, pool headroom, last error) and reads back pause and drain requests,
so any host can steer any worker through the database.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection
from taskboard.core import sql
from taskboard.core.engine.connection import HeldConnection
from taskboard.core.engine.db_errors import is_transient
from taskboard.core.engine.supervisor import Supervisor

CONTROL = "control"


@dataclass(frozen=True)
class Requests:
    """What the worker's row asks of it."""

    pause: bool
    drain: bool


class Controller:
    """The control loop of one worker."""

    def __init__(
        self,
        *,
        worker_id: str,
        connection: HeldConnection,
        heartbeat_seconds: float,
        retry_cap: float,
        supervisor: Supervisor,
        status: Callable[[], dict[str, Any]],
        on_requests: Callable[[Requests], None],
        on_jobs: Callable[[], None],
        on_cancel: Callable[[str], None],
    ) -> None:
        self._worker_id = worker_id
        self._conn = connection
        self._heartbeat_seconds = heartbeat_seconds
        self._retry_cap = retry_cap
        self._supervisor = supervisor
        self._status = status
        self._on_requests = on_requests
        self._on_jobs = on_jobs
        self._on_cancel = on_cancel
        # Set by `beat_once`: the LISTEN holds the connection for up to a heartbeat, and a
        # drain's "draining" heartbeat waited that long behind it (a second on every stop).
        self._wake = asyncio.Event()

    async def run(self) -> None:
        """Heartbeat, then wait for notifications until the next one, for ever."""
        while True:
            try:
                await self._beat()
                await self._listen()
            except Exception as exc:
                if not is_transient(exc):
                    raise
                self._supervisor.trouble(CONTROL, exc)
                # NOTIFYs may have been missed while disconnected: look for work now.
                self._on_jobs()
                await asyncio.sleep(self._retry_cap)
                continue
            self._supervisor.ok(CONTROL)

    async def beat_once(self) -> None:
        """One heartbeat now (drain and stop write their state at once)."""
        self._wake.set()
        await self._beat()

    async def _beat(self) -> None:
        async with self._conn.use("heartbeat") as conn:
            cur = await conn.execute(sql.HEARTBEAT, {"id": self._worker_id, **self._status()})
            row = await cur.fetchone()
        if row is not None:
            self._on_requests(Requests(pause=bool(row[0]), drain=bool(row[1])))

    async def _listen(self) -> None:
        limit = self._heartbeat_seconds + self._conn.answer_timeout
        async with self._conn.use("waiting for notifications", timeout=limit) as conn:
            if self._wake.is_set():
                self._wake.clear()
                return
            reading = asyncio.ensure_future(self._read_notifies(conn))
            woken = asyncio.ensure_future(self._wake.wait())
            try:
                await asyncio.wait((reading, woken), return_when=asyncio.FIRST_COMPLETED)
            finally:
                woken.cancel()
                if not reading.done():
                    # Cancelled while it waits for the socket to be readable: nothing has
                    # been read yet (psycopg reads a packet's notifies without a pause), and
                    # the session is idle, so psycopg sends no cancel; what arrives meanwhile
                    # waits in the socket for the next LISTEN.
                    reading.cancel()
                    await asyncio.wait((reading,))
            self._wake.clear()
            if not reading.cancelled():
                reading.result()

    async def _read_notifies(self, conn: AsyncConnection[Any]) -> None:
        async for notify in conn.notifies(timeout=self._heartbeat_seconds):
            if notify.channel == "taskboard_jobs":
                self._on_jobs()
            elif notify.payload.startswith("cancel:"):
                self._on_cancel(notify.payload.removeprefix("cancel:"))
            elif notify.payload == self._worker_id:
                return  # an operator request for us: the heartbeat reads it now
