"""Test helpers: in-process workers with an event recorder."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from taskboard.core.engine.events import Effect, Event, EventBus
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.engine.worker import Worker
from taskboard.core.kinds import KindRegistry, builtin_registry


@dataclass
class Recorder:
    """Collects every event of the workers it is subscribed to."""

    events: list[Event] = field(default_factory=list)

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    def of(self, kind: type[Any], **match: Any) -> list[Any]:
        """Events of one type whose fields equal `match`."""
        return [
            e
            for e in self.events
            if isinstance(e, kind) and all(getattr(e, k) == v for k, v in match.items())
        ]


@dataclass
class RunningWorker:
    """A worker running in a task of the test's loop."""

    worker: Worker
    task: asyncio.Task[None]

    async def stop(self) -> None:
        """Drain and wait for the worker to finish."""
        if not self.task.done():
            self.worker.drain()
            await asyncio.wait_for(self.task, 30)

    async def crash(self) -> None:
        """Stop at once without releasing leases."""
        await self.worker.crash()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(self.task, 30)


@contextlib.asynccontextmanager
async def run_workers(
    url: str,
    *names: str,
    recorder: Recorder | None = None,
    registry: KindRegistry | None = None,
    services: Any = None,
    **settings: Any,
) -> AsyncIterator[list[RunningWorker]]:
    """Start one worker per name with shared settings; drain them all on exit."""
    bus = EventBus()
    if recorder is not None:
        bus.subscribe(recorder)
    registry = registry or builtin_registry()
    running = []
    for name in names:
        worker = Worker(
            url,
            registry=registry,
            services=services,
            bus=bus,
            settings=WorkerSettings(worker_id=name, **settings),
        )
        task = asyncio.create_task(worker.run())
        running.append(RunningWorker(worker, task))
    try:
        for r in running:
            await r.worker.wait_started()
        yield running
    finally:
        for r in running:
            if r.task.done():
                continue
            await r.stop()


@contextlib.asynccontextmanager
async def run_stalling_worker(
    url: str, name: str, **options: Any
) -> AsyncIterator[RunningWorker]:
    """One worker (`run_workers` options) that pauses at each of its external effects,
    right after a send or a charge and before its completion: the stalled holder of a
    lease, for certain. `worker.resume()` lets it go on."""
    async with run_workers(url, name, **options) as [running]:
        worker = running.worker
        worker.bus.subscribe(
            lambda e: worker.pause() if isinstance(e, Effect) and e.worker_id == worker.id else None
        )
        yield running
