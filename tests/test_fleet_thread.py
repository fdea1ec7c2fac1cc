"""The dashboard's embedded workers keep their leases while the UI's loop is blocked."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.fleet import Fleet
from taskboard.core.kinds import builtin_registry
from taskboard.core.queue.jobs import enqueue
from taskboard.core.runtime.db import Database
from taskboard.core.view.status import job_history

LEASE = 1.0

CLAIMED = "SELECT lease_token IS NOT NULL FROM taskboard_jobs WHERE id = %s"
COMPLETED = "SELECT completed_at IS NOT NULL FROM taskboard_jobs WHERE id = %s"


async def until(conn: Any, query: str, job_id: int, what: str) -> None:
    """Poll the job's row until `query` says true (10 s at most)."""
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        cur = await conn.execute(query, (job_id,))
        if (await cur.fetchone())[0]:
            return
        assert asyncio.get_running_loop().time() < deadline, f"job never {what}"
        await asyncio.sleep(0.02)


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
        job_id = await enqueue(conn, registry, "sleep", {"seconds": 2.5})

        await until(conn, CLAIMED, job_id, "claimed")
        # What a long frame does to the UI's loop, for twice the lease: on the same loop the
        # worker could not renew and would lose the job.
        time.sleep(2 * LEASE)  # noqa: ASYNC251 - blocking the loop is the point
        await until(conn, COMPLETED, job_id, "completed")
        history = await job_history(conn, job_id)
        assert [h["outcome"] for h in history] == ["completed"]
        assert history[0]["renewal_failed_at"] is None
    finally:
        await fleet.close()
