"""A real demo fleet for tests: embedded workers named worker-a, worker-b, ... running the
demo's kinds (email and billing wait for the story's cue after the send) on short leases,
with the local SMTP sink and Stripe endpoint; and a control that records the commands sent."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.fleet import Fleet
from taskboard.core.runtime.db import Database
from taskboard.core.standins.runtime import local_runtime
from taskboard.core.training.kinds import ALL, StoryCue, demo_registry

from tests.conftest import wait_for

LEASE = 2.0
"""Lease of the demo's workers in these tests, seconds."""

COMMANDS = ("pause", "resume", "enqueue_sample", "add_worker", "crash", "drain")


@asynccontextmanager
async def demo_fleet(
    url: str, workers: int = 2, lease: float = LEASE, cue: StoryCue | None = None
) -> AsyncIterator[Fleet]:
    """A started demo fleet on `url` whose held handlers wait for `cue` (a script's: give
    `DemoScript(cue=...)` the same one), closed on exit."""
    cue = cue or StoryCue()
    async with local_runtime({}) as runtime:
        fleet = Fleet(
            Database(url),
            runtime,
            demo_registry(cue),
            settings=WorkerSettings(lease_seconds=lease, drain_seconds=0.5),
            mode="demo",
            name_prefix="worker",
            sample_sleep_seconds=lease / 2,
        )
        await fleet.start(workers)
        try:
            yield fleet
        finally:
            cue.let_go(ALL)
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
    """`wait_for` with the demo's longer defaults."""
    return await wait_for(predicate, timeout=timeout, what=what, step=step)
