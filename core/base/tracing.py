"""Traces: every OpenTelemetry call Taskboard makes, here and in `tracing_attempts` (the
attempt's span and its events).

Only the API is used; with no SDK configured each call here takes a short path of well
under a microsecond and makes no span (`active`; measured by bench/tracing_cost.py, figures
in the README's Traces section). Spans follow the
OpenTelemetry messaging conventions (`messaging.*`) plus Taskboard's own (`taskboard.*`):

- a PRODUCER span per enqueue (one per batch, with the count); its W3C context is what the
  job row stores (`traceparent`, `tracestate`), so the job carries its trace;
- a CONSUMER span per attempt, a child of the stored context (and linked to it), so every
  attempt, however late and on whichever machine, is in the enqueuer's trace;
- events on the attempt for what only Taskboard knows (late renewal, lease lost, local
  deadline, completion rejected by the fence, cancellation, snooze);
- CLIENT spans for the SMTP send and the Stripe request, with the keys that make them
  idempotent, so a duplicate email is two spans with one Message-ID in one trace.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

SYSTEM = "taskboard"
tracer = trace.get_tracer("taskboard")
# W3C trace context whatever propagator the user configured globally: the columns are
# named after its two headers, and a job enqueued by one service is run by another.
_W3C = TraceContextTextMapPropagator()

Carried = dict[str, str | None]
"""What a job row stores: {"traceparent": ..., "tracestate": ...} (None when untraced)."""

NOT_TRACED: Carried = {"traceparent": None, "tracestate": None}
# How long "no SDK" is believed before the provider is looked at again (`active`).
LOOK_AGAIN_SECONDS = 1.0
_active = False
_next_look = 0.0


def look() -> bool:
    """Whether a tracer provider (an SDK) is installed, asked of the API: the global
    provider is still the API's proxy until one is set (`trace.set_tracer_provider`, or
    `OTEL_PYTHON_TRACER_PROVIDER`, which this call loads). A provider is set once per
    process, so once seen it stays. Costs about a microsecond with no SDK (the API looks
    at the environment each time), so the hot paths ask `active` instead."""
    global _active, _next_look
    if not _active:
        _active = not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
        _next_look = time.monotonic() + LOOK_AGAIN_SECONDS
    return _active


def active() -> bool:
    """`look`, with "no SDK" believed for up to `LOOK_AGAIN_SECONDS`. Without an SDK every
    call here takes a short path (no span; the caller's context, if any, passed on): the
    API's no-op spans cost several microseconds per job, a tenth or more of a no-op job's
    attempt on the worker's CPU. An enqueue looks every time (a provider set just before it
    is seen at once); a worker's attempts, by the clock: a provider set after workers
    started is seen within a second."""
    if _active:
        return True
    if time.monotonic() < _next_look:
        return False
    return look()


def _carry() -> Carried:
    """The current context in W3C form, as the row stores it."""
    headers: dict[str, str] = {}
    _W3C.inject(headers)
    if "traceparent" not in headers:
        return NOT_TRACED
    return {"traceparent": headers["traceparent"], "tracestate": headers.get("tracestate")}


def context_of(traceparent: str | None, tracestate: str | None) -> otel_context.Context | None:
    """The context a row stored, or None."""
    if not traceparent:
        return None
    headers = {"traceparent": traceparent}
    if tracestate:
        headers["tracestate"] = tracestate
    ctx = _W3C.extract(headers)
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def _link_to(traceparent: str | None, tracestate: str | None, why: str) -> list[Link]:
    ctx = context_of(traceparent, tracestate)
    if ctx is None:
        return []
    return [Link(trace.get_current_span(ctx).get_span_context(), {"taskboard.link": why})]


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id (32 hex digits) in a stored `traceparent`, for operators to paste into
    a trace viewer; None if there is none or it is malformed."""
    if not traceparent:
        return None
    parts = traceparent.split("-")
    if len(parts) < 4 or len(parts[1]) != 32 or parts[1] == "0" * 32:
        return None
    try:
        int(parts[1], 16)
    except ValueError:
        return None
    return parts[1]


# --- enqueue -------------------------------------------------------------------------------


