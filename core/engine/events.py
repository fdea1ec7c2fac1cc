"""The typed stream of what workers do.

Workers publish; the dashboard and the structured logger subscribe. Subscribers are called
synchronously on the worker's event loop, so they must be cheap (append, post a message)
and must not raise: an exception in a subscriber is logged and dropped, never allowed to
break a renewal or a completion.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from taskboard.core.engine import event_names

log = logging.getLogger("taskboard.events")


@dataclass(frozen=True)
class Event:
    """Base of every event: which worker, and when on the worker's monotonic clock."""

    worker_id: str

    @property
    def name(self) -> str:
        """Event name for logs, e.g. `completion_rejected`."""
        return event_names.name_of(type(self))

    def as_dict(self) -> dict[str, Any]:
        """Fields for structured logs (datetimes as ISO strings)."""
        # Every field is a scalar, a string or a tuple of ints: a shallow copy is what
        # `dataclasses.asdict` made with a deep one, at a fifth of the cost per event.
        data: dict[str, Any] = {"event": event_names.name_of(type(self))}
        for key in event_names.field_names(type(self)):
            value = getattr(self, key)
            data[key] = value.isoformat() if isinstance(value, datetime) else value
        return data


@dataclass(frozen=True)
class WorkerStarted(Event):
    """The worker registered itself and is about to claim."""

    capacity: int
    lease_seconds: float


@dataclass(frozen=True)
class WorkerStopped(Event):
    """The worker left: drained, crashed on purpose, or stopped."""

    reason: str


@dataclass(frozen=True)
class Claimed(Event):
    """A job was claimed with a fresh token; `previous_token` is set for a reclaim."""

    job_id: int
    kind: str
    token: str
    attempt: int
    lease_expires_at: datetime
    previous_token: str | None = None
    previous_worker: str | None = None
    queue: str = "default"
    pickup_seconds: float = 0.0  # from when the job was due to its claim (database clock)

    @property
    def is_reclaim(self) -> bool:
        """True when this claim took over an expired lease."""
        return self.previous_token is not None


@dataclass(frozen=True)
class Renewed(Event):
    """One renewal statement extended every listed lease."""

    job_ids: tuple[int, ...]
    lease_expires_at: datetime | None
    lateness: float = 0.0  # seconds this renewal ran after it was due (a busy event loop)


@dataclass(frozen=True)
class RenewalFailed(Event):
    """A lease could not be renewed: the token changed or the lease had expired."""

    job_id: int
    token: str
    reason: str


@dataclass(frozen=True)
class Completed(Event):
    """The fenced completion changed one row: this worker completed the job."""

    job_id: int
    token: str
    seconds: float


@dataclass(frozen=True)
class CompletionRejected(Event):
    """The fenced completion changed zero rows: stale token, the job is not ours."""

    job_id: int
    token: str
    reason: str = "stale token"


@dataclass(frozen=True)
class Failed(Event):
    """The handler raised; the job will be retried at `retry_at`."""

    job_id: int
    token: str
    error: str
    retry_at: datetime | None


@dataclass(frozen=True)
class Dead(Event):
    """The job will not be retried: attempts exhausted or a permanent error."""

    job_id: int
    token: str | None
    error: str


@dataclass(frozen=True)
class Released(Event):
    """The worker gave the lease back (drain) so another worker can claim at once."""

    job_id: int
    token: str
    started: bool = True  # the handler had started (the attempt stays counted)


@dataclass(frozen=True)
class LeaseGivenUp(Event):
    """The attempt ended without a verdict from the database: the lease was lost (renewal
    said so, or the local deadline passed) and the worker stopped acting for the job."""

    job_id: int
    token: str
    reason: str


@dataclass(frozen=True)
class Cancelled(Event):
    """An operator cancelled the job while this worker held it; its handler was stopped."""

    job_id: int
    token: str


@dataclass(frozen=True)
class Snoozed(Event):
    """The handler put its job back to run at `run_at`; the attempt does not count."""

    job_id: int
    token: str
    run_at: datetime | None


