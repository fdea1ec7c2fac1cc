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
            async for notify in conn.notifies(timeout=self._heartbeat_seconds):
                if notify.channel == "taskboard_jobs":
                    self._on_jobs()
                elif notify.payload.startswith("cancel:"):
                    self._on_cancel(notify.payload.removeprefix("cancel:"))
                elif notify.payload == self._worker_id:
                    return  # an operator request for us: the heartbeat reads it now
