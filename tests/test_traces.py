"""Traces across the queue (issue 29): the SDK's in-memory exporter around real workers, a
real SMTP sink and a real PostgreSQL.

The SDK's provider is global and set once per process, so it is installed once with a
sampler that records only while a test of this module runs: elsewhere it samples nothing,
and the engine behaves as it does with no SDK.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind, StatusCode
from opentelemetry.util.types import Attributes
from taskboard.core.base import tracing
from taskboard.core.cli.history import history_lines
from taskboard.core.engine.events import Completed, CompletionRejected, Effect
from taskboard.core.kinds import builtin_registry
from taskboard.core.operations import schedules
from taskboard.core.queue.jobs import NewJob, enqueue, enqueue_many
from taskboard.core.standins.runtime import Runtime, local_runtime
from taskboard.core.view.inspection import job_detail

from tests.conftest import wait_for
from tests.harness import Recorder, run_stalling_worker, run_workers

EMAIL = {"to": ["maya@example.com"], "subject": "Welcome", "text": "Hello, Maya."}


class _WhileOn(Sampler):
    """Samples everything while `on`, nothing otherwise."""

    on = False

    def should_sample(
        self, parent_context: Context | None, trace_id: int, name: str,
        kind: SpanKind | None = None, attributes: Attributes = None,
        links: Sequence[Link] | None = None, trace_state: Any = None,
    ) -> SamplingResult:
        if not self.on:
            return SamplingResult(Decision.DROP)
        return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes)

    def get_description(self) -> str:
        return "taskboard tests: on while a trace test runs"


_SAMPLER = _WhileOn()
_EXPORTER = InMemorySpanExporter()


def _install() -> None:
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        return
    provider = TracerProvider(sampler=_SAMPLER)
    provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    trace.set_tracer_provider(provider)
    # Workers of earlier tests may have looked a moment ago and believe "no SDK" for up to
    # a second (tracing.active): a test's first attempt must not be missed.
    tracing.look()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The exporter, recording for this test only."""
    _install()
    _EXPORTER.clear()
    _SAMPLER.on = True
    try:
        yield _EXPORTER
    finally:
        _SAMPLER.on = False
        _EXPORTER.clear()


@pytest.fixture
async def runtime() -> AsyncIterator[Runtime]:
    """The embedded SMTP sink and Stripe endpoint."""
    async with local_runtime({}) as rt:
        yield rt


def of_trace(exporter: InMemorySpanExporter, trace_id: int) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.context.trace_id == trace_id]


def named(found: Sequence[ReadableSpan], kind: SpanKind) -> list[ReadableSpan]:
    return [s for s in found if s.kind is kind]


def events(span: ReadableSpan) -> dict[str, dict[str, Any]]:
    return {e.name: dict(e.attributes or {}) for e in span.events}


