"""Checkpoints grouped (engine/step_group.py): the records of a worker's attempts that
arrive while another is written share the next statement, each still fenced by its own
job's token; a row another session holds does not hold the others back. Real in-process
workers, real PostgreSQL."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from taskboard.core.engine.events import Claimed, Completed, StepCheckpoint
from taskboard.core.kinds import JobContext, JobKind, KindRegistry
from taskboard.core.queue.enqueueing import enqueue_many
from taskboard.core.queue.jobs import NewJob

from tests.conftest import wait_for
from tests.harness import Recorder, run_workers


def gathering(barrier: asyncio.Barrier) -> KindRegistry:
    """Handlers that all reach their one step at the same moment."""

    async def value(job_id: int) -> int:
        return job_id

    async def handler(ctx: JobContext) -> None:
        await barrier.wait()
        await ctx.step("s", value, ctx.job_id)

    registry = KindRegistry()
    registry.register(JobKind("gather", lambda p: dict(p or {}), handler))
    return registry


async def steps_by_job(conn: Any, ids: list[int]) -> dict[int, tuple[str, Any, int]]:
    cur = await conn.execute(
        "SELECT job_id, outcome, result, xmin::text::bigint FROM taskboard_steps"
        " WHERE job_id = ANY(%s)", (ids,))
    return {job: (outcome, result, xid) for job, outcome, result, xid in await cur.fetchall()}


async def test_checkpoints_arriving_together_share_commits_and_each_is_fenced(db_url, conn):
    barrier = asyncio.Barrier(5)
    registry = gathering(barrier)
    rec = Recorder()
    async with run_workers(db_url, "w", recorder=rec, registry=registry, lease_seconds=6):
        ids = await enqueue_many(conn, registry, [NewJob("gather", {}) for _ in range(4)])
        await wait_for(lambda: len(rec.of(Claimed)) == 4, what="all four claimed")
        await wait_for(lambda: barrier.n_waiting == 4, what="all four at the barrier")
        # The lever: one job is reclaimed (its token changed) before its checkpoint.
        victim = ids[2]
        await conn.execute(
            "UPDATE taskboard_jobs SET lease_token = gen_random_uuid() WHERE id = %s",
            (victim,))
        await barrier.wait()
        await wait_for(lambda: len(rec.of(StepCheckpoint)) == 4, what="four checkpoints")
        await wait_for(lambda: len(rec.of(Completed)) == 3, what="the other three complete")
    found = await steps_by_job(conn, ids)
    assert {job: outcome for job, (outcome, _, _) in found.items()} == {
        job: "rejected" if job == victim else "recorded" for job in ids
    }
    assert all(result == job for job, (_, result, _) in found.items())
    # The first went alone; the three that came while it was written went in one statement.
    assert len({xid for _, _, xid in found.values()}) == 2, found


async def test_a_row_held_by_another_session_holds_back_only_its_own_checkpoint(db_url, conn):
    barrier = asyncio.Barrier(4)
    registry = gathering(barrier)
    rec = Recorder()
    async with run_workers(db_url, "w", recorder=rec, registry=registry, lease_seconds=6):
        ids = await enqueue_many(conn, registry, [NewJob("gather", {}) for _ in range(3)])
        await wait_for(lambda: barrier.n_waiting == 3, what="all three at the barrier")
        held = ids[1]
        async with await psycopg.AsyncConnection.connect(db_url) as other:
            # The lever: another session holds one job's row (as a reclaim committing, or
            # an operator's transaction, would) while the three checkpoints are written.
            await other.execute("SELECT 1 FROM taskboard_jobs WHERE id = %s FOR UPDATE",
                                (held,))
            await barrier.wait()
            await wait_for(
                lambda: {e.job_id for e in rec.of(StepCheckpoint, outcome="recorded")}
                == set(ids) - {held},
                what="the two others recorded while the row is held",
            )
            assert not rec.of(StepCheckpoint, job_id=held)
            await other.rollback()
        await wait_for(lambda: rec.of(StepCheckpoint, job_id=held, outcome="recorded"),
                       what="the held one recorded once the row is free")
        await wait_for(lambda: len(rec.of(Completed)) == 3, what="all three complete")
    found = await steps_by_job(conn, ids)
    assert {job: outcome for job, (outcome, _, _) in found.items()} == {
        job: "recorded" for job in ids
    }
