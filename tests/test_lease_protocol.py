"""The fenced SQL itself: the article's timeline, renewal rules, one-statement batches."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from psycopg import AsyncCursor
from taskboard.core.engine import attempt_log, leases
from taskboard.core.kinds import builtin_registry
from taskboard.core.queue.jobs import NewJob, enqueue, enqueue_many
from taskboard.core.view.status import job_history

REG = builtin_registry()
KINDS = REG.names()
DONE, REJECTED = leases.Verdict.DONE, leases.Verdict.REJECTED


class CountingCursor(AsyncCursor[Any]):
    """Counts the statements sent through it: proves a batch is one round trip."""

    statements = 0

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        type(self).statements += 1
        return await super().execute(*args, **kwargs)


async def claim_one(conn: Any, worker: str, lease: float = 0.5) -> leases.ClaimedJob:
    [job] = await leases.claim(
        conn, worker_id=worker, limit=1, lease_seconds=lease, queues=["default"], kinds=KINDS
    )
    return job


async def sleep_past(conn: Any, job: leases.ClaimedJob) -> None:
    """Wait until the lease has expired by the database's clock."""
    while True:
        cur = await conn.execute(
            "SELECT lease_expires_at <= now() FROM taskboard_jobs WHERE id = %s", (job.id,)
        )
        row = await cur.fetchone()
        if row[0]:
            return
        await asyncio.sleep(0.02)


async def test_article_timeline_stale_completion_changes_zero_rows(conn):
    job_id = await enqueue(conn, REG, "noop")

    a = await claim_one(conn, "worker-a", lease=0.3)  # 1. A receives token a
    assert a.id == job_id and a.attempt == 1 and not a.is_reclaim

    await sleep_past(conn, a)  # 2. A stalls past its deadline

    b = await claim_one(conn, "worker-b", lease=30)  # 3. B reclaims with token b
    assert b.id == job_id and b.token != a.token and b.attempt == 2
    assert b.previous_token == a.token and b.previous_worker == "worker-a"

    renewal = await leases.renew(conn, [(a.id, a.token)], lease_seconds=30)  # A's renewal fails
    assert renewal == {(a.id, a.token): REJECTED}

    assert await leases.complete(conn, a.id, a.token) is False  # 4. A's completion: zero rows
    await attempt_log.record_rejected(conn, [(a.id, a.token)])
    assert await leases.complete(conn, b.id, b.token) is True  # B completes

    history = await job_history(conn, job_id)
    assert [(h["attempt"], h["worker"], h["token"], h["outcome"]) for h in history] == [
        (1, "worker-a", str(a.token), "completion_rejected"),
        (2, "worker-b", str(b.token), "completed"),
    ]
    cur = await conn.execute(
        "SELECT completed_at IS NOT NULL, lease_token, attempts FROM taskboard_jobs WHERE id = %s",
        (job_id,),
    )
    assert await cur.fetchone() == (True, None, 2)


async def test_reclaim_closes_previous_attempt_as_lease_lost(conn):
    job_id = await enqueue(conn, REG, "noop")
    a = await claim_one(conn, "worker-a", lease=0.2)
    await sleep_past(conn, a)
    await claim_one(conn, "worker-b", lease=30)
    history = await job_history(conn, job_id)
    assert history[0]["outcome"] == "lease_lost" and history[0]["ended_at"] is not None
    assert history[1]["outcome"] is None  # B is still running


async def test_renewal_with_current_token_but_expired_lease_fails(conn):
    await enqueue(conn, REG, "noop")
    a = await claim_one(conn, "worker-a", lease=0.2)
    await sleep_past(conn, a)  # nobody reclaimed: the token is still current
    renewal = await leases.renew(conn, [(a.id, a.token)], lease_seconds=30)
    assert renewal == {(a.id, a.token): REJECTED}
    cur = await conn.execute("SELECT lease_token FROM taskboard_jobs WHERE id = %s", (a.id,))
    assert (await cur.fetchone())[0] == a.token  # unchanged: renewal did not extend it