@dataclass(frozen=True)
class EffectRefused(Event):
    """A handler was about to start an external call (an SMTP send, a Stripe request) after
    its lease was lost or its local deadline had passed, and the worker refused: the send
    that did not happen. `late_seconds` is how far past the local deadline (0 if not)."""

    job_id: int
    token: str
    what: str
    late_seconds: float


@dataclass(frozen=True)
class StepCheckpoint(Event):
    """A durable step of a job: `recorded` (its fenced checkpoint committed), `replayed` (an
    earlier attempt's record returned without running it) or `rejected` (the fence refused
    the record: the step's effect happened, and the handler stops as for a lost lease)."""

    job_id: int
    token: str
    kind: str
    step: str
    attempt: int
    outcome: str


@dataclass(frozen=True)
class LeftToExpire(Event):
    """A drain could not release a lease (its handler was inside an external call that
    cannot be cut, or the database did not take the release); the lease is left to expire
    and another worker will run the job."""

    job_id: int
    token: str
    reason: str


@dataclass(frozen=True)
class Quarantined(Event):
    """A row made one of the worker's statements fail; it was made dead with the reason
    so it cannot stall the queue."""

    job_id: int
    error: str


@dataclass(frozen=True)
class WorkerUnhealthy(Event):
    """An unexpected error persisted for longer than a lease: the worker says so and,
    run from the command line, drains and exits non-zero for its supervisor to restart it."""

    role: str
    error: str


@dataclass(frozen=True)
class LeftReadOnlyServer(Event):
    """A statement met a read-only session (a demoted primary, `default_transaction_read_only`
    on): the worker closed that connection and refills its pool through the URL. Once per
    departure, however many roles meet it."""

    role: str
    error: str


@dataclass(frozen=True)
class Paused(Event):
    """The worker stopped renewing and claiming; its handlers stop at their next await."""


@dataclass(frozen=True)
class Resumed(Event):
    """The worker runs again."""


@dataclass(frozen=True)
class Effect(Event):
    """A handler reported an external effect (sent an email, created a charge)."""

    job_id: int
    token: str
    message: str


@dataclass(frozen=True)
class PoolStats(Event):
    """Connection headroom of this worker's pool."""

    pool_max: int
    in_use: int
    idle: int
    waiting: int
    in_flight: int
    capacity: int

    @property
    def spare(self) -> int:
        """Connections not held by in-flight jobs: the ones renewal and control rely on."""
        return self.pool_max - self.in_flight


Subscriber = Callable[[Event], None]


def is_routine(event: Event) -> bool:
    """A claim that is not a reclaim, or a completion: one of each per job, the bulk of the
    stream. A subscriber may decline them (`subscribe(..., every_job=False)`)."""
    if isinstance(event, Claimed):
        return event.previous_token is None
    return isinstance(event, Completed)


@dataclass
class EventBus:
    """Fan-out of events to subscribers."""

    subscribers: list[Subscriber] = field(default_factory=list)
    every_job: list[Subscriber] = field(default_factory=list)  # those that want routine ones

    def subscribe(self, subscriber: Subscriber, *, every_job: bool = True) -> Callable[[], None]:
        """Add a subscriber (with `every_job=False`, one that is never sent routine events,
        see `is_routine`); returns a function that removes it."""
        self.subscribers.append(subscriber)
        if every_job:
            self.every_job.append(subscriber)

        def unsubscribe() -> None:
            for group in (self.subscribers, self.every_job):
                if subscriber in group:
                    group.remove(subscriber)

        return unsubscribe

    @property
    def listened(self) -> bool:
        """Whether anyone subscribes: the per-job events are not even built otherwise."""
        return bool(self.subscribers)

    @property
    def listened_every_job(self) -> bool:
        """Whether anyone wants routine events (not built otherwise; see `is_routine`)."""
        return bool(self.every_job)

    def emit(self, event: Event) -> None:
        """Deliver `event` to every subscriber; a failing subscriber never stops the worker."""
        for subscriber in list(self.every_job if is_routine(event) else self.subscribers):
            try:
                subscriber(event)
            except Exception:
                log.exception("event subscriber failed on %s", event.name)
