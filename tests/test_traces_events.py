"""What only Taskboard knows, on the attempt's span (issue 29): a late renewal, the local
deadline, a lost lease, cancellation, snooze; and an operator's retry, a context of its own
linked to the job's earlier life. Real workers, real PostgreSQL, the in-memory exporter."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from taskboard.core.engine.events import (
    Cancelled,
    Claimed,
    Completed,
    LeaseGivenUp,
    Renewed,
    Snoozed,
    StepCheckpoint,
)
from taskboard.core.kinds import JobContext, JobKind, KindRegistry, builtin_registry
from taskboard.core.queue.job_commands import cancel, retry
from taskboard.core.queue.jobs import enqueue

from tests.conftest import wait_for
from tests.harness import Recorder, run_workers
from tests.test_traces import events, spans  # noqa: F401 (the fixture)


def registry_with(name: str, handler: Any) -> KindRegistry:
    registry = KindRegistry()
    registry.register(JobKind(name, lambda payload: dict(payload or {}), handler))
    return registry


def waiting_kind(until: asyncio.Event) -> KindRegistry:
    """Kind `waits`: its handler passes a checkpoint every 20 ms until `until` is set."""

    async def waits(ctx: JobContext) -> None:
        while not until.is_set():
            await ctx.checkpoint()
            await asyncio.sleep(0.02)

    return registry_with("waits", waits)


def attempt_of(exporter: InMemorySpanExporter, job_id: int) -> list[ReadableSpan]:
    return [
        s for s in exporter.get_finished_spans()
        if s.kind is SpanKind.CONSUMER and s.attributes
        and s.attributes["messaging.message.id"] == str(job_id)
    ]


async def test_a_renewal_sent_late_is_an_event_with_the_margin_left(db_url, conn, spans):  # noqa: F811
    release = asyncio.Event()
    registry = waiting_kind(release)
    rec = Recorder()
    # Lease 6 s: renewals every 2 s, a renewal is late past 3 s, the local deadline is 5 s.
    async with run_workers(db_url, "w", recorder=rec, registry=registry, lease_seconds=6) as [w]:
        job_id = await enqueue(conn, registry, "waits", {})
        await wait_for(lambda: rec.of(Renewed), what="a first renewal", timeout=10)
        # The lever: the worker stalls right after a renewal, for longer than its schedule
        # allows but not past its local deadline, so the next renewal goes out late.
        w.worker.pause()
        await asyncio.sleep(3.6)
        renewed = len(rec.of(Renewed))
        w.worker.resume()
        await wait_for(lambda: len(rec.of(Renewed)) > renewed, what="the late renewal")
        release.set()
        await wait_for(lambda: rec.of(Completed, job_id=job_id), what="completed")
    [attempt] = attempt_of(spans, job_id)
    late = events(attempt)["taskboard.lease.renewal_late"]
    assert 0 < late["taskboard.lease.margin_left_seconds"] < 3.0
    assert attempt.attributes is not None
    assert attempt.attributes["taskboard.outcome"] == "completed"


async def test_a_local_deadline_passed_is_a_lost_lease_with_how_and_when(
    db_url, conn, spans  # noqa: F811
):
    given_up = asyncio.Event()
    registry = waiting_kind(given_up)
    rec = Recorder()
    async with run_workers(db_url, "w", recorder=rec, registry=registry, lease_seconds=1.5):
        job_id = await enqueue(conn, registry, "waits", {})
        await wait_for(lambda: rec.of(Claimed, job_id=job_id), what="claimed")
        # The lever: another session holds the row, so every renewal comes back busy and
        # none is answered before the local deadline.
        async with await psycopg.AsyncConnection.connect(db_url) as holder:
            await holder.execute("SELECT id FROM taskboard_jobs WHERE id = %s FOR UPDATE",
                                 (job_id,))
            await wait_for(lambda: rec.of(LeaseGivenUp, job_id=job_id), what="given up")
            given_up.set()
            await holder.rollback()
    # The first attempt (freed, the row is claimed again before the workers stop).
    attempt = min(attempt_of(spans, job_id), key=lambda s: s.start_time or 0)
    found = events(attempt)
    assert found["taskboard.lease.lost"]["taskboard.lease.lost.how"] == "local deadline"
    # Refused by the deadline loop ("renewal") or by the handler's next checkpoint: a race.
    assert found["taskboard.lease.local_deadline"]["taskboard.refused"]
    assert attempt.status.status_code is StatusCode.ERROR
    assert "deadline passed" in (attempt.status.description or "")


async def test_cancellation_and_snooze_are_events_on_the_attempt(db_url, conn, spans):  # noqa: F811
    async def waits(ctx: JobContext) -> None:
        if ctx.payload.get("snooze"):
            ctx.snooze(600)
        while True:
            await ctx.checkpoint()
            await asyncio.sleep(0.02)

    registry = registry_with("waits", waits)
    rec = Recorder()
    async with run_workers(db_url, "w", recorder=rec, registry=registry, lease_seconds=5):
        cancelled = await enqueue(conn, registry, "waits", {})
        snoozed = await enqueue(conn, registry, "waits", {"snooze": True})
        await wait_for(lambda: rec.of(Claimed, job_id=cancelled), what="claimed")
        await cancel(conn, cancelled)
        await wait_for(lambda: rec.of(Cancelled, job_id=cancelled), what="cancelled")
        await wait_for(lambda: rec.of(Snoozed, job_id=snoozed), what="snoozed")
    [attempt] = attempt_of(spans, cancelled)
    assert "taskboard.cancelled" in events(attempt)
    assert attempt.attributes is not None
    assert attempt.attributes["taskboard.outcome"] == "cancelled"
    [attempt] = attempt_of(spans, snoozed)
    assert events(attempt)["taskboard.snoozed"]["taskboard.run_again_at"]
    assert attempt.status.status_code is StatusCode.UNSET


async def test_a_retried_job_gets_a_context_of_its_own_linked_to_its_first_life(
    db_url, conn, spans  # noqa: F811
):
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("first request") as first:
        job_id = await enqueue(conn, builtin_registry(), "noop", {})
    [enqueued] = [s for s in spans.get_finished_spans() if s.kind is SpanKind.PRODUCER]
    await conn.execute("UPDATE taskboard_jobs SET failed_at = now() WHERE id = %s", (job_id,))
    with tracer.start_as_current_span("operator") as operator:
        await retry(conn, job_id)
    [again] = [s for s in spans.get_finished_spans() if s.name == "retry"]
    assert again.kind is SpanKind.PRODUCER
    assert again.parent is not None
    assert again.parent.span_id == operator.get_span_context().span_id
    [link] = again.links
    assert (link.context.trace_id, link.context.span_id) == (
        first.get_span_context().trace_id, enqueued.context.span_id,
    )
    rec = Recorder()
    async with run_workers(db_url, "w", recorder=rec, lease_seconds=5):
        await wait_for(lambda: rec.of(Completed, job_id=job_id), what="the retry runs")
    [attempt] = attempt_of(spans, job_id)
    assert attempt.parent is not None and attempt.parent.span_id == again.context.span_id


async def test_a_checkpoint_refused_by_the_fence_is_a_step_span_in_error(
    db_url, conn, spans  # noqa: F811
):
    """The race forced as in test_steps: a second connection changes the job's token while
    the step's effect runs, so its checkpoint is refused; the step's span says so, under
    the attempt, with the effect's own span inside it."""
    effect_done = asyncio.Event()
    go_on = asyncio.Event()
    tracer = trace.get_tracer("test")

    async def effect() -> str:
        with tracer.start_as_current_span("the effect"):
            effect_done.set()
            await go_on.wait()
        return "done"

    async def handler(ctx: JobContext) -> None:
        await ctx.step("effect", effect)

    registry = registry_with("racy", handler)
    rec = Recorder()
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as other:
        async with run_workers(db_url, "w", recorder=rec, registry=registry, lease_seconds=5):
            job_id = await enqueue(conn, registry, "racy", {})
            await wait_for(effect_done.is_set, what="the step's effect happened")
            await other.execute("UPDATE taskboard_jobs SET lease_token = gen_random_uuid()"
                                " WHERE id = %s", (job_id,))
            go_on.set()
            await wait_for(lambda: rec.of(StepCheckpoint, outcome="rejected"),
                           what="the checkpoint is refused")
            await wait_for(lambda: attempt_of(spans, job_id), what="the attempt ends")
    [attempt] = attempt_of(spans, job_id)
    finished = spans.get_finished_spans()
    [step] = [s for s in finished if s.name == "step effect"]
    assert step.parent is not None and step.parent.span_id == attempt.context.span_id
    assert step.attributes is not None
    assert step.attributes["taskboard.step.outcome"] == "rejected"
    assert step.attributes["taskboard.step.name"] == "effect"
    assert step.status.status_code is StatusCode.ERROR
    assert "record fenced out" in (step.status.description or "")
    [inner] = [s for s in finished if s.name == "the effect"]
    assert inner.parent is not None and inner.parent.span_id == step.context.span_id
    assert attempt.status.status_code is StatusCode.ERROR


