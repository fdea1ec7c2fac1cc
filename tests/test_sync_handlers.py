"""Plain `def` handlers: they run in the worker's thread pool while the event loop keeps
their lease, and once the attempt is over for the worker (its local deadline passed, its
lease lost) they start no external effect, whatever the thread does next."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest
from taskboard.core import KindRegistry, LeaseLost, SyncJobContext, enqueue
from taskboard.core.engine.events import (
    Cancelled,
    Claimed,
    Completed,
    LeaseGivenUp,
    Released,
)
from taskboard.core.kinds.registry import SendEffect
from taskboard.core.queue.jobs import cancel

from tests.conftest import wait_for
from tests.harness import Recorder, run_workers


class Effects:
    """What the handler did, per attempt, across threads."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.done: list[tuple[int, str]] = []
        self.refused: list[tuple[int, str]] = []


def blocking_kind(effects: Effects, *, cancel_safe: bool, block: float | None) -> KindRegistry:
    registry = KindRegistry()

    @registry.kind("blocking", cancel_safe=cancel_safe)
    def blocking(ctx: SyncJobContext) -> None:
        effects.started.set()
        if block is not None:
            time.sleep(block)  # a blocking call the loop must not wait for
        else:
            effects.release.wait(30)
        try:
            with ctx.external("send"):
                effects.done.append((ctx.attempt, "sent"))
        except LeaseLost as exc:
            effects.refused.append((ctx.attempt, str(exc)))
            raise

    return registry


async def test_a_sync_handler_blocking_longer_than_its_lease_keeps_it_and_completes(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    lease = 2.0
    effects = Effects()
    registry = blocking_kind(effects, cancel_safe=True, block=lease * 1.6)
    rec = Recorder()
    async with run_workers(db_url, "w", recorder=rec, registry=registry, lease_seconds=lease):
        job = await enqueue(conn, registry, "blocking")
        await wait_for(lambda: rec.of(Completed, job_id=job), timeout=20, what="completed")
    # The loop renewed while the thread blocked: one claim, one effect, no lease given up.
    assert len(rec.of(Claimed, job_id=job)) == 1
    assert rec.of(LeaseGivenUp, job_id=job) == []
    assert effects.done == [(1, "sent")] and effects.refused == []


@pytest.mark.parametrize("cancel_safe", [True, False])
async def test_a_sync_handler_blocked_past_its_deadline_never_starts_an_effect_after_it(
    db_url: str, conn: psycopg.AsyncConnection[Any], cancel_safe: bool
) -> None:
    lease = 2.0
    effects = Effects()
    registry = blocking_kind(effects, cancel_safe=cancel_safe, block=None)
    rec = Recorder()
    async with run_workers(db_url, "w", recorder=rec, registry=registry, lease_seconds=lease,
                           drain_seconds=1.0):
        job = await enqueue(conn, registry, "blocking")
        await wait_for(effects.started.is_set, timeout=10, what="handler started")
        [claim] = rec.of(Claimed, job_id=job)
        # A lock on the row held by another session: renewals skip it, so the lease runs
        # down past its local deadline (which comes before the database's) while the
        # handler's thread is blocked.
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as locker:
            async with locker.transaction():
                await locker.execute("SELECT 1 FROM taskboard_jobs WHERE id = %s FOR UPDATE",
                                     (job,))
                await wait_for(lambda: _expired(conn, job), timeout=lease * 4,
                               what="the lease expired in the database")
                effects.release.set()  # the thread goes on, past its deadline
                await wait_for(lambda: effects.refused, timeout=10, what="effect refused")
        [lost] = await wait_for(lambda: rec.of(LeaseGivenUp, token=claim.token),
                                timeout=10, what="lease given up")
        assert "deadline" in lost.reason
    assert (1, "sent") not in effects.done
    assert effects.refused[0][0] == 1 and "not starting send" in effects.refused[0][1]


@pytest.mark.parametrize("stop", ["cancel", "drain"])
async def test_a_sync_handler_whose_attempt_was_stopped_starts_no_effect_when_its_thread_goes_on(
    db_url: str, conn: psycopg.AsyncConnection[Any], stop: str
) -> None:
    effects = Effects()
    registry = blocking_kind(effects, cancel_safe=True, block=None)
    rec = Recorder()
    async with run_workers(db_url, "w", recorder=rec, registry=registry, lease_seconds=30,
                           drain_seconds=0.5) as [w]:
        job = await enqueue(conn, registry, "blocking")
        await wait_for(effects.started.is_set, timeout=10, what="handler started")
        # The worker stops the attempt; a thread cannot be cut, so it runs on, with a lease
        # that is still good: only the attempt's end can refuse the thread's effect.
        if stop == "cancel":
            await cancel(conn, job)
            await wait_for(lambda: rec.of(Cancelled, job_id=job), timeout=10, what="cancel")
        else:
            await w.stop()  # the drain gives the lease back: another worker may hold it now
            assert rec.of(Released, job_id=job)
        effects.release.set()
        await wait_for(lambda: effects.refused, timeout=10, what="effect refused")
    assert effects.done == []
    assert "not starting send" in effects.refused[0][1]


async def test_a_sync_handlers_effect_record_is_written_from_its_thread(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    registry = KindRegistry()

    @registry.kind("mailer")
    def mailer(ctx: SyncJobContext) -> None:
        with ctx.external("smtp send") as ticket:
            assert ticket.identity == ctx.identity != ""
            ticket.record(SendEffect(f"<{ctx.identity}@test>", ("maya@example.com",)))

    rec = Recorder()
    async with run_workers(db_url, "w", recorder=rec, registry=registry, lease_seconds=10):
        job = await enqueue(conn, registry, "mailer")
        await wait_for(lambda: rec.of(Completed, job_id=job), timeout=15, what="completed")
    cur = await conn.execute(
        "SELECT attempt, recipient, worker_id FROM taskboard_email_sends WHERE job_id = %s",
        (job,))
    assert await cur.fetchall() == [(1, "maya@example.com", "w")]


async def _expired(conn: psycopg.AsyncConnection[Any], job: int) -> bool:
    cur = await conn.execute(
        "SELECT lease_expires_at < clock_timestamp() FROM taskboard_jobs WHERE id = %s", (job,))
    row = await cur.fetchone()
    return bool(row and row[0])


def test_a_handler_that_is_neither_async_nor_a_plain_function_is_refused_at_register(
) -> None:
    registry = KindRegistry()

    def generator(ctx: SyncJobContext) -> Any:
        yield ctx

    async def agen(ctx: SyncJobContext) -> Any:
        yield ctx

    class Callable:
        async def __call__(self, ctx: SyncJobContext) -> None: ...

    for handler in (generator, agen, Callable(), print):
        with pytest.raises(TypeError, match="must be an `async def` or a plain `def`") as exc:
            registry.kind("bad")(handler)
        assert "\n" not in str(exc.value)
    with pytest.raises(TypeError, match=r"cannot use ctx\.conn"):
        registry.kind("writer", writes_db=True)(lambda ctx: None)
    assert registry.names() == []
