"""A real demo fleet for tests: embedded workers named worker-a, worker-b, ... running the
demo's kinds (email and billing hold their job after the send) on short leases, with the
local SMTP sink and Stripe endpoint; and a control that records the commands sent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from taskboard.core.db import Database
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.fleet import Fleet
from taskboard.core.standins.runtime import local_runtime
from taskboard.core.training.kinds import demo_registry

LEASE = 2.0
"""Lease of the demo's workers in these tests, seconds; email and billing hold as long."""

COMMANDS = ("pause", "resume", "enqueue_sample", "add_worker", "crash", "drain")


@asynccontextmanager
async def demo_fleet(url: str, workers: int = 2, lease: float = LEASE) -> AsyncIterator[Fleet]:
    """A started demo fleet on `url`, closed on exit."""
    async with local_runtime({}) as runtime:
        fleet = Fleet(
            Database(url),
            runtime,
            demo_registry(lease),
            settings=WorkerSettings(lease_seconds=lease, drain_seconds=0.5),
            mode="demo",
            name_prefix="worker",
            sample_sleep_seconds=lease / 2,
        )
        await fleet.start(workers)
        try:
            yield fleet
        finally:
            await fleet.close()


class Recording:
    """The fleet as the script sees it, recording every command (not the reads)."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.commands: list[tuple[str, object]] = []

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.fleet, name)
        if name not in COMMANDS:
            return attribute

        async def recorded(*args: Any) -> Any:
            self.commands.append((name, args[0] if args else None))
            return await attribute(*args)

        return recorded


async def within(
    predicate: Callable[[], Any], what: str, timeout: float = 15.0, step: float = 0.05
) -> Any:
    """Await `predicate()` (sync or async) until truthy; fail naming `what` after `timeout`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(step)
