"""Traces: every OpenTelemetry call Taskboard makes, in one place.

Only the API is used; with no SDK configured every tracer is the API's no-op one and each
call here costs a few attribute look-ups (measured in bench/README.md). Spans follow the
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
import weakref
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

SYSTEM = "taskboard"
_tracer = trace.get_tracer("taskboard")
# W3C trace context whatever propagator the user configured globally: the columns are
# named after its two headers, and a job enqueued by one service is run by another.
_W3C = TraceContextTextMapPropagator()

Carried = dict[str, str | None]
"""What a job row stores: {"traceparent": ..., "tracestate": ...} (None when untraced)."""

NOT_TRACED: Carried = {"traceparent": None, "tracestate": None}


def _carry() -> Carried:
    """The current context in W3C form, as the row stores it."""
    headers: dict[str, str] = {}
    _W3C.inject(headers)
    if "traceparent" not in headers:
        return NOT_TRACED
    return {"traceparent": headers["traceparent"], "tracestate": headers.get("tracestate")}


def _context_of(traceparent: str | None, tracestate: str | None) -> otel_context.Context | None:
    """The context a row stored, or None."""
    if not traceparent:
        return None
    headers = {"traceparent": traceparent}
    if tracestate:
        headers["tracestate"] = tracestate
    ctx = _W3C.extract(headers)
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def _link_to(traceparent: str | None, tracestate: str | None, why: str) -> list[Link]:
    ctx = _context_of(traceparent, tracestate)
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

    def __init__(self, span: Span) -> None:
        self.span = span
        # With no SDK the no-op span is the caller's own context (or none): what travels
        # is then the enqueuer's context as it came, which is all there is to keep.
        self.carried: Carried = _carry()

    def enqueued(self, ids: Sequence[int]) -> None:
        """The ids the enqueue gave (the message id, for a single job)."""
        if len(ids) == 1 and self.span.is_recording():
            self.span.set_attribute("messaging.message.id", str(ids[0]))


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


@contextlib.contextmanager
def enqueuing(jobs: Sequence[Any]) -> Iterator[Enqueuing]:
    """The producer span around one enqueue of `jobs` (NewJobs, checked later: a batch
    refused for a job that is not one is still an enqueue that failed, on the caller's
    trace); a batch is one span, with its count."""
    kinds = [getattr(job, "kind", "?") for job in jobs]
    queues = [getattr(job, "queue", "?") for job in jobs]
    with _tracer.start_as_current_span(
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
    with _tracer.start_as_current_span(
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
        for link in _link_to(traceparent, tracestate, why):
            self.span.add_link(link.context, link.attributes)


@contextlib.contextmanager
def retrying(job_id: int) -> Iterator[Firing]:
    """The producer span of an operator's retry: the job gets this context (a child of the
    operator's, if any), linked to the trace of its earlier attempts."""
    with _tracer.start_as_current_span(
        "retry", kind=SpanKind.PRODUCER,
        attributes={"messaging.system": SYSTEM, "messaging.operation.type": "send",
                    "messaging.operation.name": "retry", "messaging.message.id": str(job_id)},
    ) as span:
        yield Firing(span)


def current() -> Carried:
    """The current context as a row stores it (a schedule keeps the one it was added under)."""
    return _carry()


# --- attempts ------------------------------------------------------------------------------

# The attempt span of each flight, by flight (kept only while it is open). Keyed weakly: a
# flight dropped without an outcome (a crash) takes its entry with it.
_attempts: weakref.WeakKeyDictionary[Any, Span] = weakref.WeakKeyDictionary()
# Live attempt spans by lease token, for log records written outside the flight's task
# (the completer's group, the lease keeper): they name the token.
_by_token: dict[str, Span] = {}


def attempt_started(
    flight: Any, *, worker_id: str, lease_seconds: float
) -> contextlib.AbstractContextManager[Any]:
    """Open the attempt's CONSUMER span, a child of the context its row carries; returns
    a context manager that makes it current (for the handler, its logs and its SMTP or
    Stripe spans) without ending it: the outcome ends it (`attempt_ended`)."""
    job = flight.job
    parent = _context_of(job.traceparent, job.tracestate)
    attrs: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": job.queue,
        "messaging.message.id": str(job.id),
        "taskboard.job.kind": job.kind,
        "taskboard.job.attempt": job.attempt,
        "taskboard.job.max_attempts": job.max_attempts,
        "taskboard.job.claim": job.ordinal,
        "taskboard.worker.id": worker_id,
        "taskboard.lease.seconds": lease_seconds,
        "taskboard.lease.token": str(job.token),
        "taskboard.reclaim": job.is_reclaim,
    }
    if job.previous_worker is not None:
        attrs["taskboard.reclaim.previous_worker"] = job.previous_worker
    links = [] if parent is None else [
        Link(trace.get_current_span(parent).get_span_context(), {"taskboard.link": "enqueued by"})
    ]
    span = _tracer.start_span(
        f"process {job.queue}",
        context=parent if parent is not None else otel_context.Context(),
        kind=SpanKind.CONSUMER, attributes=attrs, links=links,
    )
    if not span.is_recording():
        # No SDK: the no-op tracer hands back the enqueuer's context as it is; current, it
        # still gives the attempt's log records the enqueuer's trace id. Nothing to end.
        return trace.use_span(span, end_on_exit=False)
    _attempts[flight] = span
    _by_token[str(job.token)] = span
    return trace.use_span(
        span, end_on_exit=False, record_exception=False, set_status_on_exception=False
    )