async def test_renewal_batch_of_eight_is_one_statement(db_url):
    async with await psycopg.AsyncConnection.connect(
        db_url, autocommit=True, cursor_factory=CountingCursor
    ) as conn:
        await enqueue_many(conn, REG, [NewJob("noop") for _ in range(8)])
        claimed = await leases.claim(
            conn, worker_id="w", limit=8, lease_seconds=5, queues=["default"], kinds=KINDS
        )
        assert len(claimed) == 8
        CountingCursor.statements = 0
        renewal = await leases.renew(conn, [(j.id, j.token) for j in claimed], lease_seconds=30)
        assert CountingCursor.statements == 1
        assert renewal == {(j.id, j.token): DONE for j in claimed}
        cur = await conn.execute(
            "SELECT bool_and(lease_expires_at > now() + interval '29 seconds') FROM taskboard_jobs"
        )
        assert (await cur.fetchone())[0] is True


async def test_claim_batch_is_one_statement_and_skips_locked_rows(db_url, conn):
    await enqueue_many(conn, REG, [NewJob("noop") for _ in range(10)])
    async with await psycopg.AsyncConnection.connect(
        db_url, autocommit=True, cursor_factory=CountingCursor
    ) as counted:
        CountingCursor.statements = 0
        first = await leases.claim(
            counted, worker_id="a", limit=6, lease_seconds=5, queues=["default"], kinds=KINDS
        )
        assert CountingCursor.statements == 1 and len(first) == 6
    second = await leases.claim(conn, worker_id="b", limit=6, lease_seconds=5, queues=["default"], kinds=KINDS)
    assert len(second) == 4
    assert not {j.id for j in first} & {j.id for j in second}
    assert len({j.token for j in first + second}) == 10


async def test_fail_retries_with_backoff_then_dead(conn):
    job_id = await enqueue(conn, REG, "noop", max_attempts=2)
    a = await claim_one(conn, "w", lease=30)
    out = await leases.fail(conn, a.id, a.token, error="boom", backoff_seconds=0.2)
    assert out.owned and not out.dead and out.retry_at is not None
    assert (
        await leases.claim(conn, worker_id="w", limit=1, lease_seconds=30, queues=["default"], kinds=KINDS) == []
    )  # not before the backoff
    await asyncio.sleep(0.25)
    b = await claim_one(conn, "w", lease=30)
    out = await leases.fail(conn, b.id, b.token, error="boom again", backoff_seconds=0.2)
    assert out.owned and out.dead
    cur = await conn.execute(
        "SELECT failed_at IS NOT NULL, last_error FROM taskboard_jobs WHERE id = %s", (job_id,)
    )
    assert await cur.fetchone() == (True, "boom again")


async def test_stale_fail_and_release_change_nothing(conn):
    await enqueue(conn, REG, "noop")
    a = await claim_one(conn, "a", lease=0.2)
    await sleep_past(conn, a)
    b = await claim_one(conn, "b", lease=30)
    assert (await leases.fail(conn, a.id, a.token, error="x", backoff_seconds=1)).owned is False
    assert await leases.release(conn, [((a.id, a.token), True)]) == set()
    cur = await conn.execute(
        "SELECT lease_token, last_error FROM taskboard_jobs WHERE id = %s", (a.id,)
    )
    assert await cur.fetchone() == (b.token, None)


async def test_release_before_the_handler_started_gives_the_attempt_back(conn):
    await enqueue(conn, REG, "noop")
    a = await claim_one(conn, "a", lease=60)
    assert await leases.release(conn, [((a.id, a.token), False)]) == {a.id}
    b = await claim_one(conn, "b", lease=60)
    assert b.id == a.id and b.attempt == 1 and not b.is_reclaim


async def test_expired_lease_on_last_attempt_is_buried_with_reason(conn):
    job_id = await enqueue(conn, REG, "noop", max_attempts=1)
    a = await claim_one(conn, "doomed", lease=0.2)
    await sleep_past(conn, a)
    assert (
        await leases.claim(conn, worker_id="b", limit=5, lease_seconds=5, queues=["default"], kinds=KINDS) == []
    )
    cur = await conn.execute(
        "SELECT failed_at IS NOT NULL, last_error FROM taskboard_jobs WHERE id = %s", (job_id,)
    )
    dead, error = await cur.fetchone()
    assert dead and "lease expired on attempt 1 of 1" in error and "doomed" in error


async def test_enqueue_notifies_listeners(db_url, conn):
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as listener:
        await listener.execute("LISTEN taskboard_jobs")
        await enqueue(conn, REG, "noop", queue="mail")
        got = [n async for n in listener.notifies(timeout=5, stop_after=1)]
    assert [(n.channel, n.payload) for n in got] == [("taskboard_jobs", "mail")]


