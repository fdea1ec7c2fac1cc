"""How an attempt ended, and the one place that reports it.

Every flight ends in exactly one `Outcome`, built by a named constructor. `Reporter.report`
is the only code that turns outcomes into what the rest of the world sees: the attempt
record (where the fenced statement did not already write it in the same transaction),
the counters, and one event each.
"""

from __future__ import annotations

import enum
import logging
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from taskboard.core.base import tracing_attempts
from taskboard.core.base.errors import PermanentJobError
from taskboard.core.engine import attempt_log
from taskboard.core.engine.connection import HeldConnection
from taskboard.core.engine.db_errors import describe
from taskboard.core.engine.events import (
    Cancelled,
    Completed,
    CompletionRejected,
    Dead,
    Event,
    EventBus,
    Failed,
    LeaseGivenUp,
    Released,
    Snoozed,
)
from taskboard.core.engine.flights import Flight
from taskboard.core.engine.records import SnoozeOutcome

log = logging.getLogger("taskboard.worker")
MAX_ERROR_TEXT = 2000  # what `last_error` keeps of a handler's error


class OutcomeKind(enum.Enum):
    """How one attempt ended, as far as this worker knows."""

    COMPLETED = "completed"  # the fenced completion changed the row
    REJECTED = "rejected"  # the fenced completion changed nothing: not ours any more
    FAILED = "failed"  # the handler failed; the job will be retried
    DEAD = "dead"  # failed for good (permanent error, attempts used up, quarantined)
    LOST = "lost"  # the lease was lost; the worker stopped acting, nothing was written
    RELEASED = "released"  # a drain gave the lease back
    CANCELLED = "cancelled"  # an operator cancelled the job while it ran
    SNOOZED = "snoozed"  # the handler put the job back for later; the attempt was given back


@dataclass(frozen=True)
class Outcome:
    """One attempt's end. Build with the named constructors."""

    kind: OutcomeKind
    flight: Flight
    detail: str = ""  # error text, loss reason
    retry_at: datetime | None = None
    elapsed: float = 0.0  # seconds from claim to outcome (completed only)

    @classmethod
    def completed(cls, flight: Flight, elapsed: float) -> Outcome:
        return cls(OutcomeKind.COMPLETED, flight, elapsed=elapsed)

    @classmethod
    def rejected(cls, flight: Flight) -> Outcome:
        return cls(OutcomeKind.REJECTED, flight, "stale token")

    @classmethod
    def failed(cls, flight: Flight, error: str, retry_at: datetime | None) -> Outcome:
        return cls(OutcomeKind.FAILED, flight, error, retry_at)

    @classmethod
    def dead(cls, flight: Flight, error: str) -> Outcome:
        return cls(OutcomeKind.DEAD, flight, error)

    @classmethod
    def lost(cls, flight: Flight, reason: str) -> Outcome:
        return cls(OutcomeKind.LOST, flight, reason)

    @classmethod
    def released(cls, flight: Flight) -> Outcome:
        return cls(OutcomeKind.RELEASED, flight)

    @classmethod
    def cancelled(cls, flight: Flight) -> Outcome:
        return cls(OutcomeKind.CANCELLED, flight, "cancelled by operator")

    @classmethod
    def snoozed(cls, flight: Flight, run_at: datetime | None) -> Outcome:
        return cls(OutcomeKind.SNOOZED, flight, retry_at=run_at)

    @classmethod
    def of_snooze(cls, flight: Flight, result: SnoozeOutcome) -> Outcome:
        """Snoozed, dead past the snooze cap, or rejected (the token was stale)."""
        if not result.owned:
            return cls.rejected(flight)
        if result.dead:
            return cls.dead(flight, result.error or "snoozed past the cap")
        return cls.snoozed(flight, result.run_at)


@dataclass
class WorkerCounters:
    """Running totals for the heartbeat, the dashboard and the benchmarks."""

    claimed: int = 0
    completed: int = 0
    rejected: int = 0
    failed: int = 0
    dead: int = 0
    lost: int = 0
    released: int = 0
    cancelled: int = 0
    snoozed: int = 0
    quarantined: int = 0
    renewals_ok: int = 0
    renewals_failed: int = 0
    renewal_statements: int = 0
    renewal_lateness: deque[float] = field(default_factory=lambda: deque(maxlen=10_000))
    # Per kind, for the command's summary line (routine completions are not logged one by one).
    completed_by_kind: Counter[str] = field(default_factory=Counter)


