"""What the outside world saw is never rolled back (DESIGN invariant 14): the record of a
charge or a send commits on its own, before the fenced completion, and outlives a cancelled
or timed-out attempt. Real workers, the real Stripe SDK against the local endpoint (behind a
proxy that holds the confirm, so the cancel or the timeout lands inside it for certain), and
the real SMTP sink.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest
from aiohttp import ClientSession, web
from taskboard.core.cli.history import history_lines
from taskboard.core.engine.events import (
    Cancelled,
    Completed,
    CompletionRejected,
    Dead,
    Effect,
    Failed,
    LeaseGivenUp,
)
from taskboard.core.engine.flights import Stop
from taskboard.core.kinds import builtin_registry
from taskboard.core.queue.jobs import cancel, enqueue
from taskboard.core.standins.runtime import Runtime, local_runtime
from taskboard.core.view.inspection import job_detail

from tests.conftest import wait_for
from tests.harness import Recorder, RunningWorker, run_stalling_worker, run_workers

BILL = {"customer": "cus_maya", "amount": 1999, "currency": "usd"}
EMAIL = {"to": ["maya@example.com"], "subject": "Your receipt", "text": "Thanks, Maya."}
# Headers the proxy passes on; hop-by-hop ones are aiohttp's to set.
_KEPT = ("content-type", "idempotent-replayed", "idempotency-key", "request-id")


class ConfirmGate:
    """A proxy in front of the Stripe endpoint that holds every confirm until released:
    the test acts while the confirm is in flight, instead of hoping its timing is right."""

    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        self.arrived = asyncio.Event()
        self.release = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def __aenter__(self) -> ConfirmGate:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release.set()
        assert self._runner is not None
        await self._runner.cleanup()

    async def _forward(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.path.endswith("/confirm"):
            self.arrived.set()
            await self.release.wait()
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() not in ("host", "content-length", "transfer-encoding")}
        async with ClientSession() as session, session.request(
            request.method, self.target + request.path_qs, headers=headers, data=body
        ) as answer:
            text = await answer.read()
            kept = {k: v for k, v in answer.headers.items() if k.lower() in _KEPT}
            return web.Response(status=answer.status, body=text, headers=kept)


@pytest.fixture
async def runtime() -> AsyncIterator[Runtime]:
    """The embedded SMTP sink and Stripe endpoint, as `taskboard-tui` runs them."""
    async with local_runtime({}) as rt:
        yield rt


@pytest.fixture
async def gate(runtime: Runtime) -> AsyncIterator[ConfirmGate]:
    assert runtime.stripe is not None
    async with ConfirmGate(runtime.stripe.base_url) as g:
        yield g


def through(runtime: Runtime, gate: ConfirmGate) -> Any:
    """The runtime's services with Stripe reached through the gate."""
    services = runtime.services
    return dataclasses.replace(
        services, stripe=dataclasses.replace(services.stripe, api_base=gate.url)
    )


def flight_of(worker: RunningWorker, job_id: int) -> Any:
    return next((f for f in worker.worker.flights if f.job.id == job_id), None)


async def charges_recorded(conn: Any, job_id: int) -> list[tuple[Any, ...]]:
    cur = await conn.execute(
        "SELECT payment_intent_id FROM taskboard_billing_charges WHERE job_id = %s", (job_id,)
    )
    return await cur.fetchall()


@asynccontextmanager
async def confirm_held(
    db_url: str, conn: Any, runtime: Runtime, gate: ConfirmGate, rec: Recorder, **opts: Any
) -> AsyncIterator[tuple[RunningWorker, int]]:
    """Worker `a`, Stripe reached through the gate, runs a billing job (enqueued with
    `opts`) up to its confirm, held at the gate; the worker and the job's id."""
    assert runtime.stripe is not None
    async with run_workers(
        db_url, "a", recorder=rec, services=through(runtime, gate), lease_seconds=5
    ) as [a]:
        job_id = await enqueue(conn, builtin_registry(), "billing", BILL, **opts)
        await asyncio.wait_for(gate.arrived.wait(), 10)  # the confirm is in flight
        yield a, job_id