async def test_priority_and_run_at_order_claims(conn):
    low = await enqueue(conn, REG, "noop", priority=0)
    high = await enqueue(conn, REG, "noop", priority=10)
    cur = await conn.execute("SELECT now() + interval '1 hour'")
    later = (await cur.fetchone())[0]
    await enqueue(conn, REG, "noop", priority=100, run_at=later)
    claimed = await leases.claim(conn, worker_id="w", limit=5, lease_seconds=5, queues=["default"], kinds=KINDS)
    assert [j.id for j in claimed] == sorted([high, low]) or [j.id for j in claimed] == [high, low]
    assert {j.id for j in claimed} == {high, low}


async def test_grouped_completion_rejects_a_stale_row_alone(conn):
    await enqueue_many(conn, REG, [NewJob("noop") for _ in range(3)])
    jobs = await leases.claim(conn, worker_id="a", limit=3, lease_seconds=0.3, queues=["default"], kinds=KINDS)
    stale = jobs[1]
    await sleep_past(conn, stale)
    [b] = await leases.claim(conn, worker_id="b", limit=1, lease_seconds=30, queues=["default"], kinds=KINDS)
    assert b.is_reclaim and b.previous_worker == "a"
    # All three of A's leases expired; B took one. A's group completion: B's job is
    # rejected alone, the two others (token still current) complete.
    owned = await leases.complete_many(conn, [(j.id, j.token) for j in jobs])
    assert owned == {(j.id, j.token): REJECTED if j.id == b.id else DONE for j in jobs}
    cur = await conn.execute("SELECT lease_token FROM taskboard_jobs WHERE id = %s", (b.id,))
    assert (await cur.fetchone())[0] == b.token


async def test_group_completion_and_claim_commit_together_or_not_at_all(conn):
    first, waiting = await enqueue_many(conn, REG, [NewJob("noop"), NewJob("noop")])
    job = await claim_one(conn, "w", lease=30)
    assert job.id == first
    # The claim half fails (a lease PostgreSQL cannot add to now()) after the completion
    # half ran: the completion must roll back with it.
    try:
        await leases.complete_many_and_claim(
            conn, [(job.id, job.token)], worker_id="w", limit=1, lease_seconds=1e300,
            queues=["default"], kinds=KINDS,
        )
    except psycopg.errors.DatetimeFieldOverflow:
        pass
    else:
        raise AssertionError("the claim with an impossible lease should have failed")
    cur = await conn.execute(
        "SELECT id, completed_at IS NOT NULL, lease_token IS NOT NULL FROM taskboard_jobs"
        " ORDER BY id"
    )
    assert await cur.fetchall() == [(first, False, True), (waiting, False, False)]
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    # And with a sane lease both halves land in one go.
    owned, claimed = await leases.complete_many_and_claim(
        conn, [(job.id, job.token)], worker_id="w", limit=1, lease_seconds=30,
        queues=["default"], kinds=KINDS,
    )
    assert owned == {(job.id, job.token): DONE} and [c.id for c in claimed] == [waiting]
    history = await job_history(conn, first)
    assert [h["outcome"] for h in history] == ["completed"]


async def test_group_completion_and_claim_refuses_a_connection_in_a_transaction(db_url):
    async with await psycopg.AsyncConnection.connect(db_url) as conn:
        try:
            await leases.complete_many_and_claim(
                conn, [], worker_id="w", limit=1, lease_seconds=30, queues=["default"], kinds=KINDS
            )
        except ValueError as exc:
            assert "autocommit" in str(exc)
        else:
            raise AssertionError("a non-autocommit connection was accepted")


async def test_a_stale_and_a_current_lease_of_one_job_get_separate_verdicts(conn):
    """A worker that reclaimed its own expired job holds two leases of it; presenting both
    in one group must complete only the current one (the fault suite found this)."""
    await enqueue(conn, REG, "noop")
    stale = await claim_one(conn, "w", lease=0.2)
    await sleep_past(conn, stale)
    current = await claim_one(conn, "w", lease=30)
    assert current.previous_token == stale.token
    renewal = await leases.renew(
        conn, [(stale.id, stale.token), (current.id, current.token)], lease_seconds=30
    )
    assert renewal == {(stale.id, stale.token): REJECTED, (current.id, current.token): DONE}
    verdicts = await leases.complete_many(
        conn, [(stale.id, stale.token), (current.id, current.token)]
    )
    assert verdicts == {(stale.id, stale.token): REJECTED, (current.id, current.token): DONE}
