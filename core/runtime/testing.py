"""A helper for applications' own test suites: run a registry's waiting jobs to completion
against a real PostgreSQL, inside a test, and get each job's outcome back.

Peers answer this with an in-memory stand-in for the database; this runs the real worker
(claims, leases, fenced completions) on the database the test uses, in burst mode: it
works until nothing of the registry's kinds is ready, then drains. Jobs must be committed
to be seen (a Django test needs `TransactionTestCase`, not a rolled-back `TestCase`).
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from typing import Any

from psycopg.rows import tuple_row
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.engine.worker import Worker
from taskboard.core.kinds import JsonObject, KindRegistry
from taskboard.core.runtime.db import connection, ensure_schema
from taskboard.core.sql import testing as sql

# Short enough that a test's jobs retried after a failure come round quickly.
TEST_SETTINGS = WorkerSettings(lease_seconds=10.0, poll_seconds=0.5, retry_base_seconds=0.1)


@dataclass(frozen=True)
class JobOutcome:
    """How one job ended in the run: `completed`, `dead`, `cancelled`, or `pending` (not
    ready when the run ended: a retry waiting for its backoff, a job due later)."""

    id: int
    kind: str
    state: str
    attempts: int
    last_error: str | None
    payload: JsonObject


async def run_jobs(
    url: str,
    registry: KindRegistry,
    *,
    settings: WorkerSettings | None = None,
    services: Any = None,
    timeout: float = 60.0,
) -> list[JobOutcome]:
    """Run every ready job of `registry`'s kinds (and what they enqueue) with one worker
    until none is ready; the outcomes of the jobs that were waiting and of those enqueued
    meanwhile, by id. Raises `TimeoutError` after `timeout` seconds (the worker drained)."""
    await ensure_schema(url)
    settings = dataclasses.replace(settings or TEST_SETTINGS, burst=True)
    async with connection(url) as conn:
        cur = conn.cursor(row_factory=tuple_row)
        await cur.execute(sql.WAITING_BEFORE_RUN,
                          {"kinds": registry.runnable(), "queues": list(settings.queues)})
        row = await cur.fetchone()
        assert row is not None
        waiting, after = row
        worker = Worker(url, registry=registry, settings=settings, services=services)
        task = asyncio.ensure_future(worker.run())
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout)
        except TimeoutError:
            worker.drain()
            await task
            raise TimeoutError(f"jobs still ran after {timeout:g} s") from None
        await cur.execute(sql.OUTCOMES_OF_RUN, {"ids": waiting, "after": after})
        return [JobOutcome(r[0], r[1], r[3], r[4], r[5], r[2]) for r in await cur.fetchall()]


def run_jobs_sync(url: str, registry: KindRegistry, **options: Any) -> list[JobOutcome]:
    """`run_jobs` for a synchronous test suite (not from inside a running event loop)."""
    return asyncio.run(run_jobs(url, registry, **options))