def event(flight: Any, name: str, attributes: Mapping[str, Any] | None = None) -> None:
    """An event on the flight's attempt span (if it is traced and open)."""
    span = _attempts.get(flight)
    if span is not None:
        span.add_event(name, dict(attributes or {}))


def lease_lost(flight: Any, reason: str, how: str) -> None:
    """The lease is gone (`how`: renewal rejected, renewal late, local deadline, ...)."""
    span = _attempts.get(flight)
    if span is not None:
        lease_lost_on(span, reason, how)


def lease_lost_on(span: Span, reason: str, how: str) -> None:
    span.add_event("taskboard.lease.lost", {"taskboard.lease.lost.how": how,
                                            "taskboard.lease.lost.reason": reason})


def renewal_late(flight: Any, margin_left: float, lateness: float) -> None:
    """A renewal set out with less of the lease left than its schedule allows."""
    event(flight, "taskboard.lease.renewal_late", {
        "taskboard.lease.margin_left_seconds": round(margin_left, 3),
        "taskboard.lease.renewal_lateness_seconds": round(lateness, 3),
    })


def local_deadline(flight: Any, what: str, late: float) -> None:
    """The lease's local deadline passed: `what` was refused, `late` seconds after it."""
    event(flight, "taskboard.lease.local_deadline", {
        "taskboard.refused": what, "taskboard.late_seconds": round(late, 3)})


def attempt_ended(
    flight: Any, outcome: str, detail: str = "", run_again_at: datetime | None = None
) -> None:
    """The attempt's outcome was reported: say how it ended, and end its span."""
    span = _attempts.pop(flight, None)
    if span is None:
        return
    _by_token.pop(str(flight.job.token), None)
    span.set_attribute("taskboard.outcome", outcome)
    if outcome == "rejected":
        # Where other queues' traces show a success: the work ran, the fence refused it,
        # and that refusal is how this attempt learns its lease was lost.
        span.add_event("taskboard.completion.rejected", {
            "taskboard.lease.token": str(flight.job.token),
            "taskboard.reason": "token mismatch: the row's lease token is no longer this "
                                "attempt's (the job was reclaimed)",
        })
        if flight.lost is None:
            lease_lost_on(span, "completion rejected by the fence", "completion rejected")
        span.set_status(Status(StatusCode.ERROR, "lease lost: completion rejected by the fence"))
    elif outcome == "lost":
        span.set_status(Status(StatusCode.ERROR, f"lease lost: {detail}"))
    elif outcome in ("failed", "dead"):
        span.set_status(Status(StatusCode.ERROR, detail))
    elif outcome == "cancelled":
        span.add_event("taskboard.cancelled", {"taskboard.reason": detail})
    elif outcome == "snoozed":
        span.add_event("taskboard.snoozed", {
            "taskboard.run_again_at": run_again_at.isoformat() if run_again_at else ""})
    if run_again_at is not None and outcome == "failed":
        span.set_attribute("taskboard.retry_at", run_again_at.isoformat())
    span.end()


def attempt_abandoned(flight: Any, why: str) -> None:
    """The attempt ended with no outcome reported (an unexpected error, a crash)."""
    span = _attempts.pop(flight, None)
    if span is None:
        return
    _by_token.pop(str(flight.job.token), None)
    span.set_attribute("taskboard.outcome", "abandoned")
    span.set_status(Status(StatusCode.ERROR, why))
    span.end()


# --- external effects ----------------------------------------------------------------------


@contextlib.contextmanager
def smtp_send(message_id: str, recipients: int, relay: str) -> Iterator[None]:
    """A CLIENT span around one SMTP send; the Message-ID is what receivers de-duplicate by."""
    with _tracer.start_as_current_span(
        "smtp send", kind=SpanKind.CLIENT,
        attributes={"taskboard.email.message_id": message_id,
                    "taskboard.email.recipients": recipients, "server.address": relay},
    ):
        yield


@contextlib.contextmanager
def stripe_request(idempotency_key: str, operation: str) -> Iterator[None]:
    """A CLIENT span around one Stripe request, with the key that makes a replay safe."""
    with _tracer.start_as_current_span(
        f"stripe {operation}", kind=SpanKind.CLIENT,
        attributes={"taskboard.stripe.idempotency_key": idempotency_key,
                    "taskboard.stripe.operation": operation},
    ):
        yield


# --- logs ----------------------------------------------------------------------------------


def log_ids(fields: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(trace_id, span_id) for a log record: the current span's, else the open attempt's
    whose token the record names (events logged from outside the attempt's task)."""
    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid and fields and _by_token:
        token = fields.get("token")
        span = _by_token.get(token) if isinstance(token, str) else None
        if span is not None:
            ctx = span.get_span_context()
    if not ctx.is_valid:
        return None
    return trace.format_trace_id(ctx.trace_id), trace.format_span_id(ctx.span_id)