async def test_a_retry_by_filter_is_one_span_per_batch_linked_to_each_jobs_first_life(
    db_url, conn, spans  # noqa: F811
):
    from taskboard.core.operations.job_bulk import JobFilter, retry_matching

    tracer = trace.get_tracer("test")
    ids = []
    for name in ("first request", "second request"):
        with tracer.start_as_current_span(name):
            ids.append(await enqueue(conn, builtin_registry(), "noop", {}))
    enqueued = {int((s.attributes or {})["messaging.message.id"]): s
                for s in spans.get_finished_spans() if s.kind is SpanKind.PRODUCER}
    await conn.execute("UPDATE taskboard_jobs SET failed_at = now() WHERE id = ANY(%s)", (ids,))
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as operator_conn:
        with tracer.start_as_current_span("operator") as operator:
            done = await retry_matching(operator_conn, JobFilter(kind="noop", state="dead"))
    assert done.done == 2
    [again] = [s for s in spans.get_finished_spans() if s.name == "retry"]
    assert again.kind is SpanKind.PRODUCER
    assert again.parent is not None
    assert again.parent.span_id == operator.get_span_context().span_id
    assert again.attributes is not None
    assert again.attributes["messaging.batch.message_count"] == 2
    assert sorted(
        (int((link.attributes or {})["messaging.message.id"]), link.context.span_id)
        for link in again.links
    ) == sorted((i, enqueued[i].context.span_id) for i in ids)
    cur = await conn.execute(
        "SELECT DISTINCT traceparent FROM taskboard_jobs WHERE id = ANY(%s)", (ids,))
    [(stored,)] = await cur.fetchall()
    assert stored.startswith(f"00-{again.context.trace_id:032x}-{again.context.span_id:016x}-")


