"""Results: a handler's return value stored with its job, `jobs.result(...)` woken by NOTIFY,
and `taskboard result` with its exit codes. Real workers, real database, real CLI."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from taskboard.core.base.errors import NoResult
from taskboard.core.engine.events import Completed, Dead
from taskboard.core.kinds import JobContext, JobKind, KindRegistry
from taskboard.core.queue import results
from taskboard.core.queue.jobs import cancel, enqueue, result

from tests.conftest import wait_for
from tests.harness import Recorder, run_workers
from tests.test_cli import assert_one_line_error, run_cli


def registry_with_results() -> KindRegistry:
    async def answer(ctx: JobContext) -> Any:
        if ctx.payload.get("fail"):
            raise ValueError("no answer today")
        await asyncio.sleep(ctx.payload.get("think", 0))
        return {"answer": 42, "for": ctx.payload.get("who")}

    registry = KindRegistry()
    registry.register(JobKind("answer", lambda p: dict(p), answer))
    registry.register(JobKind("answer-db", lambda p: dict(p), answer, writes_db=True))
    return registry


async def test_result_is_woken_by_notify_not_by_the_poll(db_url, conn, monkeypatch):
    # With the fallback poll an hour away, only the notification can wake the waiter.
    monkeypatch.setattr(results, "FALLBACK_POLL_SECONDS", 3600.0)
    registry = registry_with_results()
    job_id = await enqueue(conn, registry, "answer", {"who": "maya", "think": 0.5})
    db_job = await enqueue(conn, registry, "answer-db", {"who": "db"})
    waiter = asyncio.create_task(result(conn, job_id, timeout=30))
    await asyncio.sleep(0.2)
    assert not waiter.done()
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with run_workers(db_url, "w", registry=registry, lease_seconds=5):
        assert await asyncio.wait_for(waiter, 20) == {"answer": 42, "for": "maya"}
        took = loop.time() - started
        assert await result(conn, db_job, timeout=20) == {"answer": 42, "for": "db"}
    assert took < 20


async def test_result_says_why_there_is_none(db_url, conn):
    registry = registry_with_results()
    pending = await enqueue(conn, registry, "answer", {})
    with pytest.raises(NoResult) as no:
        await result(conn, pending, timeout=0.3)
    assert no.value.state == "pending" and "not finished yet" in str(no.value)
    await cancel(conn, pending)
    with pytest.raises(NoResult) as no:
        await result(conn, pending)
    assert no.value.state == "cancelled"
    rec = Recorder()
    dead = await enqueue(conn, registry, "answer", {"fail": True}, max_attempts=1)
    async with run_workers(db_url, "w", recorder=rec, registry=registry, lease_seconds=5):
        with pytest.raises(NoResult) as no:
            await result(conn, dead, timeout=20)  # woken by the notification of its death
    assert no.value.state == "dead" and "no answer today" in str(no.value)
    with pytest.raises(NoResult) as no:
        await result(conn, 999_999)
    assert no.value.state == "missing" and "pruned" in str(no.value)


async def test_taskboard_result_prints_it_and_exits_3_without_one(db_url, conn):
    registry = registry_with_results()
    rec = Recorder()
    async with run_workers(db_url, "w", recorder=rec, registry=registry, lease_seconds=5):
        done = await enqueue(conn, registry, "answer", {"who": "cli"})
        dead = await enqueue(conn, registry, "answer", {"fail": True}, max_attempts=1)
        await wait_for(lambda: rec.of(Completed) and rec.of(Dead), what="one done, one dead")
    waiting = await enqueue(conn, registry, "answer", {}, run_at=None)

    ok = await asyncio.to_thread(run_cli, db_url, "result", str(done))
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout) == {"answer": 42, "for": "cli"}
    as_json = await asyncio.to_thread(run_cli, db_url, "result", str(done), "--json")
    assert json.loads(as_json.stdout) == {
        "id": done, "state": "completed", "result": {"answer": 42, "for": "cli"}
    }
    proc = await asyncio.to_thread(run_cli, db_url, "result", str(dead))
    assert_one_line_error(proc, f"job {dead} is dead", "no answer today", code=3)
    proc = await asyncio.to_thread(run_cli, db_url, "result", str(waiting), "--wait", "0.5")
    assert_one_line_error(proc, "has not finished yet (pending)", code=3)
    await conn.execute("DELETE FROM taskboard_jobs WHERE id = %s", (done,))  # pruned
    proc = await asyncio.to_thread(run_cli, db_url, "result", str(done))
    assert_one_line_error(proc, "does not exist (or was pruned", code=3)
    proc = await asyncio.to_thread(run_cli, db_url, "result", str(done), "--wait", "soon")
    assert proc.returncode == 2 and "--wait takes" in proc.stderr
