"""Operator writes racing each other and the workers (issue 22): each race is forced, never
hoped for. One real connection holds a row lock in an open transaction (the first writer,
mid-statement as far as the second can tell); the second writer's statement is started,
seen waiting on that lock in `pg_stat_activity`, and only then is the first committed. The
second statement's snapshot therefore predates the first's commit, which is exactly the
window in which an earlier snapshot could decide alone.

Also here, from the same issue: `taskboard retry` of a job whose unique key is taken (exit 3,
the holder named), and the snooze cap that bounds a job's history."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import psycopg
import pytest
from taskboard.core.base.errors import ConfigError, JobNotFound
from taskboard.core.cli.parser import build_parser
from taskboard.core.cli.worker import worker_settings
from taskboard.core.engine import leases
from taskboard.core.engine.events import Dead
from taskboard.core.engine.settings import DEFAULT_MAX_SNOOZES
from taskboard.core.kinds import JobContext, JobKind, builtin_registry
from taskboard.core.operations import retention
from taskboard.core.operations.queues import pause_queue, paused_queues, resume_queue
from taskboard.core.queue.jobs import NewJob, cancel, enqueue, enqueue_many, retry
from taskboard.core.view.status import job_history

from tests.conftest import wait_for
from tests.harness import Recorder, run_workers
from tests.test_cli import assert_one_line_error, run_cli

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


async def race(
    db_url: str,
    observer: Conn,
    first: Callable[[Conn], Awaitable[object]],
    second: Callable[[Conn], Awaitable[T]],
) -> T:
    """The forced race: `first` runs on a connection of its own in a transaction left open
    (its row locks held) until `second`, started on another, waits on them (`blocked`);
    then `first` commits, and `second`'s answer is returned (or its error raised)."""
    async with connect(db_url) as holder, connect(db_url) as waiter:
        async with holder.transaction():
            await first(holder)
            waiting = await blocked(observer, waiter, second(waiter))
        return await waiting


def pruning(c: Conn) -> Awaitable[retention.Pruned]:
    return retention.prune(c, retention.Retention())


async def one(conn: Conn, query: str, *params: Any) -> Any:
    cur = await conn.execute(query, params)
    return await cur.fetchone()


async def claim_one(conn: Conn, worker: str = "w", lease: float = 30) -> leases.ClaimedJob:
    [job] = await leases.claim(
        conn, worker_id=worker, limit=1, lease_seconds=lease, queues=["default"], kinds=KINDS
    )
    return job


async def running_job(conn: Conn, **opts: Any) -> leases.ClaimedJob:
    """A `noop` job (enqueued with `opts`), claimed."""
    job_id = await enqueue(conn, REG, "noop", **opts)
    job = await claim_one(conn)
    assert job.id == job_id
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
    # The retry returns success: the job must exist after.
    done = await race(db_url, conn, lambda c: retry(c, target), pruning)
    row = await one(conn, "SELECT failed_at, attempts FROM taskboard_jobs WHERE id = %s", target)
    assert row is not None, "a job whose retry returned success was pruned"
    assert row == (None, 0)
    assert [h["outcome"] for h in await job_history(conn, target)] == ["failed"]
    assert done.jobs == 2  # the others were past their age and went
    others = await one(conn, "SELECT count(*) FROM taskboard_jobs WHERE id <> %s", target)
    assert others == (0,)


async def test_prune_keeps_a_job_retried_and_finished_again_while_it_ran(
    db_url: str, conn: Conn
) -> None:
    """Finished again is not enough: the age is re-checked on the row too."""
    [target] = await dead_long_ago(conn, 1)

    async def retry_and_finish(operator: Conn) -> None:
        await retry(operator, target)
        job = await claim_one(operator)
        assert await leases.complete(operator, job.id, job.token)

    assert (await race(db_url, conn, retry_and_finish, pruning)).jobs == 0
    row = await one(conn, "SELECT completed_at IS NOT NULL FROM taskboard_jobs WHERE id = %s",
                    target)
    assert row == (True,)
    assert [h["outcome"] for h in await job_history(conn, target)] == ["failed", "completed"]


