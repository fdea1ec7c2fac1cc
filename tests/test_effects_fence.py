"""Where the fence ends: real workers, a real SMTP sink and the real Stripe SDK.

A database can reject a stale worker's completion; SMTP cannot take back a send (the same
Message-ID lets receivers spot the duplicate) and Stripe dedupes only by Idempotency-Key.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from taskboard.core.engine.events import (
    Claimed,
    Completed,
    CompletionRejected,
    Dead,
    Effect,
    Failed,
    StepCheckpoint,
)
from taskboard.core.kinds import JobContext, JobKind, KindRegistry, builtin_registry
from taskboard.core.kinds.billing import BILLING, charge
from taskboard.core.queue.jobs import enqueue
from taskboard.core.standins.runtime import Runtime, local_runtime
from taskboard.core.view.status import job_history

from tests.conftest import wait_for
from tests.harness import Recorder, run_stalling_worker, run_workers

EMAIL = {"to": ["maya@example.com"], "subject": "Your receipt", "text": "Thanks, Maya."}
BILL = {"customer": "cus_maya", "amount": 1999, "currency": "usd"}


async def identity_of(conn: Any, job_id: int) -> str:
    """The job's identity, which its Message-ID and idempotency keys are made of."""
    cur = await conn.execute("SELECT identity::text FROM taskboard_jobs WHERE id = %s", (job_id,))
    return str((await cur.fetchone())[0])


@pytest.fixture
async def runtime() -> AsyncIterator[Runtime]:
    """The embedded SMTP sink and Stripe endpoint, as `taskboard-tui` runs them."""
    async with local_runtime({}) as rt:
        yield rt


async def test_email_is_delivered_with_stable_message_id(db_url, conn, runtime):
    rec = Recorder()
    async with run_workers(db_url, "w", recorder=rec, services=runtime.services, lease_seconds=5):
        job_id = await enqueue(conn, builtin_registry(), "email", EMAIL)
        await wait_for(lambda: rec.of(Completed, job_id=job_id), what="email job completes")
    assert runtime.sink is not None
    [msg] = runtime.sink.messages()
    assert list(msg.recipients) == ["maya@example.com"]
    assert msg.subject == "Your receipt"
    assert msg.message_id == f"<taskboard-job-{await identity_of(conn, job_id)}@taskboard.local>"
    assert msg.header("X-Taskboard-Job") == str(job_id)


async def test_stalled_sender_after_a_recorded_send_is_fenced_and_not_repeated(
    db_url, conn, runtime
):
    """The article's question: does a failed completion prove no email was sent? No: A's
    send happened. Its `send` step was recorded (fenced, while A held the lease), so B, the
    new owner, replays it instead of sending a second copy (the in-flight case, where the
    record did not land, is tests/test_steps_effects.py)."""
    rec = Recorder()
    # A stalls right after its send, before it can mark the job complete.
    async with run_stalling_worker(
        db_url, "a", recorder=rec, services=runtime.services, lease_seconds=1.0
    ) as a:
        job_id = await enqueue(conn, builtin_registry(), "email", EMAIL)
        await wait_for(lambda: rec.of(Effect, worker_id="a"), what="A sent the email")
        async with run_workers(
            db_url, "b", recorder=rec, services=runtime.services, lease_seconds=30
        ):
            claim = await wait_for(lambda: rec.of(Claimed, worker_id="b"), what="B reclaims")
            assert claim[0].previous_worker == "a"
            await wait_for(lambda: rec.of(Completed, worker_id="b"), what="B completes")
            a.worker.resume()
            await wait_for(lambda: rec.of(CompletionRejected, worker_id="a"), what="A fenced")
    assert runtime.sink is not None
    sent = [
        m
        for m in runtime.sink.messages()
        if m.message_id == f"<taskboard-job-{await identity_of(conn, job_id)}@taskboard.local>"
    ]
    assert len(sent) == 1  # A's copy only: B replayed the recorded send
    assert sent[0].header("X-Taskboard-Attempt") == "1"
    assert [(e.worker_id, e.step, e.outcome) for e in rec.of(StepCheckpoint, worker_id="b")] == [
        ("b", "render", "replayed"), ("b", "send", "replayed"),
    ]
    assert rec.of(Completed, worker_id="a") == []
    assert [h["outcome"] for h in await job_history(conn, job_id)] == [
        "completion_rejected",
        "completed",
    ]
    cur = await conn.execute("SELECT count(*) FROM taskboard_jobs WHERE completed_at IS NOT NULL")
    assert (await cur.fetchone())[0] == 1


def stalling_billing(stall: Any) -> KindRegistry:
    """The real billing handler, with a stall after it recorded the charge (test lever)."""

    async def handler(ctx: JobContext) -> None:
        await charge(ctx)
        stall()

    registry = KindRegistry()
    registry.register(
        JobKind("billing", BILLING.validate, handler, writes_db=True, cancel_safe=False)
    )
    return registry