async def test_one_trace_from_the_request_to_both_attempts_and_the_one_send(
    db_url, conn, runtime, spans
):
    """The seed's timeline in one trace: the request that enqueued the email, A's attempt
    (sent, stalled, reclaimed, its completion rejected by the fence) and B's (the recorded
    send replayed, not repeated; completed)."""
    tracer = trace.get_tracer("test")
    rec = Recorder()
    # A stalls right after its send, before it can mark the job complete.
    async with run_stalling_worker(
        db_url, "a", recorder=rec, services=runtime.services, lease_seconds=1.0
    ) as a:
        with tracer.start_as_current_span("POST /signup") as request:
            job_id = await enqueue(conn, builtin_registry(), "email", EMAIL)
        await wait_for(lambda: rec.of(Effect, worker_id="a"), what="A sent the email")
        async with run_workers(
            db_url, "b", recorder=rec, services=runtime.services, lease_seconds=30
        ):
            await wait_for(lambda: rec.of(Completed, worker_id="b"), what="B reclaims, completes")
            a.worker.resume()
            await wait_for(lambda: rec.of(CompletionRejected, worker_id="a"), what="A fenced")

    found = of_trace(spans, request.get_span_context().trace_id)
    [enqueue_span] = named(found, SpanKind.PRODUCER)
    assert enqueue_span.parent is not None
    assert enqueue_span.parent.span_id == request.get_span_context().span_id
    assert enqueue_span.attributes is not None
    assert enqueue_span.attributes["messaging.system"] == "taskboard"
    assert enqueue_span.attributes["messaging.operation.type"] == "send"
    assert enqueue_span.attributes["messaging.destination.name"] == "default"
    assert enqueue_span.attributes["messaging.message.id"] == str(job_id)

    attempts = sorted(named(found, SpanKind.CONSUMER), key=lambda s: s.start_time or 0)
    assert [s.attributes["taskboard.worker.id"] for s in attempts if s.attributes] == ["a", "b"]
    for attempt in attempts:
        assert attempt.parent is not None and attempt.parent.span_id == enqueue_span.context.span_id
        assert [link.context.span_id for link in attempt.links] == [enqueue_span.context.span_id]
        assert attempt.attributes is not None
        assert attempt.attributes["messaging.operation.type"] == "process"
        assert attempt.attributes["messaging.message.id"] == str(job_id)
        assert attempt.attributes["taskboard.job.kind"] == "email"
    first, second = attempts
    assert first.attributes is not None and second.attributes is not None
    assert first.attributes["taskboard.outcome"] == "rejected"
    assert first.status.status_code is StatusCode.ERROR
    assert "lease lost" in (first.status.description or "")
    rejected = events(first)["taskboard.completion.rejected"]
    assert rejected["taskboard.lease.token"] == first.attributes["taskboard.lease.token"]
    assert "token mismatch" in rejected["taskboard.reason"]
    assert "taskboard.lease.lost" in events(first)
    assert second.attributes["taskboard.outcome"] == "completed"
    assert second.attributes["taskboard.reclaim"] is True
    assert second.attributes["taskboard.reclaim.previous_worker"] == "a"
    assert second.status.status_code is StatusCode.UNSET

    # A span per step under each attempt: A ran and recorded both; B replayed both.
    steps = {
        attempt.context.span_id: [
            (s.name, (s.attributes or {})["taskboard.step.outcome"])
            for s in sorted(found, key=lambda s: s.start_time or 0)
            if s.name.startswith("step ") and s.parent
            and s.parent.span_id == attempt.context.span_id
        ]
        for attempt in attempts
    }
    assert steps == {
        first.context.span_id: [("step render", "recorded"), ("step send", "recorded")],
        second.context.span_id: [("step render", "replayed"), ("step send", "replayed")],
    }

    # One send, under A's `send` step: it was recorded under A's lease, so B replayed it
    # instead of sending again (durable steps).
    [a_send] = [s for s in found if s.name == "step send" and s.parent
                and s.parent.span_id == first.context.span_id]
    sends = [s for s in named(found, SpanKind.CLIENT) if s.name == "smtp send"]
    assert [s.parent.span_id for s in sends if s.parent] == [a_send.context.span_id]
    ids = {s.attributes["taskboard.email.message_id"] for s in sends if s.attributes}
    assert runtime.sink is not None
    assert ids == {m.message_id for m in runtime.sink.messages()}
    assert len(ids) == 1 and len(sends) == 1

    # The operator finds the trace from the job.
    detail = await job_detail(conn, job_id)
    assert detail.trace_id == f"{request.get_span_context().trace_id:032x}"
    assert f"trace {detail.trace_id}" in history_lines(detail)


async def test_a_batch_is_one_enqueue_span_with_its_count_and_every_job_joins_it(
    db_url, conn, spans
):
    tracer = trace.get_tracer("test")
    rec = Recorder()
    with tracer.start_as_current_span("import") as request:
        ids = await enqueue_many(
            conn, builtin_registry(),
            [NewJob("noop", {}), NewJob("noop", {}), NewJob("noop", {}, unique_key="k")],
        )
    found = of_trace(spans, request.get_span_context().trace_id)
    [batch] = named(found, SpanKind.PRODUCER)
    assert batch.attributes is not None
    assert batch.attributes["messaging.batch.message_count"] == 3
    assert "messaging.message.id" not in batch.attributes
    cur = await conn.execute(
        "SELECT DISTINCT traceparent FROM taskboard_jobs WHERE id = ANY(%s)", (ids,)
    )
    [(stored,)] = await cur.fetchall()
    # The enqueue span's own context (flags vary with the SDK: sampled, random).
    assert stored.startswith(f"00-{batch.context.trace_id:032x}-{batch.context.span_id:016x}-")
    async with run_workers(db_url, "w", recorder=rec, lease_seconds=5):
        await wait_for(lambda: len(rec.of(Completed)) == 3, what="the batch completes")
    found = of_trace(spans, request.get_span_context().trace_id)
    attempts = named(found, SpanKind.CONSUMER)
    assert sorted(s.attributes["messaging.message.id"] for s in attempts if s.attributes) == sorted(
        str(i) for i in ids
    )
    assert {s.parent.span_id for s in attempts if s.parent} == {batch.context.span_id}