class Enqueuing:
    """The producer span of one enqueue; `carried` is the context to store in its rows."""

    def __init__(self, span: Span | None) -> None:
        self.span = span
        # With no span (no SDK) what travels is the caller's context as it came, if any.
        self.carried: Carried = (
            _carry() if span is not None or trace.get_current_span().get_span_context().is_valid
            else NOT_TRACED
        )

    def enqueued(self, ids: Sequence[int]) -> None:
        """The ids the enqueue gave (the message id, for a single job)."""
        if len(ids) == 1 and self.span is not None and self.span.is_recording():
            self.span.set_attribute("messaging.message.id", str(ids[0]))

    def caused_by(
        self, traceparent: str | None, tracestate: str | None, why: str,
        job_id: int | None = None,
    ) -> None:
        """Link the span to the stored context of what caused it (the schedule's `add`, the
        job's previous life, a parent the job waits on: `job_id`)."""
        if self.span is None or not self.span.is_recording():
            return
        for link in _link_to(traceparent, tracestate, why):
            attrs = dict(link.attributes or {})
            if job_id is not None:
                attrs["messaging.message.id"] = str(job_id)
            self.span.add_link(link.context, attrs)

    def note(self, key: str, value: str | bool | int) -> None:
        """An attribute for the span (if it records)."""
        if self.span is not None and self.span.is_recording():
            self.span.set_attribute(key, value)

    def __enter__(self) -> Enqueuing:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def _producer_attributes(kinds: Sequence[str], queues: Sequence[str], n: int) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "send",
        "messaging.operation.name": "enqueue",
    }
    distinct_queues = set(queues)
    if len(distinct_queues) == 1:
        attrs["messaging.destination.name"] = queues[0]
    if n != 1:
        attrs["messaging.batch.message_count"] = n
    distinct_kinds = set(kinds)
    if len(distinct_kinds) == 1:
        attrs["taskboard.job.kind"] = kinds[0]
    return attrs


def _producer_name(queues: Sequence[str]) -> str:
    distinct = set(queues)
    return f"enqueue {queues[0]}" if len(distinct) == 1 else "enqueue"


def enqueuing(jobs: Sequence[Any]) -> contextlib.AbstractContextManager[Enqueuing]:
    """The producer span around one enqueue of `jobs` (NewJobs, checked later: a batch
    refused for a job that is not one is still an enqueue that failed, on the caller's
    trace); a batch is one span, with its count."""
    return _enqueue_span(jobs) if look() else Enqueuing(None)


@contextlib.contextmanager
def _enqueue_span(jobs: Sequence[Any]) -> Iterator[Enqueuing]:
    kinds = [getattr(job, "kind", "?") for job in jobs]
    queues = [getattr(job, "queue", "?") for job in jobs]
    with tracer.start_as_current_span(
        _producer_name(queues), kind=SpanKind.PRODUCER,
        attributes=_producer_attributes(kinds, queues, len(kinds)),
    ) as span:
        yield Enqueuing(span)


@contextlib.contextmanager
def firing(
    schedule: str, slot: datetime, kind: str, queue: str
) -> Iterator[Firing]:
    """The producer span of a schedule's slot: a trace of its own (nothing the worker was
    doing caused it), linked by `Firing.caused_by` to the context the schedule was added
    under."""
    look()  # an enqueue: the attempts after it see a provider set just before
    attrs = _producer_attributes([kind], [queue], 1)
    attrs["taskboard.schedule.name"] = schedule
    attrs["taskboard.schedule.slot"] = slot.isoformat()
    with tracer.start_as_current_span(
        _producer_name([queue]), context=otel_context.Context(), kind=SpanKind.PRODUCER,
        attributes=attrs,
    ) as span:
        yield Firing(span)


class Firing(Enqueuing):
    """A job enqueued by something other than its caller's request: a schedule's slot, an
    operator's retry."""


@contextlib.contextmanager
def retrying(job_id: int | None = None) -> Iterator[Firing]:
    """The producer span of an operator's retry: the job gets this context (a child of the
    operator's, if any: with none, a trace of its own), linked to the trace of its earlier
    attempts. A retry by filter is one span per batch (`job_id` None), linked to each job's
    earlier context."""
    look()  # an enqueue: the attempts after it see a provider set just before
    attrs: dict[str, Any] = {"messaging.system": SYSTEM, "messaging.operation.type": "send",
                             "messaging.operation.name": "retry"}
    if job_id is not None:
        attrs["messaging.message.id"] = str(job_id)
    with tracer.start_as_current_span("retry", kind=SpanKind.PRODUCER, attributes=attrs) as span:
        yield Firing(span)


def current() -> Carried:
    """The current context as a row stores it (a schedule keeps the one it was added under)."""
    return _carry()


# --- external effects ----------------------------------------------------------------------


@contextlib.contextmanager
def smtp_send(message_id: str, recipients: int, relay: str) -> Iterator[None]:
    """A CLIENT span around one SMTP send; the Message-ID is what receivers de-duplicate by."""
    with tracer.start_as_current_span(
        "smtp send", kind=SpanKind.CLIENT,
        attributes={"taskboard.email.message_id": message_id,
                    "taskboard.email.recipients": recipients, "server.address": relay},
    ):
        yield


@contextlib.contextmanager
def stripe_request(idempotency_key: str, operation: str) -> Iterator[None]:
    """A CLIENT span around one Stripe request, with the key that makes a replay safe."""
    with tracer.start_as_current_span(
        f"stripe {operation}", kind=SpanKind.CLIENT,
        attributes={"taskboard.stripe.idempotency_key": idempotency_key,
                    "taskboard.stripe.operation": operation},
    ):
        yield
