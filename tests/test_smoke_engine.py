import asyncio

from taskboard.core.engine.events import Completed, EventBus
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.engine.worker import Worker
from taskboard.core.kinds import builtin_registry
from taskboard.core.queue.jobs import NewJob, enqueue_many

from tests.conftest import wait_for


async def test_worker_runs_noop_jobs(db_url, conn):
    reg = builtin_registry()
    ids = await enqueue_many(conn, reg, [NewJob("noop") for _ in range(50)])
    bus = EventBus()
    done = []
    bus.subscribe(lambda e: done.append(e.job_id) if isinstance(e, Completed) else None)
    w = Worker(
        db_url,
        registry=reg,
        settings=WorkerSettings(lease_seconds=5, pool_size=5, worker_id="w1"),
        bus=bus,
    )
    t = asyncio.create_task(w.run())
    await wait_for(lambda: len(done) == 50, timeout=20, what="50 completions")
    await w.stop()
    await t
    assert sorted(done) == ids
