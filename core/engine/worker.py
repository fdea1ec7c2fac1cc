"""`Worker`: starts a worker's roles, supervises them, and stops them.

The roles, each in its own module: the producer (slots, claims, wake-ups), the executor
(one attempt -> one outcome), the completer (fenced completions, failures, releases), the
lease keeper (renewals and local deadlines), control (LISTEN, heartbeat, operator
requests). Outcomes are reported in one place (`outcomes.Reporter`).

Connections (a pool of N): the worker holds up to `concurrency` jobs at once; handlers of
kinds that write to the database hold a connection each for the whole run (their writes
commit with the fenced completion), so at most N - 2 of those jobs are held (N - 3 with a
second engine connection); kinds that write nothing hold none. The engine connection(s)
and the control connection are kept apart for the worker itself, so renewal and control
always have a connection even when every handler is blocked on Stripe. The scheduler and
the janitor borrow a pool connection per use (worker_pool.Borrowed), waiting their turn
beside handlers rather than holding up renewals on the engine connection.

Pause is the training lever: a paused worker stops claiming and renewing, and its handlers
stop at their next checkpoint, so its leases really expire and another worker reclaims
them. On resume it first renews (learning what it lost); a handler past its local deadline
refuses to go on, and one that had already finished its work sends its completion late and
meets the fence. Either way it never reports success for a job it no longer owns.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
import socket
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from taskboard.core.engine.crew import Crew
from taskboard.core.engine.drain import Drain
from taskboard.core.engine.events import (
    EventBus,
    Paused,
    PoolStats,
    Resumed,
    WorkerStarted,
    WorkerStopped,
    WorkerUnhealthy,
)
from taskboard.core.engine.flights import Flight, FlightTable, PauseGate
from taskboard.core.engine.outcomes import WorkerCounters
from taskboard.core.engine.registration import (
    STOP_RECORD_SECONDS,
    Registration,
    check_before_pool,
)
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.engine.worker_pool import ConnectionCheck, open_pool
from taskboard.core.kinds.registry import KindRegistry

log = logging.getLogger("taskboard.worker")


class WorkerState(enum.StrEnum):
    """What a worker's row says it is doing."""

    STARTING = "starting"
    RUNNING = "running"
    PAUSED = "paused"
    DRAINING = "draining"
    UNHEALTHY = "unhealthy"  # an error persisted past a lease; drains and stops
    STOPPED = "stopped"


class ExitReason(enum.StrEnum):
    """Why `Worker.run` returned."""

    DRAINED = "drained"
    CRASHED = "crashed"
    UNHEALTHY = "unhealthy"
    UNREACHABLE = "unreachable"  # burst only: the database was gone for a lease