class Reporter:
    """Turns outcomes into attempt records, counters and events."""

    def __init__(
        self,
        worker_id: str,
        counters: WorkerCounters,
        engine: HeldConnection,
        bus: EventBus,
    ) -> None:
        self._worker_id = worker_id
        self._counters = counters
        self._engine = engine
        self._bus = bus
        self._emit = bus.emit

    async def report(self, outcomes: Sequence[Outcome]) -> None:
        """Record, count and announce `outcomes`."""
        await self._record(outcomes)
        listened, every_job = self._bus.listened, self._bus.listened_every_job
        for outcome in outcomes:
            self._count(outcome)
            # A completion is routine (see `is_routine`): built only if someone wants it.
            if every_job or (listened and outcome.kind is not OutcomeKind.COMPLETED):
                self._emit(self._event(outcome))
            # After the event, so its log record still finds the attempt's span.
            tracing_attempts.attempt_ended(
                outcome.flight, outcome.kind.value, outcome.detail, outcome.retry_at
            )

    async def _record(self, outcomes: Sequence[Outcome]) -> None:
        # Completions, failures, releases and cancels wrote their attempt record in the
        # same statement as the job; a rejection and a loss have no fenced statement of
        # their own (the job is not ours), so their record is written here. Best effort:
        # the database may be the reason the lease was lost.
        rejected = [o.flight.lease for o in outcomes if o.kind is OutcomeKind.REJECTED]
        lost = [(o.flight.lease, o.detail) for o in outcomes if o.kind is OutcomeKind.LOST]
        if not rejected and not lost:
            return
        try:
            async with self._engine.use("recording lost and rejected attempts") as conn:
                await attempt_log.record_rejected(conn, rejected)
                await attempt_log.record_lost(conn, lost)
        except Exception as exc:
            log.warning(
                "worker %s: could not record %d rejected / %d lost attempts (%s)",
                self._worker_id,
                len(rejected),
                len(lost),
                describe(exc),
            )

    def _count(self, outcome: Outcome) -> None:
        c = self._counters
        match outcome.kind:
            case OutcomeKind.COMPLETED:
                c.completed += 1
                c.completed_by_kind[outcome.flight.job.kind] += 1
            case OutcomeKind.REJECTED:
                c.rejected += 1
            case OutcomeKind.FAILED:
                c.failed += 1
            case OutcomeKind.DEAD:
                c.failed += 1
                c.dead += 1
            case OutcomeKind.LOST:
                c.lost += 1
            case OutcomeKind.RELEASED:
                c.released += 1
            case OutcomeKind.CANCELLED:
                c.cancelled += 1
            case OutcomeKind.SNOOZED:
                c.snoozed += 1

    def _event(self, outcome: Outcome) -> Event:
        w, job, token = self._worker_id, outcome.flight.job.id, str(outcome.flight.job.token)
        match outcome.kind:
            case OutcomeKind.COMPLETED:
                return Completed(w, job, token, outcome.elapsed)
            case OutcomeKind.REJECTED:
                return CompletionRejected(w, job, token)
            case OutcomeKind.FAILED:
                return Failed(w, job, token, outcome.detail, outcome.retry_at)
            case OutcomeKind.DEAD:
                return Dead(w, job, token, outcome.detail)
            case OutcomeKind.LOST:
                return LeaseGivenUp(w, job, token, outcome.detail)
            case OutcomeKind.RELEASED:
                return Released(w, job, token, outcome.flight.started)
            case OutcomeKind.CANCELLED:
                return Cancelled(w, job, token)
            case OutcomeKind.SNOOZED:
                return Snoozed(w, job, token, outcome.retry_at)


def error_text(exc: BaseException) -> str:
    """What `last_error` says for a handler's exception."""
    if isinstance(exc, PermanentJobError):
        text = str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text[:MAX_ERROR_TEXT]