async def test_retry_of_a_job_being_pruned_says_it_does_not_exist(
    db_url: str, conn: Conn
) -> None:
    """The other order: the prune's DELETE holds the row; the retry that waited on it must
    not report success for a job that is gone."""
    [target] = await dead_long_ago(conn, 1)

    async def prune_batch(pruner: Conn) -> None:
        assert await retention.prune_batch(pruner, retention.Retention()) == 1

    with pytest.raises(JobNotFound, match="does not exist"):
        await race(db_url, conn, prune_batch, lambda c: retry(c, target))
    assert await one(conn, "SELECT count(*) FROM taskboard_jobs") == (0,)


# --- cancel ----------------------------------------------------------------------------------


async def test_cancel_waiting_on_a_claim_ends_the_new_attempt_as_cancelled(
    db_url: str, conn: Conn
) -> None:
    """The claim commits the job's new lease and its attempt row while the cancel waits: the
    cancel must take that lease and close that attempt (which its own snapshot never saw),
    so the worker's next renewal hears "cancelled", not "lost"."""
    job_id = await enqueue(conn, REG, "noop")
    claimed: list[leases.ClaimedJob] = []

    async def claim(worker: Conn) -> None:
        claimed.append(await claim_one(worker))

    await race(db_url, conn, claim, lambda c: cancel(c, job_id))
    [job] = claimed
    verdicts = await leases.renew(conn, [(job.id, job.token)], lease_seconds=30)
    assert verdicts == {(job.id, job.token): leases.Verdict.CANCELLED}
    row = await one(conn, "SELECT cancelled_at IS NOT NULL, lease_token FROM taskboard_jobs"
                          " WHERE id = %s", job_id)
    assert row == (True, None)
    [attempt] = await job_history(conn, job_id)
    assert (attempt["outcome"], attempt["error"]) == ("cancelled", "cancelled by operator")


async def test_cancel_waiting_on_a_completion_says_already_finished(
    db_url: str, conn: Conn
) -> None:
    job = await running_job(conn)

    async def complete(worker: Conn) -> None:
        assert await leases.complete(worker, job.id, job.token)

    with pytest.raises(JobNotFound, match="already finished"):
        await race(db_url, conn, complete, lambda c: cancel(c, job.id))
    row = await one(conn, "SELECT completed_at IS NOT NULL, cancelled_at FROM taskboard_jobs"
                          " WHERE id = %s", job.id)
    assert row == (True, None)
    assert [h["outcome"] for h in await job_history(conn, job.id)] == ["completed"]


async def test_completion_waiting_on_a_cancel_is_rejected(db_url: str, conn: Conn) -> None:
    job = await running_job(conn)
    completing = race(db_url, conn, lambda c: cancel(c, job.id),
                      lambda c: leases.complete(c, job.id, job.token))
    assert await completing is False
    row = await one(conn, "SELECT completed_at, cancelled_at IS NOT NULL FROM taskboard_jobs"
                          " WHERE id = %s", job.id)
    assert row == (None, True)
    assert [h["outcome"] for h in await job_history(conn, job.id)] == ["cancelled"]


# --- retry -----------------------------------------------------------------------------------


async def test_two_retries_of_one_job_one_succeeds(db_url: str, conn: Conn) -> None:
    [target] = await dead_long_ago(conn, 1, days=0)
    with pytest.raises(JobNotFound, match="is not dead or cancelled"):
        await race(db_url, conn, lambda c: retry(c, target), lambda c: retry(c, target))


async def test_retry_racing_a_cancel_sees_the_job_as_the_cancel_committed_it(
    db_url: str, conn: Conn
) -> None:
    """A retry while the cancel is uncommitted acts on the running job it can see (refused,
    at once: it does not queue behind the cancel's lock); once the cancel commits, it
    succeeds. Never a retried job that the cancel then finishes, or the reverse."""
    job_id = await enqueue(conn, REG, "noop")
    async with connect(db_url) as canceller, connect(db_url) as operator:
        async with canceller.transaction():
            await cancel(canceller, job_id)
            with pytest.raises(JobNotFound, match="is not dead or cancelled"):
                await asyncio.wait_for(retry(operator, job_id), timeout=10)
        await retry(operator, job_id)
    row = await one(conn, "SELECT cancelled_at, attempts FROM taskboard_jobs WHERE id = %s",
                    job_id)
    assert row == (None, 0)


