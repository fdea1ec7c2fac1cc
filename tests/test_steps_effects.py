"""Durable steps against the real outside world: worker processes SIGKILLed between steps
(the Stripe endpoint counts the requests), and a send in flight while the lease was lost
(the SMTP sink counts the copies; the refused checkpoint is in the job's history)."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from taskboard.core.cli.history import history_lines
from taskboard.core.engine.events import Claimed, Completed, LeaseGivenUp, StepCheckpoint
from taskboard.core.kinds import builtin_registry
from taskboard.core.queue.enqueueing import enqueue
from taskboard.core.standins.runtime import Runtime, local_runtime
from taskboard.core.standins.stripe_endpoint import StripeEndpoint
from taskboard.core.view.inspection import job_detail

from tests.conftest import wait_for
from tests.faults.harness import spawn_worker
from tests.harness import Recorder, run_workers

BILL = {"customer": "cus_maya", "amount": 1999, "currency": "usd"}
EMAIL = {"to": ["maya@example.com"], "subject": "Your receipt", "text": "Thanks, Maya."}


async def recorded_steps(conn: Any, job_id: int) -> list[tuple[str, str, int]]:
    cur = await conn.execute(
        "SELECT name, outcome, attempt FROM taskboard_steps WHERE job_id = %s ORDER BY id",
        (job_id,),
    )
    return [tuple(r) for r in await cur.fetchall()]


async def completed(conn: Any, job_id: int) -> bool:
    cur = await conn.execute(
        "SELECT completed_at IS NOT NULL FROM taskboard_jobs WHERE id = %s", (job_id,)
    )
    return bool((await cur.fetchone())[0])


async def test_a_worker_killed_after_create_leaves_one_intent_to_the_next_process(
    db_url: str, conn: Any, endpoint: StripeEndpoint, tmp_path: Path
) -> None:
    """SIGKILL after step 1 (create) was recorded: another worker process completes the job
    without creating a second PaymentIntent; Stripe's side sees one create and one charge."""
    env = {"TASKBOARD_STRIPE_API_BASE": endpoint.base_url}
    endpoint.set_latency(1.5)  # each request takes a while: A dies inside `confirm`
    job_id = await enqueue(conn, builtin_registry(), "billing", BILL)
    a = spawn_worker(db_url, "proc-a", tmp_path / "a.log", lease=1.0, env=env)
    b = None
    try:
        await wait_for(lambda: recorded_steps(conn, job_id), timeout=20,
                       what="A records step 1 (create)")
        os.kill(a.pid, signal.SIGKILL)
        a.wait(10)
        endpoint.set_latency(0)
        b = spawn_worker(db_url, "proc-b", tmp_path / "b.log", lease=5.0, env=env)
        await wait_for(lambda: completed(conn, job_id), timeout=30, what="B completes the job")
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(15)
    creates = [r for r in endpoint.requests()
               if r.method == "POST" and r.path == "/v1/payment_intents"]
    assert len(creates) == 1 and creates[0].attempt == 1  # B never asked for another intent
    assert len([c for c in endpoint.charges() if c.job_id == job_id]) == 1
    steps = await recorded_steps(conn, job_id)
    assert steps[0] == ("create", "recorded", 1)
    assert ("confirm", "recorded") in [(n, o) for n, o, _ in steps]


@pytest.fixture
async def runtime() -> AsyncIterator[Runtime]:
    async with local_runtime({}) as rt:
        yield rt


async def test_a_send_in_flight_when_the_lease_is_lost_is_refused_and_sent_again(
    db_url: str, conn: Any, runtime: Runtime
) -> None:
    """A's send is at the relay (slow to answer) when A stalls past its lease; B reclaims
    and sends. A's checkpoint then meets the fence: refused, kept, shown in history. The
    in-flight step is the one that repeats (two copies, one Message-ID)."""
    sink = runtime.sink
    assert sink is not None
    sink.set_latency(5.0)
    rec = Recorder()
    async with run_workers(db_url, "a", recorder=rec, services=runtime.services,
                           lease_seconds=1.0) as [a]:
        job_id = await enqueue(conn, builtin_registry(), "email", EMAIL)
        # A's SMTP session has begun: its send step is past the lease check.
        await wait_for(lambda: len(sink._started) > 0, what="A's send reaches the relay")
        a.worker.pause()  # no more renewals: the lease runs out while the relay thinks
        async with run_workers(db_url, "b", recorder=rec, services=runtime.services,
                               lease_seconds=30):
            await wait_for(lambda: rec.of(Claimed, worker_id="b"), what="B reclaims")
            sink.set_latency(0)
            await wait_for(lambda: rec.of(Completed, worker_id="b"), what="B sends, completes")
            await wait_for(lambda: rec.of(StepCheckpoint, worker_id="a", outcome="rejected"),
                           what="A's late checkpoint is refused", timeout=15)
            a.worker.resume()
            await wait_for(lambda: rec.of(LeaseGivenUp, worker_id="a"), what="A gives up")
    copies = sink.count_by_message_id()
    assert list(copies.values()) == [2]
    steps = await recorded_steps(conn, job_id)
    assert ("send", "rejected", 1) in steps and ("send", "recorded", 2) in steps
    text = "\n".join(history_lines(await job_detail(conn, job_id)))
    assert "send  claim #1  a" in text and "rejected: effect happened, record fenced out" in text
