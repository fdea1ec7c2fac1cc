"""An attempt's history row is written once, by the statement that ends it (migration 15):
while it runs, its job row holds it, and `history` reads it from there. Rows written early
(a renewal failure, an attempt given up) and rows from before the migration are ended by
an update instead, never doubled."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from taskboard.core import sql
from taskboard.core.engine import attempt_log, leases
from taskboard.core.engine.records import Verdict
from taskboard.core.kinds import builtin_registry
from taskboard.core.queue.job_commands import cancel
from taskboard.core.queue.jobs import enqueue
from taskboard.core.view.inspection import job_detail
from taskboard.core.view.status import job_history

REG = builtin_registry()
KINDS = REG.names()
Conn = psycopg.AsyncConnection[Any]


async def _claim(conn: Conn, worker: str, lease: float = 30) -> leases.ClaimedJob:
    [job] = await leases.claim(
        conn, worker_id=worker, limit=1, lease_seconds=lease, queues=["default"], kinds=KINDS
    )
    return job


async def _rows(conn: Conn, job_id: int) -> list[tuple[Any, ...]]:
    cur = await conn.execute(
        "SELECT attempt, worker_id, outcome FROM taskboard_attempts WHERE job_id = %s"
        " ORDER BY attempt", (job_id,))
    return list(await cur.fetchall())


async def _updates(conn: Conn) -> int:
    """Row updates of taskboard_attempts so far (this backend's, pending ones included)."""
    cur = await conn.execute(
        "SELECT n_tup_upd FROM pg_stat_xact_user_tables WHERE relname = 'taskboard_attempts'")
    row = await cur.fetchone()
    return 0 if row is None else int(row[0])


async def _expire(conn: Conn, job_id: int) -> None:
    await conn.execute("UPDATE taskboard_jobs SET lease_expires_at = now() - interval '1 s'"
                       " WHERE id = %s", (job_id,))


async def test_a_claim_writes_no_row_history_reads_the_job_row_and_the_completion_inserts_it(
    conn: Conn,
) -> None:
    job_id = await enqueue(conn, REG, "noop")
    await asyncio.sleep(0.05)  # a pickup the history can show
    job = await _claim(conn, "w-a")
    assert await _rows(conn, job_id) == []
    history = await job_history(conn, job_id)
    assert [(h["attempt"], h["worker"], h["token"], h["outcome"]) for h in history] == [
        (1, "w-a", str(job.token), None)]
    [running] = (await job_detail(conn, job_id)).attempts
    assert running.pickup_seconds is not None and running.pickup_seconds >= 0.04
    assert running.claimed_at is not None and running.ended_at is None

    async with conn.transaction():
        verdicts = await leases.complete_many(conn, [(job.id, job.token)], [(0.25, 29.5)])
        assert await _updates(conn) == 0  # inserted, not updated
    assert list(verdicts.values()) == [Verdict.DONE]
    assert await _rows(conn, job_id) == [(1, "w-a", "completed")]
    [done] = (await job_detail(conn, job_id)).attempts
    assert (done.handler_seconds, done.min_margin_seconds) == (0.25, 29.5)
    assert done.pickup_seconds == running.pickup_seconds
    assert done.claimed_at == running.claimed_at and done.ended_at is not None


async def test_a_renewal_failure_writes_the_row_early_and_the_completion_ends_that_row(
    conn: Conn,
) -> None:
    job_id = await enqueue(conn, REG, "noop")
    job = await _claim(conn, "w-a")
    await attempt_log.record_renewal_failed(conn, [((job.id, job.token), "database away")])
    assert await _rows(conn, job_id) == [(1, "w-a", None)]
    cur = await conn.execute(sql.LIST_TROUBLE, {"limit": 10})
    assert [(r[1], r[4]) for r in await cur.fetchall()] == [(job_id, "renewal_failed")]
    # Not doubled by the job row's running attempt.
    assert len(await job_history(conn, job_id)) == 1
    assert await leases.complete(conn, job.id, job.token) is True
    [row] = await job_history(conn, job_id)
    assert row["outcome"] == "completed" and row["renewal_failed_at"] is not None
    assert row["error"] == "database away"


async def test_an_attempt_given_up_then_reclaimed_keeps_its_reason_and_one_row_each(
    conn: Conn,
) -> None:
    job_id = await enqueue(conn, REG, "noop")
    a = await _claim(conn, "w-a", lease=0.2)
    await _expire(conn, job_id)
    await attempt_log.record_lost(conn, [((a.id, a.token), "local deadline passed")])
    assert await _rows(conn, job_id) == [(1, "w-a", "lease_lost")]
    b = await _claim(conn, "w-b")
    assert b.previous_token == a.token
    history = await job_history(conn, job_id)
    assert [(h["attempt"], h["worker"], h["outcome"], h["error"]) for h in history] == [
        (1, "w-a", "lease_lost", "local deadline passed"), (2, "w-b", None, None)]
    assert await leases.complete(conn, a.id, a.token) is False
    await attempt_log.record_rejected(conn, [(a.id, a.token)])
    assert await leases.complete(conn, b.id, b.token) is True
    assert await _rows(conn, job_id) == [
        (1, "w-a", "completion_rejected"), (2, "w-b", "completed")]


async def test_a_reclaim_writes_the_lost_holders_row_with_when_it_was_superseded(
    conn: Conn,
) -> None:
    job_id = await enqueue(conn, REG, "noop")
    a = await _claim(conn, "w-a", lease=0.2)
    await _expire(conn, job_id)
    b = await _claim(conn, "w-b")
    cur = await conn.execute(
        "SELECT a.attempt, a.lease_token, a.outcome, a.superseded_at = j.claimed_at,"
        " a.claimed_at < j.claimed_at FROM taskboard_attempts a"
        " JOIN taskboard_jobs j ON j.id = a.job_id WHERE a.job_id = %s", (job_id,))
    assert await cur.fetchall() == [(1, a.token, "lease_lost", True, True)]
    assert b.attempt == 2


async def test_cancelling_a_running_job_writes_its_row_and_the_holder_hears_cancelled(
    conn: Conn,
) -> None:
    job_id = await enqueue(conn, REG, "noop")
    job = await _claim(conn, "w-a")
    await cancel(conn, job_id)
    assert await _rows(conn, job_id) == [(1, "w-a", "cancelled")]
    verdicts = await leases.renew(conn, [(job.id, job.token)], lease_seconds=30)
    assert verdicts == {(job.id, job.token): Verdict.CANCELLED}


async def test_an_attempt_row_written_at_claim_before_migration_15_is_ended_by_an_update(
    conn: Conn,
) -> None:
    job_id = await enqueue(conn, REG, "noop")
    job = await _claim(conn, "w-a")
    # What a claim wrote before migration 15: the attempt's row, open.
    await conn.execute(
        "INSERT INTO taskboard_attempts (job_id, attempt, lease_token, worker_id, claimed_at)"
        " SELECT id, claim_count, lease_token, claimed_by, claimed_at FROM taskboard_jobs"
        " WHERE id = %s", (job_id,))
    assert len(await job_history(conn, job_id)) == 1
    outcome = await leases.fail(conn, job.id, job.token, error="boom", backoff_seconds=1,
                                permanent=True)
    assert outcome.owned and outcome.dead
    assert await _rows(conn, job_id) == [(1, "w-a", "failed")]


async def test_deleting_jobs_deletes_their_attempts_without_the_foreign_key(conn: Conn) -> None:
    # Migration 15 replaced the attempts' foreign key (and its ON DELETE CASCADE) with a
    # statement trigger: a delete by hand still takes the history with the job, no other.
    gone, kept = await enqueue(conn, REG, "noop"), await enqueue(conn, REG, "noop")
    for _ in range(2):
        job = await _claim(conn, "w-a")
        assert await leases.complete(conn, job.id, job.token) is True
    await conn.execute("DELETE FROM taskboard_jobs WHERE id = %s", (gone,))
    cur = await conn.execute("SELECT job_id FROM taskboard_attempts ORDER BY job_id")
    assert [r[0] for r in await cur.fetchall()] == [kept]


async def test_a_lease_listed_twice_is_completed_and_recorded_once(conn: Conn) -> None:
    # The attempts' insert may not meet one row twice (ON CONFLICT DO UPDATE refuses that).
    job_id = await enqueue(conn, REG, "noop")
    job = await _claim(conn, "w-a")
    lease = (job.id, job.token)
    await attempt_log.record_renewal_failed(conn, [(lease, "one"), (lease, "two")])
    verdicts = await leases.complete_many(conn, [lease, lease])
    assert verdicts == {lease: Verdict.DONE}
    assert await _rows(conn, job_id) == [(1, "w-a", "completed")]