def test_retry_of_a_job_whose_unique_key_is_taken_names_the_holder_and_exits_3(
    db_url: str,
) -> None:
    """Issue 22 item 7: was a raw "duplicate key value violates unique constraint", exit 2."""
    first = int(run_cli(db_url, "enqueue", "noop", "--key", "invoice-42").stdout)
    assert run_cli(db_url, "cancel", str(first)).returncode == 0
    holder = int(run_cli(db_url, "enqueue", "noop", "--key", "invoice-42").stdout)
    assert holder != first
    proc = run_cli(db_url, "retry", str(first))
    assert_one_line_error(
        proc, f"job {first} cannot be retried", f"job {holder} holds its unique key",
        "'invoice-42'", code=3,
    )
    assert "duplicate key" not in proc.stderr
    with psycopg.connect(db_url) as c:
        row = c.execute("SELECT cancelled_at IS NOT NULL FROM taskboard_jobs WHERE id = %s",
                        (first,)).fetchone()
    assert row == (True,)  # refused: nothing changed


async def test_retry_waiting_on_an_enqueue_of_its_key_names_the_new_job(
    db_url: str, conn: Conn
) -> None:
    """The holder commits while the retry waits on the unique index: refused, and named."""
    first = await enqueue(conn, REG, "noop", unique_key="invoice-7")
    await cancel(conn, first)
    with pytest.raises(JobNotFound, match="holds its unique key") as refused:
        await race(db_url, conn, lambda c: enqueue(c, REG, "noop", unique_key="invoice-7"),
                   lambda c: retry(c, first))
    [holder] = await one(conn, "SELECT id FROM taskboard_jobs WHERE id <> %s", first)
    assert f"job {holder} holds its unique key" in str(refused.value)
    row = await one(conn, "SELECT cancelled_at IS NOT NULL FROM taskboard_jobs WHERE id = %s",
                    first)
    assert row == (True,)


async def test_refused_retry_leaves_the_callers_transaction_usable(conn: Conn) -> None:
    first = await enqueue(conn, REG, "noop", unique_key="k")
    await cancel(conn, first)
    holder = await enqueue(conn, REG, "noop", unique_key="k")
    async with conn.transaction():
        with pytest.raises(JobNotFound, match=f"job {holder} holds"):
            await retry(conn, first)
        await cancel(conn, holder)  # the transaction goes on
        await retry(conn, first)  # and the key is free now
    row = await one(conn, "SELECT cancelled_at FROM taskboard_jobs WHERE id = %s", first)
    assert row == (None,)


# --- snooze and timeout (the worker's fenced outcomes) ---------------------------------------


async def test_snooze_waiting_on_a_cancel_is_rejected(db_url: str, conn: Conn) -> None:
    job = await running_job(conn)
    snoozing = race(db_url, conn, lambda c: cancel(c, job.id),
                    lambda c: leases.snooze(c, job.id, job.token, 60, cap=100))
    assert (await snoozing).owned is False
    row = await one(conn, "SELECT cancelled_at IS NOT NULL, attempts, snoozes"
                          " FROM taskboard_jobs WHERE id = %s", job.id)
    assert row == (True, 1, 0)  # the attempt was not given back to a cancelled job
    assert [h["outcome"] for h in await job_history(conn, job.id)] == ["cancelled"]


async def test_cancel_waiting_on_a_snooze_cancels_the_snoozed_job(
    db_url: str, conn: Conn
) -> None:
    job = await running_job(conn)

    async def snooze(worker: Conn) -> None:
        assert (await leases.snooze(worker, job.id, job.token, 60, cap=100)).owned

    await race(db_url, conn, snooze, lambda c: cancel(c, job.id))
    row = await one(conn, "SELECT cancelled_at IS NOT NULL FROM taskboard_jobs WHERE id = %s",
                    job.id)
    assert row == (True,)
    # The snoozed attempt keeps its outcome: the cancel found no lease to take.
    assert [h["outcome"] for h in await job_history(conn, job.id)] == ["snoozed"]


async def test_timeout_failure_waiting_on_a_cancel_is_rejected(
    db_url: str, conn: Conn
) -> None:
    job = await running_job(conn, max_attempts=1)
    failing = race(db_url, conn, lambda c: cancel(c, job.id), lambda c: leases.fail(
        c, job.id, job.token, error="TimedOut: timed out after 3 s", backoff_seconds=1,
    ))
    assert (await failing).owned is False
    row = await one(conn, "SELECT failed_at, cancelled_at IS NOT NULL, last_error"
                          " FROM taskboard_jobs WHERE id = %s", job.id)
    assert row == (None, True, "cancelled by operator")
    [attempt] = await job_history(conn, job.id)
    assert (attempt["outcome"], attempt["error"]) == ("cancelled", "cancelled by operator")


