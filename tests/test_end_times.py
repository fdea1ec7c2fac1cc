"""End times are the ending statement's, not the transaction's start (issue 26: a billing
job "ended" at .628 and charged at .871). A kind that writes to the database completes in
its handler's transaction, so `now()` there is before the work."""

from __future__ import annotations

from typing import Any

import psycopg
from taskboard.core.engine import leases
from taskboard.core.kinds import builtin_registry
from taskboard.core.queue.jobs import NewJob, cancel, enqueue_many

from tests.test_operator_races import claim_one, one

Conn = psycopg.AsyncConnection[Any]
REG = builtin_registry()
WORK = 0.3  # seconds of "handler work" inside the transaction


async def _work_in_a_transaction(conn: Conn) -> tuple[Any, Any]:
    """The transaction's start and the moment its work finished."""
    [started] = await one(conn, "SELECT now()")
    await conn.execute("SELECT pg_sleep(%s)", (WORK,))
    [worked] = await one(conn, "SELECT clock_timestamp()")
    assert (worked - started).total_seconds() >= WORK
    return started, worked


async def test_a_completion_in_the_handlers_transaction_ends_after_its_work(conn: Conn) -> None:
    [job_id] = await enqueue_many(conn, REG, [NewJob("noop")])
    job = await claim_one(conn)
    async with conn.transaction():
        started, worked = await _work_in_a_transaction(conn)
        assert await leases.complete(conn, job.id, job.token)
    completed_at, ended_at = await one(
        conn,
        "SELECT j.completed_at, a.ended_at FROM taskboard_jobs j"
        " JOIN taskboard_attempts a ON a.job_id = j.id WHERE j.id = %s", job_id,
    )
    assert completed_at >= worked > started, (started, worked, completed_at)
    assert ended_at == completed_at  # the job's end and its attempt's end agree


async def test_a_failure_and_a_cancel_in_a_transaction_end_after_what_came_before(
    conn: Conn,
) -> None:
    ids = await enqueue_many(conn, REG, [NewJob("noop", max_attempts=1) for _ in range(2)])
    job = await claim_one(conn)
    async with conn.transaction():
        _, worked = await _work_in_a_transaction(conn)
        result = await leases.fail(conn, job.id, job.token, error="boom", backoff_seconds=0)
        assert result.dead
    [failed_at] = await one(conn, "SELECT failed_at FROM taskboard_jobs WHERE id = %s", job.id)
    assert failed_at >= worked
    other = ids[1] if job.id == ids[0] else ids[0]
    async with conn.transaction():
        _, worked = await _work_in_a_transaction(conn)
        await cancel(conn, other)
    [cancelled_at] = await one(
        conn, "SELECT cancelled_at FROM taskboard_jobs WHERE id = %s", other
    )
    assert cancelled_at >= worked