async def test_reclaimed_billing_job_charges_once_and_keeps_one_record(
    db_url, conn, runtime
):
    assert runtime.stripe is not None
    runtime.stripe.set_latency(0.3)  # the handler waits on Stripe holding its connection
    rec = Recorder()
    holder: list[Any] = []
    registry_a = stalling_billing(lambda: holder[0].worker.pause())
    async with run_workers(
        db_url, "a", recorder=rec, registry=registry_a, services=runtime.services, lease_seconds=1.0
    ) as [a]:
        holder.append(a)
        job_id = await enqueue(conn, builtin_registry(), "billing", BILL)
        await wait_for(lambda: a.worker.paused, what="A charged, recorded, then stalled")
        async with run_workers(
            db_url, "b", recorder=rec, services=runtime.services, lease_seconds=30
        ):
            await wait_for(lambda: rec.of(Claimed, worker_id="b"), what="B reclaims")
            # A's steps (create, confirm) were recorded under its lease: B replays them and
            # completes without a request to Stripe.
            await wait_for(lambda: rec.of(Completed, worker_id="b"), what="B completes")
            a.worker.resume()
            await wait_for(lambda: rec.of(CompletionRejected, worker_id="a"), what="A fenced")
    charges = [c for c in runtime.stripe.charges() if c.job_id == job_id]
    assert len(charges) == 1  # one charge, not two
    assert charges[0].replays == 0  # B never asked: nothing for Stripe to replay
    assert len(runtime.stripe.requests()) == 2  # A's create and confirm, nothing of B's
    assert [e.outcome for e in rec.of(StepCheckpoint, worker_id="b")] == ["replayed"] * 2
    # One record: A's, written on its own when Stripe answered it, kept through A's
    # rejected completion; B's replay met the same PaymentIntent.
    cur = await conn.execute(
        "SELECT payment_intent_id, attempt, worker_id FROM taskboard_billing_charges"
        " WHERE job_id = %s", (job_id,)
    )
    assert await cur.fetchall() == [(charges[0].payment_intent, 1, "a")]
    assert [h["outcome"] for h in await job_history(conn, job_id)] == [
        "completion_rejected",
        "completed",
    ]


async def test_smtp_4xx_retries_then_5xx_goes_dead_with_the_reply(db_url, conn, runtime):
    assert runtime.sink is not None
    runtime.sink.fail_next(1, code=451, message="4.3.0 try again later")
    rec = Recorder()
    async with run_workers(
        db_url,
        "w",
        recorder=rec,
        services=runtime.services,
        lease_seconds=5,
        retry_base_seconds=0.05,
    ):
        retried = await enqueue(conn, builtin_registry(), "email", EMAIL)
        await wait_for(lambda: rec.of(Completed, job_id=retried), what="delivered after a retry")
        runtime.sink.fail_next(1, code=550, message="5.1.1 mailbox unavailable")
        dead = await enqueue(conn, builtin_registry(), "email", EMAIL)
        await wait_for(lambda: rec.of(Dead, job_id=dead), what="dead on 5xx")
    [failure] = rec.of(Failed, job_id=retried)
    assert "451" in failure.error and "try again later" in failure.error
    cur = await conn.execute(
        "SELECT attempts, last_error FROM taskboard_jobs WHERE id = %s", (dead,)
    )
    attempts, error = await cur.fetchone()
    assert attempts == 1 and "550" in error and "mailbox unavailable" in error


async def test_smtp_down_retries_then_dead_and_worker_keeps_running(db_url, conn, runtime):
    assert runtime.sink is not None
    runtime.sink.down = True
    rec = Recorder()
    async with run_workers(
        db_url,
        "w",
        recorder=rec,
        services=runtime.services,
        lease_seconds=5,
        retry_base_seconds=0.05,
    ):
        job_id = await enqueue(conn, builtin_registry(), "email", EMAIL, max_attempts=2)
        await wait_for(lambda: rec.of(Dead, job_id=job_id), what="dead after retries")
        runtime.sink.down = False
        ok = await enqueue(conn, builtin_registry(), "email", EMAIL)
        await wait_for(lambda: rec.of(Completed, job_id=ok), what="worker still delivering")
    cur = await conn.execute("SELECT last_error FROM taskboard_jobs WHERE id = %s", (job_id,))
    assert "unreachable" in (await cur.fetchone())[0]


@pytest.mark.parametrize(
    ("fault", "outcome", "needle"),
    [
        ("decline", Dead, "generic_decline"),
        ("500", Completed, None),
        ("429", Completed, None),
    ],
)
async def test_stripe_errors_land_where_they_should(db_url, conn, runtime, fault, outcome, needle):
    assert runtime.stripe is not None
    runtime.stripe.inject(fault, times=1)
    rec = Recorder()
    async with run_workers(
        db_url,
        "w",
        recorder=rec,
        services=runtime.services,
        lease_seconds=5,
        retry_base_seconds=0.05,
    ):
        job_id = await enqueue(conn, builtin_registry(), "billing", BILL)
        await wait_for(lambda: rec.of(outcome, job_id=job_id), what=f"{fault} handled")
    if outcome is Dead:
        cur = await conn.execute(
            "SELECT attempts, last_error FROM taskboard_jobs WHERE id = %s", (job_id,)
        )
        attempts, error = await cur.fetchone()
        assert attempts == 1 and needle in error
        assert [c for c in runtime.stripe.charges() if c.job_id == job_id] == []
    else:
        assert len(rec.of(Failed, job_id=job_id)) == 1  # retried once, then charged
        assert len([c for c in runtime.stripe.charges() if c.job_id == job_id]) == 1
    assert "sk_test" not in " ".join(str(e) for e in rec.events)


async def test_waiting_on_stripe_does_not_block_renewals(db_url, conn, runtime):
    assert runtime.stripe is not None
    runtime.stripe.set_latency(1.5)  # longer than the lease: only renewals keep it
    rec = Recorder()
    async with run_workers(
        db_url, "w", recorder=rec, services=runtime.services, lease_seconds=1.0, pool_size=3
    ):
        job_id = await enqueue(conn, builtin_registry(), "billing", BILL)
        await wait_for(lambda: rec.of(Completed, job_id=job_id), timeout=15, what="charged")
    assert [e.attempt for e in rec.of(Claimed)] == [1]
