"""Operator writes racing each other and the workers (issue 22): each race is forced, never
hoped for. One real connection holds a row lock in an open transaction (the first writer,
mid-statement as far as the second can tell); the second writer's statement is started,
seen waiting on that lock in `pg_stat_activity`, and only then is the first committed. The
second statement's snapshot therefore predates the first's commit, which is exactly the
window in which an earlier snapshot could decide alone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import psycopg
import pytest
from taskboard.core import retention
from taskboard.core.engine import leases
from taskboard.core.errors import JobNotFound
from taskboard.core.jobs import NewJob, cancel, enqueue, enqueue_many, retry
from taskboard.core.kinds import builtin_registry
from taskboard.core.status import job_history

from tests.conftest import wait_for

REG = builtin_registry()
KINDS = REG.names()
T = TypeVar("T")
Conn = psycopg.AsyncConnection[Any]


@asynccontextmanager
async def connect(url: str) -> AsyncIterator[Conn]:
    c = await psycopg.AsyncConnection.connect(url, autocommit=True)
    try:
        yield c
    finally:
        await c.close()


async def waiting_on_lock(observer: Conn, pid: int) -> bool:
    cur = await observer.execute(
        "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", (pid,)
    )
    row = await cur.fetchone()
    return bool(row and row[0])


async def blocked(observer: Conn, second: Conn, statement: Awaitable[T]) -> asyncio.Task[T]:
    """Start `statement` on `second` and return once it waits on a lock (its snapshot is
    taken by then); the caller commits the lock holder next."""
    task = asyncio.ensure_future(statement)
    pid = second.info.backend_pid
    await wait_for(
        lambda: task.done() or waiting_on_lock(observer, pid), timeout=10,
        what="the second statement to wait on the first one's lock",
    )
    assert not task.done(), task.result()  # it must wait, or no race was forced
    return task


async def one(conn: Conn, query: str, *params: Any) -> Any:
    cur = await conn.execute(query, params)
    return await cur.fetchone()


async def claim_one(conn: Conn, worker: str = "w", lease: float = 30) -> leases.ClaimedJob:
    [job] = await leases.claim(
        conn, worker_id=worker, limit=1, lease_seconds=lease, queues=["default"], kinds=KINDS
    )
    return job


async def dead_long_ago(conn: Conn, n: int, days: float = 8) -> list[int]:
    """`n` jobs that each ran once, failed for good, and died `days` ago (history kept)."""
    ids = await enqueue_many(conn, REG, [NewJob("noop") for _ in range(n)])
    for _ in ids:
        job = await claim_one(conn)
        result = await leases.fail(
            conn, job.id, job.token, error="boom", backoff_seconds=0, permanent=True
        )
        assert result.dead
    await conn.execute(
        "UPDATE taskboard_jobs SET failed_at = now() - %s * interval '1 day'"
        " WHERE id = ANY(%s)", (days, ids),
    )
    return ids


# --- prune -----------------------------------------------------------------------------------


async def test_prune_keeps_a_job_retried_while_it_ran_with_its_history(
    db_url: str, conn: Conn
) -> None:
    """Issue 22 item 1: the prune's id list comes from its snapshot; the job retried after
    that snapshot (pending again) must survive the DELETE, attempts and all."""
    ids = await dead_long_ago(conn, 3)
    target = ids[1]
    async with connect(db_url) as operator, connect(db_url) as pruner:
        async with operator.transaction():
            await retry(operator, target)  # returned success: the job must exist after
            pruning = await blocked(conn, pruner, retention.prune(pruner, retention.Retention()))
        done = await pruning
    row = await one(conn, "SELECT failed_at, attempts FROM taskboard_jobs WHERE id = %s", target)
    assert row is not None, "a job whose retry returned success was pruned"
    assert row == (None, 0)
    assert [h["outcome"] for h in await job_history(conn, target)] == ["failed"]
    assert done.jobs == 2  # the others were past their age and went
    others = await one(conn, "SELECT count(*) FROM taskboard_jobs WHERE id <> %s", target)
    assert others == (0,)


async def test_retry_of_a_job_being_pruned_says_it_does_not_exist(
    db_url: str, conn: Conn
) -> None:
    """The other order: the prune's DELETE holds the row; the retry that waited on it must
    not report success for a job that is gone."""
    [target] = await dead_long_ago(conn, 1)
    async with connect(db_url) as pruner, connect(db_url) as operator:
        async with pruner.transaction():
            deleted = await retention.prune_batch(pruner, retention.Retention())
            assert deleted == 1
            retrying = await blocked(conn, operator, retry(operator, target))
        with pytest.raises(JobNotFound, match="does not exist"):
            await retrying
    assert await one(conn, "SELECT count(*) FROM taskboard_jobs") == (0,)