async def test_a_scheduled_job_has_a_trace_of_its_own_linked_to_the_schedule(db_url, conn, spans):
    tracer = trace.get_tracer("test")
    rec = Recorder()
    with tracer.start_as_current_span("deploy") as deploy:
        await schedules.add_schedule(
            conn, builtin_registry(), schedules.Schedule("tick", "* * * * * *", "noop")
        )
    async with run_workers(db_url, "w", recorder=rec, lease_seconds=5):
        [done, *_] = await wait_for(lambda: rec.of(Completed), what="a slot runs")
    finished = spans.get_finished_spans()
    [attempt] = [
        s for s in finished
        if s.kind is SpanKind.CONSUMER and s.attributes
        and s.attributes["messaging.message.id"] == str(done.job_id)
    ]
    [firing] = [s for s in finished if attempt.parent and s.context.span_id == attempt.parent.span_id]
    assert firing.kind is SpanKind.PRODUCER
    assert firing.attributes is not None
    assert firing.attributes["taskboard.schedule.name"] == "tick"
    # Its own trace, not the deploy's: the schedule did not run inside that request...
    assert firing.parent is None
    assert firing.context.trace_id != deploy.get_span_context().trace_id
    # ...but it says what caused it.
    [link] = firing.links
    assert link.context.span_id == deploy.get_span_context().span_id
    assert link.context.trace_id == deploy.get_span_context().trace_id


def test_trace_id_of_reads_only_well_formed_traceparents():
    good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert tracing.trace_id_of(good) == "4bf92f3577b34da6a3ce929d0e0e4736"
    for bad in (None, "", "garbage", "00-" + "0" * 32 + "-00f067aa0ba902b7-01",
                "00-zzf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"):
        assert tracing.trace_id_of(bad) is None


async def test_a_sync_enqueue_carries_the_trace_and_a_plain_handler_runs_inside_its_attempt(
    db_url, conn, spans
):
    """A WSGI application's enqueue on a sync connection, and a `def` handler in the
    worker's thread pool: both in the request's trace (the thread gets the attempt's
    context, so the handler's logs and spans join it)."""
    from taskboard.core import KindRegistry, SyncJobContext
    from taskboard.core import enqueue as public_enqueue

    seen: list[tuple[int, int]] = []
    registry = KindRegistry()

    @registry.kind("plain")
    def plain(ctx: SyncJobContext) -> None:
        here = trace.get_current_span().get_span_context()
        seen.append((here.trace_id, here.span_id))

    tracer = trace.get_tracer("test")
    rec = Recorder()
    with psycopg.connect(db_url) as sync_conn, tracer.start_as_current_span("GET /") as request:
        job_id = public_enqueue(sync_conn, registry, "plain", {})
        sync_conn.commit()
    async with run_workers(db_url, "w", recorder=rec, registry=registry, lease_seconds=5):
        await wait_for(lambda: rec.of(Completed, job_id=job_id), what="the plain handler ran")
    [enqueued] = [s for s in spans.get_finished_spans() if s.kind is SpanKind.PRODUCER]
    assert enqueued.parent is not None
    assert enqueued.parent.span_id == request.get_span_context().span_id
    [attempt] = [s for s in spans.get_finished_spans() if s.kind is SpanKind.CONSUMER]
    assert attempt.parent is not None and attempt.parent.span_id == enqueued.context.span_id
    assert seen == [(attempt.context.trace_id, attempt.context.span_id)]
