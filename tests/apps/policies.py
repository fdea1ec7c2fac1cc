"""An application whose kinds set their own policies and fleet limits, for the tests of
per-kind leases and limits run with real worker processes (`tests/test_kind_policies.py`,
`tests/test_kind_limits.py`). Each handler holds its job for `seconds` of the payload."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

import psycopg
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


@dataclass
class Entry:
    pause: float = 0.0  # seconds the first attempt waits, inside its external call


@registry.kind("fenced", lease_seconds=2)
async def fenced(ctx: JobContext, job: Entry) -> None:
    """Writes a ledger row in the application's own transaction, fenced by the attempt
    number (`taskboard_fence`): a stalled older attempt's late write is refused."""
    url = os.environ["TASKBOARD_DATABASE_URL"]
    async with ctx.external("ledger write") as ticket:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await conn.execute("INSERT INTO stage (job_id, attempt) VALUES (%s, %s)",
                               (ctx.job_id, ticket.attempt))
            if ticket.attempt == 1:
                await asyncio.sleep(job.pause)  # the test stalls this process here
            try:
                async with conn.transaction():
                    await conn.execute("SELECT taskboard_fence(%s, %s, %s)",
                                       (f"ledger:{ctx.job_id}", ctx.job_id, ticket.attempt))
                    await conn.execute("INSERT INTO ledger (job_id, attempt) VALUES (%s, %s)",
                                       (ctx.job_id, ticket.attempt))
            except psycopg.Error as exc:
                if exc.sqlstate != "TB409":
                    raise
                await conn.execute("INSERT INTO refused (job_id, attempt) VALUES (%s, %s)",
                                   (ctx.job_id, ticket.attempt))
                raise