class Worker:
    """One worker: a connection pool and its roles."""

    def __init__(
        self,
        url: str,
        *,
        registry: KindRegistry,
        settings: WorkerSettings | None = None,
        services: Any = None,
        bus: EventBus | None = None,
        host: str | None = None,
    ) -> None:
        self.url = url
        self.registry = registry
        self.settings = settings or WorkerSettings()
        self.services = services
        self.bus = bus or EventBus()
        self.id = self.settings.worker_id
        self.host = host or socket.gethostname()
        self.counters = WorkerCounters()
        self.state = WorkerState.STARTING
        self.exit_reason: ExitReason | None = None
        self.start_error: Exception | None = None  # set by an owner when `run` raised
        self.pool: AsyncConnectionPool[AsyncConnection[Any]] | None = None
        self.pool_check: ConnectionCheck | None = None
        self.flights = FlightTable(self.settings.capacity, self.settings.connection_slots)
        self.gate = PauseGate()
        self._crew: Crew | None = None
        self._stop = asyncio.Event()
        self._started = asyncio.Event()
        self._drain_task: asyncio.Task[None] | None = None
        self._pause_requested = False

    # --- public control ----------------------------------------------------------------

    @property
    def paused(self) -> bool:
        """True while the worker is paused."""
        return self.gate.paused

    @property
    def in_flight(self) -> int:
        """Jobs held right now."""
        return len(self.flights)

    def in_flight_jobs(self) -> list[Flight]:
        """The jobs held right now (a copy)."""
        return list(self.flights)

    @property
    def last_error(self) -> str | None:
        """The last unexpected error a role met, if any."""
        return self._crew.supervisor.last_error if self._crew else None

    def pause(self) -> None:
        """Stop claiming and renewing; handlers stop at their next checkpoint."""
        if self.paused or self.state not in (WorkerState.RUNNING, WorkerState.STARTING):
            return
        self.gate.close()
        self.state = WorkerState.PAUSED
        self.bus.emit(Paused(self.id))

    def resume(self) -> None:
        """Carry on where the worker stopped (renewing first)."""
        if not self.paused:
            return
        if self.state is WorkerState.PAUSED:
            self.state = WorkerState.RUNNING
        self.gate.open()
        if self._crew is not None:
            self._crew.producer.wake()
            self._crew.keeper.poke()
        self.bus.emit(Resumed(self.id))

    def drain(self) -> None:
        """Stop claiming, give in-flight work `drain_seconds`, release what can be released,
        leave the rest to expire, then stop."""
        if self._crew is None:
            # Asked before the roles started (a SIGTERM while the pool opens): there is
            # nothing to drain, and `run` starts no role once `_stop` is set.
            self._stop.set()
            return
        if self._drain_task is None and not self._stop.is_set():
            self._drain_task = asyncio.get_running_loop().create_task(self._drain())

    async def crash(self) -> None:
        """Stop at once without releasing anything: the leases must expire on their own."""
        self.exit_reason = ExitReason.CRASHED
        if self._crew is not None:
            self._crew.producer.stop_claiming()
            self._crew.cancel_all()
        if self._drain_task:
            self._drain_task.cancel()
        self._stop.set()

    async def wait_started(self, timeout: float = 30.0) -> None:
        """Wait until the worker registered and started its roles."""
        await asyncio.wait_for(self._started.wait(), timeout)

    async def stop(self) -> None:
        """Drain and wait until the worker has stopped."""
        self.drain()
        await self._stop.wait()

    # --- main --------------------------------------------------------------------------

    async def run(self) -> ExitReason:
        """Run until drained, crashed or unhealthy; returns why it stopped."""
        if self._stop.is_set():
            return ExitReason.DRAINED  # drained before it began
        size = self.settings.pool_size
        await check_before_pool(self.url, self.id, self.settings)
        self.pool_check = ConnectionCheck(self.settings.answer_timeout)
        self.pool = await open_pool(self.url, self.id, size, self.pool_check)
        registration = Registration(self, self.pool)
        try:
            installation = await registration.register()
            if self._stop.is_set():
                return ExitReason.DRAINED  # drained while starting; `finally` stops cleanly
            self._crew = Crew(
                self, self.pool, str(installation), on_unhealthy=self._unhealthy,
                on_unreachable=functools.partial(self._unhealthy, reason=ExitReason.UNREACHABLE),
            )
            self.state = WorkerState.PAUSED if self.paused else WorkerState.RUNNING
            self.bus.emit(
                WorkerStarted(self.id, self.settings.capacity, self.settings.lease_seconds)
            )
            self._crew.start()
            self._started.set()
            await self._stop.wait()
        finally:
            if self._crew is not None:
                await self._crew.stop(keep_leases=self.exit_reason is ExitReason.CRASHED)
            if self.exit_reason is not ExitReason.CRASHED:
                await registration.stopped(self.last_error)
            self.state = WorkerState.STOPPED
            if self._crew is not None:
                await self._crew.close_connections()
            await self.pool.close(timeout=2)
            reason = self.exit_reason or ExitReason.DRAINED
            self.exit_reason = reason
            self.bus.emit(WorkerStopped(self.id, "crashed" if reason is ExitReason.CRASHED
                                        else "stopped"))
        return reason

    def heartbeat_fields(self) -> dict[str, Any]:
        """What the heartbeat writes to the worker's row."""
        stats = self.pool_stats()
        self.bus.emit(stats)
        return {
            "state": str(self.state),
            "in_flight": stats.in_flight,
            "renewals_ok": self.counters.renewals_ok,
            "renewals_failed": self.counters.renewals_failed,
            "pool_max": stats.pool_max,
            "pool_in_use": stats.in_use,
            "pool_idle": stats.idle,
            "pool_waiting": stats.waiting,
            "last_error": self.last_error,
        }

    def on_requests(self, pause: bool, drain: bool) -> None:
        """Obey the worker's row: drain, or pause/resume on a change of request (a pause
        made in-process, by the dashboard or a test, is not undone by a row that never
        asked for one)."""
        if drain:
            self.drain()
        elif pause != self._pause_requested:
            self._pause_requested = pause
            if pause:
                self.pause()
            else:
                self.resume()

    def pool_stats(self) -> PoolStats:
        """Connection headroom right now."""
        raw = self.pool.get_stats() if self.pool is not None else {}
        size = raw.get("pool_size", 0)
        idle = raw.get("pool_available", 0)
        return PoolStats(
            self.id,
            pool_max=self.settings.pool_size,
            in_use=size - idle,
            idle=idle,
            waiting=raw.get("requests_waiting", 0),
            in_flight=len(self.flights),
            capacity=self.settings.capacity,
        )

    # --- stopping ------------------------------------------------------------------------

    def _unhealthy(self, role: str, error: str, reason: ExitReason = ExitReason.UNHEALTHY) -> None:
        # Also a burst run whose database was unreachable for a lease (reason UNREACHABLE).
        self.state = WorkerState.UNHEALTHY
        self.exit_reason = reason
        log.error(
            "worker unhealthy",
            extra={"fields": {"msg": "worker unhealthy: draining and stopping", "worker": self.id,
                              "role": role, "error": error}},
        )
        self.bus.emit(WorkerUnhealthy(self.id, role, error))
        self.drain()

    async def _drain(self) -> None:
        assert self._crew is not None
        if self.state is not WorkerState.UNHEALTHY:
            self.state = WorkerState.DRAINING
        # Best effort, as the stopped row is, and with its limit: in an outage the heartbeat
        # waits for the control connection (the LISTEN holds it while it waits on the pool,
        # up to a heartbeat and an answer limit), then on the pool itself: 10-21 s at the
        # default lease, which the drain waited behind (tests/test_stop_in_outage.py).
        with contextlib.suppress(Exception):
            async with asyncio.timeout(STOP_RECORD_SECONDS):
                await self._crew.controller.beat_once()
        try:
            await Drain(self, self._crew).run()
        finally:
            self._stop.set()