async def test_cancel_waiting_on_a_timeout_failure_says_already_finished(
    db_url: str, conn: Conn
) -> None:
    job = await running_job(conn, max_attempts=1)

    async def time_out(worker: Conn) -> None:
        result = await leases.fail(worker, job.id, job.token,
                                   error="TimedOut: timed out after 3 s", backoff_seconds=1)
        assert result.dead  # its last attempt

    with pytest.raises(JobNotFound, match="already finished"):
        await race(db_url, conn, time_out, lambda c: cancel(c, job.id))
    row = await one(conn, "SELECT failed_at IS NOT NULL, cancelled_at, last_error"
                          " FROM taskboard_jobs WHERE id = %s", job.id)
    assert row == (True, None, "TimedOut: timed out after 3 s")


# --- queues and workers ----------------------------------------------------------------------


async def test_pause_waiting_on_a_resume_leaves_the_queue_paused(
    db_url: str, conn: Conn
) -> None:
    await pause_queue(conn, "mail", "smtp down")
    await race(db_url, conn, lambda c: resume_queue(c, "mail"),
               lambda c: pause_queue(c, "mail", "down again"))
    [paused] = await paused_queues(conn)
    assert (paused.name, paused.reason) == ("mail", "down again")


async def test_resume_waiting_on_a_pause_leaves_the_queue_running(
    db_url: str, conn: Conn
) -> None:
    await pause_queue(conn, "mail", "smtp down")
    await race(db_url, conn, lambda c: pause_queue(c, "mail", "still down"),
               lambda c: resume_queue(c, "mail"))
    assert await paused_queues(conn) == []


async def test_worker_prune_keeps_a_worker_whose_heartbeat_came_while_it_ran(
    db_url: str, conn: Conn
) -> None:
    for name in ("gone", "back"):
        await conn.execute(
            "INSERT INTO taskboard_workers (id, host, pid, lease_seconds, capacity,"
            " heartbeat_at) VALUES (%s, 'h', 1, 30, 8, now() - interval '2 days')", (name,))
    heartbeat = "UPDATE taskboard_workers SET heartbeat_at = now() WHERE id = 'back'"
    done = await race(db_url, conn, lambda c: c.execute(heartbeat), pruning)
    assert done.workers == 1
    cur = await conn.execute("SELECT id FROM taskboard_workers")
    assert await cur.fetchall() == [("back",)]


# --- bounded history: the snooze cap ---------------------------------------------------------


async def test_a_job_snoozing_in_a_loop_dies_at_the_cap_with_the_reason(
    db_url: str, conn: Conn
) -> None:
    registry = builtin_registry()

    async def forever(ctx: JobContext) -> None:
        ctx.snooze(0.01)

    registry.register(JobKind("forever", lambda p: dict(p), forever))
    rec = Recorder()
    async with run_workers(db_url, "w", recorder=rec, registry=registry, lease_seconds=5,
                           max_snoozes=5):
        job_id = await enqueue(conn, registry, "forever", max_attempts=1)
        [dead] = await wait_for(lambda: rec.of(Dead, job_id=job_id), timeout=15, what="dead")
    assert "snoozed 5 times, the cap (max snoozes 5)" in dead.error
    row = await one(conn, "SELECT failed_at IS NOT NULL, snoozes, attempts, last_error"
                          " FROM taskboard_jobs WHERE id = %s", job_id)
    assert row[:3] == (True, 6, 1) and row[3] == dead.error
    history = await job_history(conn, job_id)
    assert [h["outcome"] for h in history] == ["snoozed"] * 5 + ["failed"]  # bounded
    assert history[-1]["error"] == dead.error
    await retry(conn, job_id)  # a retry gives the job a fresh snooze budget
    assert await one(conn, "SELECT snoozes FROM taskboard_jobs WHERE id = %s", job_id) == (0,)


def test_the_snooze_cap_is_a_worker_flag_with_a_checked_range() -> None:
    parse = build_parser().parse_args
    assert worker_settings(parse(["worker"])).max_snoozes == DEFAULT_MAX_SNOOZES == 100
    assert worker_settings(parse(["worker", "--max-snoozes", "7"])).max_snoozes == 7
    with pytest.raises(ConfigError, match="max snoozes must be between 0 and"):
        worker_settings(parse(["worker", "--max-snoozes", "-1"]))
