"""The async worker: claims jobs, keeps their leases, runs handlers, completes behind the fence.

Connections (pool of N): in-flight jobs of kinds that write to the database hold at most
N - 2, one each, for the whole handler run (their writes commit with the fenced
completion); kinds that write nothing hold none. The control loop holds one for LISTEN,
heartbeats and pause/drain requests; the engine connection (core/engine_conn.py) runs the
worker's own claims, grouped completions, renewals and releases, one at a time. So renewal
always finds a connection even when every handler is blocked on Stripe.

Pause is the training lever: a paused worker stops claiming and renewing, and its handlers
stop at their next checkpoint, so its leases really expire and another worker reclaims
them. On resume it carries on where it stopped, as a stalled process would: a handler that
finishes tries to complete and the fence rejects it; the next renewal reports the other
lost leases and stops their handlers. Either way it never reports success for a job it
no longer owns.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from taskboard.core.engine import leases, sql
from taskboard.core.engine.connection import EngineConnection
from taskboard.core.engine.events import (
    Claimed,
    Completed,
    CompletionRejected,
    Dead,
    Effect,
    Event,
    EventBus,
    Failed,
    Paused,
    PoolStats,
    Released,
    RenewalFailed,
    Renewed,
    Resumed,
    WorkerStarted,
    WorkerStopped,
)
from taskboard.core.engine.leases import ClaimedJob
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.errors import (
    DatabaseUnavailable,
    LeaseLost,
    PermanentJobError,
    ValidationError,
)
from taskboard.core.kinds import JobKind, KindRegistry

log = logging.getLogger("taskboard.worker")

# Errors that mean "the database is not answering right now": retried with backoff, never
# treated as a verdict on ownership.
DB_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout)
MAX_ERROR_TEXT = 2000
_GROUPED = object()  # marker: complete this job in the next grouped statement
POOL_TIMEOUT_SECONDS = 10.0
# Backoff cap while the database is unreachable: short, so a worker is back within about a
# second of the database (a restart), long enough not to hammer a server that is starting.
MAX_RETRY_DELAY = 1.0


@dataclass(eq=False)
class InFlight:
    """One claimed job this worker is running."""

    job: ClaimedJob
    kind: JobKind | None
    local_deadline: float  # loop.time() when the lease expires, from the DB's own clock
    started: float
    task: asyncio.Task[None] | None = None
    lost: bool = False  # a renewal failed or the lease ran out: never complete
    completing: bool = False  # completion statement sent: renewal must not count it lost
    cancelled_for_loss: bool = False

    @property
    def lease(self) -> tuple[int, UUID]:
        """(job id, token): what every fenced statement presents."""
        return (self.job.id, self.job.token)


class _Context:
    """The `JobContext` a handler gets."""

    def __init__(
        self, worker: Worker, flight: InFlight, conn: AsyncConnection[Any] | None, payload: Any
    ) -> None:
        self._worker = worker
        self._flight = flight
        self._conn = conn
        self._payload = payload

    @property
    def job_id(self) -> int:
        return self._flight.job.id

    @property
    def kind(self) -> str:
        return self._flight.job.kind

    @property
    def payload(self) -> dict[str, Any]:
        return dict(self._payload)

    @property
    def attempt(self) -> int:
        return self._flight.job.attempt

    @property
    def conn(self) -> AsyncConnection[Any]:
        if self._conn is None:
            # Kinds that write nothing run without a connection: their completions are
            # grouped on the engine connection, and the pool is kept for kinds that write.
            raise RuntimeError(
                f"job kind {self._flight.job.kind!r} is registered with writes_db=False and "
                "gets no database connection; register it with writes_db=True to use ctx.conn"
            )
        return self._conn

    @property
    def services(self) -> Any:
        return self._worker.services

    async def checkpoint(self) -> None:
        await self._worker._checkpoint(self._flight)

    def note(self, message: str) -> None:
        job = self._flight.job
        self._worker._emit(Effect(self._worker.id, job.id, str(job.token), message))


class _GroupCompleter:
    """Fenced completions of handlers that wrote nothing, many per statement.

    While one statement is in flight the next group gathers, so under load each commit
    (the real cost with fsync on) completes many jobs and claims their replacements; when
    idle a group is one job and nothing waits. Each row still gets its own verdict: a stale
    token in a group is rejected alone.
    """

    def __init__(self, worker: Worker) -> None:
        self._worker = worker
        self._pending: list[tuple[InFlight, asyncio.Future[None]]] = []
        self._ready = asyncio.Event()
        self.statements = 0

    async def complete(self, flight: InFlight) -> None:
        """Queue `flight` for the next group; returns once its verdict was reported."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((flight, fut))
        self._ready.set()
        await fut

    async def run(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            batch, self._pending = self._pending, []
            if not batch:
                continue
            try:
                await self._worker._finish_group([flight for flight, _ in batch])
                self.statements += 1
            except asyncio.CancelledError:
                for _, fut in batch:
                    fut.cancel()
                raise
            except Exception as exc:
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            for _, fut in batch:
                if not fut.done():
                    fut.set_result(None)


@dataclass
class WorkerCounters:
    """Running totals for the heartbeat, the dashboard and the benchmarks."""

    claimed: int = 0
    completed: int = 0
    rejected: int = 0
    failed: int = 0
    renewals_ok: int = 0
    renewals_failed: int = 0
    renewal_statements: int = 0
    renewal_lateness: deque[float] = field(default_factory=lambda: deque(maxlen=10_000))


class Worker:
    """One worker: a connection pool, a claim loop, a renewal loop and a control loop."""

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
        self.state = "starting"
        self.pool: AsyncConnectionPool[AsyncConnection[Any]] | None = None
        self._engine_conn: EngineConnection | None = None
        # Keyed by token, not job id: a worker may reclaim its own expired job, and the
        # stale attempt and the new one must never be confused.
        self._inflight: dict[UUID, InFlight] = {}
        self._running = asyncio.Event()  # cleared while paused
        self._running.set()
        self._wake = asyncio.Event()  # NOTIFY arrived or a slot freed
        self._stop = asyncio.Event()
        self._claiming = True
        self._started = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._crashed = False
        self._drain_task: asyncio.Task[None] | None = None
        self._pause_requested = False
        self._completer = _GroupCompleter(self)
        self._reserved = 0

    @property
    def _engine(self) -> EngineConnection:
        assert self._engine_conn is not None, "the worker is not running"
        return self._engine_conn

    # --- public control ----------------------------------------------------------------

    @property
    def paused(self) -> bool:
        """True while the worker is paused."""
        return not self._running.is_set()

    @property
    def in_flight(self) -> int:
        """Jobs held right now."""
        return len(self._inflight)

    def in_flight_jobs(self) -> list[InFlight]:
        """The jobs held right now (a copy)."""
        return list(self._inflight.values())

    def pause(self) -> None:
        """Stop claiming and renewing; handlers stop at their next checkpoint."""
        if self.paused or self.state in ("draining", "stopped"):
            return
        self._running.clear()
        self.state = "paused"
        self._emit(Paused(self.id))

    def resume(self) -> None:
        """Carry on where the worker stopped."""
        if not self.paused:
            return
        self.state = "running"
        self._running.set()
        self._wake.set()
        self._emit(Resumed(self.id))

    def drain(self) -> None:
        """Stop claiming, give in-flight work `drain_seconds`, release the rest, then stop."""
        if self._drain_task is None and not self._stop.is_set():
            self._drain_task = asyncio.get_running_loop().create_task(self._drain())

    async def crash(self) -> None:
        """Stop at once without releasing anything: the leases must expire on their own."""
        self._crashed = True
        self._claiming = False
        for task in [*self._tasks, *(f.task for f in self._inflight.values() if f.task)]:
            task.cancel()
        self._stop.set()
        if self._drain_task:
            self._drain_task.cancel()

    async def wait_started(self, timeout: float = 30.0) -> None:
        """Wait until the worker registered and started its loops."""
        await asyncio.wait_for(self._started.wait(), timeout)

    async def stop(self) -> None:
        """Drain and wait until the worker has stopped."""
        self.drain()
        await self._stop.wait()

    # --- main --------------------------------------------------------------------------

    async def run(self) -> None:
        """Run until drained, stopped or crashed."""
        pool_size = self.settings.pool_size
        self.pool = AsyncConnectionPool(
            self.url,
            min_size=pool_size,
            max_size=pool_size,
            kwargs={"autocommit": True},
            open=False,
            name=f"taskboard-{self.id}",
            timeout=POOL_TIMEOUT_SECONDS,
        )
        self._engine_conn = EngineConnection(self.pool)
        try:
            await self.pool.open(wait=True, timeout=POOL_TIMEOUT_SECONDS)
        except PoolTimeout:
            await self.pool.close()
            raise DatabaseUnavailable(
                f"worker {self.id}: could not open {self.settings.pool_size} connections "
                f"within {POOL_TIMEOUT_SECONDS:g} s (database down, or max_connections reached?)"
            ) from None
        try:
            await self._with_retry(self._register)
            self.state = "running"
            self._emit(WorkerStarted(self.id, self.settings.capacity, self.settings.lease_seconds))
            loop = asyncio.get_running_loop()
            self._tasks = [
                loop.create_task(self._control_loop(), name=f"{self.id}-control"),
                loop.create_task(self._renew_loop(), name=f"{self.id}-renew"),
                loop.create_task(self._claim_loop(), name=f"{self.id}-claim"),
                loop.create_task(self._completer.run(), name=f"{self.id}-complete"),
            ]
            self._started.set()
            await self._stop.wait()
        finally:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            # Whatever is still running (crash, or the owner cancelled `run`) stops here
            # without writing: its leases expire and another worker reclaims them.
            stragglers = [f.task for f in self._inflight.values() if f.task and not f.task.done()]
            for task in stragglers:
                task.cancel()
            await asyncio.gather(*stragglers, return_exceptions=True)
            if not self._crashed:
                with contextlib.suppress(*DB_ERRORS, psycopg.Error):
                    async with self.pool.connection(timeout=2) as conn:
                        await conn.execute(sql.WORKER_STOPPED, {"id": self.id})
            self.state = "stopped"
            if self._engine_conn is not None:
                with contextlib.suppress(*DB_ERRORS, psycopg.Error):
                    await self._engine_conn.close()
            await self.pool.close(timeout=2)
            self._emit(WorkerStopped(self.id, "crashed" if self._crashed else "stopped"))

    async def _register(self) -> None:
        assert self.pool is not None
        async with self.pool.connection() as conn:
            await conn.execute(
                sql.REGISTER_WORKER,
                {
                    "id": self.id,
                    "host": self.host,
                    "pid": os.getpid(),
                    "queues": list(self.settings.queues),
                    "lease": self.settings.lease_seconds,
                    "capacity": self.settings.capacity,
                    "pool_max": self.settings.pool_size,
                },
            )

    async def _with_retry(self, op: Callable[[], Awaitable[None]]) -> None:
        delay = 0.2
        while True:
            try:
                await op()
                return
            except DB_ERRORS as exc:
                log.warning("worker %s: database unavailable (%s); retrying", self.id, _line(exc))
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_RETRY_DELAY)

    # --- claiming ----------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        assert self.pool is not None
        loop = asyncio.get_running_loop()
        error_delay = 0.2
        while self._claiming:
            await self._running.wait()
            if not self._claiming:
                return
            free = self._free_slots()
            if free <= 0:
                self._wake.clear()
                await self._wake.wait()
                continue
            self._wake.clear()
            wait_for: float | None = self.settings.poll_seconds
            self._reserved += free
            try:
                async with self._engine.use() as conn:
                    claimed = await leases.claim(
                        conn,
                        worker_id=self.id,
                        limit=free,
                        lease_seconds=self.settings.lease_seconds,
                        queues=self.settings.queues,
                    )
                    received = loop.time()
                    if len(claimed) < free:
                        due = await leases.seconds_until_claimable(conn, self.settings.queues)
                        if due is not None:
                            # A little past the deadline so the lease has surely expired
                            # by the database's clock when we ask again.
                            wait_for = min(self.settings.poll_seconds, due + 0.005)
                error_delay = 0.2
            except DB_ERRORS as exc:
                log.warning("worker %s: claim failed (%s); retrying", self.id, _line(exc))
                await asyncio.sleep(error_delay)
                error_delay = min(error_delay * 2, MAX_RETRY_DELAY)
                continue
            finally:
                self._reserved -= free
            for job in claimed:
                self._start_job(job, received)
            if len(claimed) >= free or (claimed and wait_for == 0):
                continue
            if not self._claiming:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait_for)

    def _free_slots(self) -> int:
        # Slots being claimed by a statement in flight count as taken, so the claim loop
        # and the group completer never claim the same free slot twice.
        return self.settings.capacity - len(self._inflight) - self._reserved

    async def _finish_group(self, flights: list[InFlight]) -> None:
        """Complete `flights` in one statement and claim replacements in the same commit."""
        assert self.pool is not None
        loop = asyncio.get_running_loop()
        refill = 0
        if self._claiming and self._running.is_set():
            refill = max(0, self._free_slots() + len(flights))
        self._reserved += refill
        claimed: list[ClaimedJob] = []
        try:
            async with self._engine.use() as conn:
                if refill:
                    owned, claimed = await leases.complete_many_and_claim(
                        conn,
                        [f.lease for f in flights],
                        worker_id=self.id,
                        limit=refill,
                        lease_seconds=self.settings.lease_seconds,
                        queues=self.settings.queues,
                    )
                else:
                    owned = await leases.complete_many(conn, [f.lease for f in flights])
                received = loop.time()
                rejected = [f for f in flights if f.lease not in owned]
                if rejected:
                    await self._rejected(conn, rejected)
        finally:
            self._reserved -= refill
        for flight in flights:
            self._inflight.pop(flight.job.token, None)
            if flight.lease in owned:
                self._completed(flight)
        for job in claimed:
            self._start_job(job, received)
        if refill and len(claimed) < refill:
            self._wake.set()  # the queue ran short: let the claim loop set its timer

    def _start_job(self, job: ClaimedJob, received: float) -> None:
        self.counters.claimed += 1
        try:
            kind: JobKind | None = self.registry.get(job.kind)
        except ValidationError:
            kind = None
        remaining = (job.lease_expires_at - job.db_now).total_seconds()
        flight = InFlight(job, kind, local_deadline=received + remaining, started=received)
        self._inflight[job.token] = flight
        self._emit(
            Claimed(
                self.id,
                job.id,
                job.kind,
                str(job.token),
                job.attempt,
                job.lease_expires_at,
                str(job.previous_token) if job.previous_token else None,
                job.previous_worker,
            )
        )
        flight.task = asyncio.get_running_loop().create_task(
            self._run_job(flight), name=f"{self.id}-job-{job.id}"
        )

    # --- running one job ---------------------------------------------------------------

    async def _run_job(self, flight: InFlight) -> None:
        assert self.pool is not None
        job = flight.job
        try:
            if flight.kind is not None and flight.kind.writes_db:
                async with self.pool.connection() as conn:
                    owned = await self._execute(conn, flight)
            else:
                owned = await self._execute(None, flight)
            if owned is _GROUPED:
                # The handler wrote nothing (it had no connection), so its fenced
                # completion can share one statement with other finished jobs.
                await self._completer.complete(flight)
            elif owned is True:
                self._completed(flight)
            elif owned is False:
                assert self.pool is not None
                async with self.pool.connection() as conn:
                    await self._rejected(conn, [flight])
        except asyncio.CancelledError:
            if not flight.cancelled_for_loss:
                raise
        except DB_ERRORS as exc:
            # We cannot tell whether the database saw our completion; the lease decides:
            # if it did not, the job is reclaimed after the deadline. Never report success.
            log.warning("worker %s: job %s lost its connection (%s)", self.id, job.id, _line(exc))
        except Exception:
            log.exception("worker %s: unexpected error running job %s", self.id, job.id)
        finally:
            self._inflight.pop(job.token, None)
            self._wake.set()

    async def _execute(
        self, conn: AsyncConnection[Any] | None, flight: InFlight
    ) -> bool | object | None:
        """Run the handler; returns True/False (owned or not), `_GROUPED`, or None (no write)."""
        job = flight.job
        kind = flight.kind
        try:
            if kind is None:
                raise PermanentJobError(f"unknown job kind {job.kind!r}")
            try:
                payload = self.registry.validate(job.kind, json.loads(job.payload))
            except ValidationError as exc:
                raise PermanentJobError(f"invalid payload: {exc}") from None
            except (ValueError, RecursionError, OverflowError) as exc:
                raise PermanentJobError(
                    f"invalid payload: cannot be decoded ({type(exc).__name__})"
                ) from None
            ctx = _Context(self, flight, conn, payload)
            if not kind.writes_db:
                await kind.handler(ctx)
                await self._before_complete(flight)
                flight.completing = True
                return _GROUPED
            assert conn is not None  # writes_db kinds run on their own connection
            owned = False
            async with conn.transaction():
                await kind.handler(ctx)
                await self._before_complete(flight)
                flight.completing = True
                owned = await leases.complete(conn, job.id, job.token)
                if not owned:
                    # The stale worker's own writes must not survive its rejection.
                    raise psycopg.Rollback()
            return owned
        except LeaseLost:
            return None
        except (*DB_ERRORS, asyncio.CancelledError):
            raise
        except Exception as exc:
            await self._fail(conn, flight, exc)
            return None

    def _completed(self, flight: InFlight) -> None:
        self.counters.completed += 1
        elapsed = asyncio.get_running_loop().time() - flight.started
        self._emit(Completed(self.id, flight.job.id, str(flight.job.token), elapsed))

    async def _before_complete(self, flight: InFlight) -> None:
        # A paused worker stalls here too: the article's worker that sent the email and
        # stopped before marking the job complete.
        await self._checkpoint(flight)

    async def _checkpoint(self, flight: InFlight) -> None:
        if flight.lost:
            raise LeaseLost(f"job {flight.job.id}: lease lost")
        if not self._running.is_set():
            await self._running.wait()
        if flight.lost:
            raise LeaseLost(f"job {flight.job.id}: lease lost")

    async def _rejected(self, conn: AsyncConnection[Any], flights: list[InFlight]) -> None:
        self.counters.rejected += len(flights)
        with contextlib.suppress(*DB_ERRORS):
            await leases.record_rejected(conn, [f.lease for f in flights])
        for flight in flights:
            self._emit(CompletionRejected(self.id, flight.job.id, str(flight.job.token)))

    async def _fail(
        self, conn: AsyncConnection[Any] | None, flight: InFlight, exc: Exception
    ) -> None:
        if flight.lost:
            return  # never write for a job we no longer own
        if conn is None:
            assert self.pool is not None
            async with self.pool.connection() as own:
                await self._fail(own, flight, exc)
            return
        job = flight.job
        permanent = isinstance(exc, PermanentJobError)
        error = _error_text(exc)
        outcome = await leases.fail(
            conn,
            job.id,
            job.token,
            error=error,
            backoff_seconds=self.settings.backoff(job.attempt),
            permanent=permanent,
        )
        self.counters.failed += 1
        if not outcome.owned:
            await self._rejected(conn, [flight])
        elif outcome.dead:
            self._emit(Dead(self.id, job.id, str(job.token), error))
        else:
            self._emit(Failed(self.id, job.id, str(job.token), error, outcome.retry_at))

    # --- lease renewal -----------------------------------------------------------------

    async def _renew_loop(self) -> None:
        assert self.pool is not None
        loop = asyncio.get_running_loop()
        interval = self.settings.renewal_interval
        next_due = loop.time() + interval
        while True:
            await asyncio.sleep(max(0.0, next_due - loop.time()))
            if not self._running.is_set():
                await self._running.wait()
                # A resumed worker renews one interval later, as if it had just woken up.
                next_due = loop.time() + interval
                continue
            self.counters.renewal_lateness.append(loop.time() - next_due)
            try:
                await self._renew_once()
                next_due += interval
                if next_due < loop.time():
                    next_due = loop.time() + interval
            except DB_ERRORS as exc:
                log.warning("worker %s: renewal failed (%s); retrying", self.id, _line(exc))
                self._expire_overdue(loop.time(), "database unreachable until the lease expired")
                next_due = loop.time() + min(1.0, interval / 4)

    async def _renew_once(self) -> None:
        assert self.pool is not None
        flights = [f for f in self._inflight.values() if not f.lost and not f.completing]
        if not flights:
            return
        loop = asyncio.get_running_loop()
        async with self._engine.use() as conn:
            sent = loop.time()
            result = await leases.renew(
                conn, [f.lease for f in flights], lease_seconds=self.settings.lease_seconds
            )
            self.counters.renewal_statements += 1
            lost_leases = set(result.lost)
            # Jobs that completed while the statement was in flight are not losses.
            lost = [
                f
                for f in flights
                if f.lease in lost_leases and not f.completing and f.job.token in self._inflight
            ]
            # Marked lost before the next await: a handler that finishes meanwhile must not
            # go on to complete a lease this statement just reported lost.
            for flight in lost:
                self._lose(flight, "token changed or lease expired")
            if lost:
                await leases.record_renewal_failed(conn, [f.lease for f in lost])
        if result.db_now is not None:
            for flight in flights:
                deadline = result.renewed.get(flight.lease)
                if deadline is not None:
                    flight.local_deadline = sent + (deadline - result.db_now).total_seconds()
        self.counters.renewals_ok += len(result.renewed)
        if result.renewed:
            first = next(iter(result.renewed.values()))
            self._emit(Renewed(self.id, tuple(i for i, _ in result.renewed), first))

    def _expire_overdue(self, now: float, reason: str) -> None:
        for flight in list(self._inflight.values()):
            if not flight.lost and not flight.completing and now >= flight.local_deadline:
                self._lose(flight, reason)

    def _lose(self, flight: InFlight, reason: str) -> None:
        flight.lost = True
        self.counters.renewals_failed += 1
        self._emit(RenewalFailed(self.id, flight.job.id, str(flight.job.token), reason))
        if flight.kind is not None and flight.kind.cancel_safe and flight.task is not None:
            flight.cancelled_for_loss = True
            flight.task.cancel()

    # --- control: LISTEN, heartbeat, pause and drain requests ---------------------------

    async def _control_loop(self) -> None:
        assert self.pool is not None
        delay = 0.2
        while True:
            try:
                async with self.pool.connection() as conn:
                    await conn.execute("LISTEN taskboard_jobs")
                    await conn.execute("LISTEN taskboard_control")
                    delay = 0.2
                    while True:
                        await self._heartbeat(conn)
                        async for notify in conn.notifies(timeout=self.settings.heartbeat_seconds):
                            if notify.channel == "taskboard_jobs":
                                self._wake.set()
                            elif notify.payload == self.id:
                                break  # an operator request for us: heartbeat reads it now
            except DB_ERRORS as exc:
                log.warning("worker %s: control connection lost (%s)", self.id, _line(exc))
                # NOTIFYs may have been missed while disconnected: look for work now.
                self._wake.set()
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_RETRY_DELAY)

    async def _heartbeat(self, conn: AsyncConnection[Any]) -> None:
        stats = self.pool_stats()
        cur = await conn.execute(
            sql.HEARTBEAT,
            {
                "id": self.id,
                "state": self.state,
                "in_flight": stats.in_flight,
                "renewals_ok": self.counters.renewals_ok,
                "renewals_failed": self.counters.renewals_failed,
                "pool_max": stats.pool_max,
                "pool_in_use": stats.in_use,
                "pool_idle": stats.idle,
                "pool_waiting": stats.waiting,
            },
        )
        row = await cur.fetchone()
        self._emit(stats)
        if row is None:
            return
        pause_requested, drain_requested = bool(row[0]), bool(row[1])
        if drain_requested:
            self.drain()
        # Act on changes of the request only, so a pause made in-process (the dashboard's
        # embedded worker, a test) is not undone by a row that never asked for one.
        elif pause_requested != self._pause_requested:
            self._pause_requested = pause_requested
            if pause_requested:
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
            in_flight=len(self._inflight),
            capacity=self.settings.capacity,
        )

    # --- drain -------------------------------------------------------------------------

    async def _drain(self) -> None:
        assert self.pool is not None
        self._claiming = False
        self.state = "draining"
        self._wake.set()
        running = [f.task for f in self._inflight.values() if f.task]
        if running and self._running.is_set():
            # A paused worker's handlers are stopped: release at once instead of waiting.
            await asyncio.wait(running, timeout=self.settings.drain_seconds)
        leftover = [f for f in self._inflight.values() if not f.lost and not f.completing]
        if leftover:
            for flight in leftover:
                flight.lost = True  # from here on this worker must not complete them
            try:
                async with self._engine.use() as conn:
                    released = await leases.release(conn, [f.lease for f in leftover])
            except DB_ERRORS as exc:
                log.warning(
                    "worker %s: release failed (%s); leases will expire", self.id, _line(exc)
                )
                released = set()
            for flight in leftover:
                if flight.job.id in released:
                    self._emit(Released(self.id, flight.job.id, str(flight.job.token)))
                if flight.task is not None:
                    flight.cancelled_for_loss = True
                    flight.task.cancel()
        self._running.set()  # let paused handlers reach their checkpoint and stop
        pending = [f.task for f in self._inflight.values() if f.task]
        if pending:
            await asyncio.wait(pending, timeout=max(1.0, self.settings.drain_seconds))
        self._stop.set()

    # --- events ------------------------------------------------------------------------

    def _emit(self, event: Event) -> None:
        self.bus.emit(event)


def _line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if not isinstance(exc, PermanentJobError) else str(exc)
    return text[:MAX_ERROR_TEXT]
