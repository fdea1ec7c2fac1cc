"""Durable steps with real in-process workers: a reclaimed attempt replays what was recorded,
and the fence refuses (and keeps) a stale worker's checkpoint."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from taskboard.core.cli.history import history_lines
from taskboard.core.engine.events import (
    Completed,
    Dead,
    LeaseGivenUp,
    StepCheckpoint,
)
from taskboard.core.kinds import JobContext, JobKind, KindRegistry
from taskboard.core.kinds.sync_context import SyncJobContext
from taskboard.core.queue.enqueueing import enqueue
from taskboard.core.runtime.metrics import Metrics
from taskboard.core.view.inspection import job_detail

from tests.conftest import wait_for
from tests.harness import Recorder, run_workers


def anything(payload: Any) -> dict[str, Any]:
    return dict(payload)


async def steps_of(conn: Any, job_id: int) -> list[tuple[str, str, str, Any]]:
    cur = await conn.execute(
        "SELECT name, outcome, worker_id, result FROM taskboard_steps WHERE job_id = %s "
        "ORDER BY id",
        (job_id,),
    )
    return [tuple(r) for r in await cur.fetchall()]


async def result_of(conn: Any, job_id: int) -> Any:
    cur = await conn.execute("SELECT result FROM taskboard_jobs WHERE id = %s", (job_id,))
    return (await cur.fetchone())[0]


async def test_a_reclaimed_job_replays_its_recorded_step_and_runs_the_rest(db_url, conn):
    calls = {"one": 0, "two": 0}
    hang = asyncio.Event()

    async def one() -> dict[str, Any]:
        calls["one"] += 1
        return {"intent": "pi_1", "n": calls["one"]}

    def two(first: dict[str, Any]) -> str:  # a plain function: runs in a thread
        calls["two"] += 1
        return f"confirmed {first['intent']}"

    async def handler(ctx: JobContext) -> Any:
        first = await ctx.step("one", one)
        if ctx.attempt == 1:
            await hang.wait()  # worker A dies here, after step one was recorded
        second = await ctx.step("two", two, first)
        return {"first": first, "second": second}

    registry = KindRegistry()
    registry.register(JobKind("two-steps", anything, handler))
    rec = Recorder()
    async with run_workers(db_url, "a", recorder=rec, registry=registry,
                           lease_seconds=1.0) as [a]:
        job_id = await enqueue(conn, registry, "two-steps", {})
        await wait_for(lambda: rec.of(StepCheckpoint, worker_id="a", outcome="recorded"),
                       what="A records step one")
        await a.crash()
    async with run_workers(db_url, "b", recorder=rec, registry=registry, lease_seconds=5.0):
        await wait_for(lambda: rec.of(Completed, job_id=job_id), what="B completes")
    assert calls == {"one": 1, "two": 1}  # step one ran once, on A only
    assert [(e.worker_id, e.step, e.outcome) for e in rec.of(StepCheckpoint)] == [
        ("a", "one", "recorded"), ("b", "one", "replayed"), ("b", "two", "recorded"),
    ]
    assert [(n, o, w) for n, o, w, _ in await steps_of(conn, job_id)] == [
        ("one", "recorded", "a"), ("two", "recorded", "b"),
    ]
    assert await result_of(conn, job_id) == {
        "first": {"intent": "pi_1", "n": 1}, "second": "confirmed pi_1"
    }


async def test_a_stale_checkpoint_is_refused_kept_and_the_new_owner_runs_the_step(db_url, conn):
    """A sends, stalls past its lease (paused: no renewals) while B reclaims, runs the step
    itself and completes; A's late record is refused by the fence, visible in history."""
    effects: list[str] = []
    holder: list[Any] = []
    b_done = asyncio.Event()

    async def send(ctx: JobContext) -> str:
        effects.append(f"sent by attempt {ctx.attempt}")
        if ctx.attempt == 1:
            holder[0].worker.pause()  # A stalls right after its effect
            await b_done.wait()
        return "message-1"

    async def handler(ctx: JobContext) -> None:
        await ctx.step("send", send, ctx)

    registry = KindRegistry()
    registry.register(JobKind("sender", anything, handler, cancel_safe=True))
    rec = Recorder()
    metrics = Metrics()
    async with run_workers(db_url, "a", recorder=rec, registry=registry,
                           lease_seconds=1.0) as running:
        running[0].worker.bus.subscribe(metrics)
        holder.extend(running)
        job_id = await enqueue(conn, registry, "sender", {})
        async with run_workers(db_url, "b", recorder=rec, registry=registry,
                               lease_seconds=5.0) as [b]:
            b.worker.bus.subscribe(metrics)  # before the reclaim, a lease (1 s) away at least
            await wait_for(lambda: rec.of(Completed, job_id=job_id, worker_id="b"),
                           what="B reclaims, sends and completes")
            b_done.set()
            running[0].worker.resume()
            await wait_for(lambda: rec.of(StepCheckpoint, worker_id="a", outcome="rejected"),
                           what="A's checkpoint is refused")
            await wait_for(lambda: rec.of(LeaseGivenUp, worker_id="a"), what="A gives up")
    assert effects == ["sent by attempt 1", "sent by attempt 2"]  # the in-flight step repeats
    assert [(n, o, w) for n, o, w, _ in await steps_of(conn, job_id)] == [
        ("send", "recorded", "b"), ("send", "rejected", "a"),
    ]
    lines = history_lines(await job_detail(conn, job_id))
    assert any("send" in line and "rejected" in line and "a" in line and "fenced out" in line
               for line in lines), lines
    text = metrics.render().decode()
    assert 'taskboard_steps_total{kind="sender",outcome="rejected"} 1.0' in text
    assert 'taskboard_steps_total{kind="sender",outcome="recorded"} 1.0' in text


