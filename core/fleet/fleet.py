"""`Fleet`: the real `BoardControl` — embedded workers in this process plus the database.

The dashboard talks only to this object. Workers of other processes or hosts are seen and
steered through the database (`taskboard_workers`); embedded ones are also steered directly,
and only they can be crashed from here. Job and queue commands live in `JobDesk`; every
database call goes through one `BoardLink`, bounded in time.

Embedded workers run on their own event loop in a thread (`LoopThread`), so the
dashboard's rendering never delays their renewals; every method here is awaited from the
caller's (the UI's) loop and hands worker calls over to that thread. Their events reach
`bus` on that thread; core observers subscribe there (the trends here, metrics), and the
dashboard sees what they make of them in each snapshot.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
import string
from collections.abc import Callable, Iterator

from taskboard.core import sql
from taskboard.core.base.errors import DatabaseUnavailable
from taskboard.core.engine.events import EventBus
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.engine.worker import Worker
from taskboard.core.fleet.desk import JobDesk
from taskboard.core.fleet.drain_report import DrainCounter, DrainReport
from taskboard.core.fleet.link import BoardLink
from taskboard.core.kinds import KindRegistry
from taskboard.core.runtime.db import Database
from taskboard.core.runtime.loop_thread import LoopThread
from taskboard.core.standins.runtime import Runtime
from taskboard.core.view.board import BoardSnapshot, LinkHealth
from taskboard.core.view.control import CommandRefused
from taskboard.core.view.operator import request_drain, request_pause
from taskboard.core.view.status import read_board
from taskboard.core.view.trends import TrendRecorder

log = logging.getLogger("taskboard.fleet")


class Fleet(JobDesk):
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
        link: BoardLink | None = None,
    ) -> None:
        super().__init__(
            link or BoardLink(db.url), registry, runtime, sample_sleep_seconds=sample_sleep_seconds,
            worker_lease=settings.lease_seconds,
        )
        self.db = db
        self.settings = settings
        self.bus = bus or EventBus()
        self.mode = mode or db.mode
        self.prefix = name_prefix or f"{socket.gethostname()}-{os.getpid()}"
        self.workers: dict[str, Worker] = {}
        self.trends = TrendRecorder()
        self.bus.subscribe(self.trends.on_event)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._last: BoardSnapshot | None = None
        self._claims_limit = claims_limit
        self._names = _names()
        self._workers_loop = LoopThread(name=f"taskboard-workers-{self.prefix}")

    # --- lifecycle ---------------------------------------------------------------------

    async def start(self, workers: int) -> None:
        """Start `workers` embedded workers."""
        self._workers_loop.start()
        for _ in range(workers):
            await self.add_worker()

    async def close(self, on_drain: Callable[[DrainReport], None] | None = None) -> None:
        """Drain embedded workers (their unfinished leases are released) and disconnect.
        `on_drain` hears, on the workers' thread, the jobs running as the drain starts and
        how they ended once the workers have stopped."""
        if self._workers_loop.running:
            try:
                await self._workers_loop.run(self._stop_workers(release=True, on_drain=on_drain))
            except Exception:
                log.exception("embedded workers did not stop cleanly")
        await self._workers_loop.stop()
        await self.link.drop()

    async def _stop_workers(
        self, *, release: bool, on_drain: Callable[[DrainReport], None] | None = None
    ) -> None:
        # On the workers' loop.
        here = [w for wid, w in self.workers.items() if wid in self.embedded_worker_ids()]
        counter = DrainCounter(DrainReport(len(here), sum(w.in_flight for w in here),
                                           self.settings.drain_seconds))
        unsubscribe = self.bus.subscribe(counter)
        _tell(on_drain, counter.report)
        try:
            for worker in here:
                if release:
                    worker.drain()
                else:
                    await worker.crash()
            tasks = list(self._tasks.values())
            if tasks:
                await asyncio.wait(tasks, timeout=self.settings.drain_seconds + 5)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            unsubscribe()
        # A claim answered as the drain began is adopted after the count above, then
        # released: the endings may outnumber the jobs counted running.
        end = counter.report
        ended = end.completed + end.released + end.left_to_expire
        _tell(on_drain, dataclasses.replace(end, done=True, running=max(end.running, ended)))

    # --- BoardControl ------------------------------------------------------------------

    def embedded_worker_ids(self) -> list[str]:
        """Workers running in this process now."""
        # A copy first: the workers' thread adds entries.
        return [wid for wid, t in list(self._tasks.items()) if not t.done()]

    def started_here(self) -> frozenset[str]:
        """Every worker this dashboard started, running or not (crashed, drained)."""
        return frozenset(list(self._tasks))

    def health(self) -> LinkHealth:
        """The database link as it stands now (no database call)."""
        return self.link.health()

    async def refresh(self) -> BoardSnapshot:
        """Read the board; on a lost database keep the last data and say why."""
        try:
            snapshot = await self.link.run(
                "refreshing the board",
                lambda conn: read_board(
                    conn,
                    database=self.db.masked,
                    mode=self.mode,
                    claims_limit=self._claims_limit,
                    embedded_ids=self.started_here(),
                    effects=self.runtime.effects() if self.runtime else None,
                ),
            )
        except DatabaseUnavailable as exc:
            if self._last is None:
                raise
            return dataclasses.replace(self._last, connected=False, error=str(exc))
        snapshot = dataclasses.replace(snapshot, trends=self.trends.observe(snapshot))
        self._last = snapshot
        return snapshot

    async def pause(self, worker_id: str) -> None:
        """Pause a worker (embedded: at once; remote: through its row)."""
        worker = self._running_here(worker_id)
        if worker is not None:
            if worker.paused:
                raise CommandRefused(f"{worker_id} is already paused")
            await self._workers_loop.call(worker.pause)
            return
        await self._command(f"pausing {worker_id}", lambda c: request_pause(c, worker_id, True))

    async def resume(self, worker_id: str) -> None:
        """Resume a paused worker."""
        worker = self._running_here(worker_id)
        if worker is not None:
            if not worker.paused:
                raise CommandRefused(f"{worker_id} is running, not paused")
            await self._workers_loop.call(worker.resume)
            return
        await self._command(f"resuming {worker_id}", lambda c: request_pause(c, worker_id, False))

    async def drain(self, worker_id: str) -> None:
        """Drain a worker: finish or release its jobs and stop."""
        worker = self._running_here(worker_id)
        if worker is not None:
            await self._workers_loop.call(worker.drain)
            return
        await self._command(f"draining {worker_id}", lambda c: request_drain(c, worker_id))

    def _running_here(self, worker_id: str) -> Worker | None:
        if worker_id in self.started_here() and worker_id not in self.embedded_worker_ids():
            raise CommandRefused(f"{worker_id} has already stopped")
        return self.workers.get(worker_id) if worker_id in self.embedded_worker_ids() else None

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
        self._running_here(worker_id)
        if worker_id not in self.embedded_worker_ids():
            raise CommandRefused(
                f"{worker_id} does not run in this dashboard; only its own workers can be crashed"
            )
        await self._workers_loop.run(self.workers[worker_id].crash())

    async def reset_demo(self, workers: int = 2) -> None:
        """Start the training story again: stop this dashboard's workers, empty the demo
        database and the stand-ins' records, and start `workers` fresh ones (a, b, ...)."""
        if self.mode != "demo":
            raise CommandRefused("only the demo's own database can be reset (taskboard-tui --demo)")
        await self._workers_loop.run(self._stop_workers(release=False))
        self.workers.clear()
        self._tasks.clear()
        await self._command("emptying the demo database", lambda c: c.execute(sql.DEMO_RESET))
        if self.runtime is not None:
            self.runtime.clear_records()
        self._names = _names()
        self._last = None
        self.trends.clear()
        for _ in range(workers):
            await self.add_worker()

    # --- internals ---------------------------------------------------------------------

    async def _run(self, worker: Worker) -> None:
        try:
            await worker.run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            worker.start_error = exc
            log.exception("embedded worker %s stopped with an error", worker.id)


def _names() -> Iterator[str]:
    """a, b, ..., z, a2, b2, ...: short names for embedded workers."""
    round_ = 1
    while True:
        for letter in string.ascii_lowercase:
            yield letter if round_ == 1 else f"{letter}{round_}"
        round_ += 1


def _tell(on_drain: Callable[[DrainReport], None] | None, report: DrainReport) -> None:
    # Whatever the listener does, the drain goes on: its leases must be released.
    if on_drain is None:
        return
    try:
        on_drain(report)
    except Exception:
        log.exception("the drain's listener failed")
