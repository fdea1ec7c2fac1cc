"""The attempt's span: opened at the start of an attempt as a child of the context its row
carries, given the events only Taskboard knows (late renewal, lost lease, local deadline,
rejected completion, cancellation, snooze), and ended by the reported outcome. Log records
find it here too. See `taskboard.core.base.tracing`.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from taskboard.core.base import tracing
from taskboard.core.base.tracing import SYSTEM, context_of, tracer

_NOTHING = contextlib.nullcontext()

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
    if not tracing.active():
        # No SDK: no span; the enqueuer's context, if the row has one, stays current so
        # the attempt's log records still name its trace.
        if job.traceparent is None:
            return _NOTHING
        ctx = context_of(job.traceparent, job.tracestate)
        if ctx is None:
            return _NOTHING
        carried = trace.get_current_span(ctx)  # non-recording: ending it does nothing
        _attempts[flight] = carried
        _by_token[str(job.token)] = carried
        return trace.use_span(carried, end_on_exit=False)
    parent = context_of(job.traceparent, job.tracestate)
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
    span = tracer.start_span(
        f"process {job.queue}",
        context=parent if parent is not None else otel_context.Context(),
        kind=SpanKind.CONSUMER, attributes=attrs, links=links,
    )
    if not span.is_recording():  # not sampled: nothing to end
        return trace.use_span(span, end_on_exit=False)
    _attempts[flight] = span
    _by_token[str(job.token)] = span
    return trace.use_span(
        span, end_on_exit=False, record_exception=False, set_status_on_exception=False
    )


def event(flight: Any, name: str, attributes: Mapping[str, Any] | None = None) -> None:
    """An event on the flight's attempt span (if it is traced and open)."""
    span = _attempts.get(flight) if _by_token else None
    if span is not None:
        span.add_event(name, dict(attributes or {}))


def lease_lost(flight: Any, reason: str, how: str) -> None:
    """The lease is gone (`how`: renewal rejected, renewal late, local deadline, ...)."""
    span = _attempts.get(flight) if _by_token else None
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
    span = _attempts.pop(flight, None) if _by_token else None
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
    span = _attempts.pop(flight, None) if _by_token else None
    if span is None:
        return
    _by_token.pop(str(flight.job.token), None)
    span.set_attribute("taskboard.outcome", "abandoned")
    span.set_status(Status(StatusCode.ERROR, why))
    span.end()



class StepSpan:
    """The span of one `ctx.step`, told how its checkpoint went."""

    def __init__(self, span: Span | None) -> None:
        self.span = span

    def ended(self, outcome: str) -> None:
        """`recorded` or `rejected` (the fence refused the record; the effect happened)."""
        span = self.span
        if span is None or not span.is_recording():
            return
        span.set_attribute("taskboard.step.outcome", outcome)
        if outcome == "rejected":
            span.set_status(Status(StatusCode.ERROR, "effect happened, record fenced out"))


_NO_STEP = StepSpan(None)


def _step_attributes(job: Any, name: str) -> dict[str, Any]:
    return {"taskboard.step.name": name, "messaging.message.id": str(job.id),
            "taskboard.job.kind": job.kind, "taskboard.job.claim": job.ordinal}


@contextlib.contextmanager
def step_running(job: Any, name: str) -> Iterator[StepSpan]:
    """The span of a step that runs: a child of the attempt's, current while `fn` runs (an
    SMTP or Stripe span inside is the step's) and while its checkpoint is written."""
    if not tracing.active():
        yield _NO_STEP
        return
    with tracer.start_as_current_span(f"step {name}", attributes=_step_attributes(job, name)) as s:
        yield StepSpan(s)


def step_replayed(job: Any, name: str) -> None:
    """A step an earlier attempt recorded, given back without running: a span of no length,
    so the trace shows every step of every attempt, and which ones did not run again."""
    if not tracing.active():
        return
    attrs = _step_attributes(job, name)
    attrs["taskboard.step.outcome"] = "replayed"
    tracer.start_span(f"step {name}", attributes=attrs).end()


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