async def test_a_plain_handler_steps_from_its_thread(db_url, conn):
    ran = []

    def effect(x: int) -> int:
        ran.append(threading.current_thread().name)
        return x * 2

    def handler(ctx: SyncJobContext) -> Any:
        return {"doubled": ctx.step("double", effect, 21)}

    registry = KindRegistry()
    registry.register(JobKind("plain", anything, handler))
    rec = Recorder()
    async with run_workers(db_url, "w", recorder=rec, registry=registry, lease_seconds=5.0):
        job_id = await enqueue(conn, registry, "plain", {})
        await wait_for(lambda: rec.of(Completed, job_id=job_id), what="completes")
    assert len(ran) == 1 and ran[0] != threading.main_thread().name
    assert await result_of(conn, job_id) == {"doubled": 42}
    assert [(n, o, r) for n, o, _, r in await steps_of(conn, job_id)] == [
        ("double", "recorded", 42)
    ]


async def test_bad_steps_fail_the_job_for_good_naming_the_step(db_url, conn):
    async def not_json(ctx: JobContext) -> None:
        await ctx.step("make-set", lambda: {1, 2})

    async def twice(ctx: JobContext) -> None:
        await ctx.step("same", lambda: 1)
        await ctx.step("same", lambda: 2)

    async def huge(ctx: JobContext) -> None:
        await ctx.step("big", lambda: "x" * 1_100_000)

    async def bad_result(ctx: JobContext) -> Any:
        return object()

    registry = KindRegistry()
    for name, handler in (("not-json", not_json), ("twice", twice), ("huge", huge),
                          ("bad-result", bad_result)):
        registry.register(JobKind(name, anything, handler))
    rec = Recorder()
    async with run_workers(db_url, "w", recorder=rec, registry=registry, lease_seconds=5.0):
        ids = {name: await enqueue(conn, registry, name, {}, max_attempts=3)
               for name in ("not-json", "twice", "huge", "bad-result")}
        await wait_for(lambda: len(rec.of(Dead)) == 4, what="all four dead")
    errors = {e.job_id: e.error for e in rec.of(Dead)}
    assert "step 'make-set'" in errors[ids["not-json"]] and "not JSON" in errors[ids["not-json"]]
    assert "step 'same' ran twice" in errors[ids["twice"]]
    assert "step 'big'" in errors[ids["huge"]] and "at most 1000000" in errors[ids["huge"]]
    assert "handler" in errors[ids["bad-result"]]
    cur = await conn.execute("SELECT id, attempts FROM taskboard_jobs ORDER BY id")
    assert all(attempts == 1 for _, attempts in await cur.fetchall())  # no retry loop
    assert json.dumps([r for r in await steps_of(conn, ids["twice"])], default=str)


