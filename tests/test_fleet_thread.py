"""The dashboard's embedded workers keep their leases while the UI's loop is blocked."""

from __future__ import annotations

import asyncio
import time

from taskboard.core.config import WorkerSettings
from taskboard.core.db import Database
from taskboard.core.fleet import Fleet
from taskboard.core.jobs import enqueue
from taskboard.core.kinds import builtin_registry
from taskboard.core.status import job_history

LEASE = 0.6


async def test_a_frozen_ui_loop_does_not_cost_embedded_workers_their_leases(db_url, conn):
    registry = builtin_registry()
    fleet = Fleet(
        Database(db_url),
        None,
        registry,
        settings=WorkerSettings(lease_seconds=LEASE, drain_seconds=0.5),
        name_prefix="ui",
    )
    await fleet.start(1)
    try:
        job_id = await enqueue(conn, registry, "sleep", {"seconds": 1.5})

        async def claimed() -> bool:
            cur = await conn.execute(
                "SELECT lease_token IS NOT NULL FROM taskboard_jobs WHERE id = %s", (job_id,)
            )
            return bool((await cur.fetchone())[0])

        deadline = asyncio.get_running_loop().time() + 10
        while not await claimed():
            assert asyncio.get_running_loop().time() < deadline, "never claimed"
            await asyncio.sleep(0.02)
        # What a long frame does to the UI's loop, for twice the lease: on the same loop the
        # worker could not renew and would lose the job.
        time.sleep(2 * LEASE)  # noqa: ASYNC251 - blocking the loop is the point

        async def done() -> bool:
            cur = await conn.execute(
                "SELECT completed_at IS NOT NULL FROM taskboard_jobs WHERE id = %s", (job_id,)
            )
            return bool((await cur.fetchone())[0])

        deadline = asyncio.get_running_loop().time() + 10
        while not await done():
            assert asyncio.get_running_loop().time() < deadline, "never completed"
            await asyncio.sleep(0.05)
        history = await job_history(conn, job_id)
        assert [h["outcome"] for h in history] == ["completed"]
        assert history[0]["renewal_failed_at"] is None
    finally:
        await fleet.close()