async def test_cancel_during_the_stripe_confirm_keeps_the_record_of_the_charge(
    db_url, conn, runtime, gate
):
    """Issue 22 item 2: Stripe charged, the job reads cancelled; the record must survive."""
    rec = Recorder()
    async with confirm_held(db_url, conn, runtime, gate, rec) as (a, job_id):
        await cancel(conn, job_id)
        await wait_for(
            lambda: getattr(flight_of(a, job_id), "stop", None) is Stop.CANCELLED,
            what="the worker heard the cancel while its confirm was held",
        )
        gate.release.set()  # Stripe moves the money now, after the cancel
        await wait_for(lambda: flight_of(a, job_id) is None, what="the attempt is over")
    [charged] = [c for c in runtime.stripe.charges() if c.job_id == job_id]
    assert await charges_recorded(conn, job_id) == [(charged.payment_intent,)]
    cur = await conn.execute(
        "SELECT attempt, worker_id, status FROM taskboard_billing_charges WHERE job_id = %s",
        (job_id,),
    )
    assert await cur.fetchall() == [(1, "a", "succeeded")]
    assert rec.of(Completed, job_id=job_id) == []
    detail = await job_detail(conn, job_id)
    assert detail.state == "cancelled"
    lines = history_lines(detail)
    assert (
        f"  charged 19.99 USD (attempt 1, worker a), then cancelled: {charged.payment_intent}"
        in lines
    )


async def test_timeout_during_the_confirm_on_the_last_attempt_is_dead_charged_and_recorded(
    db_url, conn, runtime, gate
):
    rec = Recorder()
    async with confirm_held(
        db_url, conn, runtime, gate, rec, timeout=1, max_attempts=1
    ) as (a, job_id):
        await wait_for(
            lambda: getattr(flight_of(a, job_id), "timed_out", None),
            what="the timeout fired while the confirm was held",
        )
        gate.release.set()
        await wait_for(lambda: rec.of(Dead, job_id=job_id), what="dead: timed out")
    [dead] = rec.of(Dead, job_id=job_id)
    assert "timed out after 1 s" in dead.error
    [charged] = [c for c in runtime.stripe.charges() if c.job_id == job_id]
    assert await charges_recorded(conn, job_id) == [(charged.payment_intent,)]
    lines = history_lines(await job_detail(conn, job_id))
    assert any(line.startswith("  charged 19.99 USD (attempt 1, worker a), then dead")
               for line in lines)


async def test_an_email_job_cancelled_after_its_send_keeps_the_send_record(
    db_url, conn, runtime
):
    assert runtime.sink is not None
    rec = Recorder()
    # A stalls right after its send, before it can mark the job complete.
    async with run_stalling_worker(
        db_url, "a", recorder=rec, services=runtime.services, lease_seconds=5
    ) as a:
        job_id = await enqueue(conn, builtin_registry(), "email", EMAIL)
        await wait_for(lambda: rec.of(Effect, job_id=job_id), what="sent")
        await cancel(conn, job_id)
        a.worker.resume()
        # However the worker hears of it (NOTIFY while paused, or the fenced completion),
        # the attempt ends without completing.
        ended = (LeaseGivenUp, Cancelled, CompletionRejected, Completed)
        await wait_for(
            lambda: [e for kind in ended for e in rec.of(kind, job_id=job_id)],
            what="the attempt's outcome",
        )
    assert rec.of(Completed, job_id=job_id) == []
    [received] = runtime.sink.messages()
    cur = await conn.execute(
        "SELECT job_id, attempt, message_id, recipient, worker_id FROM taskboard_email_sends"
    )
    assert await cur.fetchall() == [
        (job_id, 1, received.message_id, "maya@example.com", "a")
    ]
    detail = await job_detail(conn, job_id)
    assert detail.state == "cancelled"
    assert (
        f"  sent {received.message_id} to maya@example.com, attempt 1 by worker a, "
        "then cancelled" in history_lines(detail)
    )


