"""psycopg's own OpenTelemetry instrumentation (`opentelemetry-instrumentation-psycopg`, as a
user installs it) nests its query spans under Taskboard's: the enqueue's statement under
the enqueue span, a handler's query under its attempt. In-process workers, real PostgreSQL,
the in-memory exporter of test_traces."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from taskboard.core.engine.events import Completed
from taskboard.core.kinds import JobContext, JobKind, KindRegistry
from taskboard.core.queue.jobs import enqueue

from tests.conftest import wait_for
from tests.harness import Recorder, run_workers
from tests.test_traces import spans  # noqa: F401 (the fixture)

MARK = "SELECT 'asked by the handler' AS marker"


@pytest.fixture
def instrumented(spans: InMemorySpanExporter) -> Iterator[InMemorySpanExporter]:  # noqa: F811
    """Every psycopg connection opened meanwhile is instrumented (the workers' pools too);
    undone after, so no other test runs with it."""
    instrumentor = PsycopgInstrumentor()
    instrumentor.instrument(tracer_provider=trace.get_tracer_provider())
    try:
        yield spans
    finally:
        instrumentor.uninstrument()


async def test_psycopg_query_spans_nest_under_the_enqueue_and_the_attempt(
    db_url: str, instrumented: InMemorySpanExporter
) -> None:
    import psycopg

    async def asks(ctx: JobContext) -> None:
        await ctx.conn.execute(MARK)

    registry = KindRegistry()
    registry.register(JobKind("asks", lambda p: dict(p or {}), asks, writes_db=True))
    tracer = trace.get_tracer("test")
    rec = Recorder()
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        with tracer.start_as_current_span("POST /ask"):
            job_id = await enqueue(conn, registry, "asks", {})
    async with run_workers(db_url, "w", recorder=rec, registry=registry, lease_seconds=5):
        await wait_for(lambda: rec.of(Completed, job_id=job_id), what="the handler ran")
    finished = instrumented.get_finished_spans()
    by_id = {s.context.span_id: s for s in finished}

    def parent_of(span: Any) -> Any:
        return by_id.get(span.parent.span_id) if span.parent else None

    [producer] = [s for s in finished if s.kind is SpanKind.PRODUCER]
    inserts = [s for s in finished if s.kind is SpanKind.CLIENT
               and "INSERT INTO taskboard_jobs" in str((s.attributes or {}).get("db.statement"))]
    assert inserts and all(parent_of(s) is producer for s in inserts), [s.name for s in finished]
    [attempt] = [s for s in finished if s.kind is SpanKind.CONSUMER]
    [query] = [s for s in finished if MARK in str((s.attributes or {}).get("db.statement"))]
    assert query.kind is SpanKind.CLIENT
    assert parent_of(query) is attempt
    assert query.context.trace_id == producer.context.trace_id
