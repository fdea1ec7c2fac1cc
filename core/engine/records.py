"""The rows the lease statements return, as typed records (psycopg's `class_row` builds
them by column name), and the verdict a fenced statement gives each held row."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

Lease = tuple[int, UUID]
"""(job id, token): what every fenced statement presents."""


@dataclass(frozen=True)
class ClaimedJob:
    """A job this worker now holds, with the token that proves it (a row of `sql.CLAIM`)."""

    id: int
    kind: str
    payload: str  # JSON text, decoded by the worker (see sql.CLAIM)
    queue: str
    attempt: int  # attempts used of the retry budget, this one included
    max_attempts: int
    ordinal: int  # the how-many-th claim of this job ever (history numbering)
    token: UUID
    lease_expires_at: datetime
    timeout: float | None  # seconds the handler may run (the job's own, else its kind's)
    run_at: datetime  # when it became due (pickup latency = db_now - run_at)
    previous_token: UUID | None
    previous_worker: str | None
    db_now: datetime
    # What the job's external effects are keyed by (Idempotency-Key, Message-ID): a random
    # UUID drawn at enqueue, so a job id that comes back (a restore) never meets another
    # job's effects; the id itself for jobs enqueued before migration 9.
    identity: str
    # The enqueuer's W3C trace context (migration 12), None when it had none.
    traceparent: str | None = None
    tracestate: str | None = None

    @property
    def is_reclaim(self) -> bool:
        """True when the claim took over an expired lease from another attempt."""
        return self.previous_token is not None

    @property
    def lease(self) -> Lease:
        """(job id, token)."""
        return (self.id, self.token)


class Verdict(enum.Enum):
    """What a fenced statement decided for one held row."""

    DONE = "done"  # the statement changed the row: it was ours
    BUSY = "busy"  # another session holds the row locked: ours still, try again
    REJECTED = "rejected"  # the token is not current: not ours any more
    CANCELLED = "cancelled"  # an operator cancelled the job (and took the lease)
    # The job's row is gone (pruned, with its history) before a completion whose answer
    # was lost could be read again: done or refused, nobody can tell any more.
    GONE = "gone"


@dataclass(frozen=True)
class RenewRow:
    id: int
    token: UUID
    lease_expires_at: datetime | None
    busy: bool
    cancelled: bool


@dataclass(frozen=True)
class CompleteRow:
    id: int
    token: UUID
    completed: bool
    busy: bool
    already: bool
    gone: bool

    @property
    def verdict(self) -> Verdict:
        if self.completed or self.already:
            return Verdict.DONE
        if self.busy:
            return Verdict.BUSY
        return Verdict.GONE if self.gone else Verdict.REJECTED


@dataclass(frozen=True)
class FailOutcome:
    """Outcome of a fenced failure: `owned` is False when the token was stale."""

    owned: bool
    dead: bool = False
    retry_at: datetime | None = None


@dataclass(frozen=True)
class SnoozeOutcome:
    """Outcome of a fenced snooze: `owned` is False when the token was stale; `dead` when
    the snooze was past the job's cap, and `error` then says so."""

    owned: bool
    run_at: datetime | None = None
    dead: bool = False
    error: str | None = None

    @classmethod
    def from_history(cls, outcome: str | None, cap: int) -> SnoozeOutcome:
        """What an earlier try whose answer was lost did, from its attempt's outcome."""
        if outcome == "failed":
            return cls(owned=True, dead=True, error=f"snoozed past the cap ({cap})")
        return cls(owned=outcome == "snoozed")