async def test_a_record_the_database_cannot_take_is_kept_and_written_later_without_failing_the_job(
    db_url, conn, runtime
):
    rec = Recorder()
    async with sends_locked(db_url) as locker:
        async with run_workers(
            db_url, "a", recorder=rec, services=runtime.services, lease_seconds=3
        ):
            # The effect happened: the job completes, not fails, while its record waits.
            job_id = await email_completed(conn, runtime, rec)
            assert rec.of(Failed, job_id=job_id) == []
            await locker.rollback()
            await wait_for(
                lambda: sends_of(conn, job_id), what="the kept record written", timeout=15
            )
    [message] = runtime.sink.messages()
    assert await sends_of(conn, job_id) == [(message.message_id, "maya@example.com", 1)]


@asynccontextmanager
async def sends_locked(db_url: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """Another session holds the send records' table: every write of a record fails
    (lock_timeout) until it lets go (`rollback`, or the block's end)."""
    async with await psycopg.AsyncConnection.connect(db_url) as locker:
        await locker.execute("LOCK TABLE taskboard_email_sends IN ACCESS EXCLUSIVE MODE")
        yield locker


async def email_completed(conn: Any, runtime: Runtime, rec: Recorder) -> int:
    """Enqueue the email, wait for a worker to complete it; its id."""
    assert runtime.sink is not None
    job_id = await enqueue(conn, builtin_registry(), "email", EMAIL)
    await wait_for(lambda: rec.of(Completed, job_id=job_id), what="completed")
    return job_id


async def sends_of(conn: Any, job_id: int) -> list[tuple[Any, ...]]:
    cur = await conn.execute(
        "SELECT message_id, recipient, attempt FROM taskboard_email_sends WHERE job_id = %s",
        (job_id,),
    )
    return await cur.fetchall()


async def test_a_worker_that_stops_with_a_record_unwritten_logs_it_in_full(
    db_url, conn, runtime, caplog
):
    rec = Recorder()
    async with sends_locked(db_url):
        async with run_workers(
            db_url, "a", recorder=rec, services=runtime.services, lease_seconds=3
        ):
            job_id = await email_completed(conn, runtime, rec)
        # The worker has stopped; the table was locked all along.
    [message] = runtime.sink.messages()
    lost = [r for r in caplog.records if r.getMessage().startswith("effect record not written")]
    assert lost, "an unwritten record must be logged, never dropped silently"
    fields = lost[0].fields  # type: ignore[attr-defined]
    assert fields["record"]["message_id"] == message.message_id
    assert fields["record"]["job_id"] == job_id and fields["record"]["attempt"] == 1
    assert await sends_of(conn, job_id) == []


async def test_a_send_recorded_after_its_job_was_pruned_is_kept_and_prune_takes_sends_with_jobs(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    """A worker that stalled, or retried its record write after a restart, may write a send
    record after retention deleted the job: the send happened, so the record is taken (a
    foreign key would refuse it for ever and the worker's record role would fail on it).
    Retention deletes a job's sends with the job in the same statement."""
    from taskboard.core import sql
    from taskboard.core.operations.retention import Retention, prune

    job_id = await enqueue(conn, builtin_registry(), "noop", {})
    await conn.execute(
        "UPDATE taskboard_jobs SET completed_at = now() - interval '2 days' WHERE id = %s",
        (job_id,),
    )
    send = {"attempt": 1, "message_id": "<m@x>", "recipients": ["a@example.com"],
            "worker_id": "w"}
    await conn.execute(sql.RECORD_SENDS, {"job_id": job_id, **send})
    done = await prune(conn, Retention())
    assert done.jobs == 1
    cur = await conn.execute("SELECT count(*) FROM taskboard_email_sends")
    assert await cur.fetchone() == (0,)

    # The late record of the pruned job: taken, and kept.
    await conn.execute(sql.RECORD_SENDS, {"job_id": job_id, **send})
    cur = await conn.execute("SELECT job_id, message_id FROM taskboard_email_sends")
    assert await cur.fetchall() == [(job_id, "<m@x>")]
