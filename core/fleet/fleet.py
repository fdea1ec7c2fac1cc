"""`Fleet`: the real `BoardControl` — embedded workers in this process plus the database.

The dashboard talks only to this object. Workers of other processes or hosts are seen and
steered through the database (`taskboard_workers`); embedded ones are also steered directly,
and only they can be crashed from here.

Embedded workers run on their own event loop in a thread (`LoopThread`), so the
dashboard's rendering never delays their renewals; every method here is awaited from the
caller's (the UI's) loop and hands worker calls over to that thread. Events on `bus` are
delivered on the workers' thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
import string
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import PoolTimeout
from taskboard.core.board import BoardSnapshot
from taskboard.core.control import CommandRefused
from taskboard.core.db import Database, connect
from taskboard.core.engine.events import EventBus
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.engine.worker import Worker
from taskboard.core.errors import DatabaseUnavailable, JobNotFound, TaskboardError
from taskboard.core.jobs import enqueue, retry
from taskboard.core.kinds import KindRegistry
from taskboard.core.loop_thread import LoopThread
from taskboard.core.operator import request_drain, request_pause
from taskboard.core.secrets import mask_text
from taskboard.core.standins.runtime import Runtime
from taskboard.core.status import read_board

log = logging.getLogger("taskboard.fleet")

SAMPLE_PAYLOADS: dict[str, dict[str, Any]] = {
    "email": {
        "to": "maya@example.com",
        "subject": "Your receipt",
        "text": "Thanks for your order, Maya.",
    },
    "billing": {"customer": "cus_maya", "amount": 1999, "currency": "usd"},
    "sleep": {"seconds": 5.0},
    "noop": {},
}


class Fleet:
    """Embedded workers, the board reader, and the commands the dashboard may send."""

    def __init__(
        self,
        db: Database,
        runtime: Runtime | None,
        registry: KindRegistry,
        *,
        settings: WorkerSettings,
        bus: EventBus | None = None,
        mode: str | None = None,
        name_prefix: str | None = None,
        sample_sleep_seconds: float | None = None,
        claims_limit: int = 100,
    ) -> None:
        self.db = db
        self.runtime = runtime
        self.registry = registry
        self.settings = settings
        self.bus = bus or EventBus()
        self.mode = mode or db.mode
        self.prefix = name_prefix or f"{socket.gethostname()}-{os.getpid()}"
        self.workers: dict[str, Worker] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._conn: AsyncConnection[Any] | None = None
        self._last: BoardSnapshot | None = None
        self._sample_sleep = sample_sleep_seconds
        self._claims_limit = claims_limit
        self._names = iter(_names())
        self._workers_loop = LoopThread(name=f"taskboard-workers-{self.prefix}")

    # --- lifecycle ---------------------------------------------------------------------

    async def start(self, workers: int) -> None:
        """Connect the board reader and start `workers` embedded workers."""
        self._conn = await connect(self.db.url)
        self._workers_loop.start()
        for _ in range(workers):
            await self.add_worker()

    async def close(self) -> None:
        """Drain embedded workers (their unfinished leases are released) and disconnect."""
        if self._workers_loop.running:
            try:
                await self._workers_loop.run(self._stop_workers())
            except Exception:
                log.exception("embedded workers did not stop cleanly")
        await self._workers_loop.stop()
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()

    async def _stop_workers(self) -> None:
        # On the workers' loop.
        for worker in self.workers.values():
            worker.drain()
        tasks = list(self._tasks.values())
        if tasks:
            await asyncio.wait(tasks, timeout=self.settings.drain_seconds + 5)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # --- BoardControl ------------------------------------------------------------------

    def embedded_worker_ids(self) -> list[str]:
        """Workers running in this process."""
        # A copy first: the workers' thread adds entries.
        return [wid for wid, t in list(self._tasks.items()) if not t.done()]

    async def refresh(self) -> BoardSnapshot:
        """Read the board; on a lost database keep the last data and say why."""
        try:
            conn = await self._connection()
            snapshot = await read_board(
                conn,
                database=self.db.masked,
                mode=self.mode,
                claims_limit=self._claims_limit,
                embedded_ids=frozenset(self.embedded_worker_ids()),
                effects=self.runtime.effects() if self.runtime else None,
            )
        except (DatabaseUnavailable, psycopg.Error, PoolTimeout, OSError) as exc:
            await self._drop_connection()
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            reason = mask_text(reason)
            if self._last is None:
                raise DatabaseUnavailable(reason) from None
            return dataclasses.replace(self._last, connected=False, error=reason)
        self._last = snapshot
        return snapshot

    async def pause(self, worker_id: str) -> None:
        """Pause a worker (embedded: at once; remote: through its row)."""
        worker = self.workers.get(worker_id)
        if worker is not None and worker_id in self.embedded_worker_ids():
            if worker.paused:
                raise CommandRefused(f"{worker_id} is already paused")
            await self._workers_loop.call(worker.pause)
            return
        await self._remote(request_pause, worker_id, True)

    async def resume(self, worker_id: str) -> None:
        """Resume a paused worker."""
        worker = self.workers.get(worker_id)
        if worker is not None and worker_id in self.embedded_worker_ids():
            if not worker.paused:
                raise CommandRefused(f"{worker_id} is running, not paused")
            await self._workers_loop.call(worker.resume)
            return
        await self._remote(request_pause, worker_id, False)

    async def drain(self, worker_id: str) -> None:
        """Drain a worker: finish or release its jobs and stop."""
        worker = self.workers.get(worker_id)
        if worker is not None and worker_id in self.embedded_worker_ids():
            await self._workers_loop.call(worker.drain)
            return
        await self._remote(request_drain, worker_id)

    async def add_worker(self) -> str:
        """Start one more embedded worker."""
        worker_id = f"{self.prefix}-{next(self._names)}"
        await self._workers_loop.run(self._spawn(worker_id))
        return worker_id

    async def _spawn(self, worker_id: str) -> None:
        # On the workers' loop: the worker's events and tasks belong to it.
        settings = dataclasses.replace(self.settings, worker_id=worker_id)
        worker = Worker(
            self.db.url,
            registry=self.registry,
            settings=settings,
            services=self.runtime.current_services if self.runtime else None,
            bus=self.bus,
        )
        self.workers[worker_id] = worker
        task = asyncio.get_running_loop().create_task(self._run(worker), name=f"fleet-{worker_id}")
        self._tasks[worker_id] = task
        started = asyncio.ensure_future(worker.wait_started())
        await asyncio.wait({task, started}, return_when=asyncio.FIRST_COMPLETED)
        if not started.done():
            # The worker ended before it started (no room for its pool, no database):
            # say why now rather than after the start timeout.
            started.cancel()
            raise worker.start_error or DatabaseUnavailable(f"worker {worker_id} did not start")
        started.result()

    async def crash(self, worker_id: str) -> None:
        """Stop an embedded worker without releasing its leases."""
        if worker_id not in self.embedded_worker_ids():
            raise CommandRefused(
                f"{worker_id} does not run in this dashboard; only embedded workers can be crashed"
            )
        await self._workers_loop.run(self.workers[worker_id].crash())

    async def enqueue_sample(self, kind: str) -> int:
        """Enqueue a sample job of `kind`."""
        payload = dict(SAMPLE_PAYLOADS.get(kind, {}))
        if kind == "sleep" and self._sample_sleep is not None:
            payload["seconds"] = self._sample_sleep
        try:
            conn = await self._connection()
            return await enqueue(conn, self.registry, kind, payload)
        except TaskboardError as exc:
            raise CommandRefused(str(exc)) from None
        except (psycopg.Error, PoolTimeout, OSError) as exc:
            await self._drop_connection()
            raise CommandRefused(f"database unavailable: {type(exc).__name__}") from None

    async def retry(self, job_id: int) -> None:
        """Make a dead job pending again."""
        try:
            await retry(await self._connection(), job_id)
        except JobNotFound as exc:
            raise CommandRefused(str(exc)) from None

    # --- internals ---------------------------------------------------------------------

    async def _run(self, worker: Worker) -> None:
        try:
            await worker.run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            worker.start_error = exc
            log.exception("embedded worker %s stopped with an error", worker.id)

    async def _connection(self) -> AsyncConnection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = await connect(self.db.url)
        return self._conn

    async def _drop_connection(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()
        self._conn = None

    async def _remote(self, op: Any, *args: Any) -> None:
        try:
            await op(await self._connection(), *args)
        except (psycopg.Error, PoolTimeout, OSError) as exc:
            await self._drop_connection()
            raise CommandRefused(f"database unavailable: {type(exc).__name__}") from None


def _names() -> Any:
    """a, b, ..., z, a2, b2, ...: short names for embedded workers."""
    round_ = 1
    while True:
        for letter in string.ascii_lowercase:
            yield letter if round_ == 1 else f"{letter}{round_}"
        round_ += 1