async def test_a_child_is_enqueued_in_its_own_request_linked_to_each_parent(
    db_url, conn, spans  # noqa: F811
):
    """A dependency: the child belongs to the request that enqueued it, and its enqueue
    span links to each parent's (the parents' completion is what releases it)."""
    tracer = trace.get_tracer("test")
    parents = []
    for name in ("import a", "import b"):
        with tracer.start_as_current_span(name):
            parents.append(await enqueue(conn, builtin_registry(), "noop", {}))
    with tracer.start_as_current_span("report") as report:
        child = await enqueue(conn, builtin_registry(), "noop", {}, after=parents)
    producers = {int((s.attributes or {})["messaging.message.id"]): s
                 for s in spans.get_finished_spans() if s.kind is SpanKind.PRODUCER}
    enqueued = producers[child]
    assert enqueued.parent is not None
    assert enqueued.parent.span_id == report.get_span_context().span_id
    assert sorted(
        (int((link.attributes or {})["messaging.message.id"]), link.context.trace_id,
         link.context.span_id, (link.attributes or {})["taskboard.link"])
        for link in enqueued.links
    ) == sorted(
        (p, producers[p].context.trace_id, producers[p].context.span_id, "after")
        for p in parents
    )
    rec = Recorder()
    async with run_workers(db_url, "w", recorder=rec, lease_seconds=5):
        await wait_for(lambda: rec.of(Completed, job_id=child), what="the child runs")
    [attempt] = attempt_of(spans, child)
    assert attempt.parent is not None and attempt.parent.span_id == enqueued.context.span_id
