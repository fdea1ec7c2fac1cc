"""The worker's engine connection: one backend for its own statements, replaced when broken."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool
from taskboard.core.engine.connection import HeldConnection, session_params
from taskboard.core.engine.events import Completed, Dead, Failed
from taskboard.core.kinds import JobContext, JobKind, builtin_registry
from taskboard.core.queue.jobs import NewJob, enqueue, enqueue_many

from tests.conftest import wait_for
from tests.harness import Recorder, run_workers


async def backend_pid(conn: Any) -> int:
    cur = await conn.execute("SELECT pg_backend_pid()")
    return (await cur.fetchone())[0]


async def setting(conn: Any, name: str) -> str:
    cur = await conn.execute("SELECT current_setting(%s)", (name,))
    return (await cur.fetchone())[0]


def engine_on(pool: Any) -> HeldConnection:
    """The engine connection as a worker makes it (session settings, answer limit)."""
    return HeldConnection(
        pool,
        role="engine",
        session_params=session_params(statement_timeout=2.0, lock_timeout=1.0),
        answer_timeout=5.0,
    )


@pytest.fixture
async def pool(db_url: str) -> Any:
    p: AsyncConnectionPool[Any] = AsyncConnectionPool(
        db_url, min_size=2, max_size=2, kwargs={"autocommit": True}, open=False
    )
    await p.open(wait=True)
    try:
        yield p
    finally:
        await p.close()


async def test_every_use_runs_on_the_same_backend_with_generic_plans(pool):
    engine = engine_on(pool)
    pids = set()
    for _ in range(5):
        async with engine.use("test") as conn:
            pids.add(await backend_pid(conn))
            assert await setting(conn, "plan_cache_mode") == "force_generic_plan"
            assert await setting(conn, "statement_timeout") == "2s"
            assert await setting(conn, "lock_timeout") == "1s"
        # Handlers meanwhile get the pool's other connection, untouched by that setting.
        async with pool.connection() as other:
            assert await backend_pid(other) not in pids
            assert await setting(other, "plan_cache_mode") == "auto"
            assert await setting(other, "statement_timeout") == "0"
    assert len(pids) == 1
    await engine.close()
    # Given back with its session reset: the next holder sees the server's defaults.
    for _ in range(2):
        async with pool.connection() as c:
            assert await setting(c, "plan_cache_mode") == "auto"
            assert await setting(c, "lock_timeout") == "0"


async def test_a_broken_connection_is_replaced_on_next_use(pool, conn):
    engine = engine_on(pool)
    async with engine.use("test") as c:
        first = await backend_pid(c)
    await conn.execute("SELECT pg_terminate_backend(%s)", (first,))
    with pytest.raises(psycopg.OperationalError):
        async with engine.use("test") as c:
            await c.execute("SELECT 1")
    async with engine.use("test") as c:
        second = await backend_pid(c)
        assert second != first
        assert await setting(c, "plan_cache_mode") == "force_generic_plan"
    await engine.close()
    # Back in the pool as a fresh connection: the session setting did not leak.
    for _ in range(2):
        async with pool.connection() as c:
            assert await setting(c, "plan_cache_mode") == "auto"


async def test_a_statement_left_in_a_transaction_does_not_poison_the_next_use(pool):
    engine = engine_on(pool)
    with pytest.raises(RuntimeError):
        async with engine.use("test") as c:
            await c.execute("BEGIN")
            raise RuntimeError("caller failed mid-transaction")
    async with engine.use("test") as c:
        assert c.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    await engine.close()


async def test_worker_claims_and_completes_on_one_backend(db_url, conn):
    registry = builtin_registry()
    rec = Recorder()
    # One engine connection (the second, for grouped completions: tests/test_overlap.py).
    async with run_workers(db_url, "w", recorder=rec, lease_seconds=5, engine_connections=1):
        ids = await enqueue_many(conn, registry, [NewJob("noop") for _ in range(200)])
        await wait_for(lambda: len(rec.of(Completed)) == len(ids), what="all completed")
        cur = await conn.execute(
            "SELECT count(DISTINCT pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND query LIKE %s",
            ("%taskboard_jobs%",),
        )
        # The control connection's heartbeat touches taskboard_workers, not jobs: exactly
        # one backend ran the claims and grouped completions of 200 no-op jobs.
        assert (await cur.fetchone())[0] == 1


async def test_a_kind_that_writes_nothing_gets_no_connection(db_url, conn):
    registry = builtin_registry()

    async def sneaky(ctx: JobContext) -> None:
        await ctx.conn.execute("SELECT 1")

    registry.register(JobKind("sneaky", lambda p: dict(p), sneaky))
    rec = Recorder()
    async with run_workers(
        db_url, "w", recorder=rec, registry=registry, lease_seconds=5, retry_base_seconds=0.05
    ):
        job_id = await enqueue(conn, registry, "sneaky", max_attempts=2)
        await wait_for(lambda: rec.of(Dead, job_id=job_id), what="dead")
    failed = rec.of(Failed, job_id=job_id) + rec.of(Dead, job_id=job_id)
    assert failed and all("writes_db=False" in e.error for e in failed), failed


async def test_a_server_that_stops_answering_costs_the_answer_limit_not_ten_seconds(
    pool: Any, conn: Any
) -> None:
    """A frozen backend never fires statement_timeout, and psycopg's own cancel waits up to
    10 s for a server that will not answer: the worker closes the socket at its limit."""
    import os
    import signal
    import time

    from taskboard.core.engine.db_errors import AnswerTimeout

    engine = HeldConnection(pool, role="engine", answer_timeout=0.5,
                            session_params=session_params(statement_timeout=2.0,
                                                          lock_timeout=1.0))
    async with engine.use("test") as c:
        pid = await backend_pid(c)
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(AnswerTimeout):
            async with engine.use("a statement on a frozen backend") as c:
                await c.execute("SELECT 1")
        took = time.monotonic() - started
    finally:
        os.kill(pid, signal.SIGCONT)
    assert took < 1.5
    async with engine.use("test") as c:  # a fresh backend, working
        assert await backend_pid(c) != pid
    await engine.close()


async def test_a_connection_with_a_lost_prepared_statement_is_replaced(pool):
    """psycopg records a statement as prepared that the server no longer has (here the
    server was told to forget it behind psycopg's back; base/pipelines.py tells how a failed
    pipeline did it): the use that meets the error gives the connection up, the next use
    runs on another."""
    engine = engine_on(pool)
    query = "SELECT %s::int * 2"
    async with engine.use("test") as conn:
        first = await backend_pid(conn)
        for n in range(6):  # psycopg prepares it on the sixth run
            await conn.execute(query, (n,))
        await conn.execute("DEALLOCATE _pg3_0")
    with pytest.raises(psycopg.errors.InvalidSqlStatementName):
        async with engine.use("test") as conn:
            await conn.execute(query, (1,))
    async with engine.use("test") as conn:
        assert await backend_pid(conn) != first
        cur = await conn.execute(query, (21,))
        assert await cur.fetchone() == (42,)
