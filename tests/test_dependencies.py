"""Dependencies (`after=`): a child runs only once every parent completed, reads their
results; a dead parent cancels its waiting children with the reason, a retry makes them wait
again; bad parents are refused at enqueue. Real workers, real database, real CLI."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from taskboard.core import sql
from taskboard.core.base.errors import NoResult, ValidationError
from taskboard.core.cli.history import history_lines
from taskboard.core.engine.events import Claimed, Completed, Dead
from taskboard.core.kinds import JobContext, JobKind, KindRegistry
from taskboard.core.queue.jobs import NewJob, enqueue, enqueue_many, result, retry
from taskboard.core.view.inspection import job_detail
from taskboard.core.view.status import read_board

from tests.conftest import wait_for
from tests.harness import Recorder, run_workers
from tests.test_cli import assert_one_line_error, run_cli


def diamond_registry(order: list[str]) -> KindRegistry:
    async def node(ctx: JobContext) -> Any:
        if ctx.payload.get("fail"):
            raise RuntimeError("the top fell over")
        order.append(ctx.payload["name"])
        parents = await ctx.parent_results()
        return {"name": ctx.payload["name"],
                "saw": sorted(r["name"] for r in parents.values())}

    registry = KindRegistry()
    registry.register(JobKind("node", lambda p: dict(p), node))
    return registry


async def state_of(conn: Any, job_id: int) -> tuple[Any, ...]:
    cur = await conn.execute(
        "SELECT completed_at IS NOT NULL, cancelled_at IS NOT NULL, waiting_on, last_error "
        "FROM taskboard_jobs WHERE id = %s", (job_id,))
    return tuple(await cur.fetchone())


async def test_a_diamond_runs_in_dependency_order_and_children_read_their_parents(db_url, conn):
    order: list[str] = []
    registry = diamond_registry(order)
    rec = Recorder()
    # Enqueued before any worker runs: the children exist first, waiting.
    top = await enqueue(conn, registry, "node", {"name": "top"})
    left = await enqueue(conn, registry, "node", {"name": "left"}, after=[top])
    right = await enqueue(conn, registry, "node", {"name": "right"}, after=[top])
    bottom = await enqueue(conn, registry, "node", {"name": "bottom"}, after=[left, right])
    detail = await job_detail(conn, bottom)
    assert detail.state == "waiting"
    assert detail.after == (f"#{left} node waiting", f"#{right} node waiting")
    assert any(line.startswith("after: ") for line in history_lines(detail))
    async with run_workers(db_url, "w1", "w2", recorder=rec, registry=registry,
                           lease_seconds=5):
        assert await result(conn, bottom, timeout=20) == {
            "name": "bottom", "saw": ["left", "right"]
        }
    assert order[0] == "top" and order[-1] == "bottom" and sorted(order[1:3]) == ["left", "right"]
    assert await result(conn, left, timeout=0) == {"name": "left", "saw": ["top"]}
    # No child was claimed before its parents completed.
    claims = {e.job_id: i for i, e in enumerate(rec.events) if isinstance(e, Claimed)}
    dones = {e.job_id: i for i, e in enumerate(rec.events) if isinstance(e, Completed)}
    assert dones[top] < claims[left] and dones[top] < claims[right]
    assert max(dones[left], dones[right]) < claims[bottom]


async def test_a_dead_parent_cancels_its_children_and_a_retry_makes_them_wait_again(
    db_url, conn
):
    order: list[str] = []
    registry = diamond_registry(order)
    rec = Recorder()
    top = await enqueue(conn, registry, "node", {"name": "top", "fail": True}, max_attempts=1)
    child = await enqueue(conn, registry, "node", {"name": "child"}, after=[top])
    grandchild = await enqueue(conn, registry, "node", {"name": "grand"}, after=[child])
    async with run_workers(db_url, "w", recorder=rec, registry=registry, lease_seconds=5):
        await wait_for(lambda: rec.of(Dead, job_id=top), what="the parent dies")
        child_state = await wait_for(lambda: _cancelled(conn, child), what="child cancelled")
        assert child_state[3] == f"cancelled: parent job {top} is dead"
        grand_state = await wait_for(lambda: _cancelled(conn, grandchild), what="cascade")
        assert grand_state[3] == f"cancelled: parent job {child} is cancelled"
        assert order == []
        # Retried (and now healthy), the parent makes its children wait again, then run.
        await conn.execute(
            "UPDATE taskboard_jobs SET payload = '{\"name\": \"top\"}' WHERE id = %s", (top,))
        await retry(conn, top)
        assert await result(conn, grandchild, timeout=20) == {"name": "grand", "saw": ["child"]}
    assert order == ["top", "child", "grand"]


async def _cancelled(conn: Any, job_id: int) -> tuple[Any, ...] | None:
    state = await state_of(conn, job_id)
    return state if state[1] else None


async def test_bad_parents_are_refused_at_enqueue_and_nothing_is_written(db_url, conn):
    order: list[str] = []
    registry = diamond_registry(order)
    with pytest.raises(ValidationError, match=r"after: job 424242 does not exist"):
        await enqueue(conn, registry, "node", {"name": "orphan"}, after=[424242])
    dead = await enqueue(conn, registry, "node", {"name": "x"})
    await conn.execute("UPDATE taskboard_jobs SET failed_at = now() WHERE id = %s", (dead,))
    with pytest.raises(ValidationError, match=rf"job {dead} is dead or cancelled"):
        await enqueue_many(conn, registry, [NewJob("node", {"name": "ok"}),
                                            NewJob("node", {"name": "y"}, after=[dead])])
    with pytest.raises(ValidationError, match="after: must be a list of job ids"):
        await enqueue(conn, registry, "node", {"name": "z"}, after=7)
    cur = await conn.execute("SELECT count(*) FROM taskboard_jobs")
    assert (await cur.fetchone())[0] == 1  # the whole batch rolled back
    proc = await asyncio.to_thread(
        run_cli, db_url, "enqueue", "noop", "--after", "424242")
    assert_one_line_error(proc, "after: job 424242 does not exist", code=2)
    ok = await asyncio.to_thread(run_cli, db_url, "enqueue", "noop")
    parent = int(ok.stdout)
    proc = await asyncio.to_thread(
        run_cli, db_url, "enqueue", "noop", "--after", str(parent), "--after", str(parent))
    assert proc.returncode == 0, proc.stderr
    assert (await state_of(conn, int(proc.stdout)))[2] == 1  # waits on its one parent


async def test_a_chain_of_1000_completes_in_order(db_url, conn):
    seen: list[int] = []

    async def link(ctx: JobContext) -> int:
        seen.append(ctx.payload["n"])
        return int(ctx.payload["n"])

    registry = KindRegistry()
    registry.register(JobKind("link", lambda p: dict(p), link))
    ids: list[int] = []
    async with conn.transaction():
        for n in range(1000):
            ids.append(await enqueue(conn, registry, "link", {"n": n},
                                     after=[ids[-1]] if ids else []))
    async with run_workers(db_url, "w", registry=registry, lease_seconds=5, concurrency=4):
        assert await result(conn, ids[-1], timeout=120) == 999
    assert seen == list(range(1000))


def test_enqueue_sync_takes_after_too(db_url):
    import psycopg
    from taskboard.core.queue.enqueueing import enqueue as enqueue_any

    registry = diamond_registry([])
    with psycopg.connect(db_url, autocommit=True) as sync_conn:
        parent = enqueue_any(sync_conn, registry, "node", {"name": "p"})
        child = enqueue_any(sync_conn, registry, "node", {"name": "c"}, after=[parent])
        with pytest.raises(ValidationError, match="after: job 777777 does not exist"):
            enqueue_any(sync_conn, registry, "node", {"name": "x"}, after=[777777])
        row = sync_conn.execute(
            "SELECT waiting_on FROM taskboard_jobs WHERE id = %s", (child,)).fetchone()
        count = sync_conn.execute("SELECT count(*) FROM taskboard_jobs").fetchone()
    assert row == (1,) and count == (2,)


# --- what jobs without dependencies pay for them: nothing (issue 28, "Cost") ---------------


def _nodes(plan: Any) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found += _nodes(child)
    return found


async def test_waiting_children_stay_out_of_the_ready_index_the_claim_reads(conn):
    """A queue's claim walks its ready index until it has its limit: with fewer due jobs
    than that (a queue draining), every child parked in the index was one more entry read
    per claim, and a chain of 1,000 made that 1,000. The index holds none of them now."""
    registry = diamond_registry([])
    parent = await enqueue(conn, registry, "node", {"name": "p"}, queue="q")
    await enqueue_many(conn, registry, [NewJob("node", {"name": f"c{n}"}, queue="q",
                                               after=[parent]) for n in range(2000)])
    ready = [await enqueue(conn, registry, "node", {"name": f"r{n}"}, queue="q")
             for n in range(3)]
    await conn.execute("ANALYZE taskboard_jobs")
    # Read through the index alone: what it holds for the queue, and what it had to skip.
    async with conn.transaction():
        await conn.execute("SET LOCAL enable_seqscan = off")
        await conn.execute("SET LOCAL enable_bitmapscan = off")
        cur = await conn.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) SELECT id FROM taskboard_jobs"
            " WHERE lease_token IS NULL AND completed_at IS NULL AND failed_at IS NULL"
            " AND cancelled_at IS NULL AND waiting_on = 0 AND queue = 'q'")
        plan = (await cur.fetchone())[0][0]["Plan"]
    scans = [n for n in _nodes(plan) if n.get("Index Name") == "taskboard_jobs_ready"]
    assert len(scans) == 1, plan
    assert scans[0]["Actual Rows"] == 1 + len(ready)
    assert scans[0].get("Rows Removed by Filter", 0) == 0, scans[0]
    # The claim's own candidate scan goes through it, and the board counts the children
    # as not due (scheduled) from their own index, the due jobs as pending.
    fresh = (sql.claim._FRESH_CANDIDATE + sql.claim._FRESH_WHERE
             + " ORDER BY queue, priority DESC, run_at, id LIMIT 10 FOR NO KEY UPDATE SKIP LOCKED")
    cur = await conn.execute("EXPLAIN (FORMAT JSON) " + fresh, {
        "queues": ["q"], "kinds": ["node"], "skip": []})
    text = str((await cur.fetchone())[0][0])
    assert "taskboard_jobs_ready" in text and "Seq Scan" not in text, text[:1500]
    board = await read_board(conn, database="t", mode="attached")
    assert (board.counts.pending, board.counts.scheduled) == (1 + len(ready), 2000)


async def test_a_child_retried_by_hand_still_waits_for_its_parents(db_url, conn):
    """Retrying a child that its dead parent cancelled does not run it ahead of that parent:
    it waits (the board and `result` say so) until the parent is retried and completes."""
    order: list[str] = []
    registry = diamond_registry(order)
    rec = Recorder()
    top = await enqueue(conn, registry, "node", {"name": "top", "fail": True}, max_attempts=1)
    child = await enqueue(conn, registry, "node", {"name": "child"}, after=[top])
    other = await enqueue(conn, registry, "node", {"name": "other"})
    async with run_workers(db_url, "w", recorder=rec, registry=registry, lease_seconds=5):
        await wait_for(lambda: _cancelled(conn, child), what="child cancelled")
        await retry(conn, child)
        await wait_for(lambda: rec.of(Completed, job_id=other), what="an unrelated job runs")
        more = await enqueue(conn, registry, "node", {"name": "more"})
        await wait_for(lambda: rec.of(Completed, job_id=more), what="a later job runs too")
        assert not rec.of(Claimed, job_id=child)
        with pytest.raises(NoResult) as no:
            await result(conn, child, timeout=0)
        assert no.value.state == "waiting"
        await conn.execute(
            "UPDATE taskboard_jobs SET payload = '{\"name\": \"top\"}' WHERE id = %s", (top,))
        await retry(conn, top)
        assert await result(conn, child, timeout=20) == {"name": "child", "saw": ["top"]}
    assert order.index("top") < order.index("child")
