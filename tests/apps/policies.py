"""An application whose kinds set their own policies and fleet limits, for the tests of
per-kind leases and limits run with real worker processes (`tests/test_kind_policies.py`,
`tests/test_kind_limits.py`). Each handler holds its job for `seconds` of the payload."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from taskboard.core import JobContext, KindRegistry

registry = KindRegistry(builtins=False)


@dataclass
class Hold:
    seconds: float = 0.0


async def _hold(ctx: JobContext, seconds: float) -> None:
    loop = asyncio.get_running_loop()
    until = loop.time() + seconds
    while loop.time() < until:
        await ctx.checkpoint()
        await asyncio.sleep(min(0.05, max(0.0, until - loop.time())))


@registry.kind("brief", lease_seconds=2)
async def brief(ctx: JobContext, job: Hold) -> None:
    """A kind with a short lease of its own (its worker's default is longer)."""
    await _hold(ctx, job.seconds)


@registry.kind("long")
async def long(ctx: JobContext, job: Hold) -> None:
    """A kind that takes its worker's lease."""
    await _hold(ctx, job.seconds)


@registry.kind("paced", rate_per_second=10)
async def paced(ctx: JobContext, job: Hold) -> None:
    """An SMTP relay's pace: at most ten claims in any second, fleet-wide."""
    await _hold(ctx, job.seconds)


@registry.kind("pair", max_running=2)
async def pair(ctx: JobContext, job: Hold) -> None:
    """At most two held at once, fleet-wide."""
    await _hold(ctx, job.seconds)


@registry.kind("single", max_running=1, lease_seconds=2)
async def single(ctx: JobContext, job: Hold) -> None:
    """One at a time, with a short lease, so a dead holder's slot frees quickly."""
    await _hold(ctx, job.seconds)
