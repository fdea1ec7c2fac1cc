"""`HandlerContext`: the `JobContext` a handler gets for one attempt."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any, NoReturn

from psycopg import AsyncConnection
from taskboard.core.base.errors import LeaseLost, Sleep, Snooze
from taskboard.core.engine.events import Effect, EffectRefused, Event
from taskboard.core.engine.flights import Flight, PauseGate, Phase
from taskboard.core.engine.flights import wait_at_checkpoint as wait_at_checkpoint
from taskboard.core.engine.steps import AttemptSteps, StepLog
from taskboard.core.kinds.registry import EffectTicket, Recorder
from taskboard.core.queue.dependencies import parent_results

MAX_HOLD_SECONDS = 3600.0
MAX_SNOOZE_SECONDS = 366 * 86_400.0


class HandlerContext:
    """One attempt's view of the worker: payload, connection, checkpoints, external calls."""

    def __init__(
        self,
        flight: Flight,
        conn: AsyncConnection[Any] | None,
        payload: dict[str, Any],
        *,
        services: Any,
        installation_id: str,
        gate: PauseGate,
        emit: Callable[[Event], None],
        worker_id: str,
        recorder: Recorder | None = None,
        steps: StepLog | None = None,
    ) -> None:
        self._flight = flight
        self._step_log = steps
        self._steps: AttemptSteps | None = None
        self._sleeps = 0  # durable sleeps reached in this attempt: their steps' names
        self._recorder = recorder
        self._conn = conn
        self._payload = payload
        self._services = services
        self._installation_id = installation_id
        self._gate = gate
        self._emit = emit
        self._worker_id = worker_id

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
    def identity(self) -> str:
        return self._flight.job.identity

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
        return self._services

    @property
    def installation_id(self) -> str:
        return self._installation_id

    async def checkpoint(self) -> None:
        await wait_at_checkpoint(self._flight, self._gate)
        self._flight.refuse("continuing", asyncio.get_running_loop().time())

    @contextlib.asynccontextmanager
    async def external(self, what: str) -> AsyncIterator[EffectTicket]:
        flight = self._flight
        await wait_at_checkpoint(flight, self._gate)
        loop = asyncio.get_running_loop()
        now = loop.time()
        try:
            flight.refuse(f"starting {what}", now)
        except LeaseLost:
            # The send that did not happen, reported as itself (the dashboard lists it).
            job = flight.job
            late = max(0.0, now - flight.deadline)
            self._emit(EffectRefused(self._worker_id, job.id, str(job.token), what, late))
            raise
        ticket = EffectTicket(
            job_id=flight.job.id,
            attempt=flight.job.ordinal,
            deadline=time.time() + (flight.deadline - now),
            identity=flight.job.identity,
            worker_id=self._worker_id,
            recorder=self._recorder,
        )
        previous = flight.phase
        flight.phase = Phase.EXTERNAL
        try:
            yield ticket
        finally:
            flight.phase = previous

    async def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._step_log is None:
            raise RuntimeError("this context has no step log (steps need a worker)")
        if self._steps is None:
            self._steps = AttemptSteps(self._step_log, self._flight, self._gate)
        return await self._steps.step(name, fn, *args, **kwargs)

    async def parent_results(self) -> dict[int, Any]:
        if self._step_log is None:
            raise RuntimeError("this context has no connection to read its parents with")
        async with self._step_log.engine.use("parent results") as conn:
            return await parent_results(conn, self.job_id)

    async def sleep(self, seconds: float) -> None:
        if not (isinstance(seconds, int | float) and 0 <= seconds <= MAX_SNOOZE_SECONDS):
            raise ValueError(f"sleep needs 0 <= seconds <= {MAX_SNOOZE_SECONDS:g}")
        await self.sleep_until(time.time() + seconds)

    async def sleep_until(self, when: datetime | float) -> None:
        target = when.timestamp() if isinstance(when, datetime) else float(when)
        n, self._sleeps = self._sleeps, self._sleeps + 1

        async def wake_at() -> float:
            return target

        # A step: the resumed job gets the first wake-up time back and does not sleep anew.
        wake = float(await self.step(f"taskboard.sleep#{n}", wake_at))
        left = wake - time.time()
        if left > 0:
            raise Sleep(left)  # the lease is given back, no attempt counted

    def snooze(self, seconds: float) -> NoReturn:
        if not (isinstance(seconds, int | float) and 0 < seconds <= MAX_SNOOZE_SECONDS):
            raise ValueError(f"snooze needs 0 < seconds <= {MAX_SNOOZE_SECONDS:g}")
        raise Snooze(float(seconds))

    def hold_completion(self, seconds: float) -> None:
        self._flight.hold_seconds = min(max(0.0, float(seconds)), MAX_HOLD_SECONDS)

    def note(self, message: str) -> None:
        job = self._flight.job
        self._emit(Effect(self._worker_id, job.id, str(job.token), message))
