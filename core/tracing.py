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
import os
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
_active = False
_UNKNOWN = object()
_PROVIDER_FROM_ENV = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ


def active() -> bool:
    """Whether a tracer provider (an SDK) is installed. Without one every call here takes a
    short path (no span; the caller's context, if any, passed on): the API's no-op spans
    cost several microseconds per job, a tenth or more of a no-op job's attempt on the
    worker's CPU. A provider is set once per process, so once seen it stays."""
    global _active
    if _active:
        return True
    # `get_tracer_provider()` costs microseconds (it looks at the environment each time):
    # the API's own global, None until a provider is set, answers first; a provider named
    # by the environment is loaded by the public call, which then sets it.
    if getattr(trace, "_TRACER_PROVIDER", _UNKNOWN) is None and not _PROVIDER_FROM_ENV:
        return False
    _active = not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    return _active


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
    return _enqueue_span(jobs) if active() else Enqueuing(None)


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

    def caused_by(self, traceparent: str | None, tracestate: str | None, why: str) -> None:
        """Link the span to the stored context of what caused it (the schedule's `add`, the
        job's previous life)."""
        if self.span is None or not self.span.is_recording():
            return
        for link in _link_to(traceparent, tracestate, why):
            self.span.add_link(link.context, link.attributes)

    def note(self, key: str, value: str | bool) -> None:
        """An attribute for the span (if it records)."""
        if self.span is not None and self.span.is_recording():
            self.span.set_attribute(key, value)


@contextlib.contextmanager
def retrying(job_id: int) -> Iterator[Firing]:
    """The producer span of an operator's retry: the job gets this context (a child of the
    operator's, if any), linked to the trace of its earlier attempts."""
    with tracer.start_as_current_span(
        "retry", kind=SpanKind.PRODUCER,
        attributes={"messaging.system": SYSTEM, "messaging.operation.type": "send",
                    "messaging.operation.name": "retry", "messaging.message.id": str(job_id)},
    ) as span:
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