async def test_a_durable_sleep_frees_the_slot_and_resumes_after_its_time(db_url, conn):
    """ctx.sleep(3) gives the lease back: with one slot, another job runs meanwhile; the
    sleeper resumes about 3 s later, its step before the sleep replayed, no attempt used."""
    ran: list[str] = []
    loop = asyncio.get_running_loop()
    times: dict[str, float] = {}

    async def before() -> str:
        ran.append("before")
        times["slept"] = loop.time()
        return "ok"

    async def sleeper(ctx: JobContext) -> Any:
        await ctx.step("before", before)
        await ctx.sleep(3)
        times["woke"] = loop.time()
        ran.append("after")
        return "rested"

    async def quick(ctx: JobContext) -> None:
        ran.append("quick")

    registry = KindRegistry()
    registry.register(JobKind("sleeper", anything, sleeper))
    registry.register(JobKind("quick", anything, quick))
    rec = Recorder()
    async with run_workers(db_url, "w", recorder=rec, registry=registry, lease_seconds=2.0,
                           concurrency=1):
        sleeping = await enqueue(conn, registry, "sleeper", {}, max_attempts=1)
        await wait_for(lambda: "before" in ran, what="the sleeper reaches its sleep")
        other = await enqueue(conn, registry, "quick", {})
        await wait_for(lambda: rec.of(Completed, job_id=other), what="the other job runs")
        assert "after" not in ran  # it ran while the sleeper slept, in the only slot
        await wait_for(lambda: rec.of(Completed, job_id=sleeping), timeout=15,
                       what="the sleeper resumes and completes")
    assert ran == ["before", "quick", "after"]  # `before` ran once: replayed on resume
    assert times["woke"] - times["slept"] >= 2.9
    cur = await conn.execute(
        "SELECT attempts, max_attempts, result FROM taskboard_jobs WHERE id = %s", (sleeping,))
    assert tuple(await cur.fetchone()) == (1, 1, "rested")  # the sleep used no attempt


async def test_a_checkpoint_racing_a_reclaim_waits_for_it_and_is_refused(db_url, conn):
    """The race forced: a second connection holds a reclaim (the job's token changed, not
    yet committed) while the step's checkpoint runs. The checkpoint must wait for it (it
    holds the row FOR SHARE) and then be refused, not record under the old token."""
    effect_done = asyncio.Event()
    go_on = asyncio.Event()

    async def effect() -> str:
        effect_done.set()
        await go_on.wait()
        return "done"

    async def handler(ctx: JobContext) -> None:
        await ctx.step("effect", effect)

    registry = KindRegistry()
    registry.register(JobKind("racy", anything, handler))
    rec = Recorder()
    other = await psycopg_connect(db_url)
    async with run_workers(db_url, "a", recorder=rec, registry=registry, lease_seconds=5.0):
        job_id = await enqueue(conn, registry, "racy", {})
        await wait_for(effect_done.is_set, what="the step's effect happened")
        await other.execute("BEGIN")
        await other.execute(
            "UPDATE taskboard_jobs SET lease_token = gen_random_uuid() WHERE id = %s", (job_id,))
        go_on.set()
        await asyncio.sleep(0.5)
        assert rec.of(StepCheckpoint) == []  # waiting on the reclaim's row lock
        await other.execute("COMMIT")
        await wait_for(lambda: rec.of(StepCheckpoint, outcome="rejected"),
                       what="the checkpoint is refused once the reclaim committed")
    await other.close()
    assert [(n, o) for n, o, _, _ in await steps_of(conn, job_id)] == [("effect", "rejected")]


async def psycopg_connect(url: str) -> Any:
    import psycopg

    return await psycopg.AsyncConnection.connect(url, autocommit=True)
